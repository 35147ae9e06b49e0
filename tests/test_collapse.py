"""The collapse measures (dialogrl.collapse) by hand and their sampling: the states they sample at, common random
numbers across batch sizes, Verbalized Sampling's draw and unusable answers, and the per-state claims."""
import numpy as np
import pandas as pd
import pytest

from conftest import play_texts
from dialogrl.agents import LMAgent, VerbalizedSampling
from dialogrl.agents.counterpart import LMCounterpart
from dialogrl.collapse import (
    before_last_reply,
    collapse_at_chats,
    collapse_at_states,
    manipulation_checks,
    reply_spread,
    sample_replies,
    spread_record,
    state_claims,
    vs_pick,
)
from dialogrl.envs.persuasion import PersuasionForGood
from dialogrl.game import GameState
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


def test_spread_record_means_each_measure_and_fits_gamma_against_the_reference():
    replies = {"reference": [["a", "b"], ["c", "c"]], "single": [["a", "a"], ["c", "c"]]}
    rows = reply_spread(replies)
    rec = spread_record(replies, rows, ["top1", "distinct_1"], 2, [True, False, False, False])
    assert rec["states"] == 2 and rec["samples"] == 2 and rec["vs_unusable_rate"] == 0.25
    assert rec["top1/reference"] == pytest.approx(0.75) and rec["top1/single"] == 1.0
    assert rec["distinct_1/single"] == pytest.approx(np.mean([0.5, 0.5]))
    assert set(rec) == {"states", "samples", "vs_unusable_rate", "top1/reference", "distinct_1/reference",
                        "top1/single", "distinct_1/single", "gamma/single"}
    assert np.isnan(rec["gamma/single"])   # three replies seen in all: too few to fit


def _toy_simulators(model, tok):
    return {"reference": LMAgent(model, tok, name="reference", max_new_tokens=6),
            "single": LMAgent(model, tok, name="single", max_new_tokens=6, temperature=0.3),
            "vs": VerbalizedSampling(LMAgent(model, tok, max_new_tokens=6), k=3, name="vs")}


def test_collapse_at_states_samples_every_simulator_at_each_cut(toy_model_dir):
    import torch

    model, tok = load_model(str(toy_model_dir), device="cpu")
    task = PersuasionForGood(max_exchanges=2)
    sims, at = _toy_simulators(model, tok), task.sample_scenarios(3, seed=0)
    policy = LMAgent(model, tok, max_new_tokens=6)

    def measure():
        torch.manual_seed(0)   # the replies come from torch's generator
        return collapse_at_states(task, sims, policy, at, "persuader", 2, seed=0, spread=reply_spread,
                                  measures=["top1", "distinct_1"])

    rec, rows = measure()
    assert rec["states"] == 3 and rec["samples"] == 2 and len(rows) == 3 * 3
    assert rec["vs_unusable_rate"] == 1.0   # the toy model writes no VS JSON: each first answer counted
    assert {"gamma/single", "gamma/vs"} <= set(rec) and "gamma/reference" not in rec
    assert measure()[0] == pytest.approx(rec, nan_ok=True)   # seeded: the same record


def test_collapse_at_chats_samples_on_the_talkers_own_chats_from_named_streams(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    task = PersuasionForGood(max_exchanges=2)
    talker = LMCounterpart(LMAgent(model, tok, max_new_tokens=6), name="toy")
    args = (task, talker, _toy_simulators(model, tok), LMAgent(model, tok, max_new_tokens=6),
            task.sample_scenarios(2, seed=1), "persuader", 3)
    rec, rows = collapse_at_chats(*args, seed=0, spread=reply_spread, measures=["top1"])
    assert rec["states"] == 2 and rec["samples"] == 3 and set(rows["simulator"]) == {"reference", "single", "vs"}
    assert collapse_at_chats(*args, seed=0, spread=reply_spread, measures=["top1"])[0] == pytest.approx(rec,
                                                                                                        nan_ok=True)


def test_diversity_measures_by_hand():
    from dialogrl.collapse import distinct_n, label_entropy, top1_share

    assert distinct_n(["a b a b", "a b"], 1) == pytest.approx(2 / 6)
    assert distinct_n(["a b a b", "a b"], 2) == pytest.approx(2 / 4)   # (a b), (b a)
    assert np.isnan(distinct_n(["a"], 2))
    assert label_entropy(["x"] * 4) == 0 and label_entropy(["x", "y", "z", "w"]) == pytest.approx(2)
    assert label_entropy(["x", "x", "y", "y"], base=np.e) == pytest.approx(np.log(2))
    assert top1_share(["Hi there", "hi  there", "no"]) == pytest.approx(2 / 3) and np.isnan(top1_share([]))


def test_sharpening_exponent_recovers_a_temperature():
    from dialogrl.collapse import sharpening_exponent

    p = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    for gamma in (1.0, 2.0, 1 / 0.3):
        q = p ** gamma / (p ** gamma).sum()
        g, se = sharpening_exponent(p, q)
        assert g == pytest.approx(gamma) and se == pytest.approx(0, abs=1e-9)
    with pytest.raises(ValueError, match="at least 3"):
        sharpening_exponent([0.5, 0.5, 0], [0.9, 0.1, 0.2])


def test_reply_spread_per_state_by_hand():
    from dialogrl.collapse import pooled_gamma, reply_spread

    replies = {"collapsed": [["yes sure", "Yes  sure", "yes sure"], ["no", "no", "no"]],
               "spread": [["yes sure", "no way", "maybe later"], ["no", "why", "ok then"]]}
    one_hot = {"yes sure": [1, 0], "no": [0, 1], "no way": [0, 1], "maybe later": [1, 0], "why": [0, 1],
               "ok then": [1, 0]}

    def embed(texts):
        return np.array([one_hot[" ".join(t.lower().split())] for t in texts], float)

    def label(texts):
        return [[t.split()[0].lower()] for t in texts]

    t = reply_spread(replies, label=label, embed=embed).set_index(["simulator", "state"])
    assert t.loc[("collapsed", 0), "top1"] == 1 and t.loc[("spread", 0), "top1"] == pytest.approx(1 / 3)
    assert t.loc[("collapsed", 0), "similarity"] == 1 and t.loc[("spread", 0), "similarity"] == pytest.approx(1 / 3)
    assert t.loc[("collapsed", 1), "act_entropy"] == 0
    assert t.loc[("spread", 1), "act_entropy"] == pytest.approx(np.log2(3))
    assert t.loc[("spread", 0), "distinct_1"] == pytest.approx(1.0)
    bare = reply_spread(replies)
    assert bare["similarity"].isna().all() and bare["act_entropy"].isna().all()
    # gamma pools the states' reply frequencies: a simulator that copies the reference has gamma 1
    ref = [["a"] * 4 + ["b"] * 2 + ["c"], ["d"] * 3 + ["e"] * 2 + ["f"] * 2]
    assert pooled_gamma(ref, ref) == pytest.approx(1.0)
    assert np.isnan(pooled_gamma([["a", "b"]], [["c", "d"]]))


def test_cluster_coverage_tells_one_mode_from_many():
    from dialogrl.collapse import cluster_coverage

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(8, 5)) * 10
    spread = np.concatenate([c + rng.normal(size=(20, 5)) for c in centres])
    collapsed = centres[0] + rng.normal(size=(160, 5))
    cov = cluster_coverage({"spread": spread, "collapsed": collapsed}, k=8)
    assert cov["spread"] == 1.0 and cov["collapsed"] <= 2 / 8
    with pytest.raises(ValueError, match="k=50"):
        cluster_coverage({"a": spread[:10]}, k=50)


