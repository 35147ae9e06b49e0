"""How a claim is judged (dialogrl.claims): the manipulation check, the four verdicts against hand-worked cases, and
the papers' claims tables, which must be what the code computes from the numbers they cite."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from dialogrl.claims import (
    CLAIMS_END,
    CLAIMS_START,
    VERDICTS,
    check_record,
    claims_excerpt,
    claims_table,
    compact_check,
    excerpt_path,
    intervention,
    judge,
    load_excerpt,
    manipulation_check,
    manipulation_table,
    method_status,
    refresh_claims,
    rejudge,
    verdict,
    verdict_counts,
    verdicts_in_block,
    with_interventions,
    write_claims_block,
)

PASS = {"moved": True, "passed": True, "intervention": True}
MOVED = {"moved": True, "passed": False, "intervention": True}       # moved, too little to pass
STILL = {"moved": False, "passed": False, "intervention": True}      # did not move
NOT_DONE = {"moved": True, "passed": True, "intervention": False}    # the manipulation did not happen
UNKNOWN = {"moved": None, "passed": None, "intervention": True}      # not measured


# ------------------------------------------------------------------------------------------------ verdicts

@pytest.mark.parametrize("diff, ci, effect, mde, checks, kind, expected", [
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": PASS}, "point", "holds"),        # above zero in the paper's direction
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": MOVED}, "point", "holds"),       # moving is enough to show an effect
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": STILL}, "point", "not tested"),  # ... not moving is not (both ways)
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": NOT_DONE}, "point", "not tested"),  # the manipulation did not happen
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": UNKNOWN}, "point", "not resolved"),
    (-0.10, (-0.18, -0.02), -0.05, 0.04, {}, "point", "holds"),             # the paper says negative
    (-0.10, (-0.18, -0.02), 0.09, 0.05, {"m": PASS}, "point", "refuted"),   # the wrong sign, decisively
    (0.00, (-0.03, 0.03), 0.09, 0.05, {"m": PASS, "b": PASS}, "point", "refuted"),
    (0.00, (-0.03, 0.03), 0.09, 0.05, {"m": PASS, "b": STILL}, "point", "not tested"),
    (0.00, (-0.03, 0.03), 0.09, 0.05, {"m": PASS, "b": MOVED}, "point", "not resolved"),  # refuting needs passes
    (0.00, (-0.03, 0.03), 0.09, 0.05, {"m": UNKNOWN}, "point", "not resolved"),  # check not measured
    (0.00, (-0.03, 0.03), 0.09, 0.12, {"m": PASS}, "point", "not resolved"),  # MDE above the paper's effect
    (0.05, (-0.01, 0.11), 0.09, 0.05, {"m": PASS}, "point", "not resolved"),  # the CI holds the paper's effect
    (0.00, (-0.03, 0.03), None, 0.05, {"m": PASS}, "point", "not resolved"),  # no paper effect: nothing to refute
    (0.00, (-0.03, 0.03), 0.09, 0.05, {"m": PASS}, "up to", "not resolved"),  # "up to 9": (0, 0.03] not excluded
    (-0.05, (-0.09, -0.01), 0.09, 0.05, {"m": PASS}, "up to", "refuted"),     # every positive effect excluded
    (0.00, (-0.03, float("nan")), 0.09, 0.05, {"m": PASS}, "point", "not resolved"),
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": True}, "point", "holds"),          # an older claim's bool: passed
    (0.10, (0.02, 0.18), 0.09, 0.05, {"m": False}, "point", "not resolved"),  # failed, moved unknown
])
def test_verdict_cases(diff, ci, effect, mde, checks, kind, expected):
    assert verdict(diff, ci, effect, mde, checks, kind) == expected
    assert expected in VERDICTS


def test_verdict_rejects_unknown_effect_kind():
    with pytest.raises(ValueError, match="effect_kind"):
        verdict(0.0, (-1, 1), 0.1, 0.1, {}, "at least")


def test_judge_replaces_holds_with_a_verdict():
    claim = {"diff": 0.0, "ci": [-0.03, 0.03], "holds": False, "seeds": 5, "games": 100}
    out = judge(claim, paper_effect=0.14, mde=0.05, checks={"cotrain": check_record("reward", 0.01, (-0.02, 0.04),
                                                                                     0.6, 1.0)},
                effect_kind="up to")
    assert "holds" not in out and out["verdict"] == "not tested"
    assert out["checks"] == {"cotrain": {"moved": False, "passed": False}}
    assert out["seeds"] == 5 and out["effect_kind"] == "up to" and out["mde"] == 0.05


# ------------------------------------------------------------------------------------- manipulation check

def test_check_record_moved_and_passed():
    # base 0.6 of a ceiling 1.0: room 0.4, threshold 0.1
    rec = check_record("r", 0.12, (0.05, 0.19), 0.6, 1.0)
    assert rec["moved"] is True and rec["passed"] is True and rec["ceiling_kind"] == "nominal"
    rec = check_record("r", 0.08, (0.05, 0.11), 0.6, 1.0)                            # significant, too small
    assert rec["moved"] is True and rec["passed"] is False
    rec = check_record("r", 0.12, (-0.01, 0.25), 0.6, 1.0)                           # large, not significant
    assert rec["moved"] is False and rec["passed"] is False
    rec = check_record("r", 0.02, None, 0.6, 1.0)                                     # no interval, far below
    assert rec["passed"] is False and rec["threshold"] == pytest.approx(0.1) and rec["room"] == pytest.approx(0.4)
    assert rec["moved"] is None
    assert check_record("r", 0.2, None, 0.6, 1.0)["passed"] is None                  # no interval: unknown
    rec = check_record("r", 0.06, (0.02, 0.10), 0.6, 0.8, reference="fair")          # attainable: 0.8 by `fair`
    assert rec["passed"] is True and rec["threshold"] == pytest.approx(0.05) and rec["ceiling_kind"] == "attainable"


def test_manipulation_table_shows_each_intervention_with_its_value():
    check = with_interventions(check_record("reward", 0.12, (0.05, 0.19), 0.6, 1.0),
                               intervention("usable VS answers", 0.93, at_least=0.8),
                               intervention("counterpart changed", -0.04, ci=(-0.07, -0.01)))
    row = manipulation_table({"manipulation": {"vs": check}}).splitlines()[2]
    assert row.startswith("| vs | reward (ceiling 1, nominal) | 0.6 | +0.12 [+0.05, +0.19] | 0.1 (0.25 x 0.4) |")
    assert row.endswith("| yes | yes | yes; usable VS answers 0.93; counterpart changed -0.04 [-0.07, -0.01] |")


def test_intervention_gates_the_check():
    ok, no = intervention("usable VS answers", 0.93, at_least=0.8), intervention("usable VS answers", 0.4, at_least=0.8)
    assert ok["happened"] is True and no["happened"] is False
    assert intervention("shift fell by", None, at_least=0.0)["happened"] is None
    assert intervention("spread wider by", 0.0, above=0.0)["happened"] is False
    assert intervention("spread wider by", 0.01, above=0.0)["happened"] is True
    # a change either way, read from its interval
    assert intervention("counterpart changed", -0.04, ci=(-0.07, -0.01))["happened"] is True
    assert intervention("counterpart changed", 0.03, ci=(-0.01, 0.07))["happened"] is False
    assert intervention("counterpart changed", 0.03, ci=(float("nan"), float("nan")))["happened"] is None
    check = check_record("r", 0.12, (0.05, 0.19), 0.6, 1.0)
    assert method_status(with_interventions(check, ok)) == "passed"
    assert method_status(with_interventions(check, ok, no)) == "no intervention"
    assert method_status(with_interventions(check, intervention("x", float("nan")))) == "no intervention"
    assert [method_status(c) for c in (STILL, MOVED, PASS, True, False, None)] == [
        "not moved", "moved", "passed", "passed", "not measured", "not measured"]


def test_a_missing_intervention_is_not_tested_never_happened():
    """An intervention declared but not measured (None, nan) leaves the claim "not tested", whatever its interval says,
    and stays missing in the claim's record; a method with no intervention of its own has no key and is judged on
    its check alone."""
    unmeasured = with_interventions(check_record("r", 0.12, (0.05, 0.19), 0.6, 1.0), intervention("x", None))
    assert unmeasured["intervention"] is None and method_status(unmeasured) == "no intervention"
    kept = compact_check(unmeasured)
    assert kept["intervention"] is None and method_status(kept) == "no intervention"
    for diff, ci in ((0.3, (0.2, 0.4)), (0.0, (-0.01, 0.01))):   # would hold; would be refuted
        assert verdict(diff, ci, 0.09, 0.05, {"m": unmeasured}) == "not tested"
        assert verdict(diff, ci, 0.09, 0.05, {"m": kept}) == "not tested"
    plain = check_record("r", 0.12, (0.05, 0.19), 0.6, 1.0)
    assert "intervention" not in compact_check(plain) and method_status(compact_check(plain)) == "passed"
    assert verdict(0.3, (0.2, 0.4), 0.09, 0.05, {"m": compact_check(plain)}) == "holds"


def _games(method_shift: float, seeds: int = 4, scenarios: int = 30, seed: int = 0) -> tuple[pd.DataFrame, ...]:
    rng = np.random.default_rng(seed)
    rows_t, rows_b = [], []
    for k in range(seeds):
        skill = rng.normal(0, 0.02)
        for s in range(scenarios):
            noise = rng.normal(0, 0.1)
            base = 0.5 + noise
            rows_b.append({"seed": k, "scenario": s, "role": "A", "counterpart": "train", "reward": base})
            rows_t.append({"seed": k, "scenario": s, "role": "A", "counterpart": "train",
                           "reward": base + method_shift + skill + rng.normal(0, 0.05)})
    return pd.DataFrame(rows_t), pd.DataFrame(rows_b)


def test_manipulation_check_pairs_by_scenario_and_seed():
    trained, base = _games(0.2)
    check = manipulation_check(trained, base, "reward", ceiling=1.0)
    assert check["passed"] is True and check["seeds"] == 4 and check["games"] == 120
    assert check["gain"] == pytest.approx(0.2, abs=0.05) and check["ci"][0] > 0
    assert check["base"] == pytest.approx(base["reward"].mean())
    still, base = _games(0.0)
    assert manipulation_check(still, base, "reward", ceiling=1.0)["passed"] is False


def test_manipulation_check_needs_games():
    trained, base = _games(0.1)
    with pytest.raises(ValueError, match="no games"):
        manipulation_check(trained.iloc[:0], base, "reward", ceiling=1.0)


# ----------------------------------------------------------------------------------------- claims blocks

def _summary():
    check_ok = check_record("reward", 0.3, (0.2, 0.4), 0.2, 1.0, seeds=5)
    check_no = check_record("reward", 0.0, (-0.1, 0.1), 0.2, 1.0, seeds=5)
    claims = {"success.a_minus_base": judge({"diff": 0.1, "ci": [0.05, 0.15]}, 0.09, 0.05, {"a": check_ok}),
              "success.b_minus_a": judge({"diff": 0.0, "ci": [-0.02, 0.02]}, 0.14, 0.05, {"a": check_ok, "b": check_no},
                                         effect_kind="up to")}
    return {"claims": claims, "manipulation": {"a": check_ok, "b": check_no}}


def test_claims_block_round_trip(tmp_path):
    paper = tmp_path / "x.md"
    paper.write_text(f"# x\n\n{CLAIMS_START}\nold table\n{CLAIMS_END}\n\nafter\n")
    block = write_claims_block(paper, claims_excerpt(_summary(), "run-1", "a test"))
    text = paper.read_text()
    assert "old table" not in text and text.endswith(f"{CLAIMS_END}\n\nafter\n") and "run-1" in block
    assert verdicts_in_block(paper) == {"success.a_minus_base": "holds", "success.b_minus_a": "not tested"}
    assert "up to +0.14" in block and "| a | reward" in block


def test_refresh_claims_from_a_run_and_refuses_a_typed_verdict(tmp_path):
    papers = tmp_path / "papers"
    papers.mkdir()
    (papers / "x.md").write_text(f"{CLAIMS_START}\n{CLAIMS_END}\n")
    run = tmp_path / "run"
    run.mkdir()
    summary = _summary()
    (run / "summary.json").write_text(__import__("json").dumps(summary))
    (run / "config.json").write_text('{"profile": "cpu"}')
    refresh_claims("x", run, papers)
    excerpt = load_excerpt(excerpt_path("x", papers))
    assert excerpt["run"] == "run" and rejudge(excerpt) == verdicts_in_block(papers / "x.md")
    excerpt["claims"]["success.b_minus_a"]["verdict"] = "refuted"      # typed, not computed
    excerpt_path("x", papers).write_text(__import__("json").dumps(excerpt))
    with pytest.raises(ValueError, match="differ from what"):
        refresh_claims("x", None, papers)


def test_bad_runs_are_refused_before_anything_is_written(tmp_path):
    """A run without claims, a smoke run, an empty or truncated summary, a claim without its numbers, a missing run
    folder: each an error naming the file, and the paper file and its excerpt stay as they were (no 0/0/7/0 table)."""
    import json

    from dialogrl.__main__ import main

    papers = tmp_path / "papers"
    papers.mkdir()
    (papers / "x.md").write_text(f"{CLAIMS_START}\nthe table\n{CLAIMS_END}\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"profile": "cpu"}')
    cases = [({"seeds": [0, 1]}, "summary.json: no claims"),
             ("", "summary.json: empty"),
             ('{"claims": {"a": ', "summary.json: not valid JSON"),
             ([1, 2], "summary.json: no claims"),
             ({"claims": {"a": {"verdict": "holds", "ci": [0, 1]}}},
              r"claims without their numbers: \{'a': \['diff'\]")]
    for summary, needle in cases:
        (run / "summary.json").write_text(summary if isinstance(summary, str) else json.dumps(summary))
        with pytest.raises(ValueError, match=needle):
            refresh_claims("x", run, papers)
    (run / "summary.json").write_text(json.dumps(_summary()))
    (run / "config.json").write_text('{"profile": "smoke"}')
    with pytest.raises(ValueError, match="a 'smoke' run; papers/ cites the cpu and confirm profiles' runs only"):
        refresh_claims("x", run, papers)
    with pytest.raises(ValueError, match="nowhere: no summary.json"):
        refresh_claims("x", tmp_path / "nowhere", papers)
    assert (papers / "x.md").read_text() == f"{CLAIMS_START}\nthe table\n{CLAIMS_END}\n"
    assert not excerpt_path("x", papers).exists()
    readme = tmp_path / "README.md"
    assert main(["claims", "x", "--run", str(tmp_path / "nowhere"), "--papers", str(papers),
                 "--readme", str(readme)]) == 2
    assert not readme.exists()


# ---------------------------------------------------------------------------- the repository's paper files

STEMS = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("stem", STEMS)
def test_papers_verdicts_are_the_codes(stem, tmp_path):
    """Every paper file shows a claims block generated from the excerpt of the run it cites (papers/claims/), and
    every verdict there is what dialogrl.claims.verdict computes from the excerpt's numbers: nobody types one."""
    paper, excerpt_file = REPO / "papers" / f"{stem}.md", excerpt_path(stem, REPO / "papers")
    assert excerpt_file.exists(), f"{excerpt_file} missing: python -m dialogrl claims {stem} --run <run folder>"
    excerpt = load_excerpt(excerpt_file)
    computed = rejudge(excerpt)
    assert computed, f"{excerpt_file} holds no judged claim"
    assert computed == {k: c["verdict"] for k, c in excerpt["claims"].items()}
    assert verdicts_in_block(paper) == computed, f"{paper}'s claims table differs from its excerpt's verdicts"
    copy = tmp_path / paper.name   # the block is exactly what the generator writes (no hand edits inside it)
    shutil.copyfile(paper, copy)
    write_claims_block(copy, excerpt)
    assert copy.read_text() == paper.read_text(), f"{paper}: edit the excerpt and run python -m dialogrl claims {stem}"


