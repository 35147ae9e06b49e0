"""Notebook 01's calibration step alone: does calibrating the simulator make it decide like the humans?

    python bench/calibration_check.py --builds 0 1 --modes sft decider --epochs 2       # the synthetic humans
    python bench/calibration_check.py --builds 0 1 --modes sft --notes yes --epochs 2 4  # a view that states worth
    python bench/calibration_check.py --logs dealnodeal --builds 0 1 --modes sft         # the real human logs

For each warm-start build and each setting (the calibration: plain SFT on the user's logged turns, or `decider`, the
language model fine-tuned with each logged decision marked beside a decision module fitted on them,
dealnodeal.DecidingUser; the user's view with or without the task's worth `notes`; the SFT passes), the
steps of notebook 01's "Calibrating the simulator" at its `cpu` sizes: the human logs (synthetic: the notebook's
human population, 80% to calibrate on, 20% held out; real: the release's dialogues split 60 / 15 / 25% as the
notebook splits them), the uncalibrated simulator (the warm start prompted as the user) and the calibrated one
(calibration.calibrate_sft on the user's turns of the training logs; with `decider` on dealnodeal's
decision_conversations, beside an AcceptanceModel fitted on the same logs), then for each simulator:
  - its acceptance curve (calibration.acceptance_curve of dealnodeal.decisions, dealnodeal.DECISION_BINS) and its
    decision distance to the held-out humans' (calibration.decision_distance), playing the user's role against the
    logged humans' role-A population (real logs: the human proxy, a model of its own split of the logs);
  - its behaviour distance (dealnodeal.behaviour_stats) and the held-out human-turn NLL;
  - whether it responds (dialogrl.room.responsiveness with dealnodeal.probe("B"); offer protocol only);
  - with `decider`, the share of its turns whose [accept] the module struck out (DecidingUser.stats).
Per setting, the change calibrated minus uncalibrated of each distance with its t-interval over the builds
(calibration.distance_change). Prints the tables, writes check.json and acceptance.png (the three curves, pooled over
the builds with t-intervals) to --out. A measurement that chooses a design, not a comparison of methods: nothing
trains a policy here.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dialogrl.agents import LMAgent
from dialogrl.calibration import (
    acceptance_curve,
    behaviour_distance,
    calibrate_sft,
    decision_distance,
    distance_change,
    role_conversations,
    turn_nll,
)
from dialogrl.data import data_path
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import (
    BEHAVIOUR_SCALES,
    DECISION_BINS,
    AcceptanceModel,
    DecidingUser,
    SelectionClassifier,
    behaviour_stats,
    decision_conversations,
    decisions,
    population,
    probe,
)
from dialogrl.envs.dealnodeal.data import load_dond, replay, selection_conversations
from dialogrl.models import load_model
from dialogrl.plots import acceptance_curves
from dialogrl.rollout import play
from dialogrl.room import responsiveness
from dialogrl.run import seed_everything
from dialogrl.seeds import eval_seeds, stream_seed
from dialogrl.tiny import TinyConfig, build_tiny, warm_start

HUMANS = dict(zip(["greedy", "fair", "stubborn", "accommodating", "erratic"], [0.1, 0.3, 0.25, 0.25, 0.1]))


def human_logs(logs: str | None, n_logs: int, seed: int, max_turns: int, limit: int):
    """(task, training logs, held-out logs, proxy logs or None): as notebook 01 draws or splits them."""
    if logs is None:
        task = DealOrNoDeal(max_turns=max_turns)
        humans = {r: population(r, list(HUMANS), HUMANS, seed=seed, style="casual") for r in task.roles}
        states = [e.state for e in play(task, humans, task.sample_scenarios(n_logs, seed=stream_seed("logs", seed)))]
        n = int(0.8 * len(states))
        return task, states[:n], states[n:], None
    task = DealOrNoDeal(protocol="selection", max_turns=max_turns)
    records = [r for r in load_dond(data_path(logs))
               if set(r.selections) >= set(task.roles) and sum(1 for _ in r.turns) <= max_turns]
    order = np.random.default_rng(seed).permutation(len(records))[:limit or None]
    states = [replay(task, records[i]) for i in order]
    n_train, n_held = int(0.6 * len(states)), int(0.15 * len(states))
    return task, states[:n_train], states[n_train:n_train + n_held], states[n_train + n_held:]


def behaviour(task, states) -> dict:
    """The user's (role B's) negotiation statistics and acceptance curve in finished games."""
    return {"stats": behaviour_stats(task, states, "B"),
            "curve": acceptance_curve(decisions(task, states, "B"), DECISION_BINS)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", default=None, help="real logs (a data set name, hub id or folder); default synthetic")
    ap.add_argument("--builds", type=int, nargs="+", default=[0, 1], help="warm-start build seeds (2+: an interval)")
    ap.add_argument("--notes", nargs="+", choices=("no", "yes"), default=["yes"],
                    help="the simulated user's view marks what each proposal gives it (offer protocol)")
    ap.add_argument("--modes", nargs="+", choices=("sft", "decider"), default=["decider"],
                    help="calibration: SFT on the user's turns, or a decision module beside SFT with decisions marked")
    ap.add_argument("--epochs", type=float, nargs="+", default=[2.0], help="SFT passes over the user's logged turns")
    ap.add_argument("--dialogues", type=int, default=0, help="synthetic: the warm starts' corpus size (0: tiny-dond's)")
    ap.add_argument("--lr", type=float, default=1e-3, help="SFT learning rate (notebook 01's calibration_lr)")
    ap.add_argument("--n-logs", type=int, default=2000, help="synthetic logged games (notebook 01's n_human_logs)")
    ap.add_argument("--limit", type=int, default=0, help="real logs: use at most this many dialogues (0: all)")
    ap.add_argument("--human-epochs", type=float, default=4.0, help="real logs: passes of the warm start and proxy")
    ap.add_argument("--eval", type=int, default=300, help="games per simulator against the humans' role A")
    ap.add_argument("--probe-games", type=int, default=100, help="paired games of the responsiveness probe")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-turns", type=int, default=10)
    ap.add_argument("--out", default="results/calibration_check", help="where check.json and the figure go")
    args = ap.parse_args(argv)
    if args.logs is not None and (args.notes != ["no"] or args.modes != ["sft"]):
        ap.error("the real logs play the selection protocol, which has no proposals: --notes no --modes sft")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task0, train_logs, held_logs, proxy_logs = human_logs(args.logs, args.n_logs, args.seed, args.max_turns,
                                                          args.limit)
    human = behaviour(task0, held_logs)
    if args.logs is None:
        human_a = population("A", list(HUMANS), HUMANS, seed=args.seed, style="casual")
        selector = None
    else:   # the notebook's real-logs branch: a selection classifier, a proxy of its own split as role A
        selector = task0.selector = SelectionClassifier().fit(task0, train_logs)
        proxy_dir = build_tiny(selection_conversations(task0, proxy_logs), TinyConfig(epochs=args.human_epochs),
                               name="tiny-dond-human-proxy")
        human_a = LMAgent.load(proxy_dir, name="human proxy", max_new_tokens=48)
    rows, curves = [], [{"simulator": "human (held-out logs)", **r} for r in human["curve"]]
    for k in args.builds:
        if args.logs is None:
            path = warm_start("tiny-dond", args.dialogues, build_seed=args.seed + k)
        else:
            path = str(build_tiny(selection_conversations(task0, train_logs),
                                  TinyConfig(epochs=args.human_epochs, seed=args.seed + k),
                                  name="tiny-dond-human-train"))
        scenarios = task0.sample_scenarios(args.eval, seed=stream_seed("eval-scenarios", args.seed + k))
        for notes in args.notes:
            task = DealOrNoDeal(protocol=task0.protocol, max_turns=args.max_turns, selector=selector,
                                notes=("B",) if notes == "yes" else ())
            held_convs = role_conversations(task, held_logs, "B")
            base_model, base_tok = load_model(path, device="auto")
            sims = {"uncalibrated": LMAgent(base_model, base_tok, name="uncalibrated", max_new_tokens=48)}
            nll = {"uncalibrated": turn_nll(base_model, base_tok, held_convs)}
            deciders = {}
            for mode in args.modes:
                corpus = (decision_conversations if mode == "decider" else role_conversations)(task, train_logs, "B")
                for epochs in args.epochs:
                    t0 = time.time()
                    sim_dir = calibrate_sft(path, corpus, out / f"sim-{k}-notes-{notes}-{mode}-{epochs:g}",
                                            epochs=epochs, lr=args.lr, seed=args.seed + k)
                    model, tok = load_model(str(sim_dir), device="auto")
                    name = f"calibrated {mode} {epochs:g}"
                    sims[name] = LMAgent(model, tok, name=name, max_new_tokens=48)
                    if mode == "decider":   # the module decides, the fine-tuned model talks (its marks in view)
                        deciders[name] = AcceptanceModel(seed=args.seed + k).fit(task, train_logs, "B")
                        sims[name] = DecidingUser(sims[name], deciders[name])
                        nll[name] = turn_nll(model, tok, decision_conversations(task, held_logs, "B"))
                    else:
                        nll[name] = turn_nll(model, tok, held_convs)
                    print(f"build {k}, notes {notes}: {name} in {time.time() - t0:.0f} s")
            for name, sim in sims.items():
                seed_everything(args.seed + k)
                states = [e.state for e in play(task, {"A": human_a, "B": sim}, scenarios,
                                                seeds=eval_seeds(args.seed + k, scenarios, "B", name))]
                seen = behaviour(task, states)
                row = {"build": k, "notes": notes, "simulator": name, "nll": nll[name],
                       "decision_distance": decision_distance(seen["curve"], human["curve"]),
                       "behaviour_distance": behaviour_distance(seen["stats"], human["stats"], BEHAVIOUR_SCALES)[
                           "total"], **{f"accepted {r['bin']}": r["accepted"] for r in seen["curve"]}}
                if name in deciders:   # the share of its turns whose [accept] the module struck out
                    row["overruled"] = sim.stats["overruled"] / max(sim.stats["turns"], 1)
                if task.protocol == "offer":
                    rec = responsiveness(task, sim, probe("B"), n=args.probe_games, seed=args.seed)
                    row.update(good=rec["good"], bad=rec["bad"], responds=rec["responds"])
                rows.append(row)
                curves += [{"simulator": name, "build": k, "notes": notes, **r} for r in seen["curve"]]
                print({key: (round(v, 3) if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print(pd.DataFrame(human["curve"]).to_string(index=False))
    print(table.round(3).to_string(index=False))
    changes = {}
    for notes in args.notes:
        at = table[table["notes"] == notes]
        uncal = at[at["simulator"] == "uncalibrated"].set_index("build")
        for name in [s for s in at["simulator"].unique() if s != "uncalibrated"]:
            cal = at[at["simulator"] == name].set_index("build").loc[uncal.index]
            for metric in ("decision_distance", "behaviour_distance"):
                changes[f"notes {notes}, {name}, {metric}"] = distance_change(uncal[metric], cal[metric])
    for key, c in changes.items():
        print(f"{key}: calibrated minus uncalibrated {c['diff']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] "
              f"per build {np.round(c['per_seed'], 3).tolist()}; happened: {c['happened']}")
    frame = pd.DataFrame(curves)
    acceptance_curves(frame[frame["simulator"].isin(["human (held-out logs)", "uncalibrated"])
                            | frame["simulator"].str.startswith("calibrated")], path=out / "acceptance.png")
    (out / "check.json").write_text(json.dumps({"args": vars(args), "human": human, "rows": rows,
                                                "changes": changes, "curves": curves}, indent=1, default=str) + "\n")
    print(f"wrote {out / 'check.json'} and {out / 'acceptance.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
