"""The collapse measures' sampling (dialogrl.collapse): the states they sample at, common random numbers across
batch sizes, Verbalized Sampling's draw and unusable answers, and the per-state claims."""
import numpy as np
import pandas as pd
import pytest

from conftest import play_texts
from dialogrl.agents import LMAgent, VerbalizedSampling
from dialogrl.collapse import before_last_reply, sample_replies, state_claims, vs_pick
from dialogrl.envs.base import GameState
from dialogrl.envs.persuasion import PersuasionForGood
from dialogrl.models import load_model


def test_the_state_before_a_roles_last_reply():
    task = PersuasionForGood(max_exchanges=5)
    scenario = task.sample_scenarios(1, seed=0)[0]
    state = play_texts(task, scenario, ["Hi, may I tell you about a charity?", "Sure.", "It saves children.", "Hm."])
    cut = before_last_reply(state, "persuadee")
    assert [t.text for t in cut.turns] == [t.text for t in state.turns[:3]] and cut.scenario is scenario
    assert [t.text for t in before_last_reply(state, "persuader").turns] == [t.text for t in state.turns[:2]]
    silent = GameState(scenario, state.turns[:1])   # the persuadee never replied: the state after the first turn
    assert [t.text for t in before_last_reply(silent, "persuadee").turns] == [state.turns[0].text]


def test_vs_pick_draws_uniformly_or_by_stated_probability():
    cands = [("a", 0.9), ("b", 0.1), ("c", 0.0)]
    rng = np.random.default_rng(0)
    uniform = [vs_pick(cands, "random", rng) for _ in range(600)]
    assert {uniform.count(x) for x in "abc"} <= set(range(150, 250))
    by_p = [vs_pick(cands, "prob", rng) for _ in range(600)]
    assert "c" not in by_p and 480 < by_p.count("a") < 600


def test_sample_replies_are_common_random_numbers_across_batches(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    lm = LMAgent(model, tok, max_new_tokens=6, temperature=1.0)
    chats = [[{"role": "system", "content": "You count balls."},
              {"role": "user", "content": f"how many {c} balls? there are {k}."}]
             for c, k in (("red", 3), ("blue", 7), ("green", 1))]
    unusable = []
    big = sample_replies(lm, chats, 4, seed=0, key="k", role="assistant", unusable=unusable)
    small = sample_replies(lm, chats, 4, seed=0, key="k", role="assistant", unusable=unusable, batch=1)
    assert big == small and not unusable   # an LMAgent's replies are never counted as VS answers
    assert [len(r) for r in big] == [4, 4, 4]
    assert sample_replies(lm, chats, 4, seed=0, key="other", role="assistant", unusable=[]) != big
    # the toy model writes no VS JSON: every answer is unusable and its raw text is the reply, one count per answer
    vs = VerbalizedSampling(LMAgent(model, tok, max_new_tokens=6, temperature=1.0), k=3)
    texts = sample_replies(vs, chats, 2, seed=0, key="k", role="assistant", unusable=unusable)
    assert unusable == [True] * 6 and all(isinstance(t, str) for r in texts for t in r)


def test_state_claims_compare_two_simulators_state_by_state():
    spread = pd.DataFrame({"simulator": ["a"] * 3 + ["b"] * 3, "state": [0, 1, 2] * 2,
                           "similarity": [0.9, 0.8, 0.7, 0.5, 0.5, 0.6],
                           "act_entropy": [1.0, np.nan, np.nan, 2.0, 2.0, 2.0]})
    claims = state_claims(spread, {"a_minus_b": ("a", "b")}, prefix="collapse.m")
    c = claims["collapse.m.similarity.a_minus_b"]
    assert c["diff"] == pytest.approx(0.8 / 3) and c["games"] == 3 and c["unit"] == "state" and "verdict" in c
    assert "collapse.m.act_entropy.a_minus_b" not in claims   # one state measured on both sides: no claim
    spread.loc[1, "act_entropy"] = 0.5
    d = state_claims(spread, {"a_minus_b": ("a", "b")}, prefix="collapse.m")["collapse.m.act_entropy.a_minus_b"]
    assert d["diff"] == pytest.approx(-(-1.0 - 1.5) / 2)   # sign -1: a lower act entropy is the more collapsed