def test_readme_verdicts_at_a_glance_match_the_excerpts():
    from dialogrl.claims import glance_table

    readme = (REPO / "README.md").read_text()
    assert glance_table(REPO / "papers") in readme, "README's verdict table is stale: python -m dialogrl claims --all"


def test_the_glance_table_shows_the_confirmatory_run_beside_the_cpu_one(tmp_path):
    """A paper with a stored confirmatory excerpt shows its counts and run; one that registers a design without a run
    says so; one with neither shows dashes."""
    from dialogrl.claims import glance_table
    from dialogrl.run import PREREGISTERED

    papers = tmp_path / "papers"
    (papers / "claims" / "confirm").mkdir(parents=True)
    for stem in ("a", "b", "c"):
        (papers / "claims" / f"{stem}.json").write_text(json.dumps(claims_excerpt(_summary(), f"{stem}-cpu", "t")))
    (papers / "claims" / "confirm" / "a.json").write_text(json.dumps(claims_excerpt(_summary(), "a-confirm", "t")))
    (papers / "b.md").write_text(f"# b\n\n{PREREGISTERED.format('0' * 64)}\n")
    rows = glance_table(papers).splitlines()
    assert rows[0] == ("| paper | holds | refuted | not tested | not resolved | `cpu` run | confirmatory verdicts "
                       "| confirmatory run |")
    assert rows[2].endswith("| 1 | 0 | 1 | 0 | `a-cpu` | 1 holds, 1 not tested | `a-confirm` |")
    assert rows[3].endswith("| `b-cpu` | registered, not run yet | — |")
    assert rows[4].endswith("| `c-cpu` | — | — |")


