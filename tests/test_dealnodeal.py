"""Deal or No Deal rules: the scenario generator (against the human logs), both protocols, scoring, malformed input,
metrics."""
import random
from collections import Counter

import pytest

from conftest import play_texts
from dialogrl.envs import DealOrNoDeal, make_task
from dialogrl.envs.dealnodeal import (
    POOL_FREQUENCIES,
    DondScenario,
    all_splits,
    count_vectors,
    is_pareto_optimal,
    parse_offer,
    parse_selection,
    sample_scenario,
    split_value,
    valid_values,
    value_pairs,
    value_vectors,
)

SC = DondScenario(counts=(1, 2, 3), values=((4, 0, 2), (2, 4, 0)))  # 4+0+6 = 10 and 2+8+0 = 10


def test_generator_obeys_the_rules_over_many_seeds():
    rng = random.Random(0)
    seen_counts = set()
    for i in range(5000):
        sc = sample_scenario(rng, id=i)
        c, (va, vb) = sc.counts, sc.values
        assert all(1 <= x <= 4 for x in c) and 5 <= sum(c) <= 7
        for v in (va, vb):
            assert all(isinstance(x, int) and x >= 0 for x in v)
            assert sum(ci * vi for ci, vi in zip(c, v)) == 10
        assert all(a > 0 or b > 0 for a, b in zip(va, vb))  # every type worth something to someone
        assert any(a > 0 and b > 0 for a, b in zip(va, vb))  # some type worth something to both
        seen_counts.add(c)
    assert seen_counts == set(count_vectors())  # every allowed pool occurs
    assert len(count_vectors()) == 6 + 10 + 12 and all(value_pairs(c) for c in count_vectors())


def human_dialogues(path):
    """(pool, values of one role, values of the other) per dialogue of the human logs' data.txt. Most dialogues are
    stored twice, once per perspective, on consecutive lines (same pool, swapped contexts, same talk): once here."""
    def parse(line):
        t = line.split()
        mine, theirs = tuple(map(int, t[:6])), tuple(map(int, t[-6:]))
        talk = [w.replace("THEM:", "YOU:") for w in t[6:t.index("<selection>")]]  # the same from either side
        return mine, theirs, talk

    lines = [parse(x) for x in path.read_text().splitlines() if x.strip()]
    out, i = [], 0
    while i < len(lines):
        mine, theirs, talk = lines[i]
        out.append((mine[0::2], mine[1::2], theirs[1::2]))
        twin = i + 1 < len(lines) and lines[i + 1] == (theirs, mine, talk)
        i += 2 if twin else 1
    return out


def test_generator_follows_the_human_logs(shared_data):
    dialogues = human_dialogues(shared_data / "dealnodeal" / "data.txt")
    assert len(dialogues) == 6318  # 5916 stored from both perspectives, 402 from one
    pools = Counter(counts for counts, _, _ in dialogues)
    assert pools == POOL_FREQUENCIES  # the generator's table is this count
    assert set(pools) == set(count_vectors())  # every human pool is one the generator draws, and the other way round
    for counts, va, vb in dialogues:  # the value rules hold for every human scenario
        assert va in value_vectors(counts) and vb in value_vectors(counts) and valid_values(va, vb)

    def size_shares(counter):
        n = sum(counter.values())
        return {k: sum(m for c, m in counter.items() if sum(c) == k) / n for k in (5, 6, 7)}

    human = size_shares(pools)
    assert human == pytest.approx({5: 0.405, 6: 0.401, 7: 0.194}, abs=0.001)
    sampled = DealOrNoDeal().sample_scenarios(20_000, seed=11)
    assert all(1 <= x <= 4 for sc in sampled for x in sc.counts)
    ours = size_shares(Counter(sc.counts for sc in sampled))
    for k in (5, 6, 7):  # one standard error is about 0.35 points at 20,000 scenarios
        assert abs(ours[k] - human[k]) < 0.02, (k, ours[k], human[k])


def test_same_seed_same_scenarios():
    task = DealOrNoDeal()
    assert task.sample_scenarios(50, seed=3) == task.sample_scenarios(50, seed=3)
    assert task.sample_scenarios(50, seed=3) != task.sample_scenarios(50, seed=4)


