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