def test_verdict_counts():
    assert verdict_counts(_summary()) == {"holds": 1, "refuted": 0, "not tested": 1, "not resolved": 0}


def test_every_game_states_its_reward_ceiling():
    """The manipulation check's ceiling per game and role, against games that reach it."""
    from dialogrl.envs import make_task

    assert make_task("dealnodeal").max_reward("A") == 10.0
    tele = make_task("telesales")
    assert tele.max_reward("seller") == 1.5 and tele.max_reward("buyer") == 2.0
    assert make_task("persuasion").max_reward("persuader") == 1.0
    assert make_task("social").max_reward("agent") == pytest.approx(1.0 + make_task("social").relationship_weight * 5)


def test_panel_parts_split_by_rule_family():
    from dialogrl.claims import claim_base, panel_parts

    games = pd.DataFrame({"counterpart": ["a", "b", "c"], "family": ["same rule family", "other family",
                                                                     "same rule family"]})
    parts = dict(panel_parts(games))
    assert list(parts) == ["", "@same", "@other"] and list(parts["@other"]["counterpart"]) == ["b"]
    assert [k for k, _ in panel_parts(games[games["family"] == "same rule family"])] == [""]
    assert claim_base("goal.socialrl_minus_base@other") == "goal.socialrl_minus_base"


