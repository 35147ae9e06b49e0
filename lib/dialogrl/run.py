"""Run bookkeeping: seeding, run folders, config/env/summary files, metrics logging, device choice.

Every notebook does the same few things first (minGPT / cleanrl style):

    seed_everything(seed)
    run_dir = make_run_dir("04_ibrl_bilateral", seed=seed)
    save_config(run_dir, params)      # every parameter and the seed
    save_env(run_dir)                 # package versions, device
    log = MetricsLogger(run_dir)      # metrics.jsonl, one JSON object per line; Trainer.train(log=log) also
                                      # appends its effective configuration to train_configs.jsonl
    ...
    save_summary(run_dir, summary)    # the numbers the paper's claims are judged by
    save_timings(run_dir, timings)    # wall-clock times, apart from the summary (they differ between runs)

An interrupted run is finished in its own folder: `start_run(..., resume=run_dir)` checks that the parameters and
the environment are the ones it ran with and clears what it wrote, except the training runs it finished, which
`parallel.map_runs(..., keep=run_dir / "jobs")` saved as each one ended and takes up again.

Long loops show `progress(...)` bars (tqdm), which TQDM_DISABLE=1 turns off everywhere.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    import pandas as pd

RESULTS_ROOT = Path("results")
TRAIN_CONFIGS = "train_configs.jsonl"  # one line per trainer run in a run folder (MetricsLogger.log_config)
LOCK = ".lock"  # held by the process that writes a run folder (`_hold`)
JOBS = "jobs"  # a run folder's finished training runs (map_runs' keep), until the run finishes: what a resume reuses

# packages whose versions go into env.json
_TRACKED_PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "tokenizers",
                     "numpy", "scipy", "pandas", "seaborn", "papermill", "dialogrl")
# parameters a resumed run may change: where it writes, and how many training runs at a time (the same results for
# any value: tests/test_notebooks.py)
RESUMABLE = ("run_dir", "resume", "processes")
# the keys that say where and how a run goes, not what it is: left out of its preregistered parameters' hash
RUN_KEYS = (*RESUMABLE, "report_to")
PREREGISTRATION = "preregistration.json"  # what a run found preregistered when it started (`preregistration`)
PREREGISTERED = "<!-- preregistered: params {} -->"  # the marker of a paper file's confirmatory design section
# what decides a run's numbers besides its parameters: a resumed run must find these as its env.json recorded them
_SAME_ENV = ("python", "packages", "torch_threads", "cuda", "cuda_device", "git_commit", "git_dirty")


def seed_everything(seed: int, deterministic: bool = True) -> int:
    """Seed python, numpy and torch (all devices) with one integer; run i of a sweep uses seed + i.

    With deterministic=True, torch picks deterministic kernels where it has them, so the same seed gives the
    same numbers on CPU. Returns the seed so it can be recorded.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)  # for subprocesses; this process's hash seed is fixed at startup
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if torch.backends.cudnn.is_available():
            torch.backends.cudnn.benchmark = False
    return seed


def choose_device(device: str = "auto") -> torch.device:
    """'auto' picks cuda, then mps, then cpu; anything else is passed to torch.device and checked. Under a
    multi-process launch (`accelerate launch`, torchrun: LOCAL_RANK set) 'auto' is this rank's own GPU, so that the
    models each rank loads before its trainer starts (the frozen counterparts) sit beside the rank's policy, not
    all on GPU 0."""
    if device == "auto":
        if torch.cuda.is_available():
            rank = os.environ.get("LOCAL_RANK")
            return torch.device("cuda", int(rank) % torch.cuda.device_count()) if rank else torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} asked for CUDA, but torch sees no CUDA device; use device='auto' or 'cpu'")
    return dev


def progress(iterable=None, desc: str | None = None, total: int | None = None, enabled: bool = True, **kwargs):
    """A tqdm progress bar (`tqdm.auto`: a widget in Jupyter, text elsewhere) over `iterable`.

    Off when enabled is False, or for every bar when the environment sets TQDM_DISABLE=1 (the tests do: papermill
    kernels inherit it). kwargs go to tqdm (leave, unit, position, ...). Use it as tqdm: `for x in progress(xs,
    "eval")`, `bar.set_postfix(...)`, `bar.update()`.
    """
    from tqdm.auto import tqdm

    off = os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes")  # read now: tqdm reads it at import
    return tqdm(iterable, desc=desc, total=total, disable=off or not enabled, **kwargs)


