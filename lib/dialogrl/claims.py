"""How a claim is judged: the manipulation and intervention checks and the four verdicts (papers/PROTOCOL.md, "The
manipulation check and the intervention check" and "The four verdicts"; papers/README.md, "How a claim is judged").

    check = manipulation_check(trained, base, "reward", ceiling=room["ceiling"], reference=room["reference"])
    check = with_interventions(check, intervention("VS answers usable", 0.93, at_least=0.8))   # did it happen?
    claim = judge(paired_clustered(a, b, "success"), paper_effect=0.09, mde=0.05, checks={"vs": check, ...})
    claim["verdict"]                                                    # holds | refuted | not tested | not resolved

A method must move before it can be judged. Its **manipulation check** is its gain over the untrained base on its own
training objective (the reward it was trained on, against the frozen counterpart the base plays, on evaluation
scenarios), paired by scenario and seed, with the t-interval over training seeds. It has two levels: the method
**moved** when the interval lies above zero, and **passed** when it moved and the gain is at least `ROOM_SHARE` (a
quarter) of the room between the base and the objective's *attainable* ceiling: what the best reference policy
reaches against the same counterpart (`dialogrl.room.room_test`; a nominal ceiling such as `Task.max_reward` only
where no reference was measured, and the record says which). The threshold is fixed here, before any method is
compared, and the same for every notebook. An **intervention check** says whether the manipulation itself happened
(Verbalized Sampling's answers were usable, calibration lowered the shift, the process reward varied within groups,
the co-trained counterpart changed): a method whose intervention did not happen did not test what the paper is about.

The four verdicts, computed from numbers only (nobody types one), gated in both directions:

    not tested    a method of the claim did not move its objective, or its intervention did not happen: a method
                  that did not change the policy can neither show nor refute what that method does;
    holds         otherwise, every method moved and the interval excludes zero in the paper's direction;
    refuted       every method passed its check, the design's MDE is at most the paper's effect, and the interval
                  excludes that effect;
    not resolved  otherwise (a check not measured, a method that moved but did not pass, an interval too wide, or a
                  design that could not detect the paper's effect).

A paper's "up to X" is a maximum over several settings: the paper claims some effect in (0, X] in each, so it is
refuted only by an interval that excludes every positive effect (at or below zero), and the MDE is compared with X.
A claim without a paper effect (the paper reports none on that metric) can hold; it cannot be refuted.

`claims_table` renders a summary's claims as the markdown table that papers/<stem>.md and results/REPORT.md show;
`write_claims_block` rewrites it between the CLAIMS markers of a paper file (`python -m dialogrl claims <stem>`).
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from dialogrl.run import read_json, registered_hashes, show, write_text
from dialogrl.stats import design_mde, paired_clustered, power_analysis, t_interval

VERDICTS = ("holds", "refuted", "not tested", "not resolved")
EFFECT_KINDS = ("point", "up to")
ROOM_SHARE = 0.25  # a method passes its manipulation check with a gain of at least this share of the base's room


def manipulation_check(trained: pd.DataFrame, base: pd.DataFrame, metric: str, ceiling: float,
                       keys: Sequence[str] = ("counterpart", "role", "scenario"), cluster: str = "seed",
                       share: float = ROOM_SHARE, reference: str | None = None) -> dict:
    """Did a trained method move its own training objective? Its gain over the base, with a t-interval over seeds.

    trained: the method's evaluation games against the frozen counterpart the base plays (rows of
        `evaluate.game_rows`, with a `seed` column); base: the untrained base's games against it, same scenarios.
    metric: the training objective's column (e.g. "reward"), higher is better; ceiling: its attainable ceiling, what
        the best reference policy `reference` reaches against that counterpart (`room.room_test`); reference None:
        a nominal ceiling (the largest value the metric can take), which the record calls so.
    keys: what pairs a trained game with a base game (with the seed). The `counterpart` column may name the
        counterpart differently on the two sides (a method's own training counterpart vs the base's); pass keys
        without it then and make sure each side holds one game per key.
    Returns `check_record`'s dict, with "seeds" and "games".
    """

    if len(trained) == 0 or len(base) == 0:
        raise ValueError(f"manipulation check on {metric!r}: no games ({len(trained)} trained, {len(base)} base)")
    d = paired_clustered(trained, base, metric, keys=keys, cluster=cluster)
    base_mean = float(base[metric].mean())
    return check_record(metric, d["diff"], d["ci"], base_mean, ceiling, share, reference=reference, seeds=d["seeds"],
                        games=d["games"])


def method_check(games: pd.DataFrame, method: str, metric: str, ceiling: float, base: str = "base", by: str = "method",
                 keys: Sequence[str] = ("counterpart", "role", "scenario"), reference: str | None = None) -> dict:
    """`manipulation_check` of `method`'s games in `games` (e.g. the games against its training counterpart) against the
    base's games in the same frame."""
    return manipulation_check(games[games[by] == method], games[games[by] == base], metric, ceiling, keys=keys,
                              reference=reference)