def _panel_games(seeds=3, scenarios=4):
    """Three methods against two counterparts (one of each rule family): a beats b by 0.1 on average, c by 0.05."""
    rng = np.random.default_rng(0)
    rows = []
    for seed in range(seeds):
        for c, family in (("x", "same rule family"), ("y", "other family")):
            for sc in range(scenarios):
                base = rng.random()
                rows += [{"method": m, "seed": seed, "counterpart": c, "family": family, "scenario": sc,
                          "success": base + shift + rng.normal(0, 0.05)}
                         for m, shift in (("a", 0.1), ("b", 0.0), ("c", 0.05))]
    return pd.DataFrame(rows)


def test_pair_claims_read_each_pair_on_the_pooled_panel_and_its_parts():
    from dialogrl.claims import pair_claims
    from dialogrl.stats import paired_clustered

    games = _panel_games()
    claims = pair_claims(games, {"a_minus_b": ("a", "b"), "a_minus_z": ("a", "z")}, "success", "success")
    assert list(claims) == ["success.a_minus_b", "success.a_minus_b@same", "success.a_minus_b@other"]  # z never played
    assert claims["success.a_minus_b"]["diff"] == pytest.approx(0.1, abs=0.05)
    same = games[games["family"] == "same rule family"]
    assert claims["success.a_minus_b@same"] == paired_clustered(same[same["method"] == "a"],
                                                                same[same["method"] == "b"], "success")
    assert claims["success.a_minus_b"]["families"] == ["other family", "same rule family"]
    # a pooled panel of the training family alone: one claim, and its row says so
    alone = pair_claims(same, {"a_minus_b": ("a", "b")}, "success", "success")
    assert list(alone) == ["success.a_minus_b"] and alone["success.a_minus_b"]["families"] == ["same rule family"]
    row = claims_table({"claims": {k: judge(c) for k, c in alone.items()}}).splitlines()[2]
    assert row.endswith("** (read on the training family alone) |")
    assert not claims_table({"claims": {k: judge(c) for k, c in claims.items()}}).count("family alone")


