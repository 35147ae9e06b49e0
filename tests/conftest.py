"""Shared fixtures: a toy chat corpus and a tiny model built from it in seconds (the named models take minutes)."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from dialogrl.tiny import TinyConfig, build_tiny

os.environ["TQDM_DISABLE"] = "1"  # no progress bars in tests (papermill's kernels inherit it); see run.progress
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one pytest-xdist worker per core: each computes with one thread (its notebook kernels and
    # worker processes inherit it), so that two workers do not fight over the cores; models the workers build into
    # the cache are built with one thread (a build, like any, may differ in its last bits from one with two threads)
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
if SHARED_DATA.is_dir():
    # the data sets the notebooks name (dialogrl.data) are read from the copies beside the repository, never fetched
    os.environ.setdefault("DIALOGRL_DATA", str(SHARED_DATA))

# Corpus sizes of the embedded models' test builds: the warm starts of the learning tests (and of the tests that play
# tiny-dond, and of the demo notebook: tiny-social). Half of the full corpora or less (minutes to build on one
# thread, not tens of minutes), each a size at which the learning test's gain, measured on builds 0, 1, 2, holds
# (tests/test_learning.py): tiny-dond at 2000 gained too little on build 2 and at 3000 (PPO) on build 0, at 4500
# (last loss 0.48-0.52, full 0.45) enough; tiny-persuasion at 1000 (last loss 0.51-0.55; 2000: 0.35) gains about as
# much as at 2000 on its weakest build and builds in half the time. Against the scenarios' own scripted persuadees
# on 100 scenarios (seed 10000), its build 0 persuades 0.66 at 1000 and 0.65 at 2000 (2026-12-06).
# The smoke profiles' warm starts (30 or 50 dialogues; 100 and 200 alike) write no valid offer: RL from them gains
# nothing.
TEST_DIALOGUES = {"tiny-dond": 4500, "tiny-persuasion": 1000, "tiny-social": 3000}


def small_build(name: str, build_seed: int = 0) -> Path:
    """The folder of `name`'s test-sized build (TEST_DIALOGUES; built into the model cache on first use)."""
    from dialogrl.tiny import build_tiny_model

    return build_tiny_model(name, build_seed=build_seed, n_dialogues=TEST_DIALOGUES[name])


# Small enough to build in a few seconds on 2 cores, big enough to learn the toy task's format.
TOY_CONFIG = TinyConfig(vocab_size=320, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                        intermediate_size=128, epochs=3, batch_size=16, lr=3e-3, max_length=128)


def make_toy_corpus(n: int = 300, seed: int = 0, answer: str = "{k} {colour} balls.") -> list[list[dict]]:
    """'How many <colour> balls? There are <n>.' -> '<n> <colour> balls.' A format a 0.1M model learns in seconds.
    `answer` (a template of k and colour) gives the same questions answered in another style."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(n):
        colour, k = rng.choice(["red", "green", "blue", "yellow"]), rng.randint(1, 9)
        corpus.append([{"role": "system", "content": "You count balls."},
                       {"role": "user", "content": f"how many {colour} balls? there are {k}."},
                       {"role": "assistant", "content": answer.format(k=k, colour=colour)}])
    return corpus


def play_texts(task, scenario, texts):
    """A game of `task` on `scenario` in which the roles say `texts`, in turn."""
    state = task.reset(scenario)
    for t in texts:
        task.step(state, t)
    return state


@pytest.fixture(autouse=True)
def _model_cache_kept():
    """A test that points DIALOGRL_CACHE elsewhere (colab.keep_on_drive does) puts it back: the tests after it on the
    same worker would otherwise build every model anew into its temporary folder."""
    before = os.environ.get("DIALOGRL_CACHE")
    yield
    assert os.environ.get("DIALOGRL_CACHE") == before, f"DIALOGRL_CACHE left at {os.environ.get('DIALOGRL_CACHE')!r}"


@pytest.fixture(scope="session")
def toy_corpus():
    return make_toy_corpus()


@pytest.fixture(scope="session")
def toy_model_dir(tmp_path_factory, toy_corpus):
    return build_tiny(toy_corpus, TOY_CONFIG, out_dir=tmp_path_factory.mktemp("toy") / "toy-model", name="toy")


@pytest.fixture(scope="session")
def dond_toy_dir():
    """A Deal or No Deal model trained for seconds on 300 dialogues: it speaks the format badly enough to exercise the
    malformed-input paths and well enough for games to end in different ways. Built once into the model cache and
    shared by the test modules (and the workers) that play or train it."""
    from dialogrl.envs.dealnodeal.corpus import dond_corpus

    cfg = TinyConfig(**{**TOY_CONFIG.to_dict(), "max_length": 512, "epochs": 1.0})
    return build_tiny(dond_corpus(300, seed=0, views="one"), cfg, name="dond-toy")


@pytest.fixture(scope="session")
def games(tmp_path_factory):
    """Scripted Deal or No Deal cross-play (greedy and conceder against fair and stubborn, 100 scenarios, both roles)
    and its transcripts file: the games the evaluation, statistics and plot tests read (none of them changes it)."""
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.evaluate import cross_play

    task = DealOrNoDeal()
    path = tmp_path_factory.mktemp("eval") / "transcripts.jsonl"
    policies = {"greedy": ScriptedAgent("greedy", 0), "conceder": ScriptedAgent("conceder", 0)}
    panel = {"fair": ScriptedAgent("fair", 1), "stubborn": ScriptedAgent("stubborn", 1)}
    df = cross_play(task, policies, panel, task.sample_scenarios(100, seed=5), transcripts=path, n_transcripts=2)
    return df, path


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real dialogue data not found at {SHARED_DATA} (the shared/ folder beside the repository)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct (the packaged pretrained model; `make install` installs it), loaded once per session:
    converted from its GGUF file into the model cache on first use (about 30 s), then read from there."""
    from dialogrl.models import load_model

    return load_model("smollm2-135m-instruct", device="cpu")


