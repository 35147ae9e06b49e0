"""`python -m dialogrl reproduce`: run every paper notebook through papermill and gather the results.

For each notebooks/<stem>.ipynb (sorted, or those named by --only):
  1. parameters: the notebook's defaults for the `cpu` profile; params/<stem>/<profile>.yaml for `smoke` and `gpu`
     (every key must be a parameter of the notebook: papermill itself only warns on unknown ones); `profile` itself
     is always passed, so that a notebook's `profile = "auto"` does not pick another one;
  2. a new run folder results/<stem>/<run_id>/, passed to the notebook as its `run_dir` parameter; the executed
     notebook is saved there beside the notebook's own summary.json, metrics.jsonl, figures and transcripts (with
     --resume, the notebook's newest interrupted run of the profile instead, as its `resume` parameter: the training
     runs it finished are reused, `run.resume_run`);
  3. results/REPORT.md: the claims of each notebook's latest run beside the paper's effects, with intervals, MDEs
     and verdicts (`compare.compare_table`), its manipulation checks, and the paper's other numbers, which
     papers/<stem>.md lists in its front matter under `paper_numbers:` (dotted summary keys -> the paper's value);
  4. for the `cpu` profile, the key figures papers/<stem>.md lists under `figures:` go to papers/figures/<stem>/
     (`refresh_figures`), where the paper file shows them, and the paper's claims table is rewritten from the run
     (`claims.refresh_claims`: its excerpt goes to papers/claims/<stem>.json), as is the README's verdicts table.
"""
from __future__ import annotations

import ast
import contextlib
import math
import shutil
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from dialogrl.claims import CLAIMS_START, manipulation_table, refresh_claims, write_glance
from dialogrl.compare import compare_table, run_rows
from dialogrl.estimate import DEVICES, PROMPT_TOKENS, Device, estimate
from dialogrl.params import PROFILES, cell_literals, check_values, load_yaml
from dialogrl.rl.methods import paper
from dialogrl.run import make_run_dir, make_run_id, params_hash, read_json, repo_root, write_text


@dataclass
class NotebookRun:
    stem: str
    run_dir: Path | None
    ok: bool
    seconds: float
    error: str = ""
    earlier: bool = False  # found on disk from an earlier invocation, not run now


def find_notebooks(notebooks_dir: str | Path = "notebooks", only: list[str] | None = None) -> list[Path]:
    """The notebooks to run, sorted by name; `only` selects stems (an unknown stem is an error naming the choices)."""
    found = sorted(Path(notebooks_dir).glob("*.ipynb"))
    if only:
        stems = {p.stem: p for p in found}
        unknown = [s for s in only if s not in stems]
        if unknown:
            raise ValueError(f"--only {unknown}: no such notebook in {notebooks_dir}/; "
                             f"notebooks: {', '.join(stems) or '(none yet)'}")
        found = [stems[s] for s in only]
    return found


def notebook_parameters(nb_path: str | Path) -> dict:
    """{name: default} of the notebook's parameters cell (papermill's own parser)."""
    import papermill

    return {name: info["default"] for name, info in papermill.inspect_notebook(str(nb_path)).items()}


