"""`python -m dialogrl compare`: claims of several runs side by side, and results/REPORT.md's claims table."""
import json

import pytest

from dialogrl.__main__ import main
from dialogrl.claims import judge
from dialogrl.compare import compare_table, run_rows, runs_table


def fake_run(root, stem, run_id, claims, commit="abcdef0123", dirty=False, seconds=600.0, seeds=4):
    run = root / stem / run_id
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"seeds": seeds, "claims": claims}))
    (run / "config.json").write_text(json.dumps({"profile": run_id.split("__")[-1], "seed": 0}))
    (run / "env.json").write_text(json.dumps({"git_commit": commit, "git_dirty": dirty}))
    (run / "timings.json").write_text(json.dumps({"seconds": seconds}))
    return run


def claim(diff, lo, hi, paper=0.1, mde=0.05, moved=True):
    return judge({"diff": diff, "ci": [lo, hi]}, paper_effect=paper, mde=mde, checks={"m": {"passed": moved}})


def test_claims_of_two_runs_side_by_side(tmp_path, capsys):
    a = fake_run(tmp_path, "02_socialrl", "20261201-000000__cpu",
                 {"goal.a_minus_b": claim(0.12, 0.05, 0.19), "goal.only_in_a": claim(0.0, -0.1, 0.1)})
    b = fake_run(tmp_path, "02_socialrl", "20261202-000000__cpu", {"goal.a_minus_b": claim(0.01, -0.01, 0.03)},
                 commit="1234567890", dirty=True, seconds=5400.0, seeds=[0, 1, 2])
    rows = run_rows([a, b])
    assert [r["seeds"] for r in rows] == [4, 3] and rows[1]["commit"] == "1234567+dirty" and rows[1]["minutes"] == 90
    assert "| 02_socialrl | `20261201-000000__cpu` | cpu | 4 | abcdef0 | 10 | 1 | 0 | 0 | 1 |" in runs_table(rows)
    lines = compare_table(rows).splitlines()
    assert lines[2] == ("| `goal.a_minus_b` | +0.1 | `20261201-000000__cpu` | +0.12 [+0.05, +0.19] | 0.05 "
                        "| **holds** | cpu | 4 | abcdef0 | 10 |")
    assert lines[3] == ("|  |  | `20261202-000000__cpu` | +0.01 [-0.01, +0.03] | 0.05 | **refuted** | cpu | 3 "
                        "| 1234567+dirty | 90 |")
    assert "| `goal.only_in_a` |" in lines[4] and "absent" in lines[5]   # a claim one run lacks says so
    out = tmp_path / "COMPARE.md"
    assert main(["compare", str(a), str(b), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert lines[2] in printed and lines[2] in out.read_text()


def test_a_folder_without_a_summary_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "half").mkdir()
    with pytest.raises(ValueError, match="no summary.json"):
        run_rows([tmp_path / "half"])
    assert main(["compare", str(tmp_path / "half"), "--out", str(tmp_path / "c.md")]) == 2
    assert "not a finished run folder" in capsys.readouterr().err


def test_a_claim_without_its_numbers_is_a_clear_error(tmp_path, capsys):
    """A summary whose judged claim lacks its diff (or whose interval is not two numbers) is named, file and claim,
    with no traceback and no table written."""
    broken = claim(0.12, 0.05, 0.19)
    del broken["diff"]
    run = fake_run(tmp_path, "02_socialrl", "20261201-000000__cpu", {"goal.a_minus_b": broken})
    with pytest.raises(ValueError, match="claim 'goal.a_minus_b' has a verdict but not its numbers"):
        run_rows([run])
    out = tmp_path / "c.md"
    assert main(["compare", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "summary.json" in err and "Traceback" not in err and not out.exists()
    odd = fake_run(tmp_path, "02_socialrl", "20261202-000000__cpu", {"goal.a_minus_b": {**claim(0.1, 0, 0.2),
                                                                                       "ci": [0.0]}})
    with pytest.raises(ValueError, match="not its numbers"):
        run_rows([odd])


def test_a_paper_files_cited_run_compares_with_a_new_one(tmp_path):
    """papers/claims/<stem>.json (the run a paper cites, its folder perhaps gone) beside a new run folder."""
    excerpt = tmp_path / "02_socialrl.json"
    excerpt.write_text(json.dumps({"run": "20261130-000000__cpu", "source": "recorded",
                                   "claims": {"goal.a_minus_b": claim(0.2, 0.1, 0.3)}, "manipulation": {}}))
    new = fake_run(tmp_path, "02_socialrl", "20261202-000000__cpu", {"goal.a_minus_b": claim(0.01, -0.01, 0.03)})
    rows = run_rows([excerpt, new])
    assert rows[0]["notebook"] == rows[1]["notebook"] == "02_socialrl" and rows[0]["commit"] == "?"
    table = compare_table(rows)
    assert "(cited by papers/02_socialrl.md)" in table and "**holds**" in table and "**refuted**" in table
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a claims excerpt"):
        run_rows([tmp_path / "other.json"])