def test_value_vectors_by_hand():
    assert sorted(value_vectors((5, 1, 1))) == sorted(
        [(0, 0, 10), (0, 1, 9), (0, 2, 8), (0, 3, 7), (0, 4, 6), (0, 5, 5), (0, 6, 4), (0, 7, 3), (0, 8, 2),
         (0, 9, 1), (0, 10, 0), (1, 0, 5), (1, 1, 4), (1, 2, 3), (1, 3, 2), (1, 4, 1), (1, 5, 0), (2, 0, 0)])


def test_offer_accept_ends_with_the_proposed_split():
    task = DealOrNoDeal()
    state = play_texts(task, SC, ["i want the balls [propose book=1 hat=0 ball=3]", "ok [accept]"])
    assert state.done and state.end_reason == "accept"
    out = task.outcome(state)
    assert out["A"]["score"] == 4 + 6 and out["B"]["score"] == 8  # A: book+3 balls; B: 2 hats
    assert out["A"]["share"] == (1, 0, 3) and out["B"]["share"] == (0, 2, 0)
    assert out["A"]["agreed"] and out["A"]["pareto"]


def test_counter_offer_replaces_the_standing_one():
    task = DealOrNoDeal()
    state = play_texts(task, SC, ["[propose book=1 hat=2 ball=3]", "no [propose book=1 hat=2 ball=0]", "[accept]"])
    out = task.outcome(state)
    assert out["B"]["share"] == (1, 2, 0) and out["A"]["share"] == (0, 0, 3)
    assert (out["A"]["score"], out["B"]["score"]) == (6, 10)


def test_a_capped_game_is_the_same_game_with_fewer_turns():
    task = DealOrNoDeal(protocol="offer", max_turns=10, invalid_penalty=0.5, notes=["B"])
    short = task.capped(4)
    assert (short.protocol, short.max_turns, short.invalid_penalty, short.notes) == ("offer", 4, 0.5, ("B",))
    assert task.max_turns == 10   # the game it was capped from is unchanged
    state = play_texts(short, SC, ["hi", "hello", "hi", "hello"])
    assert state.done and state.end_reason == "turn_cap"


def test_no_deal_and_turn_cap_score_zero():
    task = DealOrNoDeal(max_turns=3)
    state = play_texts(task, SC, ["[propose book=1 hat=0 ball=3]", "never [no deal]"])
    assert state.done and state.end_reason == "no_deal"
    assert all(o["score"] == 0 and not o["agreed"] for o in task.outcome(state).values())
    state = play_texts(task, SC, ["hi", "hello", "[propose book=1 hat=0 ball=3]"])
    assert state.done and state.end_reason == "turn_cap"
    assert task.outcome(state)["A"]["score"] == 0


@pytest.mark.parametrize("text, reason", [
    ("[accept]", "accept without a standing proposal"),
    ("[propose book=2 hat=0 ball=0]", "beyond the pool"),
    ("[propose book=one]", "malformed marker"),
    ("[propose book=1 hat=0 ball=0] [accept]", "2 markers"),
    ("sounds good. [propose book=i would like 1 hat", "unbalanced brackets"),
    ("ok ] [accept]", "unbalanced brackets"),
])
def test_invalid_markers_are_counted_forfeit_the_turn_and_cost_reward(text, reason):
    task = DealOrNoDeal(invalid_penalty=1.0)
    state = play_texts(task, SC, [text])
    assert reason in state.turns[0].invalid and not state.done
    assert "offer" not in state.info  # no effect on the game
    task.step(state, "[propose book=0 hat=2 ball=0]")
    task.step(state, "[accept]")
    out = task.outcome(state)
    assert out["A"]["n_invalid"] == 1 and out["A"]["reward"] == out["A"]["score"] - 1.0
    assert out["B"]["reward"] == out["B"]["score"]