def test_pair_power_and_its_table():
    from dialogrl.claims import pair_power, power_table
    from dialogrl.stats import power_analysis

    games = _panel_games()
    pairs = {"a_minus_b": ("a", "b"), "c_minus_b": ("c", "b")}
    power = pair_power(games, pairs, "success", "success", {"a_minus_b": 0.2})
    assert power["success.a_minus_b"] == power_analysis(games[games["method"] == "a"], games[games["method"] == "b"],
                                                        "success", 0.2)
    assert power["success.c_minus_b"]["paper_effect"] is None
    table = power_table(power, designs=[(8, 100)])
    assert list(table.index) == ["success.a_minus_b", "success.c_minus_b"]
    assert {"mde", "paper_effect", "detectable", "seeds", "games", "mde 8x100"} <= set(table.columns)
    assert table.loc["success.a_minus_b", "mde 8x100"] < table.loc["success.a_minus_b", "mde"]   # more seeds: finer
    assert power_table({}).empty


def test_seed_claims_compare_a_per_seed_measure_with_the_references():
    from dialogrl.claims import seed_claims
    from dialogrl.stats import t_interval

    per_seed = pd.DataFrame({"method": ["single"] * 3 + ["vs"] * 3 + ["one"], "seed": [0, 1, 2, 0, 1, 2, 0],
                             "entropy": [1.0, 1.2, 0.8, 1.5, 1.4, np.nan, 2.0]})
    claims = seed_claims(per_seed, "entropy", "single", "diversity.entropy", games={"vs": 40, "one": 9})
    assert list(claims) == ["diversity.entropy.vs_minus_single"]   # `one` has a single paired seed: no claim
    lo, hi = t_interval([0.5, 0.2])
    assert claims["diversity.entropy.vs_minus_single"] == {"diff": pytest.approx(0.35), "ci": [lo, hi], "seeds": 2,
                                                           "games": 40}


