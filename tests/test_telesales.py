"""Vehicle TeleSales: the scenario generator, the rules by hand-worked cases, malformed markers, metrics, the scripted
personas of both roles, and the warm-start corpus. Fast: no model is built."""
import random
import re

import numpy as np
import pytest

from conftest import play_texts
from dialogrl.envs import TASKS, make_task
from dialogrl.envs.telesales import (
    BUYER_PERSONAS,
    CATALOG,
    FEATURES,
    SELLER_PERSONAS,
    TYPES,
    UNSEEN_BUYERS,
    ScriptedAgent,
    TelesalesScenario,
    VehicleTeleSales,
    feasible,
    fits,
    hear,
    listen,
    parse_marker,
    population,
    sample_scenario,
)
from dialogrl.envs.telesales.corpus import telesales_corpus
from dialogrl.rollout import play
from dialogrl.tiny import TINY_MODELS, check_corpus

# By hand: atlas (suv: awd third_row towing, list 38900), strada (sedan, no extras, 22800), shuttle (van: third_row
# towing, 36700). The buyer needs a third row and towing and has $37000: atlas and shuttle fit, strada does not.
SC = TelesalesScenario(lot=("atlas", "strada", "shuttle"), floors=(34900, 20000, 32700), budget=37000,
                       must_have=("third_row", "towing"), preferred_type="suv", persona="decisive", id=7)


def test_catalog():
    assert len(CATALOG) >= 20
    assert {v.type for v in CATALOG.values()} == set(TYPES)
    for vid, v in CATALOG.items():
        assert re.fullmatch(r"[a-z]+", vid) and v.id == vid  # one word: usable in a marker as is
        assert set(v.features) <= set(FEATURES) and v.msrp > 0 and v.msrp % 100 == 0


def test_generator_obeys_its_constraints_over_many_seeds():
    rng = random.Random(0)
    scenarios = [sample_scenario(rng, id=i) for i in range(4000)]
    for sc in scenarios:
        assert len(sc.lot) == len(set(sc.lot)) == 6 and set(sc.lot) <= set(CATALOG)
        for vid, floor in zip(sc.lot, sc.floors):
            msrp = CATALOG[vid].msrp
            assert floor % 100 == 0 and 0.8 * msrp - 50 <= floor <= 0.93 * msrp + 50 and floor < msrp
        assert sc.budget > 0 and sc.budget % 500 == 0
        assert set(sc.must_have) <= set(FEATURES) and any(fits(sc, v) for v in sc.lot)
        assert sc.preferred_type in TYPES and sc.persona in BUYER_PERSONAS
        cheapest = min(sc.floor(v) for v in sc.lot if fits(sc, v))
        assert feasible(sc) == (sc.budget >= cheapest)
    infeasible = np.mean([not feasible(sc) for sc in scenarios])
    assert 0.15 <= infeasible <= 0.25  # p_infeasible = 0.2: budgets below every fitting floor exist
    assert any(not sc.must_have for sc in scenarios) and any(len(sc.must_have) == 3 for sc in scenarios)
    assert {sc.persona for sc in scenarios} == set(BUYER_PERSONAS)


def test_same_seed_same_scenarios():
    task = VehicleTeleSales()
    a = task.sample_scenarios(50, seed=3)
    assert a == task.sample_scenarios(50, seed=3) and a != task.sample_scenarios(50, seed=4)
    assert [sc.id for sc in a] == list(range(50))
    assert all(not feasible(sc) for sc in VehicleTeleSales(p_infeasible=1.0).sample_scenarios(100, seed=0))