def make_run_id(seed: int | None = None) -> str:
    """A sortable, unique-enough id: 20261130-021530__seed0 (cleanrl's env__exp__seed__time, shortened)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return stamp if seed is None else f"{stamp}__seed{seed}"


def make_run_dir(stem: str, seed: int | None = None, root: str | os.PathLike = RESULTS_ROOT,
                 run_id: str | None = None) -> Path:
    """Create results/<stem>/<run_id>/ and return it. Never reuses a folder: a taken id gets a -1, -2, ... suffix."""
    base = Path(root) / stem
    base.mkdir(parents=True, exist_ok=True)
    run_id = run_id or make_run_id(seed)
    for k in range(10_000):
        path = base / (run_id if k == 0 else f"{run_id}-{k}")
        try:
            path.mkdir()  # atomic: fails if another process took the name first
        except FileExistsError:
            continue
        (path / "figures").mkdir()
        return path
    raise RuntimeError(f"could not find a free run folder under {base} for id {run_id!r}")


def use_run_dir(run_dir: str | os.PathLike) -> Path:
    """Adopt a run folder given from outside (e.g. by `python -m dialogrl reproduce`); it must be new or empty."""
    path = Path(run_dir)
    path.mkdir(parents=True, exist_ok=True)
    taken = [p.name for p in path.iterdir() if p.suffix != ".ipynb" and p.name != "figures"]
    if taken:
        raise FileExistsError(f"run folder {path} already holds {sorted(taken)[:5]}: runs never overwrite each other")
    (path / "figures").mkdir(exist_ok=True)
    return path


def start_run(stem: str, params: dict, run_dir: str | os.PathLike | None = None,
              root: str | os.PathLike = RESULTS_ROOT, resume: str | os.PathLike | None = None) -> Path:
    """A notebook's setup in one call: seed everything with params['seed'], make (or adopt) the run folder,
    write config.json and env.json. Returns the run folder.
    resume: an interrupted run folder of this notebook to finish instead (`resume_run`); run_dir, if given, must name
    the same folder."""
    seed_everything(params["seed"])
    if resume:
        if run_dir and Path(run_dir).resolve() != Path(resume).resolve():
            raise ValueError(f"run_dir={str(run_dir)!r} and resume={str(resume)!r}: a resumed run writes into the "
                             "folder it resumes; give one of them")
        return resume_run(params, resume)
    path = use_run_dir(run_dir) if run_dir else make_run_dir(stem, seed=params["seed"], root=root)
    _hold(path)
    save_config(path, params)
    save_env(path)
    write_json(path / PREREGISTRATION, preregistration(stem, params))
    return path


_HELD: dict[Path, int] = {}   # run folders this process writes: the descriptor of each one's held lock file


def _hold(path: Path) -> None:
    """Mark a run folder as written by this process for as long as it lives (an advisory lock on <run>/.lock, which
    its forked workers share): a resume from another process is refused while the run still goes on."""
    try:
        import fcntl
    except ImportError:   # not POSIX: no lock
        return
    if path.resolve() in _HELD:
        return
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"{path}: another process is writing this run now (it holds {path / LOCK}): resume it once "
                         "that process has ended (a notebook's kernel too)") from None
    _HELD[path.resolve()] = fd


def resume_run(params: dict, run_dir: str | os.PathLike) -> Path:
    """Take up an interrupted run in its folder: it must hold a config.json with these parameters (those in
    RESUMABLE aside) and no summary.json, no other process may be writing it still (its lock), and this environment
    must be the one its env.json recorded (python, package versions, torch threads, device, git commit): otherwise a
    ValueError naming what differs, before anything is touched. Then everything the run wrote is removed, to be
    written again, except config.json, env.json, executed notebooks and the training runs it finished
    (<run_dir>/jobs, `parallel.map_runs`' keep). Returns the folder."""
    path = Path(run_dir)
    if not (path / "config.json").is_file():
        raise ValueError(f"resume={str(run_dir)!r}: no config.json there: not a run folder")
    if (path / "summary.json").exists():
        raise ValueError(f"{path}: this run finished (it has a summary.json): nothing to resume")
    _hold(path)
    then, now = read_json(path / "config.json"), json.loads(json.dumps(dict(params), default=_to_jsonable))
    if not isinstance(then, dict):
        raise ValueError(f"{path / 'config.json'}: not a mapping of parameters")
    def shown(d: dict, k: str) -> str:
        return repr(d[k]) if k in d else "unset"

    differ = [f"{k} ({shown(then, k)} then, {shown(now, k)} now)" for k in sorted(set(then) | set(now))
              if k not in RESUMABLE and shown(then, k) != shown(now, k)]
    if differ:
        raise ValueError(f"{path / 'config.json'}: the run was started with other parameters: {'; '.join(differ)}. "
                         "Resume it with its own parameters, or start a new run")
    env_then = read_json(path / "env.json") if (path / "env.json").is_file() else {}
    env_now = json.loads(json.dumps(environment_info(), default=_to_jsonable))
    pkgs_then, pkgs_now = env_then.get("packages") or {}, env_now.get("packages") or {}
    changed = [f"{k} {env_then.get(k)!r} then, {env_now.get(k)!r} now" for k in _SAME_ENV
               if k != "packages" and env_then.get(k) != env_now.get(k)]
    changed += [f"{name} {v!r} then, {pkgs_now.get(name)!r} now" for name, v in pkgs_then.items()
                if pkgs_now.get(name) != v]
    if changed:
        raise ValueError(f"{path / 'env.json'}: the run started in another environment: {'; '.join(changed)}. Its "
                         "finished training runs would not be this environment's: start a new run")
    for p in path.iterdir():
        if p.name in ("config.json", "env.json", PREREGISTRATION, JOBS, LOCK) or p.suffix == ".ipynb":
            continue
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    (path / "figures").mkdir()
    kept = len(list((path / JOBS).glob("job-*.pkl")))
    print(f"resuming {path}: {kept} finished training run{'s' * (kept != 1)} taken from {JOBS}/, the rest run again")
    return path


def _find_nan(obj: Any, where: str = "") -> str | None:
    """Dotted path of the first NaN/inf in a nested dict/list, or None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "<root>"
    if isinstance(obj, dict):
        for k, v in obj.items():
            bad = _find_nan(v, f"{where}.{k}" if where else str(k))
            if bad:
                return bad
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            bad = _find_nan(v, f"{where}[{i}]")
            if bad:
                return bad
    return None


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, torch.device):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON: {obj!r}")


def write_json(path: str | os.PathLike, obj: Any, allow_nan: bool = False) -> Path:
    """Write obj as indented JSON. NaN/inf are refused (they are not JSON) with the key that holds them."""
    if not allow_nan:
        bad = _find_nan(obj)
        if bad:
            raise ValueError(f"{Path(path).name}: value at '{bad}' is NaN or infinite; write None for a missing number")
    return write_text(path, json.dumps(obj, indent=2, default=_to_jsonable, allow_nan=allow_nan) + "\n")


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write a text file whole or not at all (`write_bytes`), UTF-8."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write a file whole or not at all: into a temporary file beside it, then renamed over it (a full disk or a
    killed process leaves the old file as it was, never half of the new one)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")   # this process's own: two writers never share one
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def sha256_file(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in blocks (model weights, data files)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save_config(run_dir: str | os.PathLike, params: dict) -> Path:
    """config.json: every parameter of the run (the seed included), written first."""
    return write_json(Path(run_dir) / "config.json", dict(params))


def environment_info() -> dict:
    """Package versions, python, platform and device facts, for env.json."""
    versions = {}
    for name in _TRACKED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    info = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "packages": versions,
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    if torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
    info.update(git_state())
    return info


def repo_root() -> Path:
    """The repository this library runs from (lib/dialogrl/ -> ../..): where params/ and papers/ live."""
    return Path(__file__).resolve().parents[2]


def git_state() -> dict:
    """{"git_commit": the library's checkout's HEAD, "git_dirty": tracked files changed} ({} outside a git clone)."""
    root = repo_root()
    if not (root / ".git").exists():
        return {}
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"git_commit": head.stdout.strip(), "git_dirty": bool(dirty.stdout.strip())}


def params_hash(params: dict) -> str:
    """The SHA-256 of a run's resolved parameters (config.json's values, RUN_KEYS left out), as canonical JSON (keys
    sorted, every number a float): what a paper's confirmatory design registers (PREREGISTERED) and its run must
    match. `reproduce.design_hash` computes the same from a notebook and a profile before any run."""
    design = {k: v for k, v in dict(params).items() if k not in RUN_KEYS}
    text = json.dumps(_numbers_as_floats(json.loads(json.dumps(design, default=_to_jsonable))), sort_keys=True,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _numbers_as_floats(obj: Any) -> Any:
    """Every number a float (a YAML `0` and a cell's `0.0` are one value to a run): the form params_hash hashes."""
    if isinstance(obj, dict):
        return {k: _numbers_as_floats(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_numbers_as_floats(v) for v in obj]
    return float(obj) if isinstance(obj, (int, float)) and not isinstance(obj, bool) else obj


def registered_hashes(text: str) -> list[str]:
    """The parameter hashes a paper file's text registers: its PREREGISTERED marker lines, in order."""
    start, end = PREREGISTERED.split("{}")
    return [line.strip()[len(start):-len(end)].strip() for line in text.splitlines()
            if line.strip().startswith(start) and line.strip().endswith(end)]


def preregistration(stem: str, params: dict, root: str | os.PathLike | None = None) -> dict:
    """What papers/<stem>.md registers as committed at HEAD when a run starts (papers/PROTOCOL.md: confirmatory
    runs are preregistered): {"params_hash": this run's `params_hash`, "registered": the hash in the file's
    PREREGISTERED marker or None, "commit": the commit that added that marker or None, "paper": the file}. A marker
    only in the working tree, not yet committed, does not count; two markers in one file are refused."""
    rel = f"papers/{stem}.md"
    out = {"params_hash": params_hash(params), "registered": None, "commit": None, "paper": rel}
    root = Path(root) if root is not None else repo_root()
    if not (root / ".git").exists():
        return out
    shown = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=root, capture_output=True, text=True)
    found = registered_hashes(shown.stdout) if shown.returncode == 0 else []
    if len(found) > 1:
        raise ValueError(f"{rel}: {len(found)} preregistration markers at HEAD ({', '.join(found)}): one run per "
                         "preregistration, so one marker a paper file")
    if found:
        marker = PREREGISTERED.format(found[0])
        log = subprocess.run(["git", "log", "--format=%H", "-S", marker, "--", rel], cwd=root, capture_output=True,
                             text=True)
        out.update(registered=found[0], commit=(log.stdout.split() or [None])[0])   # newest change: the addition
    return out


def save_env(run_dir: str | os.PathLike) -> Path:
    """env.json: package versions and device."""
    return write_json(Path(run_dir) / "env.json", environment_info())


def no_nan(x: Any) -> Any:
    """`x` with every non-finite float (a measure with nothing to measure) made None, in dicts, lists and tuples (as
    lists): what save_summary takes, since it refuses NaN."""
    if isinstance(x, dict):
        return {k: no_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [no_nan(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def save_summary(run_dir: str | os.PathLike, summary: dict) -> Path:
    """summary.json: the numbers a paper's claims are judged by. NaN is refused with the offending key."""
    return write_json(Path(run_dir) / "summary.json", summary)


def save_design_checks(run_dir: str | os.PathLike, counterparts: dict, room: dict, **more) -> Path:
    """design_checks.json: every counterpart's responsiveness record and every room test (dialogrl.room), and `more`
    (e.g. the warm-start builds a design replaced), written as soon as the checks are done and before a design can be
    refused, so that a refused run keeps what refused it (summary.json repeats them when the run goes on)."""
    return write_json(Path(run_dir) / "design_checks.json",
                      no_nan({"counterparts": counterparts, "room": room, **more}))


def save_timings(run_dir: str | os.PathLike, timings: dict) -> Path:
    """timings.json: wall-clock times of the run, kept out of summary.json so that the summary of one seed on one
    machine and model build is the same file every time."""
    return write_json(Path(run_dir) / "timings.json", timings)


def save_games(run_dir: str | os.PathLike, games: pd.DataFrame, transcripts: Sequence[dict] = ()) -> None:
    """games.csv (one row per evaluation game) and transcripts.jsonl (appended: the records of
    `evaluate.transcript_records`) of a run."""
    games.to_csv(Path(run_dir) / "games.csv", index=False)
    append_jsonl(Path(run_dir) / "transcripts.jsonl", transcripts)


def show_transcripts(run_dir: str | os.PathLike, n: int = 2, keep: Callable[[dict], bool] = lambda rec: True,
                     title: Callable[[dict], str] | None = None) -> None:
    """Print the first `n` dialogues of a run's transcripts.jsonl that `keep` keeps: a title line (by default the
    policy, its role, the counterpart and the outcome), then each turn."""
    path = Path(run_dir) / "transcripts.jsonl"
    records = read_jsonl(path) if path.exists() else []
    for rec in [r for r in records if keep(r)][:n]:
        print("--- " + (title(rec) if title else f"{rec['policy']} as {rec['role']} vs {rec['counterpart']}: "
                                                 f"{rec.get('outcome')}"))
        for t in rec["turns"]:
            print(f"  {t['role']}: {t['text']}")


def text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line with its end) of a UTF-8 text file; a line that is not UTF-8 is a ValueError naming the
    file, the line and the byte (a data file saved in Latin-1, say), not a bare UnicodeDecodeError."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{path}:{n}: not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}"
                                 f"; saved in another encoding? re-save it as UTF-8)") from None


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's value; an empty, truncated or non-UTF-8 file is a ValueError naming the file and the place."""
    text = "".join(line for _, line in text_lines(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        raise ValueError(f"{path}: {'empty' if not text.strip() else where}") from None


def read_jsonl(path: str | os.PathLike) -> list:
    """The values of a JSON-lines file (metrics.jsonl, transcripts.jsonl), blank lines skipped; a line that is not
    JSON (cut short by a killed process, say) is a ValueError naming the file and the line."""
    out = []
    for n, line in text_lines(path):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not a JSON line ({err.msg} at column {err.colno})") from None
    return out


def show(obj, markdown: bool = False) -> None:
    """Display `obj` in a notebook (IPython; a markdown string rendered with `markdown`), print it elsewhere (a
    styled table as its data)."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(obj.data if type(obj).__name__ == "Styler" else obj)
    else:
        display(Markdown(obj) if markdown else obj)


def print_timings(timings: Sequence[dict]) -> None:
    """One line per run: its labels (every field but the times, e.g. task, method, seed) in aligned columns, then
    its training and evaluation seconds (`train_s`, `eval_s`)."""
    labels = [[f"{k} {v}" if k == "seed" else str(v) for k, v in t.items() if k not in ("train_s", "eval_s")]
              for t in timings]
    widths = [max(len(x[i]) for x in labels if i < len(x)) for i in range(max(map(len, labels), default=0))]
    for t, x in zip(timings, labels):
        names = " ".join(v.ljust(w) for v, w in zip(x, widths))
        print(f"{names}: train {t['train_s']:5.0f} s, eval {t['eval_s']:4.0f} s")


def skipped_steps(run_dir: str | os.PathLike) -> dict:
    """The optimizer steps fp16's loss scaler skipped in a run's training (`<adapter>/skipped_steps`, a running count
    per training run in metrics.jsonl): {"total", "runs": {"<tags>/<adapter>": count}} with the runs that skipped
    any; {} when no training run logged the count (no fp16) or none skipped a step."""
    path = Path(run_dir) / "metrics.jsonl"
    last: dict[str, int] = {}
    for row in read_jsonl(path) if path.is_file() else []:
        tags = "/".join(f"{k}={v}" for k, v in row.items() if not isinstance(v, float) and k != "step" and "/" not in k)
        for k, v in row.items():
            if k.endswith("/skipped_steps"):
                key = f"{tags}/{k.rsplit('/', 1)[0]}".lstrip("/")
                last[key] = max(last.get(key, 0), int(v))
    runs = {k: v for k, v in last.items() if v}
    return {"total": sum(runs.values()), "runs": runs} if runs else {}


def design_summary(params: Mapping[str, Any], **more: Any) -> dict:
    """The head of a notebook's summary.json, from its parameters: the profile, training seeds, evaluation scenarios,
    steps and dialogues of each training run, and how its intervals are taken; then `more`."""
    p = params
    return {"profile": p["profile"], "seeds": p["n_seeds"], "eval_scenarios": p["eval_scenarios"], "steps": p["steps"],
            "dialogues_per_run": p["steps"] * p["scenarios_per_step"] * p["group_size"],
            "interval": "t over training seeds" if p["n_seeds"] > 1 else "bootstrap over games (one seed)", **more}


def finish_run(run_dir: str | os.PathLike, summary: dict, started: float, **timings: Any) -> float:
    """Write summary.json (non-finite values as None: `no_nan`; with the optimizer steps fp16 skipped, when any:
    `skipped_steps`; with the preregistration the run found when it started, PREREGISTRATION) and timings.json (the
    seconds since `started`, a time.time(), and `timings`), and remove the finished training runs kept for a resume
    (<run_dir>/jobs); returns those seconds."""
    seconds = round(time.time() - started, 1)
    skipped = skipped_steps(run_dir)
    if skipped:   # fp16: optimizer steps the loss scaler skipped (overflows), counted where a reader sees them
        summary = {**summary, "skipped_steps": skipped}
    if (Path(run_dir) / PREREGISTRATION).is_file():   # what was registered when the run started (`preregistration`)
        summary = {**summary, "preregistration": read_json(Path(run_dir) / PREREGISTRATION)}
    save_summary(run_dir, no_nan(summary))
    save_timings(run_dir, {"seconds": seconds, **timings})
    shutil.rmtree(Path(run_dir) / JOBS, ignore_errors=True)   # kept for a resume; the run's files hold them now
    return seconds


_APPENDS: list | None = None   # inside `recorded_appends`: the (file, line) pairs append_jsonl writes


def append_jsonl(path: str | os.PathLike, rows: Sequence[dict]) -> None:
    """Append one JSON line per row to a run file (metrics.jsonl, train_configs.jsonl, transcripts.jsonl)."""
    lines = [json.dumps(row, default=str) + "\n" for row in rows]
    with open(path, "a") as f:
        f.writelines(lines)
    if _APPENDS is not None:
        _APPENDS.extend((Path(path).resolve(), line) for line in lines)


@contextlib.contextmanager
def recorded_appends() -> Iterator[list[tuple[Path, str]]]:
    """The lines `append_jsonl` writes inside the block, as (file, line) pairs: what a training run logged to its run
    folder, kept with its result (`parallel.map_runs`' keep) so that a resumed run logs it again."""
    global _APPENDS
    outer, _APPENDS = _APPENDS, []
    try:
        yield _APPENDS
    finally:
        inner, _APPENDS = _APPENDS, outer
        if outer is not None:
            outer.extend(inner)


class MetricsLogger:
    """Appends one JSON object per call to <run_dir>/metrics.jsonl, and prints a short line every `print_every`.

        log = MetricsLogger(run_dir)
        log.log(step=10, phase="train", loss=2.31, score=4.2)   # -> {"step": 10, ..., "time": 12.3}
        log.log_config(config={...}, roles={...})                # -> a line of <run_dir>/train_configs.jsonl
    """

    def __init__(self, run_dir: str | os.PathLike, filename: str = "metrics.jsonl", print_every: int = 0):
        self.path = Path(run_dir) / filename
        self.configs_path = Path(run_dir) / TRAIN_CONFIGS
        self.print_every = print_every
        self._t0 = time.time()
        self._n = 0

    def log(self, **row: Any) -> dict:
        row = json.loads(json.dumps(row, default=_to_jsonable))  # plain python values from here on
        row["time"] = round(time.time() - self._t0, 3)
        append_jsonl(self.path, [row])
        self._n += 1
        if self.print_every and self._n % self.print_every == 0:
            print(", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
        return row

    def log_config(self, **record: Any) -> dict:
        """Append one JSON object to <run_dir>/train_configs.jsonl: the effective configuration of one trainer run
        (Trainer.train writes {trainer, start_step, config, roles} here before its first step)."""
        record = json.loads(json.dumps(record, default=_to_jsonable))
        append_jsonl(self.configs_path, [record])
        return record

    def tagged(self, **tags: Any) -> TaggedLogger:
        """A logger writing to the same file whose rows all carry `tags` (e.g. task, method, seed)."""
        return TaggedLogger(self, **tags)


class TaggedLogger:
    """A MetricsLogger view that adds fixed fields to every row: `MetricsLogger(run).tagged(task="dond", seed=0)`."""

    def __init__(self, logger: MetricsLogger, **tags: Any):
        self.logger, self.tags = logger, tags

    def log(self, **row: Any) -> dict:
        return self.logger.log(**self.tags, **row)

    def log_config(self, **record: Any) -> dict:
        return self.logger.log_config(**self.tags, **record)


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """Read a metrics.jsonl (or the one in a run folder) back as a list of dicts (pandas.DataFrame(rows) to plot)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    return read_jsonl(path)