def profile_parameters(nb_path: str | Path, profile: str, params_dir: str | Path = "params") -> dict:
    """Parameter overrides for `profile`: none for cpu (the defaults), params/<stem>/<profile>.yaml otherwise.

    Raises ValueError for an unknown profile, a missing file, or a key that is not a parameter of the notebook.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; profiles: {', '.join(PROFILES)}")
    nb_path = Path(nb_path)
    path = Path(params_dir) / nb_path.stem / f"{profile}.yaml"
    if not path.exists():
        if profile == "cpu":
            return {}
        raise ValueError(f"no {path}: the {profile} profile of {nb_path.stem} is not defined")
    overrides = load_yaml(path)
    known = notebook_parameters(nb_path)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"{path}: {unknown} are not parameters of {nb_path.name} (parameters: {sorted(known)})")
    return overrides


def profile_params(stem: str, profile: str = "gpu") -> dict:
    """The parameters a notebook runs with under `profile`: its parameters cell's values, the profile's file over
    them (as `params.resolve_profile` applies them): what `dialogrl.estimate` sizes."""
    root = repo_root()
    return {**cell_literals(stem), **profile_parameters(root / "notebooks" / f"{stem}.ipynb", profile,
                                                        params_dir=root / "params")}


def estimate_table(stem: str, profile: str = "gpu", device: Device | None = None, **kwargs) -> str:
    """`python -m dialogrl estimate`'s markdown: each kind of run's peak memory and time under the profile on
    `device` (None: the profile's own, DEVICES), and whether the runs at once fit its memory."""
    device = device or DEVICES.get(profile, DEVICES["gpu"])
    rows = estimate(paper(stem), profile_params(stem, profile), device, **kwargs)
    gib = 2**30
    lines = [f"{stem}, profile {profile}, on {device.name}: predicted by dialogrl.estimate (assumed: prompts of "
             f"{PROMPT_TOKENS} tokens, every turn at full length, {device.forward_ms:g} ms a decoding pass, "
             f"{device.bandwidth:g} GB/s, {device.tflops:g} TFLOP/s in the update)", "",
             "| runs of | runs | at once | a run's peak GiB (update / decode / judge / sft) | update chunk (rows + "
             f"logit positions) | per run | all runs | GiB per process: main + at once x run | GiB at once (fits "
             f"{device.memory_gib:g}) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ph = " / ".join(f"{r['phases'][k] / gib:.1f}" if k in r["phases"] else "-"
                        for k in ("update", "decode", "judge", "sft"))
        fits = "yes" if r["memory"] <= device.memory_gib * gib else "**no**"
        lines.append(f"| {r['what']} | {r['runs']} | {r['at_once']} | {r['peak'] / gib:.1f} ({ph}) | "
                     f"{r['chunk'][0]:,} + {r['chunk'][1]:,} | {r['seconds_per_run'] / 3600:.1f} h | "
                     f"{r['hours']:.1f} h | {r['main'] / gib:.1f} + {r['at_once']} x {r['worker'] / gib:.1f} | "
                     f"{r['memory'] / gib:.1f} ({fits}) |")
    lines += ["", f"All runs: {sum(r['hours'] for r in rows):.1f} h."]
    return "\n".join(lines)


def design_hash(nb_path: str | Path, profile: str, params_dir: str | Path = "params") -> str:
    """The `run.params_hash` that a run of this notebook at `profile` records, computed before any run: the
    parameters cell's values, the profile's file over them, and the profile itself (as `reproduce --profile` passes
    them). `python -m dialogrl preregister <stem>` prints it as the marker papers/<stem>.md registers."""
    nb_path = Path(nb_path).resolve()
    return params_hash({**cell_literals(str(nb_path)), **profile_parameters(nb_path, profile, params_dir),
                        "profile": profile})


def front_matter(stem: str, papers_dir: str | Path = "papers") -> dict:
    """The YAML front matter of papers/<stem>.md ({} if absent)."""
    path = Path(papers_dir) / f"{stem}.md"
    if not path.exists():
        return {}
    text = path.read_text()
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    try:
        return dict((yaml.safe_load(text[4:end]) if end > 0 else None) or {})
    except (yaml.YAMLError, TypeError, ValueError) as err:
        raise ValueError(f"{path}: its front matter is not a YAML mapping ({type(err).__name__}: {err})") from None


def paper_numbers(stem: str, papers_dir: str | Path = "papers") -> dict:
    """The `paper_numbers:` mapping in the front matter of papers/<stem>.md ({} if absent)."""
    return dict(front_matter(stem, papers_dir).get("paper_numbers") or {})


FIGURES_START, FIGURES_END = "<!-- figures: written by python -m dialogrl reproduce -->", "<!-- /figures -->"


def refresh_figures(stem: str, run_dir: str | Path, papers_dir: str | Path = "papers",
                    command: str | None = None) -> list[Path]:
    """Copy the key figures of a `cpu` run into papers/figures/<stem>/ and say where they came from.

    The figures are those papers/<stem>.md lists under `figures:` in its front matter (file names in the run's
    figures/ folder); the file embeds them from figures/<stem>/ under the tables they illustrate, and its provenance
    line, between FIGURES_START and FIGURES_END, is rewritten here: run, commit (env.json), command, date.
    Raises ValueError for a run of another profile, or a listed figure the run did not draw.
    """
    run_dir, papers_dir = Path(run_dir), Path(papers_dir)
    names = list(front_matter(stem, papers_dir).get("figures") or [])
    if not names:
        return []
    for name in ("config.json", "env.json"):
        if not (run_dir / name).is_file():
            raise ValueError(f"{run_dir}: no {name} (not a finished notebook run folder)")
    profile = read_json(run_dir / "config.json").get("profile")
    if profile != "cpu":
        raise ValueError(f"{run_dir}: a {profile!r} run; papers/ shows the cpu profile's figures only")
    missing = [n for n in names if not (run_dir / "figures" / n).exists()]
    if missing:
        raise ValueError(f"{run_dir}/figures has no {missing} (listed under figures: in {papers_dir}/{stem}.md)")
    env = read_json(run_dir / "env.json")
    text = (papers_dir / f"{stem}.md").read_text()
    if text.find(FIGURES_START) < 0 or text.find(FIGURES_END) < text.find(FIGURES_START):
        raise ValueError(f"{papers_dir}/{stem}.md: no {FIGURES_START} ... {FIGURES_END} block for the figures' "
                         "provenance")
    out = papers_dir / "figures" / stem
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for n in names:                            # each figure whole: copied aside, then renamed over the old one
        tmp = out / f".{n}.tmp"
        shutil.copyfile(run_dir / "figures" / n, tmp)
        copied.append(tmp.replace(out / n))
    commit = env.get("git_commit", "")[:7] or "not recorded"
    if env.get("git_dirty"):
        commit += " with uncommitted changes"
    command = command or f"python -m dialogrl reproduce --only {stem}"
    line = (f"Figures: run `{run_dir.name}` of `{command}` (the `cpu` profile) at commit `{commit}`, "
            f"{env.get('time_utc', '')[:10]}; copied to `papers/figures/{stem}/`, refreshed by every `cpu` run of "
            "`python -m dialogrl reproduce`.")
    start, end = text.find(FIGURES_START), text.find(FIGURES_END)   # the paper's text, checked before the copies
    write_text(papers_dir / f"{stem}.md", text[:start] + f"{FIGURES_START}\n{line}\n" + text[end:])
    return copied


def flatten(obj, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are kept as values."""
    if not isinstance(obj, dict):
        return {prefix: obj}
    out = {}
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) else {key: v})
    return out


def _has_claims_block(stem: str, papers_dir: Path) -> bool:
    path = Path(papers_dir) / f"{stem}.md"
    return path.exists() and CLAIMS_START in path.read_text()


def run_notebook(nb_path: Path, run_dir: Path, parameters: dict, progress: bool = True,
                 resume: bool = False) -> tuple[bool, float, str]:
    """Execute one notebook with papermill into run_dir/<stem>.ipynb. Returns (ok, seconds, error text).
    resume: run_dir is an interrupted run of the notebook, to finish (its `resume` parameter)."""
    import papermill

    params = dict(parameters)
    known = notebook_parameters(nb_path)
    if "run_dir" in known:
        params["run_dir"] = str(run_dir)
    if resume:
        params["resume"] = str(run_dir)
    t0 = time.time()
    try:
        papermill.execute_notebook(str(nb_path), str(run_dir / nb_path.name), parameters=params,
                                   progress_bar=progress, cwd=str(Path.cwd()))
        return True, time.time() - t0, ""
    except Exception as err:  # a failing notebook is reported; the others still run
        return False, time.time() - t0, f"{type(err).__name__}: {err}"


DEMO_NOTEBOOK = Path("notebooks/demo/first_run.ipynb")


def demo(parameters: dict | None = None, results_root: str | Path = "results", progress: bool = True,
         notebook: str | Path = DEMO_NOTEBOOK) -> int:
    """`python -m dialogrl demo`: run the first-run notebook into results/first_run/<run_id>/ and say where its
    executed notebook, figures and summary are. Returns a process exit code."""
    literals = {}
    for name, source in notebook_parameters(notebook).items():
        literals[name] = None                              # not a literal: the notebook checks it itself
        with contextlib.suppress(ValueError, SyntaxError):
            literals[name] = ast.literal_eval(source)
    check_values(dict(parameters or {}), literals, Path(notebook).name)   # before any run folder is made
    run_dir = make_run_dir("first_run", root=results_root)
    ok, seconds, error = run_notebook(Path(notebook), run_dir, dict(parameters or {}), progress=progress)
    if not ok:
        print(f"the demo failed after {seconds / 60:.1f} min: {error.strip()}\nits notebook, as far as it ran: "
              f"{run_dir / Path(notebook).name}")
        return 1
    summary = read_json(run_dir / "summary.json")
    d = summary["trained_minus_warm_start"]
    print(f"\ndemo done in {seconds / 60:.1f} min. Held-out full agreement: warm start "
          f"{summary['success']['warm start']:.1%}, trained {summary['success']['trained']:.1%}; "
          f"difference {d['diff']:+.1%} [{d['lo']:+.1%}, {d['hi']:+.1%}] over {d['n']} paired games")
    print(f"  executed notebook  {run_dir / Path(notebook).name}  (open it in JupyterLab: the curve and the table)")
    for fig in sorted((run_dir / "figures").glob("*.png")):
        print(f"  figure             {fig}")
    print(f"  summary            {run_dir / 'summary.json'}")
    print(f"  metrics per step   {run_dir / 'metrics.jsonl'}")
    return 0


def _newest_run(stem: str, results_root: Path, profile: str | None, finished: bool) -> Path | None:
    """The newest run folder of `stem` (of `profile`, if given) that finished (a summary.json) or, with finished
    False, began (a config.json) and did not finish."""
    def wanted(run: Path) -> bool:
        if (run / "summary.json").exists() != finished:
            return False
        try:
            return profile is None or read_json(run / "config.json").get("profile") == profile
        except (OSError, ValueError, AttributeError):   # no or a damaged config: not a run to take
            return False

    runs = sorted((p for p in (Path(results_root) / stem).glob("*") if wanted(p)), key=lambda p: p.stat().st_mtime)
    return runs[-1] if runs else None


def latest_run(stem: str, results_root: Path, profile: str | None = None) -> Path | None:
    """The newest run folder of `stem` holding a summary.json (of `profile`, if given), or None."""
    return _newest_run(stem, results_root, profile, finished=True)


def unfinished_run(stem: str, results_root: Path, profile: str) -> Path | None:
    """The newest run folder of `stem` and `profile` that began (its config.json) and did not finish (no
    summary.json): the one `reproduce --resume` finishes. None if there is none."""
    return _newest_run(stem, results_root, profile, finished=False)


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, float):
        return "NaN" if math.isnan(x) else f"{x:.4g}"
    if isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(v, (int, float)) for v in x):
        return f"[{_fmt(x[0])}, {_fmt(x[1])}]"
    return str(x)


def write_report(runs: list[NotebookRun], path: Path, profile: str, papers_dir: Path, command: str) -> Path:
    """results/REPORT.md: a status table; every claim of each notebook's run beside the paper's effect, with its
    interval, MDE and verdict (`compare.compare_table`); then per notebook its manipulation checks and the paper's
    other numbers (papers/<stem>.md's `paper_numbers:`) beside ours."""
    lines = ["# Reproduction report", "",
             f"Written {datetime.now():%Y-%m-%d %H:%M} by `{command}` (profile `{profile}`).", "",
             "| notebook | status | minutes | run folder |", "|---|---|---|---|"]
    for r in runs:
        status = "ok" + (" (earlier run)" if r.earlier else "") if r.ok else "FAILED"
        lines.append(f"| {r.stem} | {status} | {r.seconds / 60:.1f} | {r.run_dir or '—'} |")
    finished = [r for r in runs if r.ok and r.run_dir]
    rows = run_rows([r.run_dir for r in finished])
    if any(row["claims"] for row in rows):
        lines += ["", "## Claims", "", "Each claim of each notebook's run: the paper's effect, ours with its 95% "
                  "t-interval over training seeds, the design's MDE and the verdict computed by "
                  "`dialogrl.claims.verdict` (papers/PROTOCOL.md has the rule). `python -m dialogrl compare RUN ...` "
                  "sets runs side by side.", "", compare_table([row for row in rows if row["claims"]])]
    for r in runs:
        lines += ["", f"## {r.stem}", ""]
        if not r.ok:
            lines += ["```", r.error.strip()[-2000:], "```", *[f"{what}: `{path}`" for what, path in left_by(r)]]
            continue
        summary = read_json(r.run_dir / "summary.json") if r.run_dir else {}
        if summary.get("manipulation"):
            lines += ["Manipulation checks:", "", manipulation_table(summary), ""]
        ours = flatten(summary)
        paper = paper_numbers(r.stem, papers_dir)
        if paper:
            lines += ["The paper's other numbers beside ours:", "", "| metric | paper | ours | ours 95% CI |",
                      "|---|---|---|---|"]
            lines += [f"| `{k}` | {_fmt(v)} | {_fmt(ours.get(k))} | {_fmt(ours.get(k + '_ci'))} |"
                      for k, v in paper.items()]
        lines += ["", f"Paper notes and the claims judged: `{papers_dir}/{r.stem}.md`."]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, "\n".join(lines) + "\n")
    return path


def left_by(run: NotebookRun) -> list[tuple[str, Path]]:
    """What a failed run left in its folder to read: the executed notebook as far as it ran and, where the notebook
    refused its design, the design checks it measured (run.save_design_checks)."""
    if run.run_dir is None:
        return []
    found = [("its notebook, as far as it ran", run.run_dir / f"{run.stem}.ipynb"),
             ("the design checks it measured", run.run_dir / "design_checks.json")]
    return [(what, path) for what, path in found if path.exists()]


def reproduce(only: list[str] | None = None, profile: str = "cpu", notebooks_dir: str | Path = "notebooks",
              params_dir: str | Path = "params", papers_dir: str | Path = "papers",
              results_root: str | Path = "results", progress: bool = True, resume: bool = False) -> int:
    """Run the notebooks and write results/REPORT.md. Returns a process exit code (0: all ran).
    resume: a notebook with an interrupted run of this profile (`unfinished_run`) finishes that one, reusing the
    training runs it finished; the others start new runs."""
    from tqdm.auto import tqdm

    results_root, papers_dir = Path(results_root), Path(papers_dir)
    notebooks = find_notebooks(notebooks_dir, only)
    if not notebooks:
        print(f"No notebooks in {notebooks_dir}/ yet: nothing to reproduce.")
        return 0
    # check every profile file before the first (long) run starts
    # the profile named explicitly: a notebook's profile "auto" would pick gpu on a CUDA machine
    overrides = {nb.stem: {"profile": profile, **profile_parameters(nb, profile, params_dir)} for nb in notebooks}
    command = "python -m dialogrl reproduce" + (f" --only {' '.join(only)}" if only else "") + \
        (f" --profile {profile}" if profile != "cpu" else "")
    runs: list[NotebookRun] = []
    bar = tqdm(notebooks, desc="reproduce", unit="notebook", disable=not progress,
               bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [elapsed {elapsed}, remaining {remaining}]")
    for nb in bar:
        bar.set_postfix_str(nb.stem)
        run_dir = unfinished_run(nb.stem, results_root, profile) if resume else None
        if run_dir is not None and "resume" in notebook_parameters(nb):
            tqdm.write(f"{nb.stem}: resuming {run_dir}")
            ok, seconds, error = run_notebook(nb, run_dir, overrides[nb.stem], progress=progress, resume=True)
        else:
            run_dir = make_run_dir(nb.stem, root=results_root, run_id=f"{make_run_id()}__{profile}")
            ok, seconds, error = run_notebook(nb, run_dir, overrides[nb.stem], progress=progress)
        if ok and not (run_dir / "summary.json").exists():
            ok, error = False, f"{nb.name} ran but wrote no summary.json to its run folder {run_dir}"
        runs.append(NotebookRun(nb.stem, run_dir, ok, seconds, error))
        tqdm.write(f"{nb.stem}: {'ok' if ok else 'FAILED'} in {seconds / 60:.1f} min -> {run_dir}")
        if ok and profile == "cpu" and refresh_figures(nb.stem, run_dir, papers_dir,
                                                       command=f"python -m dialogrl reproduce --only {nb.stem}"):
            tqdm.write(f"{nb.stem}: key figures copied to {papers_dir}/figures/{nb.stem}/")
        if ok and profile == "cpu" and _has_claims_block(nb.stem, papers_dir):
            refresh_claims(nb.stem, run_dir, papers_dir, command=f"python -m dialogrl reproduce --only {nb.stem}")
            if (readme := papers_dir.resolve().parent / "README.md").exists():
                write_glance(readme, papers_dir)
            tqdm.write(f"{nb.stem}: claims table of {papers_dir}/{nb.stem}.md rewritten from this run")
        if ok and profile == "confirm":   # written under the confirmatory heading only if it is the registered run
            try:
                refresh_claims(nb.stem, run_dir, papers_dir, command=f"python -m dialogrl reproduce --only {nb.stem} "
                               "--profile confirm")
                tqdm.write(f"{nb.stem}: the confirmatory claims of {papers_dir}/{nb.stem}.md written from this run")
            except ValueError as err:
                tqdm.write(f"{nb.stem}: no confirmatory claims written: {err}")
        if error:
            tqdm.write(error.strip().splitlines()[-1] if error.strip() else error)
            for what, path in left_by(runs[-1]):
                tqdm.write(f"{nb.stem}: {what}: {path}")
    # notebooks not run now still appear with their latest earlier run
    ran = {r.stem for r in runs}
    for nb in find_notebooks(notebooks_dir):
        if nb.stem not in ran and (prev := latest_run(nb.stem, results_root)):
            runs.append(NotebookRun(nb.stem, prev, True, 0.0, earlier=True))
    report = write_report(runs, results_root / "REPORT.md", profile, papers_dir, command)
    print(f"Report: {report}")
    return 0 if all(r.ok for r in runs) else 1