def test_good_sale_rewards_by_hand():
    task = VehicleTeleSales()
    state = play_texts(task, SC, ["hi! what do you need?", "a third row and towing, about $37000.",
                                  "the atlas fits. [OFFER atlas $36900]", "deal [BUY atlas $36900]"])
    assert state.done and state.end_reason == "buy"
    out = task.outcome(state)
    assert out["seller"]["margin"] == pytest.approx((36900 - 34900) / (38900 - 34900))  # 0.5
    assert out["seller"]["score"] == pytest.approx(1.0 + 0.5 * 0.5)                    # a good sale + 0.5 * margin
    assert VehicleTeleSales(seller_goal="margin").outcome(state)["seller"]["score"] == pytest.approx(0.5)
    assert VehicleTeleSales(seller_goal="success").outcome(state)["seller"]["score"] == pytest.approx(1.25)
    assert out["buyer"]["score"] == pytest.approx((37000 - 36900) / 37000 + 1.0)       # 1.0027
    assert out["seller"]["good_sale"] and out["buyer"]["sale"] and out["buyer"]["vehicle"] == "atlas"
    assert out["seller"]["reward"] == out["seller"]["score"] and out["buyer"]["price"] == 36900


def test_bad_sales_cost_both_roles():
    task = VehicleTeleSales()
    # a vehicle missing the must-haves: the buyer gets bad_sale, the seller bad_sale plus half its margin
    state = play_texts(task, SC, ["[OFFER strada $21000]", "[BUY strada $21000]"])
    out = task.outcome(state)
    assert out["seller"]["margin"] == pytest.approx(1000 / 2800) and out["buyer"]["score"] == -1.0
    assert out["seller"]["score"] == pytest.approx(-1.0 + 0.5 * 1000 / 2800)
    assert out["seller"]["sale"] and not out["seller"]["good_sale"]
    # with seller_goal="margin" the seller still earns its margin on a bad sale
    assert VehicleTeleSales(seller_goal="margin").outcome(state)["seller"]["score"] == pytest.approx(1000 / 2800)
    # with seller_goal="success" (Success@1) a bad sale is worth what no sale is; the buyer's score is unchanged
    success = VehicleTeleSales(seller_goal="success").outcome(state)
    assert success["seller"]["score"] == 0.0 and success["buyer"]["score"] == -1.0
    assert VehicleTeleSales(seller_goal="success").max_reward("seller") == 1.5
    # over budget (the atlas fits, $38000 > $37000)
    state = play_texts(task, SC, ["[OFFER atlas $38000]", "[BUY atlas $38000]"])
    out = task.outcome(state)
    assert out["seller"]["margin"] == pytest.approx(3100 / 4000) and out["buyer"]["score"] == -1.0
    assert out["seller"]["score"] == pytest.approx(-1.0 + 0.5 * 3100 / 4000)
    # bad_sale and success_bonus are parameters
    task = VehicleTeleSales(bad_sale=-2.0, success_bonus=0.5)
    assert task.outcome(play_texts(task, SC, ["[OFFER strada $21000]", "[BUY strada $21000]"]))["buyer"]["score"] == -2
    out = task.outcome(play_texts(task, SC, ["[OFFER atlas $37000]", "[BUY atlas $37000]"]))
    assert out["buyer"]["score"] == pytest.approx(0.5)  # budget - price = 0


def test_buy_needs_a_matching_offer_from_this_game():
    task = VehicleTeleSales()
    state = play_texts(task, SC, ["[OFFER atlas $38000]", "[BUY atlas $36000]"])  # never offered at 36000
    assert state.turns[-1].invalid == "no offer of atlas at $36000" and not state.done
    task.step(state, "[OFFER shuttle $35000]")
    task.step(state, "[BUY shuttle $38000]")  # the price of another vehicle's offer
    assert state.turns[-1].invalid and not state.done
    task.step(state, "[OFFER atlas $37500]")
    task.step(state, "ok [buy atlas $38,000]")  # an earlier offer still stands; case and commas are fine
    assert state.done and task.outcome(state)["buyer"]["price"] == 38000
    assert task.outcome(state)["buyer"]["n_invalid"] == 2 and task.outcome(state)["seller"]["n_invalid"] == 0


