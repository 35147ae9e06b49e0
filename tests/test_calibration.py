"""Simulator calibration: behaviour statistics by hand, the distance, the human-turn NLL, and that SFT and DPO
calibration move the simulator toward the 'human' data (on the toy model, seconds)."""
import math

import pytest

from conftest import make_toy_corpus, play_texts
from dialogrl.agents import LMAgent
from dialogrl.calibration import (
    behaviour_distance,
    calibrate_dpo,
    calibrate_sft,
    preference_pairs,
    role_conversations,
    turn_nll,
)
from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import BEHAVIOUR_SCALES, DondScenario, behaviour_stats
from dialogrl.models import load_model

SC = DondScenario(counts=(1, 2, 3), values=((4, 0, 2), (2, 4, 0)))  # A: book 4, ball 2; B: book 2, hat 4


def test_behaviour_stats_by_hand():
    task = DealOrNoDeal()
    g1 = play_texts(task, SC, ["[propose book=1 hat=0 ball=3]",   # A opens at 4 + 6 = 10
                               "no [propose book=1 hat=2 ball=0]",  # B opens at 2 + 8 = 10 (answers A: no accept)
                               "[propose book=1 hat=0 ball=2]",     # A concedes 10 -> 8
                               "ok [accept]"])                      # B accepts A's standing proposal
    g2 = play_texts(task, SC, ["hello there", "[accept]",            # B: accept with nothing standing (invalid)
                               "[no deal]"])
    a, b = behaviour_stats(task, [g1, g2], "A"), behaviour_stats(task, [g1, g2], "B")
    assert a["opening_demand"] == 10 and a["concession"] == 2
    assert a["acceptance_rate"] == 0.0  # A answered B's proposal once, with a counter-proposal
    assert b["acceptance_rate"] == 0.5 and b["opening_demand"] == 10 and math.isnan(b["concession"])
    assert a["turns"] == b["turns"] == 3.5 and a["agreement"] == b["agreement"] == 0.5
    assert a["words_per_turn"] == 3.0 and b["words_per_turn"] == pytest.approx(8 / 3)  # markers count as words
    d = behaviour_distance(a, b, BEHAVIOUR_SCALES)
    assert "concession" not in d  # NaN on one side: left out
    assert d["acceptance_rate"] == 0.5 and d["opening_demand"] == d["turns"] == d["agreement"] == 0.0
    assert d["words_per_turn"] == pytest.approx(1 / 30) and d["total"] == pytest.approx((0.5 + 1 / 30) / 5)


def test_role_conversations_are_the_roles_views():
    task = DealOrNoDeal()
    g = play_texts(task, SC, ["hi [propose book=1 hat=0 ball=3]", "ok [accept]"])
    conv = role_conversations(task, [g, task.reset(SC)], "B")
    assert len(conv) == 1 and conv[0][-1] == {"role": "assistant", "content": "ok [accept]"}
    assert "book" in conv[0][0]["content"] and conv[0][0]["role"] == "system"


def shifted(n, seed):
    """A 'human' population that answers the toy model's question in another style."""
    return make_toy_corpus(n, seed, answer="i see {k}, all {colour}.")


def test_sft_calibration_lowers_the_human_turn_nll(toy_model_dir, tmp_path):
    train, held_out = shifted(300, 0), shifted(60, 1)
    model, tok = load_model(str(toy_model_dir), device="cpu")
    before = turn_nll(model, tok, held_out)
    assert math.isfinite(before) and before > 0
    sim = calibrate_sft(toy_model_dir, train, tmp_path / "sim", epochs=2, lr=3e-3, seed=0)
    model2, tok2 = load_model(str(sim), device="cpu")
    after = turn_nll(model2, tok2, held_out)
    assert after < 0.5 * before, (before, after)
    assert (sim / "calibration.json").exists()


def test_dpo_prefers_the_human_turn(toy_model_dir, tmp_path):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    simulator = LMAgent(model, tok, max_new_tokens=12)
    pairs = preference_pairs(shifted(64, 2), simulator)
    assert pairs and all(p.prompt[-1]["role"] == "user" and p.chosen.startswith("i see") for p in pairs)
    held_out = shifted(40, 3)
    before = turn_nll(model, tok, held_out)
    out = calibrate_dpo(toy_model_dir, pairs, tmp_path / "dpo", beta=0.1, lr=2e-3, epochs=3, batch_size=16)
    model2, tok2 = load_model(str(out), device="cpu")
    assert turn_nll(model2, tok2, held_out) < before  # the human style became more likely