def check_record(metric: str, gain: float | None, ci: Sequence[float] | None, base: float | None, ceiling: float,
                 share: float = ROOM_SHARE, reference: str | None = None, **extra) -> dict:
    """A manipulation check's record from its numbers (`manipulation_check` measures them; the numbers a paper file
    recorded are re-judged with this). moved: the interval's lower end is above zero (None without an interval,
    unless the gain is zero or less). passed: moved and the gain at least share x (ceiling - base). Without an
    interval a check cannot pass: it fails when the gain is below the threshold (no interval can change that) and
    is None (not measured) otherwise. Without the base's level (base None) the threshold is unknown: the check fails
    only on a gain of zero or less. gain None: not measured. reference: the reference policy whose level is the
    (attainable) ceiling; None: the ceiling is nominal."""
    room = None if base is None else float(ceiling) - float(base)
    threshold = None if room is None else max(0.0, share * room)
    if gain is None:
        moved = passed = None
    else:
        moved = (ci[0] > 0) if ci is not None else (False if gain <= 0 else None)
        if moved is False or gain < (threshold if threshold is not None else 0.0):
            passed = False
        elif moved is None or threshold is None:
            passed = None
        else:
            passed = True
    return {"metric": metric, "gain": None if gain is None else float(gain),
            "ci": None if ci is None else [float(ci[0]), float(ci[1])], "base": None if base is None else float(base),
            "ceiling": float(ceiling), "ceiling_kind": "nominal" if reference is None else "attainable",
            "reference": reference, "room": room, "share": share, "threshold": threshold, "moved": moved,
            "passed": passed, **extra}


def intervention(what: str, value: float | None, at_least: float | None = None, above: float | None = None,
                 ci: Sequence[float] | None = None, below: float | None = None, **extra) -> dict:
    """An intervention check's record: did the manipulation happen? `value` (None or nan: not measured) must be at
    least `at_least`, strictly above `above` and strictly below `below` (each None: no bound), and where `ci` (the
    value's interval) is given, that interval must exclude zero (a change, either way; a nan bound: not measured).
    E.g. intervention("usable VS answers", 0.93, at_least=0.8), intervention("top-1 reply share, single minus VS",
    0.12, above=0.0), intervention("the counterpart changed", -0.04, ci=(-0.07, -0.01)), intervention("distance to
    the humans, calibrated minus uncalibrated", -0.2, below=0.0, ci=(-0.3, -0.1)): the interval below zero.
    Returns {"what", "value", "ci", "at_least", "above", "below", "happened", ...extra}."""
    unmeasured = [value] + list(ci or [])
    happened = None if any(v is None or math.isnan(v) for v in unmeasured) else bool(
        (at_least is None or value >= at_least) and (above is None or value > above)
        and (below is None or value < below) and (ci is None or ci[0] > 0 or ci[1] < 0))
    return {"what": what, "value": None if value is None else float(value),
            "ci": None if ci is None else [float(ci[0]), float(ci[1])], "at_least": at_least, "above": above,
            "below": below, "happened": happened, **extra}


def with_interventions(check: dict, *records: dict) -> dict:
    """The check with its intervention records (`intervention`), and "intervention": whether every one happened
    (False if one did not, None if one was not measured)."""
    flags = [r["happened"] for r in records]
    happened = False if any(f is False for f in flags) else None if any(f is None for f in flags) else True
    return {**check, "interventions": list(records), "intervention": happened}


STATUSES = ("passed", "moved", "not moved", "no intervention", "not measured")