def test_compared_methods_and_judge_claims():
    from dialogrl.claims import compared_methods, judge_claims, method_check

    assert compared_methods("score.interactive_minus_static@same") == ["interactive", "static"]
    assert compared_methods("mismatch.telesales.unilateral-seller_minus_base") == ["unilateral-seller"]
    assert compared_methods("counterpart_gap.calibrated") == ["calibrated"]
    claims = {"s.a_minus_b": {"diff": 0.2, "ci": [0.1, 0.3]}, "s.a_minus_b@same": {"diff": 0.2, "ci": [0.1, 0.3]},
              "s.c_minus_base": {"diff": 0.0, "ci": [-0.05, 0.05]}}
    power = {"s.a_minus_b": {"paper_effect": 0.15, "mde": 0.1}, "s.c_minus_base": {"paper_effect": None, "mde": 0.08}}
    checks = {"a": PASS, "b": PASS, "c": STILL}
    out = judge_claims(claims, power, lambda key: {m: checks[m] for m in compared_methods(key)}, effect_kind="up to")
    assert out["s.a_minus_b"] == judge(claims["s.a_minus_b"], 0.15, 0.1, {"a": PASS, "b": PASS}, effect_kind="up to")
    assert out["s.a_minus_b@same"] == judge(claims["s.a_minus_b@same"], None, None, {"a": PASS, "b": PASS})
    assert out["s.c_minus_base"]["checks"] == {"c": STILL} and out["s.c_minus_base"]["effect_kind"] == "point"
    given = judge_claims(claims, power, lambda key: {}, effect=lambda key: 0.3)   # the paper's effect on every part
    assert given["s.a_minus_b@same"]["paper_effect"] == 0.3 and given["s.a_minus_b@same"]["mde"] is None
    games = _panel_games().rename(columns={"success": "reward"}).assign(role="A")
    base = games.assign(method=games["method"].replace({"b": "base"}))
    assert method_check(base, "a", "reward", 2.0) == manipulation_check(base[base["method"] == "a"],
                                                                        base[base["method"] == "base"], "reward", 2.0)


