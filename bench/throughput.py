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

    python bench/throughput.py --design 04_ibrl_bilateral [--against 68f4c91] [--seeds 1] [--set processes=1]

prices a seed of a notebook's `cpu` design: runs the notebook itself (papermill, its parameters cell's defaults, i.e.
the `cpu` profile, with n_seeds = --seeds and any --set overrides) and reads its timings.json: `seconds per seed` is
the seed's training runs and their evaluations (every method, train_s + eval_s as the notebook records them, worker
seconds) over `processes` (the runs go that many at a time, one thread each): the machine's seconds for one more seed.
`notebook seconds` is the whole run, its one-off setup (warm starts, design checks, tables) included, and any
warm-start build the model cache lacks: the side that runs first pays it, so compare seconds per seed. With --against
<git ref> the same runs first from that commit's notebook and library (a `git worktree` under --out, its `lib` first
on PYTHONPATH, the same interpreter, packages and model cache), then from this working tree, one after the other on
the same machine, and the last line is `ratio: <against's seconds per seed / ours>` (above 1: ours is faster).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# run in a fresh interpreter with the tree's `lib` first on the path (papermill's kernel inherits the environment)
PAPERMILL = ("import json, sys, papermill; papermill.execute_notebook(sys.argv[1], sys.argv[2], "
             "parameters=json.loads(sys.argv[3]), progress_bar=False, cwd=sys.argv[4])")


def price_seed(root: Path, stem: str, seeds: int, overrides: dict, out: Path) -> dict:
    """Run notebooks/<stem>.ipynb of the tree at `root` (its own library) with n_seeds=`seeds` into `out`; returns
    the seconds per seed (the seeds' runs, train + eval, over `processes`, per seed), the notebook's seconds, and
    the per-method seconds of the seeds' runs."""
    out.mkdir(parents=True, exist_ok=True)
    params = {"n_seeds": seeds, "run_dir": str(out / "run"), **overrides}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "lib"), os.environ.get("PYTHONPATH", "")])}
    t0 = time.time()
    done = subprocess.run([sys.executable, "-c", PAPERMILL, str(root / "notebooks" / f"{stem}.ipynb"),
                           str(out / f"{stem}.ipynb"), json.dumps(params), str(root)], env=env, cwd=root,
                          capture_output=True, text=True)
    wall = time.time() - t0
    timings = out / "run" / "timings.json"
    if done.returncode != 0 or not timings.exists():
        raise SystemExit(f"{root}: notebook {stem} failed (its executed copy: {out / f'{stem}.ipynb'}):\n"
                         f"{done.stderr[-3000:]}")
    runs = json.loads(timings.read_text())["runs"]
    processes = json.loads((out / "run" / "config.json").read_text()).get("processes") or 1
    mine = [r for r in runs if isinstance(r.get("seed"), int) and r["seed"] < seeds]
    methods: dict[str, float] = {}
    for r in mine:
        methods[r["method"]] = methods.get(r["method"], 0.0) + r["train_s"] + r["eval_s"]
    worker = sum(r["train_s"] + r["eval_s"] for r in mine)
    return {"seconds_per_seed": worker / processes / seeds, "worker_seconds": worker, "processes": processes,
            "notebook_seconds": json.loads(timings.read_text())["seconds"], "wall_seconds": wall,
            "train_s": sum(r["train_s"] for r in mine), "eval_s": sum(r["eval_s"] for r in mine),
            "methods": methods}


def design_main(args) -> None:
    overrides = {}
    for item in args.set or []:
        key, _, value = item.partition("=")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:   # a bare word: a string
            overrides[key] = value
    out = Path(args.out or tempfile.mkdtemp(prefix="throughput-"))
    trees = [("ours", ROOT)]
    if args.against:
        worktree = out / "against-tree"
        if not worktree.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.against],
                           check=True, capture_output=True)
        trees.insert(0, (f"against {args.against}", worktree))
    priced = {}
    try:
        for label, root in trees:
            priced[label] = price_seed(root, args.design, args.seeds, overrides, out / label.split()[0])
            p = priced[label]
            print(f"{label}: seconds per seed: {p['seconds_per_seed']:.0f} (train {p['train_s']:.0f} s + eval "
                  f"{p['eval_s']:.0f} s of worker time over {p['processes']} processes, {args.seeds} seed(s)); "
                  f"notebook seconds: {p['notebook_seconds']:.0f}; by method: "
                  + ", ".join(f"{m} {s:.0f}" for m, s in p["methods"].items()), flush=True)
    finally:
        if args.against:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(out / "against-tree")],
                           capture_output=True)
    (out / "throughput.json").write_text(json.dumps(priced, indent=1))
    if args.against:
        print(f"ratio: {priced[trees[0][0]]['seconds_per_seed'] / priced['ours']['seconds_per_seed']:.2f}")


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
    p.add_argument("--design", help="a notebook stem: price one seed of its cpu design (runs the notebook)")
    p.add_argument("--against", help="with --design: a git ref whose notebook and library run the same first")
    p.add_argument("--seeds", type=int, default=1, help="with --design: the notebook's n_seeds")
    p.add_argument("--set", nargs="*", help="with --design: more parameters, key=value (JSON values)")
    p.add_argument("--out", help="with --design: where the runs go (default: a new temporary folder)")
    args = p.parse_args()
    if args.design:
        design_main(args)
        return
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