def method_status(check: Mapping | bool | None) -> str:
    """What a method's check says for a verdict (one of STATUSES): its intervention did not happen or was not
    measured (a record's "intervention" False or None: the claim is not tested, never taken as happened), it did not
    move, it moved, it passed, or it was not measured. A record without "intervention" belongs to a method with no
    intervention of its own to check (`with_interventions` adds the key). A record without "moved" (written before
    it existed) moved when its interval lies above zero; a bare bool is an older claim's `passed` (True: passed;
    False: whether it moved is unknown, not measured)."""
    if isinstance(check, bool):
        return "passed" if check else "not measured"
    if check is None:
        return "not measured"
    if "intervention" in check and check["intervention"] is not True:
        return "no intervention"
    moved = check["moved"] if "moved" in check else (check["ci"][0] > 0 if check.get("ci") else check.get("passed"))
    if moved is False:
        return "not moved"
    if moved is None:
        return "not measured"
    return "passed" if check.get("passed") is True else "moved"


def verdict(diff: float, ci: Sequence[float], paper_effect: float | None = None, mde: float | None = None,
            checks: Mapping[str, dict | bool | None] | None = None, effect_kind: str = "point",
            direction: int | None = None) -> str:
    """The claim's verdict (one of VERDICTS) from its paired difference and interval, the paper's effect on the same
    scale (None: the paper gives none), the design's MDE, and the checks of the claim's trained methods ({method:
    check record (moved, passed, intervention), or an older record's bool `passed`}; the untrained base needs none).

    direction: +1 when the paper says the difference is positive, -1 negative; default the sign of paper_effect,
    or +1 without one (claims are named `a_minus_b` for "a beats b").
    """
    if effect_kind not in EFFECT_KINDS:
        raise ValueError(f"effect_kind={effect_kind!r}: choose one of {', '.join(EFFECT_KINDS)}")
    lo, hi = float(ci[0]), float(ci[1])
    if any(math.isnan(x) for x in (diff, lo, hi)):
        return "not resolved"
    if direction is None:
        direction = -1 if paper_effect is not None and paper_effect < 0 else 1
    status = [method_status(c) for c in (checks or {}).values()]
    if any(s in ("not moved", "no intervention") for s in status):
        return "not tested"
    if (lo > 0) if direction > 0 else (hi < 0):
        return "holds" if all(s in ("moved", "passed") for s in status) else "not resolved"
    if any(s != "passed" for s in status):
        return "not resolved"   # a check not measured, or a method that moved too little to refute anything
    if paper_effect is None or mde is None or not math.isfinite(mde) or mde > abs(paper_effect):
        return "not resolved"
    if effect_kind == "up to":   # the paper claims some effect in (0, X]: refuted when none of them is in the CI
        excluded = hi <= 0 if direction > 0 else lo >= 0
    else:
        excluded = hi < paper_effect if direction > 0 else lo > paper_effect
    return "refuted" if excluded else "not resolved"


def compact_check(check: Mapping | bool | None) -> dict | bool | None:
    """What a claim keeps of a method's check: {"moved", "passed"} and "intervention" where the method has one (True,
    False or None as it is: a missing measurement stays missing); a bool or None as it is."""
    if not isinstance(check, Mapping):
        return check
    return {"moved": check.get("moved", check.get("passed")), "passed": check.get("passed"),
            **({"intervention": check["intervention"]} if "intervention" in check else {})}


def judge(claim: dict, paper_effect: float | None = None, mde: float | None = None,
          checks: Mapping[str, dict | None] | None = None, effect_kind: str = "point", **fields) -> dict:
    """A claim record (`stats.paired_clustered`'s dict: diff, ci, ...) with its verdict and what it rests on:
    paper_effect, effect_kind, mde, and per trained method whether it moved, passed and its intervention happened
    (`checks`, `compact_check`).
    The old boolean `holds` goes: `verdict` says it in the four words."""
    out = {k: v for k, v in claim.items() if k != "holds"}
    out.update(paper_effect=None if paper_effect is None else float(paper_effect), effect_kind=effect_kind,
               mde=None if mde is None or not math.isfinite(mde) else float(mde),
               checks={m: compact_check(c) for m, c in (checks or {}).items()}, **fields)
    out["verdict"] = verdict(claim["diff"], claim["ci"], paper_effect, mde, checks, effect_kind)
    return out


def rejudge(summary: dict) -> dict[str, str]:
    """Every claim's verdict recomputed from the numbers the summary holds ({claim: verdict}): what the tests compare
    with the verdicts a paper file shows."""
    return {name: verdict(c["diff"], c["ci"], c.get("paper_effect"), c.get("mde"), c.get("checks"),
                          c.get("effect_kind", "point"))
            for name, c in summary.get("claims", {}).items() if "verdict" in c}


# ------------------------------------------------------------------------------------------------- tables