def test_lot_numbers_name_vehicles_and_accept_takes_the_latest_offer():
    task = VehicleTeleSales()
    assert parse_marker("[offer 3 $36,000]", SC.lot)[0] == {"type": "offer", "vehicle": "shuttle", "price": 36000}
    state = play_texts(task, SC, ["the atlas? [OFFER 1 $38900]", "too much", "the shuttle then [OFFER 3 $36000]",
                                  "deal [ACCEPT]"])
    assert state.done and task.outcome(state)["buyer"]["vehicle"] == "shuttle"
    assert task.outcome(state)["buyer"]["price"] == 36000 and task.outcome(state)["buyer"]["good_sale"]
    state = play_texts(task, SC, ["[OFFER 1 $38900]", "hmm", "[OFFER 3 $36000]", "the first one [BUY 1 $38900]"])
    assert task.outcome(state)["seller"]["vehicle"] == "atlas"  # an earlier offer, by its number
    prompt = task.view(state, "buyer")[0]["content"]
    assert "1. atlas: suv" in prompt and "3. shuttle: van" in prompt and "[ACCEPT]" in prompt


def test_leave_and_turn_cap_end_without_a_sale():
    task = VehicleTeleSales(max_turns=4)
    state = play_texts(task, SC, ["[OFFER atlas $38900]", "too much [LEAVE]"])
    assert state.done and state.end_reason == "leave"
    assert all(o["score"] == 0 and o["reward"] == 0 and not o["sale"] for o in task.outcome(state).values())
    state = play_texts(task, SC, ["hi", "hello", "[OFFER atlas $38900]"])
    assert not state.done and task.current_role(state) == "buyer"
    task.step(state, "hmm")
    assert state.done and state.end_reason == "turn_cap" and task.outcome(state)["seller"]["score"] == 0
    with pytest.raises(RuntimeError):
        task.step(state, "[BUY atlas $38900]")


@pytest.mark.parametrize("texts, reason", [
    (["[BUY atlas $30000]"], "the seller cannot [BUY]"),
    (["bye [LEAVE]"], "the seller cannot [LEAVE]"),
    (["hi", "[OFFER atlas $30000]"], "the buyer cannot [OFFER]"),
    (["[OFFER corvo $30000]"], "unknown vehicle 'corvo'"),         # in the catalog, not on this lot
    (["[OFFER tesla $30000]"], "unknown vehicle 'tesla'"),
    (["[OFFER atlas $-500]"], "negative price"),
    (["[OFFER atlas 30000]"], "malformed marker"),                 # no $
    (["[OFFER atlas $30k]"], "malformed marker"),
    (["[OFFER atlas $3,00,000]"], "malformed marker"),
    (["[OFFER $30000]"], "malformed marker"),
    (["[OFFER atlas $30000] [OFFER shuttle $30000]"], "2 markers"),
    (["[OFFER atlas $30000"], "unbalanced brackets"),
    (["[OFFER atlas $" + "9" * 5000 + "]"], "price out of range"),
    (["[OFFER atlas $99999999]"], "price out of range"),
    (["[OFFER 4 $30000]"], "no vehicle number 4"),                 # the lot has 3
    (["[OFFER atlas $38901]"], "above the list price"),             # list $38900
    (["[OFFER 0 $30000]"], "unknown vehicle '0'"),
    (["ok [ACCEPT]"], "the seller cannot [ACCEPT]"),
    (["hi", "deal [ACCEPT]"], "[ACCEPT] with no offer standing"),
])
def test_invalid_markers_are_counted_forfeit_the_turn_and_cost_reward(texts, reason):
    task = VehicleTeleSales(invalid_penalty=0.1)
    state = play_texts(task, SC, texts)
    bad = state.turns[-1]
    assert reason in bad.invalid and not state.done and state.info["offers"] == []  # no effect on the game
    if bad.role == "seller":
        task.step(state, "hi")  # the buyer's turn
    task.step(state, "[OFFER atlas $36900]")
    task.step(state, "[BUY atlas $36900]")
    out = task.outcome(state)
    assert out[bad.role]["n_invalid"] == 1
    assert out[bad.role]["reward"] == pytest.approx(out[bad.role]["score"] - 0.1)
    other = "buyer" if bad.role == "seller" else "seller"
    assert out[other]["reward"] == out[other]["score"]


