"""Notebook-level throughput: training dialogues per minute and evaluation games per minute, as notebook 04 runs them.

    python bench/throughput.py [--task dond|telesales] [--steps 10] [--scenarios 6] [--group 4] [--eval 50]

One IB-RL training run (both roles trainable, each its own LoRA adapter; GRPO, KL 0.1, the cpu profile's sizes),
then one evaluation cell (the trained policy in the first role against a scripted counterpart on `--eval` held-out
scenarios). Times are wall-clock seconds on this machine with its default thread count; the last two lines are
`train dialogues/min: X` and `eval games/min: Y`. Compare two versions of the library by running this file from each
(the same model build: the cached warm start of build seed 0).

    python bench/throughput.py --runs results/<stem>/<run id> [...]

reads finished notebook runs instead (any notebook): each training run's dialogues (its metrics' `rollout/n_games`
over the steps) over its training seconds (`timings.json`), i.e. dialogues/min of one run in its process, and the
notebook's training throughput on the machine, all runs' dialogues over the training seconds divided by `processes`
(the runs go `processes` at a time). A notebook's chosen design against an earlier one: pass both runs' folders.
"""
from __future__ import annotations

import argparse
import time


def run_throughput(run_dir: str) -> str:
    """One line on a finished notebook run: training dialogues/min per run and on the machine."""
    import json
    from collections import Counter
    from pathlib import Path

    run = Path(run_dir)
    if not (run / "timings.json").exists():
        raise SystemExit(f"{run}: no timings.json (not a finished notebook run)")
    config = json.loads((run / "config.json").read_text())
    dialogues = Counter()
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "rollout/n_games" in row and "step" in row:
            dialogues[row.get("task"), row["method"], row["seed"]] += row["rollout/n_games"]
    runs = json.loads((run / "timings.json").read_text())["runs"]
    trained = [(t, dialogues[t.get("task"), t["method"], t["seed"]]) for t in runs]
    trained = [(t, d) for t, d in trained if d]  # the base and static runs roll out nothing
    if not trained:
        raise SystemExit(f"{run}: no training rollouts in metrics.jsonl")
    n = sum(d for _, d in trained)
    seconds = sum(t["train_s"] for t, _ in trained)
    processes = config.get("processes", 1)
    per_run = sorted(d / t["train_s"] * 60 for t, d in trained)
    return (f"{run_dir}: {len(trained)} training runs, {n} dialogues in {seconds:.0f} s of training "
            f"(steps {config.get('steps')}, processes {processes}): {per_run[len(per_run) // 2]:.0f} dialogues/min "
            f"per run (median; {per_run[0]:.0f}-{per_run[-1]:.0f}), train dialogues/min: "
            f"{n / seconds * 60 * processes:.0f} on the machine")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="dond", choices=["dond", "telesales"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--scenarios", type=int, default=6)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--eval", type=int, default=50)
    p.add_argument("--runs", nargs="+", help="finished notebook run folders to read instead of training here")
    args = p.parse_args()
    if args.runs:
        for run in args.runs:
            print(run_throughput(run))
        return

    from dialogrl.agents import LMAgent
    from dialogrl.envs import make_task, telesales
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.evaluate import cross_play
    from dialogrl.models import load_model
    from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
    from dialogrl.run import seed_everything
    from dialogrl.tiny import build_tiny_model

    task = make_task("dealnodeal" if args.task == "dond" else "telesales")
    path = build_tiny_model("tiny-dond" if args.task == "dond" else "tiny-telesales", build_seed=0)
    model, tok = load_model(str(path), adapters=list(task.roles), device="cpu", lora_r=8, lora_alpha=16)
    seed_everything(0)
    roles = {r: RoleSpec(adapter=r, trainable=True, lr=1e-3) for r in task.roles}
    cfg = TrainConfig(steps=args.steps, scenarios_per_step=args.scenarios, group_size=args.group, kl_coef=0.1)
    t0 = time.perf_counter()
    rows = Trainer(task, model, tok, roles, config=cfg).train(progress=False)
    parts = {part: sum(r[f"time/{part}_s"] for r in rows) for part in ("rollout", "update")}
    train_s = time.perf_counter() - t0
    role = task.roles[0]
    counterpart = ScriptedAgent("fair", seed=7) if args.task == "dond" else telesales.ScriptedAgent("decisive", seed=7)
    scenarios = task.sample_scenarios(args.eval, seed=900_000)
    t0 = time.perf_counter()
    # "partner": the counterpart's name, which keys its games' seeds (seeds.eval_seeds)
    cross_play(task, {"policy": LMAgent(model, tok, adapter=role)}, {"partner": counterpart}, scenarios, roles=[role],
               seed=10_000)
    eval_s = time.perf_counter() - t0
    dialogues = args.steps * args.scenarios * args.group
    print(f"{args.task}: training {dialogues} dialogues in {train_s:.1f} s (rollouts {parts['rollout']:.1f} s, "
          f"updates {parts['update']:.1f} s), evaluation {args.eval} games in {eval_s:.1f} s")
    print(f"train dialogues/min: {dialogues / train_s * 60:.0f}")
    print(f"eval games/min: {args.eval / eval_s * 60:.0f}")


if __name__ == "__main__":
    main()