def _num(x, scale: float = 1.0, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{x * scale:+.3g}" if signed else f"{x * scale:.3g}"


def paper_effect_text(c: dict) -> str:
    """A claim's paper effect as the tables show it: "+0.09", "up to +0.14", or "—" (the paper reports none)."""
    effect = c.get("paper_effect")
    return "—" if effect is None else ("up to " if c.get("effect_kind") == "up to" else "") + _num(effect)


def claims_table(summary: dict) -> str:
    """The claims of a summary as a markdown table: claim (its summary key), ours [95% CI], MDE, the paper's effect,
    whether each of its trained methods passed its manipulation check, verdict."""
    rows = ["| claim | ours [95% CI] | MDE | paper's effect | methods moved? | verdict |",
            "|---|---|---|---|---|---|"]
    for name, c in summary.get("claims", {}).items():
        if "verdict" not in c:
            continue
        effect_txt = paper_effect_text(c)
        checks = c.get("checks") or {}
        moved = ", ".join(f"{m} {method_status(p)}" for m, p in checks.items()) or "—"
        alone = " (read on the training family alone)" if c.get("families") == [SPLITS["same"]] else ""
        rows.append(f"| `{name}` | {_num(c['diff'])} [{_num(c['ci'][0])}, {_num(c['ci'][1])}] "
                    f"| {_num(c.get('mde'), signed=False)} | {effect_txt} | {moved} | **{c['verdict']}**{alone} |")
    return "\n".join(rows)


def manipulation_table(summary: dict) -> str:
    """The manipulation checks of a summary (`manipulation`: {method: check} or {task: {method: check}}) as a
    markdown table: method, objective, base, gain [95% CI], threshold, passed."""
    rows = ["| method | objective | base | gain [95% CI] | threshold (share of room) | moved | passed | intervention |",
            "|---|---|---|---|---|---|---|---|"]
    yes = {True: "yes", False: "**no**", None: "not measured"}
    for name, check in _checks(summary.get("manipulation", {})):
        ci = check.get("ci")
        gain = _num(check["gain"]) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else
                                      " (no interval)" if check["gain"] is not None else "")
        threshold = "—" if check["threshold"] is None else (
            f"{_num(check['threshold'], signed=False)} ({check['share']:.2g} x {_num(check['room'], signed=False)})")
        note = f"; {check['note']}" if check.get("note") else ""
        kind = ("the best reference, " + check["reference"] if check.get("reference")
                else "nominal" if check.get("ceiling_kind", "nominal") == "nominal" else "attainable")
        moved = check["moved"] if "moved" in check else (check["ci"][0] > 0 if ci else None)
        done = "—" if "intervention" not in check else yes[check["intervention"]] + "".join(
            f"; {r['what']} {_num(r['value'], signed=r.get('ci') is not None)}"
            + (f" [{_num(r['ci'][0])}, {_num(r['ci'][1])}]" if r.get("ci") else "")
            for r in check.get("interventions", []))
        rows.append(f"| {name} | {check['metric']} (ceiling {_num(check['ceiling'], signed=False)}, {kind}{note}) "
                    f"| {_num(check['base'], signed=False)} | {gain} | {threshold} | {yes[moved]} "
                    f"| {yes[check.get('passed')]} | {done} |")
    return "\n".join(rows)


def _checks(tree: dict, prefix: str = ""):
    for k, v in tree.items():
        if isinstance(v, Mapping) and "passed" in v:
            yield prefix + k, v
        elif isinstance(v, Mapping):
            yield from _checks(v, f"{prefix}{k}.")


CLAIMS_START, CLAIMS_END = "<!-- claims: written by python -m dialogrl claims -->", "<!-- /claims -->"


def claims_excerpt(summary: dict, run: str, source: str) -> dict:
    """What a paper file cites of a run: its claims and manipulation checks, with the run's name and source (the
    command, or the paper file's recorded numbers). Stored as papers/claims/<stem>.json."""
    return {"run": run, "source": source, "claims": summary.get("claims", {}),
            "manipulation": summary.get("manipulation", {}), **{k: summary[k] for k in ("counterparts", "room")
                                                                  if k in summary}}


CONFIRM_START = "<!-- confirmatory claims: written by python -m dialogrl claims -->"
CONFIRM_END = "<!-- /confirmatory claims -->"


