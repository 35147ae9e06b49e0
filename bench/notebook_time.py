"""Where a notebook run spends its time, and its training and evaluation throughput, from the run folders it wrote.

    python bench/notebook_time.py results/04_ibrl_bilateral/<run> [more runs ...] [--out notebook_time.png]

Reads each run's timings.json (wall-clock seconds per training run and evaluation, and the whole run), metrics.jsonl
(one row per training step; since the trainer logs them, `time/rollout_s` and `time/update_s`) and games.csv (one row
per evaluation game). A run with `processes = N` (config.json) trains and evaluates N runs at a time in one-thread
workers: its timings are worker seconds, so its train and eval parts are those over N (the machine's share; the
workers' imbalance falls into setup) and its rates are the machine's. Prints one table row per run:

    minutes      the whole notebook, as it recorded it
    setup        everything outside the training runs and evaluations: model builds and loads, calibration, the
                 theory checks, tables and figures
    rollouts, updates   the training steps' two parts (blank for runs made before the trainer logged them)
    train other  the rest of the training runs: trainers' construction, logging, checkpoints
    eval         the evaluation games
    train        the training runs (rollouts + updates + train other)
    train dialogues/min   dialogues played by training steps (steps x scenarios_per_step x group_size per interactive
                 run; static training plays none) per minute of those runs
    eval games/min        evaluation games per minute of evaluation

and, with --out, a figure: the minutes by part, one bar per run. Compare runs of the same profile made before and
after a change to see what it bought.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

PARTS = ("setup", "rollouts", "updates", "train other", "eval")


def breakdown(run: Path) -> dict:
    timings = json.loads((run / "timings.json").read_text())
    processes = json.loads((run / "config.json").read_text()).get("processes") or 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "step" in r and "method" in r]
    interactive = [r for r in steps if "rollout/n_games" in r]  # steps that played games (static training: none)
    runs = timings["runs"]
    train = sum(r["train_s"] for r in runs)
    evaluation = sum(r["eval_s"] for r in runs)
    rollouts = sum(r.get("time/rollout_s", 0.0) for r in steps)
    updates = sum(r.get("time/update_s", 0.0) for r in steps)
    timed = any("time/update_s" in r for r in steps)
    interactive_methods = {r["method"] for r in interactive}
    interactive_train = sum(r["train_s"] for r in runs if r["method"] in interactive_methods)
    dialogues = sum(r["rollout/n_games"] for r in interactive)
    games = sum(1 for _ in (run / "games.csv").open()) - 1
    # worker seconds -> the machine's seconds when the runs went `processes` at a time
    train, evaluation, rollouts, updates, interactive_train = (
        x / processes for x in (train, evaluation, rollouts, updates, interactive_train))
    return {"run": run.name, "notebook": run.parent.name, "processes": processes, "minutes": timings["seconds"] / 60,
            "setup": (timings["seconds"] - train - evaluation) / 60,
            "rollouts": rollouts / 60 if timed else None, "updates": updates / 60 if timed else None,
            "train other": (train - rollouts - updates) / 60 if timed else None,
            "train": train / 60, "eval": evaluation / 60,
            "train dialogues/min": dialogues / interactive_train * 60 if interactive_train else None,
            "eval games/min": games / evaluation * 60 if evaluation else None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None, help="write the figure here (png)")
    args = p.parse_args()
    table = [breakdown(r) for r in args.runs]

    def cell(v):
        return "" if v is None else f"{v:.1f}" if v < 100 else f"{v:.0f}"
    cols = ["minutes", "setup", "train", "rollouts", "updates", "train other", "eval", "train dialogues/min",
            "eval games/min"]
    print("| run | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for t in table:
        print(f"| {t['notebook']}/{t['run']} | " + " | ".join(cell(t[c]) for c in cols) + " |")
    if args.out:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 0.6 * len(table) + 1.5))
        labels = [f"{t['notebook'][:2]} {t['run']}" for t in table]
        left = [0.0] * len(table)
        for part in PARTS:
            # runs from before the trainer timed its steps show their training as one part
            widths = [t[part] if t[part] is not None else (t["train"] if part == "train other" else 0.0)
                      for t in table]
            ax.barh(labels, widths, left=left, label=part)
            left = [a + b for a, b in zip(left, widths)]
        ax.set_xlabel("minutes (2 cores)")
        ax.legend(ncol=len(PARTS), fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25))
        fig.tight_layout()
        fig.savefig(args.out, dpi=120)
        print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
