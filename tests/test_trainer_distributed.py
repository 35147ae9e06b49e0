"""The trainer as two processes (DDP-style gradient all-reduce over gloo), started by accelerate's launcher.

accelerate 1.15 starts several CPU processes under `--cpu` only through mpirun (absent here); its torchrun-based
launcher (`--multi_gpu`) starts them on a CPU-only machine too, and the trainer's Accelerator stays on the CPU
because the model is there, so the processes join one gloo group.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "train_two_steps.py"


def test_two_processes_split_the_scenarios_and_keep_identical_weights(dond_toy_dir, tmp_path):
    model_dir = dond_toy_dir
    launcher = Path(sys.executable).parent / "accelerate"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(launcher), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "29517",
                           str(SCRIPT), str(model_dir), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    # each process played its own half of the step's scenario groups
    assert ranks[0]["scenario_groups"] == [0, 2] and ranks[1]["scenario_groups"] == [1, 3]
    # gradients were averaged: both processes hold the same, updated adapter
    assert ranks[0]["changed"] and ranks[0]["checksum"] == pytest.approx(ranks[1]["checksum"], rel=0, abs=1e-9)
    # metrics are reduced over processes, and only the main process writes metrics.jsonl
    assert ranks[0]["rows"][-1]["reward/A"] == pytest.approx(ranks[1]["rows"][-1]["reward/A"])
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