def confirmatory(summary: Mapping) -> tuple[bool, str]:
    """Whether a finished run is its paper's confirmatory run, and why or why not: the hash of its resolved
    parameters equals the one papers/<stem>.md registered, committed, when the run started (`run.preregistration`,
    recorded in summary.json as "preregistration")."""
    pre = summary.get("preregistration")
    if not isinstance(pre, Mapping) or not pre.get("params_hash"):
        return False, "the run recorded no preregistration (it did not start through run.start_run, or predates it)"
    paper = pre.get("paper", "its paper file")
    if not pre.get("registered"):
        return False, f"{paper} registered no parameters at HEAD when the run started (no committed marker)"
    if pre["registered"] != pre["params_hash"]:
        return False, (f"its parameters hash {pre['params_hash'][:12]}, {paper} registered {pre['registered'][:12]}: "
                       "not the preregistered design")
    if not pre.get("commit"):
        return False, f"the commit that added {paper}'s marker was not found"
    return True, f"its parameters are the ones {paper} registered in commit {pre['commit'][:7]}"


def write_claims_block(paper: str | Path, excerpt: dict, markers: tuple[str, str] = (CLAIMS_START, CLAIMS_END)
                       ) -> str:
    """Rewrite the block between `markers` (CLAIMS_START and CLAIMS_END; CONFIRM_START and CONFIRM_END for the
    confirmatory run) of a paper file from an excerpt (`claims_excerpt`): which run, the manipulation checks, then
    the claims with their verdicts. Returns the new block."""
    path = Path(paper)
    text = path.read_text()
    start_marker, end_marker = markers
    start, end = text.find(start_marker), text.find(end_marker)
    if start < 0 or end < start:
        raise ValueError(f"{path}: no {start_marker} ... {end_marker} block for the claims table")
    rejudged = f" {excerpt['rejudged']}." if excerpt.get("rejudged") else ""
    registered = f" Confirmatory: {excerpt['confirmatory']}." if excerpt.get("confirmatory") else ""
    block = "\n".join([start_marker, f"Run `{excerpt['run']}` ({excerpt['source']}){registered}; verdicts computed by "
                       "`dialogrl.claims.verdict` from these numbers (papers/PROTOCOL.md: how a claim is judged)."
                       + rejudged, "",
                       "Manipulation checks (each trained method against the frozen counterpart the base plays, on "
                       "its training objective):", "", manipulation_table(excerpt), "", claims_table(excerpt), ""])
    write_text(path, text[:start] + block + text[end:])
    return block


def verdicts_in_block(paper: str | Path) -> dict[str, str]:
    """{claim: verdict} as the claims block of a paper file shows them (the rows whose first cell is a `key`)."""
    text = Path(paper).read_text()
    start, end = text.find(CLAIMS_START), text.find(CLAIMS_END)
    out = {}
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and cells[5].startswith("**"):
            out[cells[0].strip("`")] = cells[5].strip("*")
    return out


# claim keys renamed since runs were recorded: an older run's or a stored excerpt's key reads as the current one
RENAMED = {"partner_gap.": "counterpart_gap."}   # one word for the counterpart outside the social game (2026-12-07)


def current_keys(record: dict) -> dict:
    """A summary or excerpt with its claims (and their power records) under the current keys (RENAMED)."""
    def key(k: str) -> str:
        old = next((o for o in RENAMED if k.startswith(o)), None)
        return RENAMED[old] + k[len(old):] if old else k
    return {**record, **{part: {key(k): v for k, v in record[part].items()}
                         for part in ("claims", "power") if isinstance(record.get(part), dict)}}


def load_excerpt(path: str | Path) -> dict:
    excerpt = read_json(path)
    if not isinstance(excerpt, dict) or not isinstance(excerpt.get("claims"), dict):
        raise ValueError(f"{path}: not a claims excerpt (a mapping with its claims)")
    return current_keys(excerpt)


def excerpt_path(stem: str, papers_dir: str | Path = "papers", confirm: bool = False) -> Path:
    """papers/claims/<stem>.json (the exploratory cpu run's excerpt), or papers/claims/confirm/<stem>.json."""
    return Path(papers_dir) / "claims" / ("confirm" if confirm else "") / f"{stem}.json"


