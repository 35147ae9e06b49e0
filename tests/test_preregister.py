"""Preregistered confirmatory runs (papers/PROTOCOL.md): the hash of a run's resolved parameters, what a paper file
registers at HEAD when the run starts, and the claims command writing a run as confirmatory only when they match."""
from __future__ import annotations

import json
import subprocess

import pytest

from dialogrl.claims import CLAIMS_END, CLAIMS_START, CONFIRM_END, CONFIRM_START, confirmatory, refresh_claims
from dialogrl.run import (
    PREREGISTERED,
    PREREGISTRATION,
    RUN_KEYS,
    finish_run,
    params_hash,
    preregistration,
    registered_hashes,
    repo_root,
)
from test_claims import _summary

PARAMS = {"profile": "confirm", "seed": 0, "n_seeds": 8, "steps": 40, "lr": 3e-3, "panel": ["a", "b"],
          "run_dir": None, "resume": None, "processes": 2, "report_to": "none"}


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": "/usr/bin:/bin"})


def test_the_hash_reads_the_design_not_where_or_how_a_run_goes():
    h = params_hash(PARAMS)
    assert len(h) == 64 and h == params_hash(dict(reversed(list(PARAMS.items()))))     # order does not matter
    assert params_hash({**PARAMS, "run_dir": "/else", "processes": 1, "report_to": "wandb"}) == h
    assert set(RUN_KEYS) >= {"run_dir", "resume", "processes", "report_to"}
    for change in ({"n_seeds": 9}, {"lr": 3.0001e-3}, {"panel": ["b", "a"]}, {"profile": "cpu"}, {"new": 1}):
        assert params_hash({**PARAMS, **change}) != h, change
    # a YAML `0` for a cell's `0.0` is the same run (check_params casts it): the same hash
    assert params_hash({**PARAMS, "lr": 0, "n_seeds": 8.0}) == params_hash({**PARAMS, "lr": 0.0})
    assert params_hash({**PARAMS, "flag": True}) != params_hash({**PARAMS, "flag": 1})


def test_the_preregister_command_prints_the_marker_of_a_profiles_parameters(tmp_path, capsys):
    """`python -m dialogrl preregister <stem>` hashes the parameters cell's values under the profile's file; the
    smoke runs of tests/test_notebooks.py check that a notebook records this same hash."""
    from dialogrl.__main__ import main
    from dialogrl.params import cell_literals
    from dialogrl.reproduce import design_hash

    nb = repo_root() / "notebooks" / "04_ibrl_bilateral.ipynb"
    params = tmp_path / "params" / "04_ibrl_bilateral"
    params.mkdir(parents=True)
    (params / "confirm.yaml").write_text("profile: confirm\nseed: 7\nn_seeds: 3\n")
    expected = params_hash({**cell_literals(str(nb)), "profile": "confirm", "seed": 7, "n_seeds": 3})
    assert design_hash(nb, "confirm", tmp_path / "params") == expected
    assert main(["preregister", "04_ibrl_bilateral", "--notebooks", str(nb.parent), "--params",
                 str(tmp_path / "params")]) == 0
    assert capsys.readouterr().out.strip() == PREREGISTERED.format(expected)


def test_a_paper_registers_only_what_is_committed(tmp_path):
    root = tmp_path / "repo"
    (root / "papers").mkdir(parents=True)
    _git(root, "init", "-q")
    paper = root / "papers" / "x.md"
    paper.write_text("# x\n\n## Confirmatory design\n\nnothing yet\n")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "paper")
    assert preregistration("x", PARAMS, root) == {"params_hash": params_hash(PARAMS), "registered": None,
                                                  "commit": None, "paper": "papers/x.md"}
    marker = PREREGISTERED.format(params_hash(PARAMS))
    paper.write_text(paper.read_text() + f"\n{marker}\n")
    assert preregistration("x", PARAMS, root)["registered"] is None          # in the working tree only
    _git(root, "commit", "-qam", "preregister x")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    paper.write_text(paper.read_text() + "\nlater prose\n")                  # later commits keep the marker's commit
    _git(root, "commit", "-qam", "prose")
    pre = preregistration("x", PARAMS, root)
    assert pre["registered"] == params_hash(PARAMS) and pre["commit"] == head
    assert confirmatory({"preregistration": pre})[0]
    paper.write_text(paper.read_text() + f"\n{PREREGISTERED.format('0' * 64)}\n")
    _git(root, "commit", "-qam", "a second marker")
    with pytest.raises(ValueError, match="2 preregistration markers"):
        preregistration("x", PARAMS, root)