# The heaviest tests on an empty model cache, heaviest first, in groups that build the same models (seconds measured
# 2026-12-06 on 2 cores, their model builds included). `make test` (pytest-xdist, `--dist load`) hands the workers
# these first, in this order, and the short tests after them (`pytest_xdist_make_scheduler` below); a group's tests
# go to one worker, one after the other, so that the second finds the models the first built, where on the other
# worker it would wait on the build's lock with its core idle (04's kill-and-resume test waited 85 s beside 04's
# smoke run, the demo 45 s beside the social learning test). (pytest-xdist's own `--dist loadgroup` names a group
# by rewriting a test's node id, which pytest 9.2 no longer reads: its groups are silently ignored.)
HEAVIEST_FIRST = [
    ["test_learning.py::test_rl_against_one_persuadee_raises_its_donation_rate"],            # 320 s: tiny-persuasion
    ["test_learning.py::test_rl_against_a_persona_raises_the_score[grpo]",                   # 390 s: tiny-dond's test
     "test_learning.py::test_rl_against_a_persona_raises_the_score[ppo]"],                   # build, then reused
    ["test_notebooks.py::test_notebook_smoke_run_writes_a_summary[04_ibrl_bilateral]",       # 380 s: 04's smoke builds
     "test_notebooks.py::test_a_notebook_killed_mid_way_resumes_to_the_uninterrupted_results"],
    ["test_notebooks.py::test_notebook_smoke_run_writes_a_summary[03_scope_simulator_collapse]"],   # 200 s
    ["test_learning.py::test_ppo_with_process_rewards_raises_goal_achievement_against_one_partner",  # 210 s: tiny-
     "test_demo.py::test_demo_runs_and_prints_where_its_outputs_are"],                               # social's
    ["test_notebooks.py::test_notebook_smoke_run_writes_a_summary[02_socialrl]"],                   # 145 s
    ["test_notebooks.py::test_notebook_smoke_run_writes_a_summary[01_calibrated_interactive_rl]",   # 140 s: 01's
     "test_notebooks.py::test_notebook_parallel_runs_give_the_serial_results[01_calibrated_interactive_rl]"],
]


def heavy_group(nodeid: str) -> int | None:
    """The place in HEAVIEST_FIRST of the group that names this test, or None."""
    for k, group in enumerate(HEAVIEST_FIRST):
        if any(nodeid.endswith(name) for name in group):
            return k
    return None


def pytest_collection_modifyitems(config, items):
    def rank(item):
        k = heavy_group(item.nodeid)
        return k if k is not None else len(HEAVIEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)

    items.sort(key=rank)  # stable: the file order within each rank


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist: without it (-p no:xdist), nothing
def pytest_xdist_make_scheduler(config, log):
    """`--dist load` as a scheduler of units in collection order: each HEAVIEST_FIRST group one unit (one worker),
    every other test a unit of its own; a worker gets the next unit when it has two tests or fewer left."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class HeavyGroupsFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            k = heavy_group(nodeid)
            return f"heavy-{k}" if k is not None else nodeid

    config.option.loadscopereorder = False   # the collection's order (LoadScopeScheduling sorts units by size)
    return HeavyGroupsFirst(config, log)