def refresh_claims(stem: str, run_dir: str | Path | None = None, papers_dir: str | Path = "papers",
                   command: str | None = None, confirm: bool = False) -> Path:
    """Rewrite the claims block of papers/<stem>.md: from a run's summary.json (the excerpt it cites is stored as
    papers/claims/<stem>.json first), or, without a run, from the stored excerpt. Every verdict is recomputed from
    the numbers (`rejudge`) before it is written. Returns the paper file.

    A `confirm` profile run goes to the confirmatory block (CONFIRM_START ... CONFIRM_END; its excerpt under
    papers/claims/confirm/) and only when it is the preregistered run (`confirmatory`): otherwise a ValueError says
    why, and nothing is written. `confirm` without a run: the stored confirmatory excerpt."""
    if run_dir is not None:
        config = read_json(Path(run_dir) / "config.json") if (Path(run_dir) / "config.json").is_file() else {}
        confirm = config.get("profile") == "confirm"
    path = excerpt_path(stem, papers_dir, confirm)
    paper = Path(papers_dir) / f"{stem}.md"
    markers = (CONFIRM_START, CONFIRM_END) if confirm else (CLAIMS_START, CLAIMS_END)
    if markers[0] not in (text := paper.read_text() if paper.is_file() else "") or markers[1] not in text:
        raise ValueError(f"{paper}: no {markers[0]} ... {markers[1]} block for the claims table")
    if run_dir is not None:
        run_dir = Path(run_dir)
        if not (run_dir / "summary.json").is_file():
            raise ValueError(f"{run_dir}: no summary.json (not a finished notebook run folder)")
        summary = read_json(run_dir / "summary.json")
        summary = current_keys(summary) if isinstance(summary, dict) else summary
        profile = (read_json(run_dir / "config.json") if (run_dir / "config.json").is_file() else {}).get("profile")
        if not isinstance(summary, dict) or not summary.get("claims"):
            raise ValueError(f"{run_dir / 'summary.json'}: no claims (a notebook's finished run writes them)")
        if profile not in ("cpu", "confirm"):
            raise ValueError(f"{run_dir}: a {profile!r} run; papers/ cites the cpu and confirm profiles' runs only")
        if confirm:
            ok, why = confirmatory(summary)
            if not ok:
                raise ValueError(f"{run_dir}: not written as confirmatory: {why}")
        env = read_json(run_dir / "env.json") if (run_dir / "env.json").exists() else {}
        commit = env.get("git_commit", "")[:7] or "commit not recorded"
        reproduce = f"python -m dialogrl reproduce --only {stem}" + (" --profile confirm" if confirm else "")
        source = f"`{command or reproduce}`, profile `{profile}`, {commit}"
        excerpt = claims_excerpt(summary, run_dir.name, source)
        if confirm:
            excerpt["confirmatory"] = why
    elif path.exists():
        excerpt = load_excerpt(path)
    else:
        raise ValueError(f"no {path}: give a run folder (python -m dialogrl claims {stem} --run <folder>)")
    lacking = {k: [f for f in ("diff", "ci") if f not in c] for k, c in excerpt["claims"].items() if "verdict" in c}
    lacking = {k: v for k, v in lacking.items() if v}
    if lacking:
        raise ValueError(f"{run_dir or path}: claims without their numbers: {lacking}")
    stale = {k: v for k, v in rejudge(excerpt).items() if excerpt["claims"][k]["verdict"] != v}
    if stale:
        raise ValueError(f"{run_dir or path}: verdicts {sorted(stale)} differ from what dialogrl.claims.verdict "
                         "computes from their numbers; re-run the notebook (or fix the excerpt's numbers), never the "
                         "verdict")
    if run_dir is not None:      # checked: now the excerpt, then the paper's block (each written whole)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(excerpt, indent=1) + "\n")
    write_claims_block(paper, excerpt, markers)
    return paper


def verdict_counts(excerpt: dict) -> dict[str, int]:
    """How many of an excerpt's claims have each verdict (every one of VERDICTS, zeros included)."""
    counts = dict.fromkeys(VERDICTS, 0)
    for c in excerpt.get("claims", {}).values():
        if "verdict" in c:
            counts[c["verdict"]] += 1
    return counts


GLANCE_START, GLANCE_END = "<!-- verdicts: written by python -m dialogrl claims -->", "<!-- /verdicts -->"