def test_verdicts_keep_the_checks_and_the_judged_claims_in_the_summary(capsys):
    """A notebook's last step (claims.verdicts): the manipulation checks and every claim, judged on the checks of the
    methods it compares (a name that stands for its methods through `pairs`), with claims judged apart after them."""
    from dialogrl.claims import check_record, compared_methods, verdicts

    assert compared_methods("goal.dynamic_minus_uniform@same", pairs={"dynamic_minus_uniform": ("socialrl", "uniform")}
                            ) == ["socialrl", "uniform"]
    assert compared_methods("goal.socialrl_minus_base", pairs={"x": ("a", "b")}) == ["socialrl"]
    claims = {"goal.dynamic_minus_uniform": {"diff": 0.2, "ci": [0.1, 0.3]}}
    power = {"goal.dynamic_minus_uniform": {"paper_effect": 0.05, "mde": 0.1}}
    checks = {"socialrl": check_record("reward", 0.5, [0.3, 0.7], 0.0, 1.0),
              "uniform": check_record("reward", 0.0, [-0.1, 0.1], 0.0, 1.0)}
    apart = {"shift.quadratic_coef": judge({"diff": 0.0, "ci": [-1.0, 1.0]})}
    summary = {"power": power}
    out = verdicts(summary, claims, power, checks, pairs={"dynamic_minus_uniform": ("socialrl", "uniform")},
                   more=apart)
    assert list(out) == ["goal.dynamic_minus_uniform", "shift.quadratic_coef"] and summary["claims"] is out
    assert out["goal.dynamic_minus_uniform"] == judge(claims["goal.dynamic_minus_uniform"], 0.05, 0.1, checks)
    assert summary["manipulation"] is checks
    shown = capsys.readouterr().out
    assert "| method | objective |" in shown and "`goal.dynamic_minus_uniform`" in shown   # both tables shown


def test_a_renamed_claim_key_reads_as_the_current_one(tmp_path):
    """Runs recorded before a claim key was renamed (RENAMED) read under the current key: a stored excerpt, a run's
    summary and `compare` alike, so the paper tables and comparisons name one key."""
    import json

    from dialogrl.claims import current_keys, load_excerpt
    from dialogrl.compare import run_rows

    claim = {"diff": 0.4, "ci": [-0.2, 1.0], "seeds": 3, "verdict": "not resolved"}
    old = {"run": "20261201-000000__cpu", "claims": {"partner_gap.calibrated": claim, "score.a_minus_b": claim},
           "power": {"partner_gap.calibrated": {"mde": 1.0}}}
    assert set(current_keys(old)["claims"]) == {"counterpart_gap.calibrated", "score.a_minus_b"}
    assert set(current_keys(old)["power"]) == {"counterpart_gap.calibrated"}
    path = tmp_path / "01_x.json"
    path.write_text(json.dumps(old))
    assert "counterpart_gap.calibrated" in load_excerpt(path)["claims"]
    assert set(run_rows([path])[0]["claims"]) == {"counterpart_gap.calibrated", "score.a_minus_b"}