def test_seller_margin_is_bounded_below_at_minus_one():
    task = VehicleTeleSales()  # atlas: floor 34900, list 38900; floor - (list - floor) = 30900

    def seller(price):
        return task.outcome(play_texts(task, SC, [f"[OFFER atlas ${price}]", "[ACCEPT]"]))["seller"]["margin"]
    assert seller(32900) == pytest.approx(-0.5) and seller(30900) == pytest.approx(-1.0)
    assert seller(1) == seller(0) == -1.0  # unclipped: about -8.7
    assert seller(38900) == 1.0  # the upper bound: offers above the list price are invalid
    state = play_texts(task, SC, ["[OFFER atlas $1]", "[ACCEPT]"])
    assert task.outcome(state)["buyer"]["score"] == pytest.approx((37000 - 1) / 37000 + 1.0)  # the buyer's is unchanged
    assert task.metrics([state])["margin_seller"] == -1.0 and task.metrics([state])["score_seller"] == 0.5


def test_free_invalid_markers_with_zero_penalty():
    task = VehicleTeleSales(invalid_penalty=0.0)
    state = play_texts(task, SC, ["[BUY atlas $1]", "[OFFER atlas $1]", "[OFFER atlas $36900]", "[BUY atlas $36900]"])
    out = task.outcome(state)
    assert out["seller"]["n_invalid"] == out["buyer"]["n_invalid"] == 1
    assert out["seller"]["reward"] == out["seller"]["score"] == pytest.approx(1.25)


def test_parsers_never_raise_on_garbage():
    for text in ["", "[", "]]][[", "\x00", "[OFFER]", "[offer atlas $]", "[BUY atlas $1e9]", "[LEAVE now]",
                 "[offer ATLAS $1,000,000]", "[" + "x" * 10000 + "]"]:
        parse_marker(text, SC.lot)
        hear(text, SC.lot)
    assert parse_marker("ok [ leave ]", SC.lot)[0]["type"] == "leave"
    assert parse_marker("[offer ATLAS $1,000,000]", SC.lot)[0] == {"type": "offer", "vehicle": "atlas",
                                                                    "price": 1_000_000}


@pytest.mark.parametrize("digit", ["\u2460", "\u0661", "\uff11", "\u00b9", "\U0001d7cf"])  # 1 look-alikes
def test_only_ascii_digits_count(digit):
    for text in [f"[OFFER {digit} $20000]", f"[OFFER 1 ${digit}0000]", f"[BUY atlas $2000{digit}]"]:
        action, why = parse_marker(text, SC.lot)
        assert action == {"type": "talk"} and "malformed marker" in why
    assert parse_marker("[offer\u00a01 $20000]", SC.lot)[1].startswith("malformed")  # no-break space: not ASCII
    d = digit * 5
    said = hear(f"my budget is ${d}, or {d}, or {digit}{digit}k, or {digit}{digit}.{digit}k", SC.lot)
    assert said[0]["amounts"] == []


def test_huge_numbers_are_invalid_not_errors():
    huge = "9" * 5000  # int() refuses more than 4300 digits
    for text, reason in [(f"[OFFER 1 ${huge}]", "price out of range"), (f"[OFFER {huge} $20000]", "no vehicle number"),
                         (f"[BUY 1 $-{huge}]", "negative price"), (f"[BUY atlas ${huge},000]", "malformed marker"),
                         ("[OFFER 1 $10,000,001]", "price out of range"), ("[OFFER 1 $00030000]", None)]:
        action, why = parse_marker(text, SC.lot)
        assert (why is None) if reason is None else (reason in why and len(why) < 200 and action["type"] == "talk")
    for runaway in (f"${huge} or {huge}k", f"{huge}.{huge}k", f"$1{',000' * 2000}"):   # each within a turn's length
        said = hear(f"{runaway}, but $31,500", SC.lot)
        assert [x for s in said for x in s["amounts"]] == [31500]