def glance_table(papers_dir: str | Path = "papers") -> str:
    """Each paper's verdicts at a glance (README): how many of its claims hold, are refuted, not tested, not resolved,
    from papers/claims/<stem>.json, with the run they come from; then its confirmatory run's counts and run
    (papers/claims/confirm/<stem>.json), "registered, not run yet" where papers/<stem>.md registers one that has no
    excerpt yet, else "—"."""
    papers_dir = Path(papers_dir)
    rows = ["| paper | " + " | ".join(VERDICTS) + " | `cpu` run | confirmatory verdicts | confirmatory run |",
            "|---|" + "---:|" * len(VERDICTS) + "---|---|---|"]
    for path in sorted((papers_dir / "claims").glob("*.json")):
        excerpt = load_excerpt(path)
        counts = verdict_counts(excerpt)
        confirm = excerpt_path(path.stem, papers_dir, confirm=True)
        if confirm.exists():
            decided = load_excerpt(confirm)
            tally = verdict_counts(decided)
            done = ", ".join(f"{tally[v]} {v}" for v in VERDICTS if tally[v]) or "no claims", f"`{decided['run']}`"
        else:
            paper = papers_dir / f"{path.stem}.md"
            registered = paper.exists() and bool(registered_hashes(paper.read_text()))
            done = ("registered, not run yet", "—") if registered else ("—", "—")
        rows.append(f"| [{path.stem}](papers/{path.stem}.md) | " + " | ".join(str(counts[v]) for v in VERDICTS)
                    + f" | `{excerpt['run']}` | {done[0]} | {done[1]} |")
    return "\n".join(rows)


def write_glance(readme: str | Path = "README.md", papers_dir: str | Path = "papers") -> None:
    """Rewrite the verdict table between GLANCE_START and GLANCE_END of the README."""
    path = Path(readme)
    text = path.read_text()
    start, end = text.find(GLANCE_START), text.find(GLANCE_END)
    if start < 0 or end < start:
        raise ValueError(f"{path}: no {GLANCE_START} ... {GLANCE_END} block for the verdicts")
    write_text(path, text[:start] + f"{GLANCE_START}\n{glance_table(papers_dir)}\n" + text[end:])


# ------------------------------------------------------------------------------------- panel split by rule family

SPLITS = {"same": "same rule family", "other": "other family"}


def panel_parts(games: pd.DataFrame, family: str = "family") -> list[tuple[str, pd.DataFrame]]:
    """A held-out panel's games pooled and split by rule family: [("", all), ("@same", the counterparts of the
    training counterparts' rule family), ("@other", those of another family)]; a panel of one family gives the
    pooled part alone. A claim `key` is read on each part as `key`, `key@same`, `key@other`
    (`heldout.held_out_table` labels each counterpart; `games[family]` holds the label)."""
    parts = [(f"@{short}", games[games[family] == label]) for short, label in SPLITS.items()]
    if any(len(p) == 0 for _, p in parts):
        return [("", games)]
    return [("", games), *parts]


def pair_claims(games: pd.DataFrame, pairs: Mapping[str, tuple[str, str]], metric: str, key: str,
                keys: Sequence[str] = ("counterpart", "scenario"), by: str = "method") -> dict[str, dict]:
    """The claims "<key>.<name><part>": method a minus method b on `metric` (stats.paired_clustered, paired by
    `keys` and the seed), for each pair name: (a, b) whose methods both played, on the panel pooled and on its
    same-family and other-family parts (`panel_parts`). The pooled claim records the rule families it read
    (`families`): one of the training family alone is said so in its table row (`claims_table`)."""

    played, out = set(games[by]), {}
    for name, (a, b) in pairs.items():
        if a in played and b in played:
            for part, g in panel_parts(games):
                out[f"{key}.{name}{part}"] = paired_clustered(g[g[by] == a], g[g[by] == b], metric, keys)
                if not part and "family" in g:
                    out[f"{key}.{name}"]["families"] = sorted(set(g["family"]))
    return out


def seed_claims(per_seed: pd.DataFrame, measure: str, reference: str, key: str,
                games: Mapping[str, int] | None = None, by: str = "method") -> dict[str, dict]:
    """The claims "<key>.<m>_minus_<reference>" of a measure taken once per training seed (a row per method and
    `seed`, e.g. the diversity of all a policy said): each other method's value minus the reference's at the same
    seed, its mean and t-interval over seeds; "games": games[m], the games the measure read. A method with fewer
    than two seeds paired with the reference has no claim."""

    ref, out = per_seed[per_seed[by] == reference].set_index("seed")[measure], {}
    for m in [m for m in per_seed[by].unique() if m != reference]:
        d = (per_seed[per_seed[by] == m].set_index("seed")[measure] - ref).dropna().to_numpy()
        if len(d) > 1:
            lo, hi = t_interval(d)
            out[f"{key}.{m}_minus_{reference}"] = {"diff": float(d.mean()), "ci": [lo, hi], "seeds": len(d),
                                                   **({"games": int(games[m])} if games is not None else {})}
    return out