def test_only_the_preregistered_run_is_written_as_confirmatory(tmp_path):
    """A confirm run whose parameters' hash differs from the registered one, one without a committed registration,
    and one that recorded none are each refused with the reason, and nothing is written; the matching run is written
    to the confirmatory block (the exploratory block untouched)."""
    papers = tmp_path / "papers"
    papers.mkdir()
    text = f"# x\n\n{CONFIRM_START}\n{CONFIRM_END}\n\n{CLAIMS_START}\nthe cpu run\n{CLAIMS_END}\n"
    (papers / "x.md").write_text(text)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(PARAMS))
    h = params_hash(PARAMS)
    registered = {"params_hash": h, "registered": h, "commit": "a" * 40, "paper": "papers/x.md"}
    cases = [({**registered, "params_hash": params_hash({**PARAMS, "n_seeds": 9})}, "not the preregistered design"),
             ({**registered, "registered": None, "commit": None}, "registered no parameters"),
             (None, "recorded no preregistration")]
    for pre, needle in cases:
        summary = {**_summary(), **({"preregistration": pre} if pre else {})}
        (run / "summary.json").write_text(json.dumps(summary))
        assert not confirmatory(summary)[0]
        with pytest.raises(ValueError, match=f"not written as confirmatory: .*{needle}"):
            refresh_claims("x", run, papers)
        assert (papers / "x.md").read_text() == text and not (papers / "claims").exists()
    (run / "summary.json").write_text(json.dumps({**_summary(), "preregistration": registered}))
    refresh_claims("x", run, papers)
    written = (papers / "x.md").read_text()
    block = written[written.index(CONFIRM_START):written.index(CONFIRM_END)]
    assert "registered in commit aaaaaaa" in block and "--profile confirm" in block and "| a | reward" in block
    assert f"{CLAIMS_START}\nthe cpu run\n{CLAIMS_END}" in written
    assert (papers / "claims" / "confirm" / "x.json").is_file()
    refresh_claims("x", None, papers, confirm=True)        # again from the stored excerpt: the same block
    assert (papers / "x.md").read_text() == written


def test_a_run_records_its_registration_and_its_summary_carries_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    pre = {"params_hash": params_hash(PARAMS), "registered": None, "commit": None, "paper": "papers/x.md"}
    (run / PREREGISTRATION).write_text(json.dumps(pre))
    finish_run(run, {"claims": {}}, 0.0)
    assert json.loads((run / "summary.json").read_text())["preregistration"] == pre


def test_a_registered_design_that_has_not_run_is_what_its_notebook_would_run():
    """Until its confirmatory run is in (papers/claims/confirm/<stem>.json), a paper's registered hash must be what
    `python -m dialogrl preregister <stem>` computes now: a change to the notebook's parameters cell or its
    confirm.yaml after the registration would make the run not confirmatory, so it fails here first."""
    from dialogrl.claims import excerpt_path
    from dialogrl.reproduce import design_hash

    root = repo_root()
    for paper in sorted((root / "papers").glob("*.md")):
        found = registered_hashes(paper.read_text())
        if not found or excerpt_path(paper.stem, root / "papers", confirm=True).exists():
            continue
        assert (root / "params" / paper.stem / "confirm.yaml").exists(), f"{paper}: registered, no confirm.yaml"
        assert found == [design_hash(root / "notebooks" / f"{paper.stem}.ipynb", "confirm", root / "params")], (
            f"{paper} registers {found}; its notebook and confirm.yaml now give another hash: register anew "
            "(python -m dialogrl preregister) or restore the parameters")
