"""A learning test's body on several warm-start builds: the gains that set its margin.

    python bench/learning_margin.py dond-grpo|dond-ppo|persuasion|social --builds 0 1 2 [--size full] [--threads 1]
                                    [--set scenarios_per_step=4 ...] [--dialogues N]

Runs tests/test_learning.py's body (`dond_gain`, `persuasion_gain`, `social_gain`) on the warm start of each build
seed (`--size test`: its test build, conftest.small_build, as the tests train; `full`: the named recipe; built on
first use into the model cache) with `--threads` torch threads (1: as `make test`'s workers run it), and prints one
row per build (the paired gain, its 95% interval, minutes) and the smallest gain. `--set` changes the test's budget
(its *_SETUP: steps, scenarios_per_step, group_size, lr) for this run, to measure a candidate budget before the test
takes it; `--dialogues` the test build's corpus size (conftest.TEST_DIALOGUES), to measure a candidate size.
A test's margin is set at about half the smallest gain over builds 0, 1, 2, measured before the test runs at a new
size: a fresh machine builds the models anew, and a rebuild differs like another training run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

BODIES = {"dond-grpo": ("dond_gain", ("grpo",)), "dond-ppo": ("dond_gain", ("ppo",)),
          "persuasion": ("persuasion_gain", ()), "social": ("social_gain", ())}
MODELS = {"dond-grpo": "tiny-dond", "dond-ppo": "tiny-dond", "persuasion": "tiny-persuasion", "social": "tiny-social"}
SETUPS = {"dond-grpo": "DOND_GRPO_SETUP", "dond-ppo": "DOND_PPO_SETUP", "persuasion": "PERSUASION_SETUP",
          "social": "SOCIAL_SETUP"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("test", choices=sorted(BODIES))
    ap.add_argument("--builds", type=int, nargs="+", default=[0, 1, 2], help="warm-start build seeds")
    ap.add_argument("--size", choices=("full", "test"), default="test", help="the warm starts' size (test: the tests')")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: as make test's workers)")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="budget overrides: steps, scenarios_per_step, group_size (integers), lr")
    ap.add_argument("--dialogues", type=int, default=None,
                    help="the test build's corpus size (default: conftest.TEST_DIALOGUES); --size test only")
    args = ap.parse_args(argv)
    if args.dialogues is not None and args.size != "test":
        ap.error("--dialogues sizes the test build: --size test")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["TQDM_DISABLE"] = "1"
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import conftest
    import test_learning

    name, extra = BODIES[args.test]
    setup = getattr(test_learning, SETUPS[args.test])
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in setup:
            ap.error(f"--set {item}: the budget has {', '.join(setup)}")
        setup[key] = float(value) if key == "lr" else int(value)
    model = MODELS[args.test]
    if args.dialogues is not None:
        conftest.TEST_DIALOGUES[model] = args.dialogues
    print(f"{args.test}: {SETUPS[args.test]} = {setup}; {model}'s test build on "
          f"{conftest.TEST_DIALOGUES[model]} dialogues", flush=True)
    body = getattr(test_learning, name)
    gains = []
    for b in args.builds:
        t0 = time.time()
        diff, _ = body(*extra, build_seed=b, size=args.size)
        gains.append(diff["diff"])
        print(f"{args.test} build {b}: gain {diff['diff']:+.4f} [{diff['lo']:+.4f}, {diff['hi']:+.4f}] "
              f"({args.size} build, {(time.time() - t0) / 60:.1f} min, {args.threads} thread(s))", flush=True)
    print(f"{args.test}: smallest gain {min(gains):+.4f} over builds {args.builds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