def pair_power(games: pd.DataFrame, pairs: Mapping[str, tuple[str, str]], metric: str, key: str,
               paper_effects: Mapping[str, float | None] | None = None,
               keys: Sequence[str] = ("counterpart", "scenario"), by: str = "method") -> dict[str, dict]:
    """stats.power_analysis of each pooled claim "<key>.<name>" of `pair_claims`, beside the paper's effect
    `paper_effects[name]` on the same scale (None: the paper gives none)."""

    played, out = set(games[by]), {}
    for name, (a, b) in pairs.items():
        if a in played and b in played:
            out[f"{key}.{name}"] = power_analysis(games[games[by] == a], games[games[by] == b], metric,
                                                  (paper_effects or {}).get(name), keys=keys)
    return out


def power_table(power: Mapping[str, dict], designs: Sequence[tuple[int, int]] = ()) -> pd.DataFrame:
    """The power table of a notebook: per claim its MDE, the paper's effect, whether it is detectable, seeds and
    games, and the MDE of each other design (training seeds, units per seed; stats.design_mde) where the run had
    the seeds to estimate it."""

    rows = []
    for claim, p in power.items():
        row = {"claim": claim, **{k: p.get(k) for k in ("mde", "paper_effect", "detectable", "seeds", "games")}}
        if p["seeds"] > 1:
            row.update({f"mde {n}x{m}": design_mde(p, n, m) for n, m in designs})
        rows.append(row)
    if not rows:
        return pd.DataFrame(columns=["claim", "mde", "paper_effect", "detectable", "seeds", "games"]).set_index("claim")
    return pd.DataFrame(rows).set_index("claim")


def claim_base(key: str) -> str:
    """The claim a panel part's key reads (`goal.socialrl_minus_base@other` -> `goal.socialrl_minus_base`)."""
    return key.split("@", 1)[0]


def compared_methods(key: str, base: str = "base", pairs: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The trained methods a claim compares, read off its key's last part: `<a>_minus_<b>` names a and b, anything
    else one method (`mismatch.vs_minus_base@same` -> ["vs"], `score.interactive_minus_static` -> ["interactive",
    "static"], `counterpart_gap.calibrated` -> ["calibrated"]); the untrained `base` is left out. `pairs` ({name:
    (a, b)}, a notebook's claims) gives the methods of a name that stands for them (`dynamic_minus_uniform`:
    socialrl and uniform)."""
    name = claim_base(key).rsplit(".", 1)[-1]
    return [m for m in (pairs[name] if pairs and name in pairs else name.split("_minus_")) if m != base]


def judge_claims(claims: Mapping[str, dict], power: Mapping[str, dict], checks: Callable[[str], Mapping[str, dict]],
                 effect: Callable[[str], float | None] | None = None, effect_kind: str = "point") -> dict[str, dict]:
    """Every claim judged (`judge`) on its power record (power[key]: the paper's effect and the MDE; a panel part
    or a claim without one has neither) and the manipulation checks of the trained methods it compares,
    checks(key) -> {method: check}. effect(key), when given, is the paper's effect instead of the power record's;
    effect_kind applies to the claims with a paper effect (the others are "point")."""
    out = {}
    for key, c in claims.items():
        p = power.get(key, {})
        paper = p.get("paper_effect") if effect is None else effect(key)
        out[key] = judge(c, paper, p.get("mde"), checks(key), effect_kind=effect_kind if paper is not None else "point")
    return out


def verdicts(summary: dict, claims: Mapping[str, dict], power: Mapping[str, dict], manipulation: dict,
             checks: Callable[[str], Mapping[str, dict]] | None = None, more: Mapping[str, dict] | None = None,
             pairs: Mapping[str, Sequence[str]] | None = None, **judge_kwargs) -> dict[str, dict]:
    """The last step of every notebook: the manipulation checks ({method: check}, or {task: {method: check}}) kept as
    summary["manipulation"] and shown (`manipulation_table`), then every claim judged (`judge_claims`; checks(key)
    gives the checks of the methods a claim compares, by default those its key names: `compared_methods`, with
    `pairs` for names that stand for their methods) with
    `more` (claims judged apart) after them, kept as summary["claims"] and shown (`claims_table`). `judge_kwargs`
    go to judge_claims (effect, effect_kind). Returns the judged claims."""
    summary["manipulation"] = manipulation
    show(manipulation_table(summary), markdown=True)
    checks = checks or (lambda key: {m: manipulation[m] for m in compared_methods(key, pairs=pairs)})
    summary["claims"] = {**judge_claims(claims, power, checks, **judge_kwargs), **(more or {})}
    show(claims_table(summary), markdown=True)
    return summary["claims"]
