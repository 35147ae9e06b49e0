"""`python -m dialogrl compare RUN [RUN ...]`: the claims of several runs side by side.

    rows = run_rows([run_a, run_b])          # one record per run: notebook, profile, seeds, commit, minutes, claims
    print(compare_table(rows))               # markdown: one row per claim and run, grouped by claim

Each claim's rows show its effect with the 95% interval, the design's MDE, the paper's effect and the verdict that
`dialogrl.claims` computed in the run; beside them what makes runs differ: profile, training seeds, the commit (with
`+dirty` when the tree had uncommitted changes) and the run's wall-clock minutes. results/REPORT.md shows the same
table for the latest run of each notebook.
"""
from __future__ import annotations

from pathlib import Path

from dialogrl.claims import VERDICTS, _num, current_keys, paper_effect_text
from dialogrl.run import read_json, write_text


def _load(path: Path) -> dict:
    """A run's JSON file as a mapping ({} when absent); an empty, truncated or non-mapping file names itself."""
    value = read_json(path) if path.exists() else {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected a JSON object, found a {type(value).__name__}")
    return value


def run_rows(runs) -> list[dict]:
    """A record per run: its notebook, run id, profile, seeds, commit, minutes (timings.json) and claims
    (summary.json). A run is a run folder, or a paper's claims excerpt (papers/claims/<stem>.json: the run a paper
    file cites, whose folder may be gone; its profile, commit and minutes then show as unknown). ValueError for
    anything else."""
    rows = []
    for run in map(Path, runs):
        if run.is_file() and run.suffix == ".json":
            excerpt = current_keys(_load(run))
            if "claims" not in excerpt:
                raise ValueError(f"{run}: not a claims excerpt (papers/claims/<stem>.json) or a run folder")
            name = str(excerpt.get("run", run.stem))
            claims = _judged(excerpt["claims"], run)
            seeds = [c["seeds"] for c in claims.values() if isinstance(c.get("seeds"), int)]
            rows.append({"notebook": run.stem, "run": f"{name} (cited by papers/{run.stem}.md)",
                         "profile": name.rsplit("__", 1)[-1] if "__" in name else "?",
                         "seeds": max(seeds) if seeds else None, "commit": "?", "minutes": None, "claims": claims})
            continue
        if not (run / "summary.json").is_file():
            raise ValueError(f"{run}: not a finished run folder (no summary.json)")
        summary, config, env = current_keys(_load(run / "summary.json")), _load(run / "config.json"), _load(
            run / "env.json")
        commit = (env.get("git_commit") or "")[:7] or "?"
        seconds = _load(run / "timings.json").get("seconds")
        seeds = summary.get("seeds", config.get("n_seeds"))
        rows.append({"notebook": run.parent.name, "run": run.name, "profile": config.get("profile", "?"),
                     "seeds": len(seeds) if isinstance(seeds, list) else seeds,
                     "commit": commit + ("+dirty" if env.get("git_dirty") else ""),
                     "minutes": None if seconds is None else seconds / 60,
                     "claims": _judged(summary.get("claims", {}), run / "summary.json")})
    return rows


def _judged(claims, source: Path) -> dict:
    """The claims with a verdict, each checked to carry its numbers (diff, and ci as two numbers): a ValueError
    naming the file and the claim otherwise, before any table is written."""
    if not isinstance(claims, dict):
        raise ValueError(f"{source}: 'claims' is a {type(claims).__name__}, not a mapping of claims")
    out = {}
    for key, c in claims.items():
        if not isinstance(c, dict) or "verdict" not in c:
            continue
        ci = c.get("ci")
        if not isinstance(c.get("diff"), (int, float)) or not (isinstance(ci, list) and len(ci) == 2 and all(
                isinstance(x, (int, float)) for x in ci)):
            raise ValueError(f"{source}: claim {key!r} has a verdict but not its numbers (diff, and ci as [lo, hi])")
        out[key] = c
    return out


def _effect(c: dict) -> str:
    ci = c.get("ci") or [None, None]
    return f"{_num(c['diff'])} [{_num(ci[0])}, {_num(ci[1])}]"


def _run_cells(r: dict) -> tuple[str, str]:
    """A run's seeds and minutes as table cells ("—" when unknown)."""
    return ("—" if r["seeds"] is None else str(r["seeds"]),
            "—" if r["minutes"] is None else f"{r['minutes']:.0f}")


def runs_table(rows: list[dict]) -> str:
    """One line per run: what it is and how many of its claims got each verdict."""
    out = ["| notebook | run | profile | seeds | commit | minutes | " + " | ".join(VERDICTS) + " |",
           "|---|---|---|---:|---|---:|" + "---:|" * len(VERDICTS)]
    for r in rows:
        counts = [sum(c["verdict"] == v for c in r["claims"].values()) for v in VERDICTS]
        seeds, minutes = _run_cells(r)
        out.append(f"| {r['notebook']} | `{r['run']}` | {r['profile']} | {seeds} | {r['commit']} | {minutes} | "
                   + " | ".join(map(str, counts)) + " |")
    return "\n".join(out)


def compare_table(rows: list[dict]) -> str:
    """One row per (claim, run), the runs of a claim together: claim, paper's effect, run, effect [95% CI], MDE,
    verdict, profile, seeds, commit, minutes. A claim that a run lacks shows as absent in that run."""
    several = len({r["notebook"] for r in rows}) > 1
    out = ["| claim | paper | run | ours [95% CI] | MDE | verdict | profile | seeds | commit | minutes |",
           "|---|---|---|---|---|---|---|---:|---|---:|"]
    claims = list(dict.fromkeys((r["notebook"], k) for r in rows for k in r["claims"]))
    for notebook, name in claims:
        first = True
        for r in rows:
            if r["notebook"] != notebook:
                continue
            c = r["claims"].get(name)
            label = (f"{notebook}: " if several else "") + f"`{name}`"
            paper = "" if c is None else paper_effect_text(c)
            seeds, minutes = _run_cells(r)
            ours, mde, verdict = ("absent", "", "") if c is None else (
                _effect(c), _num(c.get("mde"), signed=False), f"**{c['verdict']}**")
            out.append(f"| {label if first else ''} | {paper if first else ''} | `{r['run']}` | {ours} | {mde} "
                       f"| {verdict} | {r['profile']} | {seeds} | {r['commit']} | {minutes} |")
            first = False
    return "\n".join(out)


def compare(runs, out: str | Path | None = None) -> str:
    """The markdown of `python -m dialogrl compare`: the runs, then their claims side by side; written to `out`."""
    rows = run_rows(runs)
    text = "\n".join(["# Runs compared", "", runs_table(rows), "", "## Claims", "",
                      "Effects are differences of means with 95% t-intervals over training seeds; a verdict is "
                      "computed in the run by `dialogrl.claims.verdict` (papers/PROTOCOL.md has the rule).", "",
                      compare_table(rows), ""])
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        write_text(out, text)
    return text
