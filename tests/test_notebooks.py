"""Notebook smoke harness: every notebooks/<stem>.ipynb runs end to end at its smoke profile.

For each notebook: it is committed without outputs, with a kernelspec and a `parameters` cell; params/<stem>/ holds
smoke.yaml and gpu.yaml whose keys are all real notebook parameters (papermill only warns on unknown ones); the smoke
run writes a summary.json with no NaN.
"""
import json
from pathlib import Path

import nbformat
import papermill
import pytest

from dialogrl.reproduce import notebook_parameters, profile_parameters

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "notebooks" / "00_example.ipynb"
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# the fixture notebook keeps the harness itself tested while notebooks/ is still empty
CASES = [pytest.param(nb, REPO / "params", id=nb.stem, marks=pytest.mark.slow) for nb in NOTEBOOKS] + \
    [pytest.param(FIXTURE, FIXTURE.parents[1] / "params", id="fixture-00_example")]


def _strict_json(path: Path):
    def refuse(constant):
        raise ValueError(f"{path}: {constant} in JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.parametrize("nb_path, params_dir", CASES)
def test_notebook_is_committed_clean(nb_path, params_dir):
    nb = nbformat.read(nb_path, as_version=4)
    assert nb.metadata.get("kernelspec"), "no kernelspec: papermill cannot run it"
    assert not [c for c in nb.cells if c.cell_type == "code" and c.outputs], "committed with outputs"
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    params = notebook_parameters(nb_path)
    assert "seed" in params and "run_dir" in params and "profile" in params
    for profile in ("smoke", "gpu"):  # both files exist and name only real parameters
        profile_parameters(nb_path, profile, params_dir)


@pytest.mark.parametrize("nb_path, params_dir", CASES)
def test_notebook_smoke_run_writes_a_summary(nb_path, params_dir, tmp_path):
    params = profile_parameters(nb_path, "smoke", params_dir)
    run_dir = tmp_path / "run"
    papermill.execute_notebook(str(nb_path), str(tmp_path / nb_path.name), cwd=str(REPO), progress_bar=False,
                               parameters={**params, "run_dir": str(run_dir)})
    summary = _strict_json(run_dir / "summary.json")
    assert summary, "empty summary.json"
    assert json.loads((run_dir / "config.json").read_text())["seed"] == params.get("seed", 0)
    assert (run_dir / "env.json").exists()


@pytest.mark.slow
def test_notebook_01_runs_on_the_real_human_logs(shared_data, tmp_path):
    """Notebook 01 with `human_logs`: the selection protocol, a warm start and a human proxy built on disjoint
    splits of the real Deal or No Deal dialogues (200 of them here; toy sizes, the numbers mean nothing)."""
    nb_path = REPO / "notebooks" / "01_calibrated_interactive_rl.ipynb"
    params = profile_parameters(nb_path, "smoke", REPO / "params")
    run_dir = tmp_path / "run"
    papermill.execute_notebook(str(nb_path), str(tmp_path / nb_path.name), cwd=str(REPO), progress_bar=False,
                               parameters={**params, "run_dir": str(run_dir), "human_logs": str(shared_data / "dealnodeal"),
                                           "human_logs_limit": 200, "human_model_epochs": 1.0})
    summary = _strict_json(run_dir / "summary.json")
    assert summary["protocol"] == "selection" and summary["n_train_logs"] == 120
    assert set(summary["score"]) >= {"base", "static", "interactive", "calibrated"}
    assert summary["shift"]["bound_test"] == "indicative" and summary["shift"]["reward"] == "terminal"
    records = [json.loads(line) for line in (run_dir / "transcripts.jsonl").read_text().splitlines()]
    assert any(t["phase"] == "select" for r in records for t in r["turns"])  # games end with both selections
