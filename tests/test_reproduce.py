"""`python -m dialogrl reproduce` on a fixture notebook of the paper notebooks' shape."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dialogrl.reproduce import (
    FIGURES_END,
    FIGURES_START,
    NotebookRun,
    find_notebooks,
    front_matter,
    left_by,
    paper_numbers,
    profile_parameters,
    refresh_figures,
    reproduce,
    unfinished_run,
)
from dialogrl.run import read_metrics

FIX = Path(__file__).parent / "fixtures"
KW = dict(notebooks_dir=FIX / "notebooks", params_dir=FIX / "params", papers_dir=FIX / "papers", progress=False)


def test_no_notebooks_says_so_and_exits_0(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dialogrl", "reproduce", "--notebooks", str(tmp_path),
                          "--results", str(tmp_path / "results")], capture_output=True, text=True)
    assert out.returncode == 0 and "No notebooks" in out.stdout


def test_reproduce_runs_the_notebook_and_writes_the_report(tmp_path):
    assert reproduce(profile="smoke", results_root=tmp_path, **KW) == 0
    (run,) = (tmp_path / "00_example").iterdir()
    assert run.name.endswith("__smoke")
    for name in ("00_example.ipynb", "config.json", "env.json", "metrics.jsonl", "summary.json", "figures/means.png"):
        assert (run / name).exists(), name
    assert json.loads((run / "config.json").read_text())["n_samples"] == 10  # the smoke profile was applied
    report = (tmp_path / "REPORT.md").read_text()
    assert "| 00_example | ok |" in report and "| `mean` | 0 |" in report

    # a second run never overwrites the first
    assert reproduce(profile="smoke", results_root=tmp_path, only=["00_example"], **KW) == 0
    assert len(list((tmp_path / "00_example").iterdir())) == 2


def test_resume_finishes_the_interrupted_run_as_an_uninterrupted_one(tmp_path, monkeypatch):
    """A run stopped at its second seed's run keeps the first; `reproduce --resume` finishes that folder, running
    only the second, to the summary and metrics of an uninterrupted run."""
    monkeypatch.setenv("EXAMPLE_STOP_AT", "1")   # the fixture's second seed stops the notebook, as a kill would
    assert reproduce(profile="smoke", results_root=tmp_path / "a", **KW) == 1
    (run,) = (tmp_path / "a" / "00_example").iterdir()
    assert not (run / "summary.json").exists() and len(list((run / "jobs").glob("job-*.pkl"))) == 1
    monkeypatch.delenv("EXAMPLE_STOP_AT")
    assert reproduce(profile="smoke", results_root=tmp_path / "a", resume=True, **KW) == 0
    assert [run] == list((tmp_path / "a" / "00_example").iterdir()) and not (run / "jobs").exists()
    assert reproduce(profile="smoke", results_root=tmp_path / "b", **KW) == 0
    (fresh,) = (tmp_path / "b" / "00_example").iterdir()
    assert (run / "summary.json").read_text() == (fresh / "summary.json").read_text()
    rows = [sorted(json.dumps({k: v for k, v in r.items() if k != "time"}) for r in read_metrics(folder))
            for folder in (run, fresh)]
    assert rows[0] == rows[1] and len(rows[0]) == 2
    assert "1 finished training run taken from jobs/" in (run / "00_example.ipynb").read_text()
    assert unfinished_run("00_example", tmp_path / "a", "smoke") is None   # nothing left to resume: a new run


def test_failing_notebook_is_reported_and_exit_code_is_nonzero(tmp_path):
    params = tmp_path / "params" / "00_example"
    params.mkdir(parents=True)
    (params / "smoke.yaml").write_text("n_samples: -5\n")  # the notebook's parameter check rejects it
    code = reproduce(profile="smoke", results_root=tmp_path / "results",
                     **{**KW, "params_dir": tmp_path / "params"})
    assert code == 1
    report = (tmp_path / "results" / "REPORT.md").read_text()
    assert "FAILED" in report and "n_samples" in report
    (run,) = (tmp_path / "results" / "00_example").iterdir()
    assert f"its notebook, as far as it ran: `{run / '00_example.ipynb'}`" in report
    assert "design checks" not in report   # this notebook refused no design: it has none


def test_a_refused_design_points_at_its_checks(tmp_path):
    (tmp_path / "03_x.ipynb").write_text("{}")
    (tmp_path / "design_checks.json").write_text("{}")
    assert left_by(NotebookRun("03_x", tmp_path, False, 1.0, "RuntimeError: refused")) == [
        ("its notebook, as far as it ran", tmp_path / "03_x.ipynb"),
        ("the design checks it measured", tmp_path / "design_checks.json")]
    assert left_by(NotebookRun("03_x", None, False, 1.0, "no folder")) == []


def test_profile_keys_must_be_notebook_parameters(tmp_path):
    nb = FIX / "notebooks" / "00_example.ipynb"
    (tmp_path / "00_example").mkdir()
    (tmp_path / "00_example" / "smoke.yaml").write_text("n_sampels: 10\n")
    with pytest.raises(ValueError, match="n_sampels.*not parameters"):
        profile_parameters(nb, "smoke", tmp_path)
    with pytest.raises(ValueError, match="unknown profile"):
        profile_parameters(nb, "paper-scale", tmp_path)
    assert profile_parameters(nb, "cpu", tmp_path) == {}


def test_only_unknown_stem_names_the_choices():
    with pytest.raises(ValueError, match="00_example"):
        find_notebooks(FIX / "notebooks", only=["99_nope"])


def test_paper_numbers_from_front_matter():
    assert paper_numbers("00_example", FIX / "papers") == {"mean": 0.0}
    assert paper_numbers("missing", FIX / "papers") == {}


def test_build_tiny_cli_lists_the_embedded_models():
    out = subprocess.run([sys.executable, "-m", "dialogrl", "build-tiny", "--list"], capture_output=True, text=True)
    assert out.returncode == 0 and "tiny-dond:" in out.stdout and "tiny-dond-human:" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "dialogrl", "build-tiny", "tiny-nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown embedded model 'tiny-nope'" in bad.stderr


def test_a_cpu_run_refreshes_the_papers_key_figures(tmp_path):
    papers = tmp_path / "papers"
    papers.mkdir()
    (papers / "00_example.md").write_text(
        "---\npaper_numbers:\n  mean: 0.0\nfigures: [means.png]\n---\n# Example\n\n| a | b |\n|---|---|\n\n"
        "![means](figures/00_example/means.png)\n\n" + FIGURES_START + "\nold line\n" + FIGURES_END + "\n\nrest\n")
    kw = {**KW, "papers_dir": papers}
    assert reproduce(profile="smoke", results_root=tmp_path / "results", **kw) == 0
    assert not (papers / "figures").exists()  # a smoke run leaves the paper alone
    assert reproduce(profile="cpu", results_root=tmp_path / "results", **kw) == 0
    (run,) = (tmp_path / "results" / "00_example").glob("*__cpu")
    copied = papers / "figures" / "00_example" / "means.png"
    assert copied.read_bytes() == (run / "figures" / "means.png").read_bytes()
    text = (papers / "00_example.md").read_text()
    commit = json.loads((run / "env.json").read_text()).get("git_commit", "")[:7] or "not recorded"  # a clone or not
    assert "old line" not in text and f"run `{run.name}`" in text and f"commit `{commit}" in text
    assert text.endswith(FIGURES_END + "\n\nrest\n")
    smoke = next((tmp_path / "results" / "00_example").glob("*__smoke"))
    with pytest.raises(ValueError, match="cpu profile's figures only"):
        refresh_figures("00_example", smoke, papers)
    (papers / "00_example.md").write_text("---\nfigures: [other.png]\n---\n")
    with pytest.raises(ValueError, match="other.png"):
        refresh_figures("00_example", run, papers)
    (papers / "00_example.md").write_text("---\nfigures: [means.png]\n---\nno markers\n")
    with pytest.raises(ValueError, match="no <!-- figures"):
        refresh_figures("00_example", run, papers)
    # a bad run folder leaves the paper's figures and text byte-identical
    figure, paper = copied.read_bytes(), (papers / "00_example.md").read_bytes()
    (run / "figures" / "means.png").write_bytes(b"another figure")
    (run / "env.json").rename(run / "env.moved")
    with pytest.raises(ValueError, match="no env.json"):
        refresh_figures("00_example", run, papers)
    (run / "env.moved").rename(run / "env.json")
    (run / "config.json").write_text("")
    with pytest.raises(ValueError, match="config.json: empty"):
        refresh_figures("00_example", run, papers)
    assert copied.read_bytes() == figure and (papers / "00_example.md").read_bytes() == paper


def test_each_paper_shows_its_key_figures():
    repo = Path(__file__).resolve().parents[1]
    for nb in find_notebooks(repo / "notebooks"):
        names = front_matter(nb.stem, repo / "papers").get("figures")
        assert names, f"papers/{nb.stem}.md lists no key figures (figures: in its front matter)"
        text = (repo / "papers" / f"{nb.stem}.md").read_text()
        block = text[text.index(FIGURES_START):text.index(FIGURES_END)]
        assert "Figures: run `" in block and "commit `" in block, f"{nb.stem}: no provenance line"
        for name in names:
            assert (repo / "papers" / "figures" / nb.stem / name).is_file(), f"{nb.stem}: {name} not copied"
            assert f"](figures/{nb.stem}/{name})" in text, f"papers/{nb.stem}.md does not show {name}"


def test_a_confirm_run_is_written_as_confirmatory_only_when_registered(tmp_path, capsys):
    """`reproduce --profile confirm` runs the profile's file and, at the end, writes the paper's confirmatory block only
    for the registered run: the fixture's paper registers nothing, so the run finishes and says why nothing was
    written, its preregistration record (no registered hash) in summary.json."""
    params = tmp_path / "params"
    shutil.copytree(FIX / "params", params)
    (params / "00_example" / "confirm.yaml").write_text("profile: confirm\nn_samples: 10\nn_seeds: 2\n")
    assert reproduce(profile="confirm", results_root=tmp_path / "results", notebooks_dir=FIX / "notebooks",
                     params_dir=params, papers_dir=FIX / "papers", progress=False) == 0
    (run,) = (tmp_path / "results" / "00_example").iterdir()
    assert run.name.endswith("__confirm")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["preregistration"]["registered"] is None and len(summary["preregistration"]["params_hash"]) == 64
    assert "00_example: no confirmatory claims written:" in capsys.readouterr().out
