"""How far can the trained role's training objective move? Scripted strategies against the training counterpart.

    python bench/room.py persuasion [--games 200] [--build-seed 0] [--temperature 0.3]
    python bench/room.py telesales [--games 200] [--build-seed 0] [--temperature 1.0]

A manipulation check (dialogrl.claims) asks a trained method to gain at least a quarter of the room the base leaves to
the objective's ceiling. The ceiling is what the reward allows (a full $2 donation; a good sale at list price), not
what the counterpart can be brought to. This bench measures the second: it plays a set of scripted policies of the
trained role (the game's own scripted personas, and for persuasion one-strategy persuaders: one strategy every turn,
asking from turn 2 or 4) against the notebook's training counterpart (the tiny warm start of `--build-seed`, sampled at
`--temperature`: notebook 03's `single` simulator at 0.3, notebook 04's frozen buyer at 1.0) and, for reference,
against the game's scripted counterpart population (the rule the warm start's corpus was written by). Every policy
plays the same scenarios with the same game seeds (common random numbers), so their differences from the base are
paired.

Prints one row per (counterpart, policy): the training reward's mean with a 95% interval over games, its gain over the
base (the warm start playing the trained role, as the notebooks' base), and the gain as a share of the manipulation
check's threshold; the last line `best share of threshold: X` (the best scripted policy against the tiny
counterpart). A share well under 1 says that no strategy in this set reaches the threshold: a trained policy that
passes must find more than any scripted strategy here does.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dialogrl.agents import LMAgent
from dialogrl.claims import ROOM_SHARE
from dialogrl.models import load_model
from dialogrl.rollout import play
from dialogrl.tiny import build_tiny_model

GAMES = {"persuasion": ("tiny-persuasion", "persuader", 0.3), "telesales": ("tiny-telesales", "seller", 1.0)}


def setup(game: str) -> tuple:
    """The task as the notebook trains it, the scripted policies of the trained role, the scripted counterparts."""
    if game == "persuasion":
        from dialogrl.envs.persuasion import STRATEGIES, PersuasionForGood
        from dialogrl.envs.persuasion.personas import (
            PERSUADER_PERSONAS,
            PersuaderPersona,
            ScriptedAgent,
            population,
        )

        task = PersuasionForGood(max_exchanges=5)
        policies = {name: ScriptedAgent(p, seed=i) for i, (name, p) in enumerate(PERSUADER_PERSONAS.items())}
        for s in STRATEGIES:
            for ask_from, again in ((2, 0.5), (4, 0.0)):
                policies[f"{s}/ask-from-{ask_from}"] = ScriptedAgent(
                    PersuaderPersona(f"{s}-{ask_from}", {s: 1.0}, ask_from=ask_from, ask_again=again), seed=1)
        return task, policies, population("persuadee", seed=7)
    from dialogrl.envs.telesales import VehicleTeleSales
    from dialogrl.envs.telesales.personas import SELLER_PERSONAS, ScriptedAgent, population

    task = VehicleTeleSales(seller_goal="success")   # notebook 04's seller objective
    policies = {name: ScriptedAgent(p, seed=i) for i, (name, p) in enumerate(SELLER_PERSONAS.items())}
    return task, policies, population("buyer", seed=7)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("game", choices=sorted(GAMES))
    ap.add_argument("--games", type=int, default=200, help="scenarios per (policy, counterpart)")
    ap.add_argument("--build-seed", type=int, default=0, help="which warm-start build plays the counterpart")
    ap.add_argument("--temperature", type=float, default=None, help="the counterpart's sampling temperature")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    torch.set_num_threads(1)
    recipe, role, temperature = GAMES[args.game]
    temperature = args.temperature if args.temperature is not None else temperature
    task, scripted, population = setup(args.game)
    other = next(r for r in task.roles if r != role)
    model, tok = load_model(str(build_tiny_model(recipe, build_seed=args.build_seed)), device="cpu")
    counterparts = {f"{recipe} (T {temperature:g})": LMAgent(model, tok, name="counterpart", temperature=temperature,
                                                            max_new_tokens=args.max_new_tokens),
                    "scripted population": population}
    policies = {"base": LMAgent(model, tok, name="base", max_new_tokens=args.max_new_tokens), **scripted}
    scenarios = task.sample_scenarios(args.games, seed=20_261_202)
    seeds = list(range(args.games))
    t0, best = time.time(), None
    for cname, counterpart in counterparts.items():
        rewards = {name: np.array([e.outcome[role]["reward"] for e in
                                   play(task, {role: policy, other: counterpart}, scenarios, seeds=seeds)])
                   for name, policy in policies.items()}
        base = rewards["base"].mean()
        threshold = ROOM_SHARE * (task.max_reward(role) - base)
        print(f"\n{cname}: base {base:.3f}, ceiling {task.max_reward(role):g}, check threshold {threshold:.3f}")
        for name, r in sorted(rewards.items(), key=lambda kv: -kv[1].mean()):
            d = r - rewards["base"]
            half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
            print(f"  {name:34s} {r.mean():.3f}  gain {d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"
                  f"  share of threshold {d.mean() / threshold:+.2f}")
        if best is None:
            best = max(r.mean() - base for name, r in rewards.items() if name != "base") / threshold
    print(f"\n{args.games} games per cell, {time.time() - t0:.0f} s")
    print(f"best share of threshold: {best:.2f}")


if __name__ == "__main__":
    main()
