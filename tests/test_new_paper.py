"""Adding a paper is adding its module, notebook, profiles and papers file: a toy paper module written into a
temporary folder on `dialogrl.rl.methods`' package path, and nothing else changed, is registered (`papers()`), its
methods build, `estimate` sizes its gpu profile from its workload, and `bench/gpu_check.py` runs its notebook with its
stand-ins; the files it must bring beside its module are PAPER_FILES, and the repository's four papers have theirs."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from dialogrl import estimate
from dialogrl.rl import methods

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

TOY = '''
"""Paper 5, a toy: one role trained by GRPO against a fixed counterpart."""
from dialogrl.rl.methods import PACKAGED, MethodSpec, Paper
from dialogrl.rl.trainer import RoleSpec

METHODS = ("base", "trained")


def method_spec(method, counterpart, role="asker", counterpart_role="teller"):
    if method == "base":
        return MethodSpec(method, eval_adapters={role: None}, adapters=("policy",))
    roles = {role: RoleSpec(adapter="policy", trainable=True), counterpart_role: RoleSpec(agent=counterpart)}
    return MethodSpec(method, roles, eval_adapters={role: "policy"}, adapters=("policy",))


def workload(p, base):
    return [{**base, "what": "the asker against its fixed teller", "model": p["policy_model"], "others": [],
             "runs": p["n_seeds"], "turns": p["max_turns"], "trained_turns": p["max_turns"] // 2,
             "eval_plays": 1.0}]


PAPER = Paper("05_toy", "A toy paper", method_spec, workload, stand_ins={"policy_model": "dond"},
              packaged_stand_ins={"policy_model": PACKAGED})
'''
TOY_PARAMS = {"n_seeds": 2, "steps": 4, "scenarios_per_step": 2, "group_size": 4, "max_new_tokens": 32,
              "eval_scenarios": 10, "eval_every": 0, "max_turns": 6, "policy_model": "Qwen/Qwen2.5-0.5B-Instruct",
              "bf16": True, "processes": 2}


@pytest.fixture
def toy_paper(tmp_path, monkeypatch):
    folder = tmp_path / "more_papers"
    folder.mkdir()
    (folder / "toy05.py").write_text(TOY.lstrip())
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(folder)])
    try:
        yield methods.paper("05_toy")
    finally:
        sys.modules.pop("dialogrl.rl.methods.toy05", None)


def test_a_new_module_is_a_registered_paper_that_the_tools_size_and_run(toy_paper):
    assert list(methods.papers())[-1] == "05_toy" and "04_ibrl_bilateral" in methods.papers()
    spec = toy_paper.method_spec("trained", counterpart=object())
    assert spec.adapters == ("policy",) and spec.eval_adapters == {"asker": "policy"} and "teller" in spec.roles

    (row,) = estimate.estimate(toy_paper, TOY_PARAMS)   # its workload, sized like the four papers'
    assert row["what"] == "the asker against its fixed teller" and row["runs"] == 2 and row["at_once"] == 2
    assert row["peak"] > estimate.weight_bytes(estimate.hub_config(TOY_PARAMS["policy_model"]), "bf16")

    assert "05_toy" in gpu_check.notebooks()
    assert gpu_check.stand_ins("05_toy") == {"policy_model": "dond"}
    assert gpu_check.stand_ins("05_toy", "packaged") == {"policy_model": gpu_check.PACKAGED}


def test_the_files_a_new_paper_brings_beside_its_module(toy_paper, tmp_path):
    root = tmp_path / "repo"
    assert methods.missing_files(toy_paper, root) == ["notebooks/05_toy.ipynb", "params/05_toy/smoke.yaml",
                                                      "params/05_toy/gpu.yaml", "params/05_toy/colab.yaml",
                                                      "papers/05_toy.md"]
    (root / "notebooks").mkdir(parents=True)
    (root / "papers").mkdir()
    shutil.copy(FIXTURES / "notebooks" / "00_example.ipynb", root / "notebooks" / "05_toy.ipynb")
    shutil.copytree(FIXTURES / "params" / "00_example", root / "params" / "05_toy")
    shutil.copy(FIXTURES / "papers" / "00_example.md", root / "papers" / "05_toy.md")
    assert methods.missing_files(toy_paper, root) == []


def test_every_notebook_is_a_registered_paper_with_its_files():
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    assert list(methods.papers()) == notebooks
    for paper in methods.papers().values():
        assert methods.missing_files(paper, REPO) == [], paper.stem
        opening = (REPO / "papers" / f"{paper.stem}.md").read_text().splitlines()[:40]
        assert any(line.startswith("## What the runs decided") for line in opening), \
            f"papers/{paper.stem}.md: its result ('## What the runs decided') within its first 40 lines"


def test_an_unknown_paper_and_one_registered_twice_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no paper registers the notebook '05_none'; registered: 01_calibrated"):
        methods.paper("05_none")
    folder = tmp_path / "twice"
    folder.mkdir()
    (folder / "ibrl_again.py").write_text("from dialogrl.rl.methods.ibrl import PAPER\n")
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(folder)])
    try:
        with pytest.raises(ValueError, match="two modules register the paper '04_ibrl_bilateral': "
                                             "dialogrl.rl.methods.ibrl and dialogrl.rl.methods.ibrl_again"):
            methods.papers()
    finally:
        sys.modules.pop("dialogrl.rl.methods.ibrl_again", None)
