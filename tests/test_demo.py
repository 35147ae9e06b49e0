"""`python -m dialogrl demo` (make demo): the first-run notebook runs end to end and says where its outputs are.

At test size (2 steps, 16 held-out scenarios) its numbers mean nothing; tests/test_learning.py checks that the same
setup at the demo's size (its warm start, 40 steps of 32 dialogues against `guarded`) moves the goal rate (its margin
measured on three builds)."""
import ast
import json
from pathlib import Path

import nbformat
import pytest

from conftest import TEST_DIALOGUES
from dialogrl.__main__ import main
from dialogrl.reproduce import DEMO_NOTEBOOK, notebook_parameters
from test_learning import SOCIAL_SETUP

REPO = Path(__file__).resolve().parents[1]


def test_demo_notebook_is_committed_clean():
    nb = nbformat.read(REPO / DEMO_NOTEBOOK, as_version=4)
    assert nb.metadata.get("kernelspec") and not [c for c in nb.cells if c.cell_type == "code" and c.outputs]
    assert {"seed", "steps", "run_dir"} <= set(notebook_parameters(REPO / DEMO_NOTEBOOK))


def test_the_demo_is_the_setup_the_learning_test_checks():
    """The demo trains on the social learning test's warm start (its test build: the suite builds it once) with the
    test's budget and learning rate, so that the test's margin speaks for the demo."""
    demo = {k: ast.literal_eval(v) for k, v in notebook_parameters(REPO / DEMO_NOTEBOOK).items()}
    assert demo["warm_start_dialogues"] == TEST_DIALOGUES["tiny-social"]
    assert {k: demo[k] for k in SOCIAL_SETUP} == SOCIAL_SETUP


@pytest.mark.slow
def test_demo_runs_and_prints_where_its_outputs_are(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)  # the command runs from the repository root, as make demo does
    assert main(["demo", "-p", "steps", "2", "-p", "eval_scenarios", "16", "--results", str(tmp_path),
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    (run,) = (tmp_path / "first_run").iterdir()
    for path in (run / "first_run.ipynb", run / "figures" / "learning_curve.png", run / "figures" / "before_after.png",
                 run / "summary.json", run / "metrics.jsonl"):
        assert path.exists() and str(path) in out, path
    assert (run / "transcripts.jsonl").exists()
    summary = json.loads((run / "summary.json").read_text())
    d = summary["trained_minus_warm_start"]
    assert d["lo"] <= d["diff"] <= d["hi"] and d["n"] == 16 and summary["steps"] == 2
    assert set(summary["success"]) == {"warm start", "trained"}
    assert len([json.loads(line) for line in (run / "metrics.jsonl").open()]) == 2