def test_hear_reads_what_a_turn_can_hold_and_skips_empty_clauses():
    """A runaway line costs the listener no more than a game's longest turn: what lies past MAX_TURN_CHARS is not
    heard (the games cut turns there), and clauses of punctuation alone are no clauses."""
    from dialogrl.game import MAX_TURN_CHARS

    said = hear("i need awd. " + "ok. " * MAX_TURN_CHARS + "budget's $31500", SC.lot)
    assert said[0]["features"] == {"awd"} and not any(s["amounts"] for s in said)
    assert len(said) <= MAX_TURN_CHARS // 4 + 1
    assert hear("?" * 100_000, SC.lot) == [] and hear("?!. ,;", SC.lot) == []
    assert [s["amounts"] for s in hear("?? budget $31500 ?!", SC.lot)] == [[31500]]


def test_hear_amounts_features_and_asks():
    said = hear("i need awd and a third row. budget's like 31.5k, can you do $30,000 on the atlas?", SC.lot)
    assert set().union(*(s["features"] for s in said)) == {"awd", "third_row"}
    assert [s["amounts"] for s in said if s["amounts"]] == [[31500], [30000]]
    assert [s["vehicles"] for s in said if s["vehicles"]] == [["atlas"]]
    task = VehicleTeleSales()
    state = play_texts(task, SC, ["hi", "i want a van. my budget is $33000.", "[OFFER strada $20000]",
                                  "the strada has no towing. how about $32000 for the shuttle?"])
    heard = listen(state, "buyer")
    assert heard["budget"] == 33000 and heard["asks"] == {"shuttle": 32000} and heard["rejected"] == {"strada"}
    assert heard["features"] == {"towing"} and heard["types"] == {"van"}


def test_views_are_private_and_from_each_role():
    task = VehicleTeleSales()
    state = play_texts(task, SC, ["hello! [OFFER atlas $38000]"])
    seller, buyer = task.view(state, "seller"), task.view(state, "buyer")
    assert "floor $34900" in seller[0]["content"] and "37000" not in seller[0]["content"]
    assert "third_row" not in seller[0]["content"].split("floor prices")[0]  # the must-haves are the buyer's
    assert "$37000" in buyer[0]["content"] and "Must have: third_row, towing" in buyer[0]["content"]
    assert "34900" not in buyer[0]["content"] and "floor" not in buyer[0]["content"]
    assert "decisive" in buyer[0]["content"] and all(v in buyer[0]["content"] for v in SC.lot)
    assert [m["role"] for m in seller] == ["system", "user", "assistant"]  # the opening cue, then its own turn
    assert [m["role"] for m in buyer] == ["system", "user"]
    # the buyer's private note on the offer: the atlas has both must-haves, and $38000 is over its $37000 budget
    assert buyer[1]["content"] == "hello! [OFFER atlas $38000]\n(to you: the atlas has all you need; over your budget)"
    state = play_texts(task, SC, ["[OFFER strada $20000]", "the strada has no towing.", "oops [OFFER strada $1e]"])
    notes = [m["content"].split("\n")[1:] for m in task.view(state, "buyer") if m["role"] == "user"]
    assert notes == [["(to you: the strada lacks third_row and towing; within your budget)"], []]  # invalid: none
    assert "(to you" not in str(task.view(state, "seller"))   # the seller never sees it
    bare = VehicleTeleSales(buyer_notes=False)
    assert "(to you" not in str(bare.view(play_texts(bare, SC, ["hello! [OFFER atlas $38000]"]), "buyer"))