def test_accepting_your_own_proposal_is_invalid():
    task = DealOrNoDeal()
    state = play_texts(task, SC, ["[propose book=1 hat=0 ball=3]", "[propose book=0 hat=2 ball=1]"])
    task.step(state, "hmm")          # A
    task.step(state, "[accept]")     # B accepts its own standing proposal: invalid
    assert state.turns[-1].invalid and not state.done


def test_free_invalid_markers_with_zero_penalty():
    task = DealOrNoDeal(invalid_penalty=0.0)
    state = play_texts(task, SC, ["[accept]", "[propose book=0 hat=2 ball=0]", "[accept]"])
    assert task.outcome(state)["A"]["reward"] == task.outcome(state)["A"]["score"] == 10


def test_selection_protocol_agreement_rule():
    task = DealOrNoDeal(protocol="selection")
    talk = ["i want the balls and the book", "fine, i take the hats", "<selection>"]
    # complementary own claims: agreement (claims about the counterpart are not part of the rule)
    state = play_texts(task, SC, talk + ["book=1 hat=0 ball=3 them: book=0 hat=2 ball=0", "item0=0 item1=2 item2=0"])
    assert state.done and task.deal(state) == {"A": (1, 0, 3), "B": (0, 2, 0)}
    # over-claiming: no agreement, both score 0
    state = play_texts(task, SC, talk + ["book=1 hat=1 ball=3", "book=0 hat=2 ball=0"])
    assert task.deal(state) is None and task.outcome(state)["B"]["score"] == 0
    # 'no agreement' and malformed selections: no agreement; malformed is counted
    state = play_texts(task, SC, talk + ["no agreement", "i think we agreed"])
    out = task.outcome(state)
    assert not out["A"]["agreed"] and out["B"]["n_invalid"] == 1 and out["A"]["n_invalid"] == 0


def test_selection_phase_views_and_turn_cap():
    task = DealOrNoDeal(protocol="selection", max_turns=2)
    state = play_texts(task, SC, ["hi", "hello"])
    assert not state.done and state.info["phase"] == "select" and state.end_reason == "turn_cap"
    assert task.current_role(state) == "A"
    assert "Selection" in task.view(state, "A")[-1]["content"]


def test_views_are_private_and_from_each_role():
    task = DealOrNoDeal()
    state = play_texts(task, SC, ["hello [propose book=1 hat=0 ball=3]"])
    va, vb = task.view(state, "A"), task.view(state, "B")
    assert "book=4 hat=0 ball=2" in va[0]["content"] and "book=2 hat=4 ball=0" not in va[0]["content"]
    assert "book=2 hat=4 ball=0" in vb[0]["content"]
    assert [m["role"] for m in va] == ["system", "user", "assistant"]  # A opened, after the opening cue
    assert [m["role"] for m in vb] == ["system", "user"]


def test_parsers_never_raise_on_garbage():
    for text in ["", "[", "]]][[", "[propose book=99999999999999999999 hat=0 ball=0]", "\x00", "[ACCEPT]"]:
        parse_offer(text, (1, 2, 3))
        parse_selection(text, (1, 2, 3))
    assert parse_offer("ok [ACCEPT]", (1, 2, 3))[0]["type"] == "accept"


@pytest.mark.parametrize("digit", ["\u2460", "\u0663", "\uff11", "\u2075", "\U0001d7d3"])  # 1 3 1 5 5 look-alikes
def test_only_ascii_digits_count(digit):
    action, why = parse_offer(f"[propose book={digit} hat=0 ball=0]", (1, 2, 3))
    assert action == {"type": "talk"} and "malformed marker" in why
    action, why = parse_selection(f"book={digit} hat=0 ball=0", (1, 2, 3))
    assert action["share"] is None and why == "malformed selection"


def test_huge_numbers_are_invalid_not_errors():
    huge = "9" * 5000  # int() refuses more than 4300 digits
    action, why = parse_offer(f"[propose book={huge} hat=0 ball=0]", (1, 2, 3))
    assert action == {"type": "talk"} and "beyond the pool" in why and len(why) < 200
    action, why = parse_selection(f"item0={huge} item1=0 item2=0", (1, 2, 3))
    assert action["share"] is None and "beyond the pool" in why
    assert parse_offer("[propose book=0001 hat=000 ball=3]", (1, 2, 3))[0]["share"] == (1, 0, 3)  # leading zeros


