"""Design checks of one game outside a notebook: does its embedded counterpart respond, and how much room is there?

    python bench/room.py persuasion [--games 150] [--build-seed 0] [--temperature 0.3]
    python bench/room.py telesales [--games 150] [--build-seed 0] [--temperature 1.0]

The notebooks run these checks themselves before training (dialogrl.room; papers/README.md, "How a claim is
judged"); this script runs them on one warm-start build, for a design's first look or a recipe's rebuild. It plays
the game's probe (`probe(role)`: a good and a bad conversation, the same scenarios and seeds) against the embedded
counterpart (the tiny warm start of `--build-seed`, sampled at `--temperature`: notebook 03's `single` simulator at
0.3, notebook 04's frozen buyer at 1.0) and against the scripted counterparts its corpus was written by, then the
room test: the base (the warm start in the trained role) and reference policies that see only what that role sees
(the game's scripted personas; for persuasion also one-strategy persuaders asking from their third turn) against
the embedded counterpart, on the trained role's reward as the notebook trains it (persuasion: success; TeleSales:
seller_goal="success"). Prints each record; `--json` writes them.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from dialogrl.agents import LMAgent
from dialogrl.models import load_model
from dialogrl.room import responsiveness, room_test
from dialogrl.tiny import build_tiny_model

GAMES = {"persuasion": ("tiny-persuasion", "persuader", 0.3), "telesales": ("tiny-telesales", "seller", 1.0)}


def setup(game: str) -> tuple:
    """The task as the notebook trains it, its probe, the reference policies of the trained role, the scripted
    counterparts."""
    if game == "persuasion":
        from dialogrl.envs import persuasion as g

        task = g.PersuasionForGood(max_exchanges=5, persuader_goal="success")
        refs = {name: g.ScriptedAgent(p, seed=i) for i, (name, p) in enumerate(g.PERSUADER_PERSONAS.items())}
        refs.update({f"{s}/ask-from-2": g.ScriptedAgent(g.PersuaderPersona(f"{s}-2", {s: 1.0}, ask_from=2,
                                                                           ask_again=0.5), seed=1)
                     for s in g.STRATEGIES})
        return task, g.probe("persuadee"), refs, g.population("persuadee", seed=7)
    from dialogrl.envs import telesales as g

    task = g.VehicleTeleSales(seller_goal="success")
    refs = {name: g.ScriptedAgent(name, seed=i) for i, name in enumerate(g.SELLER_PERSONAS)}
    return task, g.probe("buyer"), refs, g.population("buyer", seed=7)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("game", choices=sorted(GAMES))
    ap.add_argument("--games", type=int, default=150, help="games per kind (probe) and per policy (room)")
    ap.add_argument("--build-seed", type=int, default=0, help="which warm-start build plays the counterpart")
    ap.add_argument("--temperature", type=float, default=None, help="the counterpart's sampling temperature")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--json", default=None, help="write the records here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    recipe, role, temperature = GAMES[args.game]
    temperature = args.temperature if args.temperature is not None else temperature
    task, probe, references, scripted = setup(args.game)
    model, tok = load_model(str(build_tiny_model(recipe, build_seed=args.build_seed)), device="cpu")
    counterpart = LMAgent(model, tok, name="counterpart", temperature=temperature, max_new_tokens=args.max_new_tokens)
    t0 = time.time()
    out = {"counterparts": {f"{recipe} (T {temperature:g})": responsiveness(task, counterpart, probe, args.games),
                            "scripted": responsiveness(task, scripted, probe, args.games)}}
    for name, r in out["counterparts"].items():
        print(f"{name}: {probe.decision} {r['good']:.3f} after {r['kinds'][0]}, {r['bad']:.3f} after {r['kinds'][1]}; "
              f"difference {r['diff']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}] -> "
              f"{'responds' if r['responds'] else 'does not respond'}")
    base = LMAgent(model, tok, name="base", max_new_tokens=args.max_new_tokens)
    room = out["room"] = room_test(task, role, counterpart, references, base, n=args.games)
    print(f"\nroom: base {room['base']:.3f}; the best reference, {room['reference']}, {room['ceiling']:.3f} "
          f"(threshold {room['threshold']:.3f}) -> {'passed' if room['passed'] else 'refused'}")
    for name, r in sorted(room["references"].items(), key=lambda kv: -kv[1]["mean"])[:8]:
        print(f"  {name:34s} {r['mean']:.3f}  gain {r['gain']:+.3f} [{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]")
    print(f"\n{time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