def test_metrics_by_hand():
    task = VehicleTeleSales()
    games = [play_texts(task, SC, ["[OFFER atlas $36900]", "[BUY atlas $36900]"]),      # good sale
             play_texts(task, SC, ["[OFFER strada $21000]", "[BUY strada $21000]"]),    # bad sale
             play_texts(task, SC, ["[BUY atlas $1]", "[LEAVE]"])]                       # no sale, 1 invalid
    m = task.metrics(games)
    assert m["n_games"] == 3 and m["sale_rate"] == pytest.approx(2 / 3)
    assert m["success_at_1"] == pytest.approx(1 / 3) and m["good_sale_rate"] == pytest.approx(1 / 2)
    assert m["margin_seller"] == pytest.approx((0.5 + 1000 / 2800) / 3)
    assert m["score_seller"] == pytest.approx((1.25 + (-1.0 + 0.5 * 1000 / 2800)) / 3)
    assert m["reward_seller"] == pytest.approx((1.25 + (-1.0 + 0.5 * 1000 / 2800) - 0.1) / 3)
    assert m["score_buyer"] == m["reward_buyer"] == pytest.approx((100 / 37000 + 1.0 - 1.0) / 3)
    assert m["invalid_rate"] == pytest.approx(1 / 6) and m["turns"] == 2.0 and m["feasible"] == 1.0


def test_personas_play_each_other_without_error():
    task = VehicleTeleSales()
    scenarios = task.sample_scenarios(80, seed=123)
    success = {}
    for s in SELLER_PERSONAS:
        for b in BUYER_PERSONAS:
            eps = play(task, {"seller": ScriptedAgent(s, seed=1), "buyer": ScriptedAgent(b, seed=2)}, scenarios)
            m = task.metrics([e.state for e in eps])
            assert m["invalid_rate"] == 0 and m["turns"] <= task.max_turns
            assert all(e.state.done for e in eps) and all(e.agents == {"seller": s, "buyer": b} for e in eps)
            assert m["success_at_1"] <= m["feasible"]  # scripted sellers never sell below a floor
            if b != "impulsive":
                assert m["good_sale_rate"] == 1.0  # only the impulsive buyer buys what it should not
            success[s, b] = m["success_at_1"]
    mean = {s: np.mean([success[s, b] for b in BUYER_PERSONAS]) for s in SELLER_PERSONAS}
    for s in ("fair", "discounter", "upseller", "hard-seller"):
        assert mean[s] >= 0.45 and mean[s] >= mean["pusher"] + 0.3  # listening to the buyer's needs pays
    assert mean["fair"] > mean["hard-seller"]


def test_scripted_buyers_say_their_needs_and_listening_sellers_offer_what_fits():
    task = VehicleTeleSales()
    scenarios = [sc for sc in task.sample_scenarios(200, seed=5) if sc.must_have]
    eps = play(task, {"seller": ScriptedAgent("fair", 1), "buyer": ScriptedAgent(None, 2)}, scenarios)
    named, fitting = [], []
    for e in eps:
        first = e.state.turns[1]  # the buyer's first turn
        said = set().union(*(s["features"] for s in hear(first.text, e.scenario.lot)))
        named.append(bool(said & set(e.scenario.must_have)))
        offers = e.state.info["offers"]
        if len(offers) >= 1:
            fitting.append(fits(e.scenario, offers[0][0]))
    assert all(named)  # every persona names at least one must-have on its first turn
    assert np.mean(fitting) >= 0.7  # the seller's first offer after hearing them