def test_pareto_by_hand():
    # A values books/balls, B values hats: giving B the hats and A the rest is Pareto-optimal
    assert is_pareto_optimal(SC, (1, 0, 3))
    assert not is_pareto_optimal(SC, (1, 2, 3))  # A gains nothing from the hats (value 0) that B wants
    assert not is_pareto_optimal(SC, (0, 2, 0))  # swapping is better for both
    assert len(all_splits(SC.counts)) == 2 * 3 * 4
    assert split_value((4, 0, 2), (1, 0, 3)) == 10


def test_metrics():
    task = DealOrNoDeal()
    games = [play_texts(task, SC, ["[propose book=1 hat=0 ball=3]", "[accept]"]),
             play_texts(task, SC, ["[accept]", "[no deal]"])]
    m = task.metrics(games)
    assert m["agreement"] == 0.5 and m["score_A"] == 5.0 and m["score_B"] == 4.0 and m["joint"] == 9.0
    assert m["pareto"] == 1.0 and m["invalid_rate"] == 0.25


def test_bad_task_parameters_are_named():
    with pytest.raises(ValueError, match="protocol='free'"):
        DealOrNoDeal(protocol="free")
    with pytest.raises(ValueError, match="max_turns"):
        DealOrNoDeal(max_turns=0)
    with pytest.raises(ValueError, match="unknown task 'chess'.*dealnodeal"):
        make_task("chess")


def test_held_out_personas_play_legal_games_to_the_end():
    """The held-out personas (one of another rule family: `reciprocal`) against every corpus persona, in both roles:
    every game ends by the rules, nothing is invalid, and some games agree."""
    from dialogrl.envs.dealnodeal import PERSONAS, UNSEEN_PERSONAS, ScriptedAgent, population
    from dialogrl.rollout import play

    task = DealOrNoDeal(protocol="offer")
    scenarios = task.sample_scenarios(60, seed=5)
    for new in UNSEEN_PERSONAS:
        for other in PERSONAS:
            for agents in ({"A": ScriptedAgent(new, 1), "B": ScriptedAgent(other, 2)},
                           {"A": ScriptedAgent(other, 1), "B": ScriptedAgent(new, 2)}):
                m = task.metrics([e.state for e in play(task, agents, scenarios)])
                assert m["invalid_rate"] == 0 and m["agreement"] > 0, (new, other, m)
    casual = population("A", ["reciprocal", "firm"], seed=1, style="casual")   # the human style of notebook 01
    assert {m.persona.style for m in casual.members.values()} == {"casual"}


def test_reciprocal_concedes_only_as_its_counterpart_does():
    """Tit-for-tat by hand (B, values 2/4/0, opening 8, floor 4): against a counterpart that never moves it
    keeps demanding 8; when the counterpart's offer to it rises from 0 to 4 its demand falls by 4 and it accepts."""
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.envs.dealnodeal.personas import UNSEEN_PERSONAS, reciprocal_demand

    task, p = DealOrNoDeal(), UNSEEN_PERSONAS["reciprocal"]
    agent = ScriptedAgent("reciprocal", seed=3)
    stuck = ["[propose book=1 hat=2 ball=3]", "[propose book=0 hat=2 ball=0]", "[propose book=1 hat=2 ball=3]"]
    state = play_texts(task, SC, stuck)
    assert reciprocal_demand(p, state, "B", SC.values[1], SC.counts) == 8.0
    turn = task.step(state, agent.utter(task, state, "B"))
    assert turn.invalid is None and turn.action["type"] == "propose"
    assert split_value(SC.values[1], turn.action["share"]) >= 8     # no concession to a counterpart that made none
    moving = stuck[:2] + ["[propose book=1 hat=1 ball=3]"]            # A now leaves it a hat: 0 -> 4
    state = play_texts(task, SC, moving)
    assert reciprocal_demand(p, state, "B", SC.values[1], SC.counts) == 4.0
    assert task.step(state, agent.utter(task, state, "B")).action["type"] == "accept"