def test_sentence_embeddings_load_offline_and_place_paraphrases_close():
    from dialogrl.collapse import sentence_embeddings

    e = sentence_embeddings(["Would you donate to the children?", "Could you give some money to the kids?",
                             "The weather is cold in Boston."])
    assert e.shape == (3, 384) and np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-4)
    assert e[0] @ e[1] > e[0] @ e[2] + 0.2
    assert sentence_embeddings([]).shape == (0, 384)


def test_turn_diversity_leaves_other_out_of_the_strategy_entropy():
    from dialogrl.collapse import label_entropy, turn_diversity

    d = turn_diversity(["a b c", "a b d"], ["logical", "emotional", "other"])
    assert d["strategy_entropy"] == label_entropy(["logical", "emotional"]) and 0 < d["distinct_2"] <= 1
    assert turn_diversity(["x"], ["other"])["strategy_entropy"] == 0.0


def test_policy_diversity_measures_each_methods_turns_and_their_coverage():
    from dialogrl.collapse import policy_diversity, turn_diversity

    turns = {"a": ["give to save a child", "please donate today"], "b": ["hello", "hello"], "c": []}
    rows = policy_diversity(turns, lambda t: turn_diversity(t, []), clusters=2, seed=0)
    assert [r["method"] for r in rows] == ["a", "b", "c"] and np.isnan(rows[2]["coverage"])
    assert 0 < rows[0]["coverage"] <= 1 and rows[1]["distinct_1"] == 0.5


def test_scopes_manipulation_checks_read_each_method_against_its_own_simulator():
    """Frozen methods: their `train` games against the base's `train-<method>` games; a co-trained method: its games
    against where its simulator started (`train-initial`), plus whether that simulator changed; VS: its two
    interventions. Each against the room of the simulator it is checked against."""
    cells = [("base", "train-vs", 0.2, 0.0), ("base", "train-initial", 0.3, 0.0), ("vs", "train", 0.6, 0.0),
             ("cotrain", "train-initial", 0.5, 0.0), ("cotrain", "train", 0.1, None)]   # None: success every other
    games = pd.DataFrame([{"method": m, "counterpart": c, "role": "persuader", "scenario": sc, "seed": seed,
                           "reward": r + 0.01 * ((sc + seed) % 3), "success": float(sc % 2 == 0) if s is None else s}
                          for seed in range(3) for sc in range(8) for m, c, r, s in cells])
    rooms = {"vs": {"ceiling": 1.0, "reference": "fair"}, "reference": {"ceiling": 0.9, "reference": "emotional"}}
    checks = manipulation_checks(games, ["base", "vs", "cotrain"], rooms, vs_usable=0.9, top1_gap=0.1)
    assert set(checks) == {"vs", "cotrain"}
    assert checks["vs"]["gain"] == pytest.approx(0.4) and checks["vs"]["reference"] == "fair"
    assert [i["happened"] for i in checks["vs"]["interventions"]] == [True, True] and checks["vs"]["intervention"]
    assert checks["cotrain"]["gain"] == pytest.approx(0.2) and checks["cotrain"]["reference"] == "emotional"
    changed = checks["cotrain"]["interventions"][0]
    assert changed["value"] == pytest.approx(0.5) and changed["happened"]
    unusable = manipulation_checks(games, ["base", "vs"], rooms, vs_usable=0.5, top1_gap=0.1)["vs"]
    assert unusable["intervention"] is False   # most VS answers unusable: VS did not happen