def test_scenario_buyer_plays_the_scenarios_persona_and_personas_keep_to_their_role():
    task = VehicleTeleSales()
    scenarios = task.sample_scenarios(60, seed=9)
    eps = play(task, {"seller": ScriptedAgent("fair", 1), "buyer": ScriptedAgent(None, 2)}, scenarios)
    twin = play(task, {"seller": ScriptedAgent("fair", 1), "buyer": ScriptedAgent(None, 2)}, scenarios[::-1])
    assert [t.text for t in eps[0].state.turns] == [t.text for t in twin[-1].state.turns]  # batch-independent
    for e in eps[:20]:
        alone = play(task, {"seller": ScriptedAgent("fair", 1),
                            "buyer": ScriptedAgent(e.scenario.persona, 2)}, [e.scenario])[0]
        assert [t.text for t in alone.state.turns] == [t.text for t in e.state.turns]
    with pytest.raises(ValueError, match="cannot play the seller"):
        play(task, {"seller": ScriptedAgent("picky"), "buyer": ScriptedAgent(None)}, scenarios[:1])
    with pytest.raises(ValueError, match="unknown persona 'nice'.*unseen buyers: poker-face"):
        ScriptedAgent("nice")
    with pytest.raises(ValueError, match="unknown seller persona"):
        population("seller", ["picky"])


def test_unseen_buyer_plays_full_games_and_is_held_out_of_the_pipeline():
    assert UNSEEN_BUYERS and not set(UNSEEN_BUYERS) & set(BUYER_PERSONAS)
    fields = ("start", "beta", "reveal", "say_type", "say_budget", "strict_type", "patience", "slip", "wander")
    seen = {tuple(getattr(p, f) for f in fields) for p in BUYER_PERSONAS.values()}
    task = VehicleTeleSales()
    scenarios = task.sample_scenarios(60, seed=31)
    for name, persona in UNSEEN_BUYERS.items():
        # (a buyer of another rule family has none of these numbers: unlike every persona above, too)
        assert tuple(getattr(persona, f, None) for f in fields) not in seen and persona.style in ("plain", "casual")
        assert ScriptedAgent(name).persona is persona
        for s in SELLER_PERSONAS:
            eps = play(task, {"seller": ScriptedAgent(s, seed=1), "buyer": ScriptedAgent(name, seed=2)}, scenarios)
            m = task.metrics([e.state for e in eps])
            assert all(e.state.done for e in eps) and m["turns"] <= task.max_turns and m["invalid_rate"] == 0
            assert all(e.agents["buyer"] == name for e in eps) and m["good_sale_rate"] == 1.0
            assert m["sale_rate"] > 0 or s == "pusher"
            if persona.say_budget == 0:
                assert all(listen(e.state, "buyer")["budget"] is None for e in eps)  # it never names a budget
        mixed = play(task, {"seller": ScriptedAgent("fair", 1),
                            "buyer": population("buyer", [name, "decisive"], seed=3)}, scenarios)
        assert {e.agents["buyer"] for e in mixed} == {name, "decisive"}
    assert not set(UNSEEN_BUYERS) & set(population("buyer").members)  # not in the default population
    # the scenario generator, and so the corpus (its buyers play their scenario's persona), never names it
    assert {sc.persona for sc in task.sample_scenarios(2000, seed=0)} == set(BUYER_PERSONAS)
    corpus = telesales_corpus(n_dialogues=60, seed=0)
    buyers = {re.search(r"You are the buyer, ([a-z-]+):", c[0]["content"]).group(1)
              for c in corpus if "You are the buyer" in c[0]["content"]}
    assert buyers <= set(BUYER_PERSONAS)
    assert not any(n in m["content"] for n in UNSEEN_BUYERS for c in corpus for m in c)


def test_populations_mix_personas():
    task = VehicleTeleSales()
    eps = play(task, {"seller": population("seller", seed=1),
                      "buyer": population("buyer", seed=2)}, task.sample_scenarios(400, seed=77))
    assert {e.agents["seller"] for e in eps} == set(SELLER_PERSONAS)
    assert {e.agents["buyer"] for e in eps} == set(BUYER_PERSONAS)
    m = task.metrics([e.state for e in eps])
    assert 0.5 <= m["sale_rate"] <= 0.85 and 0.4 <= m["success_at_1"] <= 0.7


