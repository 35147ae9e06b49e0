"""The embedded `tiny-dond` model: built from the scripted corpus, it plays Deal or No Deal (offer protocol).

On its test build (conftest.small_build: the recipe on TEST_DIALOGUES["tiny-dond"] of its dialogues, the build the
Deal or No Deal learning tests train on); slow on an empty model cache (about 5 minutes on one core), then cached.
"""
import pytest

from conftest import small_build
from dialogrl.agents import LMAgent
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.models import load_model
from dialogrl.rollout import play
from dialogrl.run import seed_everything
from dialogrl.tiny import build_info

pytestmark = pytest.mark.slow
TASK = DealOrNoDeal()
EVAL = TASK.sample_scenarios(256, seed=10_000)  # scenario seeds apart from the corpus (seed 0)


@pytest.fixture(scope="module")
def tiny_dond():
    return load_model(str(small_build("tiny-dond")), device="cpu")


def test_build_record():
    info = build_info(small_build("tiny-dond"))
    assert 1e6 <= info["n_parameters"] <= 10e6
    assert info["last_loss"] < 0.6 < info["first_loss"]


def test_self_play_reaches_agreement_like_its_teachers(tiny_dond):
    model, tok = tiny_dond
    agent = LMAgent(model, tok)
    seed_everything(0)
    m = TASK.metrics([e.state for e in play(TASK, {"A": agent, "B": agent}, EVAL)])
    assert m["agreement"] >= 0.7  # the bar; the personas agree ~90% among themselves


def test_plays_against_a_persona(tiny_dond):
    model, tok = tiny_dond
    seed_everything(0)
    eps = play(TASK, {"A": LMAgent(model, tok), "B": ScriptedAgent("fair", 0)}, EVAL)
    m = TASK.metrics([e.state for e in eps])
    assert m["agreement"] >= 0.7 and m["score_A"] > 2.0