def test_corpus_is_deterministic_and_alternates_views():
    a = telesales_corpus(n_dialogues=40, seed=3)
    assert a == telesales_corpus(n_dialogues=40, seed=3) and a != telesales_corpus(n_dialogues=40, seed=4)
    check_corpus(a)
    assert len(a) == 40 and "You are the seller" in a[0][0]["content"] and "You are the buyer" in a[1][0]["content"]
    both = telesales_corpus(n_dialogues=10, seed=3, views="both")
    assert len(both) == 20 and both[0] == a[0] and both[3] == a[1]
    assert any("[OFFER " in m["content"] for c in a for m in c) and any("[BUY " in m["content"] for c in a for m in c)
    with pytest.raises(ValueError, match="views"):
        telesales_corpus(n_dialogues=2, views="all")


def test_registered_as_task_and_tiny_model():
    assert isinstance(make_task("telesales", max_turns=6), VehicleTeleSales) and "telesales" in TASKS
    recipe = TINY_MODELS["tiny-telesales"]
    assert recipe.corpus is telesales_corpus
    assert len(recipe.make_corpus(n_dialogues=4)) == 4


def test_bad_task_parameters_are_named():
    with pytest.raises(ValueError, match="max_turns"):
        VehicleTeleSales(max_turns=1)
    with pytest.raises(ValueError, match="lot_size"):
        VehicleTeleSales(lot_size=0)
    with pytest.raises(ValueError, match="invalid_penalty"):
        VehicleTeleSales(invalid_penalty=-1)
    with pytest.raises(ValueError, match="seller_goal='profit': choose one of good_sale, success, margin"):
        VehicleTeleSales(seller_goal="profit")
    with pytest.raises(ValueError, match="margin_weight"):
        VehicleTeleSales(margin_weight=-0.5)
    with pytest.raises(ValueError, match="unknown task 'chess'.*telesales"):
        make_task("chess")


def test_buyer_profiles_and_scripted_buyers_agree():
    """A scenario's buyer profile (the LM buyer's prompt line) and the scripted buyer of that name are one persona."""
    from dialogrl.envs.telesales import BUYER_PROFILES

    assert set(BUYER_PROFILES) == set(BUYER_PERSONAS)
    assert all(BUYER_PERSONAS[n].about == line for n, line in BUYER_PROFILES.items())
    assert not set(UNSEEN_BUYERS) & set(BUYER_PROFILES)


def test_anchored_buyer_waits_for_the_seller_to_come_down_from_its_first_price():
    """Another rule family: the anchored buyer reads the seller's concessions, not a schedule over its budget. A
    fitting offer within budget that never comes down is never bought (the decisive buyer takes it at once); once
    the price is a tenth below the seller's first, it buys."""
    task, anchored = VehicleTeleSales(), ScriptedAgent("anchored", seed=4)
    offer = "the shuttle is a van with a third row and towing. $36000. [OFFER 3 $36000]"
    state = play_texts(task, SC, [offer])
    task.step(state, ScriptedAgent("decisive").utter(task, state, "buyer"))
    assert state.end_reason == "buy" and task.outcome(state)["buyer"]["good_sale"]
    state = task.reset(SC)
    while not state.done:
        role = task.current_role(state)
        turn = task.step(state, offer if role == "seller" else anchored.utter(task, state, "buyer"))
        assert turn.invalid is None
        if role == "buyer" and not state.done:
            assert "$32400" in turn.text   # its counter: the first price less a tenth
    assert state.end_reason == "leave" and not task.outcome(state)["buyer"]["sale"]
    state = play_texts(task, SC, [offer, anchored.utter(task, play_texts(task, SC, [offer]), "buyer"),
                                  "ok, $32400 then. [OFFER 3 $32400]"])
    task.step(state, anchored.utter(task, state, "buyer"))
    assert state.end_reason == "buy" and task.outcome(state)["buyer"]["price"] == 32400
