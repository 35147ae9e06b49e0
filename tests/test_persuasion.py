"""Persuasion for Good: the scenario generator, the rules by hand-worked cases, malformed markers, metrics, the
scripted personas of both roles, the strategy lexicon, the corpus, and (on the real data) the loader, the strategy
classifier and the human fit behind the scripted persuadees. Fast: no model is built."""
import math
import random

import numpy as np
import pytest

from conftest import play_texts
from dialogrl.envs import TASKS, make_task
from dialogrl.envs.persuasion import (
    ALL_PERSUADEES,
    HUMAN_FIT,
    LABELS,
    PERSUADEE_PERSONAS,
    PERSUADEE_PROFILES,
    PERSUADER_PERSONAS,
    STRATEGIES,
    UNSEEN_PERSUADEES,
    PersuasionForGood,
    PersuasionScenario,
    ScriptedAgent,
    StrategyClassifier,
    donate_marker,
    fit_human_response,
    hear,
    parse_marker,
    population,
    sample_scenario,
)
from dialogrl.envs.persuasion.corpus import persuasion_corpus
from dialogrl.envs.persuasion.personas import SAY
from dialogrl.envs.persuasion.wish import PRESSURE, wish
from dialogrl.rollout import play
from dialogrl.tiny import TINY_MODELS, check_corpus

SC = PersuasionScenario(persona="analytical", mood=0.0, id=3)
TASK = PersuasionForGood()


def test_generator_obeys_its_constraints_and_is_seeded():
    rng = random.Random(0)
    scenarios = [sample_scenario(rng, id=i) for i in range(3000)]
    assert {s.persona for s in scenarios} == set(PERSUADEE_PROFILES) and all(s.payment == 2.0 for s in scenarios)
    moods = np.array([s.mood for s in scenarios])
    assert abs(moods.mean()) < 0.05 and 0.7 < moods.std() < 0.8
    assert TASK.sample_scenarios(50, seed=4) == TASK.sample_scenarios(50, seed=4)
    assert [s.id for s in TASK.sample_scenarios(50, seed=4)] == list(range(50))
    assert TASK.sample_scenarios(50, seed=4) != TASK.sample_scenarios(50, seed=5)
    only = PersuasionForGood(personas=["frugal"]).sample_scenarios(20, seed=1)
    assert {s.persona for s in only} == {"frugal"}


@pytest.mark.parametrize("marker, amount", [("[DONATE $1]", 1.0), ("[donate $0.50]", 0.5), ("[DONATE $.5]", 0.5),
                                            ("[ Donate  $ 2.00 ]", 2.0), ("[DONATE $0]", 0.0)])
def test_donation_ends_the_game_and_scores_by_hand(marker, amount):
    state = play_texts(TASK, SC, ["hi, would you donate?", f"sure. {marker}"])
    assert state.done and state.end_reason == "donate" and state.info["donation"] == amount
    out = TASK.outcome(state)
    assert out["persuader"]["score"] == out["persuader"]["reward"] == pytest.approx(amount / 2)
    assert out["persuadee"]["score"] == pytest.approx(1 - amount / 2)
    assert out["persuader"]["success"] == (amount > 0)


def test_turn_cap_ends_with_nothing_given():
    state = play_texts(TASK, SC, ["hello", "hi"] * 5)
    assert state.done and state.end_reason == "turn_cap" and len(state.turns) == TASK.max_turns == 10
    assert TASK.outcome(state)["persuader"]["score"] == 0.0 and TASK.outcome(state)["persuadee"]["score"] == 1.0
    short = PersuasionForGood(max_exchanges=2)
    assert play_texts(short, SC, ["a", "b", "c", "d"]).end_reason == "turn_cap"
    with pytest.raises(RuntimeError, match="over"):
        TASK.step(play_texts(TASK, SC, ["a", "[DONATE $1]"]), "more")


@pytest.mark.parametrize("texts, reason", [
    (["[DONATE $1]"], "the persuader cannot"),
    (["hi", "[DONATE $3]"], "more than the $2.00 payment"),
    (["hi", "[DONATE $-1]"], "negative amount"),
    (["hi", "[DONATE 1]"], "malformed marker"),
    (["hi", "[DONATE $1.234]"], "malformed marker"),
    (["hi", "[GIVE $1]"], "malformed marker"),
    (["hi", "[DONATE $1] [DONATE $2]"], "2 markers"),
    (["hi", "[DONATE $1"], "unbalanced"),
    (["hi", "[DONATE $１]"], "not ASCII"),
    (["hi", "[DONATE $" + "9" * 5000 + "]"], "malformed marker"),
])
def test_invalid_markers_are_counted_forfeit_the_turn_and_cost_reward(texts, reason):
    state = play_texts(TASK, SC, texts)
    turn = state.turns[-1]
    assert turn.invalid is not None and reason in turn.invalid and not state.done
    out = TASK.outcome(state)
    assert out[turn.role]["n_invalid"] == 1 and out[turn.role]["reward"] == pytest.approx(out[turn.role]["score"] - 0.1)
    assert TASK.metrics([state])["invalid_rate"] == pytest.approx(1 / len(state.turns))
    assert PersuasionForGood(invalid_penalty=0).outcome(state)[turn.role]["reward"] == out[turn.role]["score"]


def test_parser_never_raises_on_garbage():
    rng = random.Random(1)
    alphabet = "[]$.-0123456789 donateDONATE１①\n"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        action, invalid = parse_marker(text)
        assert action["type"] in ("talk", "donate")
        assert (action["type"] == "donate") == (invalid is None and "[" in text)
        if action["type"] == "donate":
            assert 0 <= action["amount"] <= 2


def test_views_are_private_and_from_each_role():
    state = play_texts(TASK, SC, ["hi there", "hello"])
    persuader, persuadee = TASK.view(state, "persuader"), TASK.view(state, "persuadee")
    assert "You are the persuader" in persuader[0]["content"] and PERSUADEE_PROFILES["analytical"] not in \
        persuader[0]["content"]
    assert PERSUADEE_PROFILES["analytical"] in persuadee[0]["content"] and "[DONATE $x]" in persuadee[0]["content"]
    assert [m["role"] for m in persuader[1:]] == ["user", "assistant", "user"]   # the opening, then the talk
    assert [m["role"] for m in persuadee[1:]] == ["user", "assistant"]
    assert TASK.current_role(state) == "persuader"


def test_the_persuadee_view_marks_how_it_leans():
    """The persuadee's private note after each persuader turn: its profile's rule and mood, over the talk so far
    (wish.leaning); a rude turn pushes it to keeping; the persuader never sees the notes, nor does a pretrained
    persuadee (counterpart_view)."""
    warm = PersuasionScenario(persona="sympathetic", mood=0.0, id=1)
    state = play_texts(TASK, warm, ["hello there.", "hi.", "imagine a child going to bed hungry tonight.", "oh.",
                                    "stop wasting my time, you are selfish.", "hm.", "you are selfish, hand it over.",
                                    "hm.", "useless. donate now."])
    notes = [m["content"].split("\n")[-1] for m in TASK.view(state, "persuadee") if m["role"] == "user"]
    # z: 0.44 (sigmoid 0.61), + 1.35 for the emotion appeal, - 1 per pressuring turn: 1.79, 0.79, -0.21, -1.21
    assert notes == ["(you lean to giving)"] * 3 + ["(you are unsure)", "(you lean to keeping it)"]
    assert "(you lean" not in str(TASK.view(state, "persuader"))
    assert "(you lean" not in str(PersuasionForGood(persuadee_notes=False).view(state, "persuadee"))
    bare = TASK.counterpart_view(state, "persuadee")          # a pretrained counterpart decides from the talk alone
    assert "(you lean" not in str(bare) and len(bare) == len(TASK.view(state, "persuadee"))
    p = PERSUADEE_PERSONAS["sympathetic"]
    assert ScriptedAgent.wish(p, state) == pytest.approx(wish(p.likes, p.base, 0.0, state.turns[:4]) - 3 * PRESSURE)
    unsure = play_texts(TASK, SC, ["hello there."])   # analytical, mood 0: z = 0.14, sigmoid 0.53
    assert TASK.view(unsure, "persuadee")[-1]["content"].endswith("(you are unsure)")


def test_success_goal_scores_any_donation():
    task = PersuasionForGood(persuader_goal="success")
    out = task.outcome(play_texts(task, SC, ["would you donate?", "ok [DONATE $0.10]"]))
    assert out["persuader"]["score"] == 1.0 and out["persuadee"]["score"] == 0.0
    assert TASK.outcome(play_texts(TASK, SC, ["would you donate?", "ok [DONATE $0.10]"]))["persuader"]["score"] == \
        pytest.approx(0.05)
    with pytest.raises(ValueError, match="persuader_goal"):
        PersuasionForGood(persuader_goal="amount")


def test_metrics_by_hand():
    games = [play_texts(TASK, SC, ["ask", "[DONATE $1]"]), play_texts(TASK, SC, ["ask", "no [DONATE $0]"]),
             play_texts(TASK, SC, ["a", "b"] * 5), play_texts(TASK, SC, ["ask", "[DONATE $2]"])]
    m = TASK.metrics(games)
    assert m["n_games"] == 4 and m["success"] == 0.5 and m["donation"] == pytest.approx(0.75)
    assert m["reward_persuader"] == pytest.approx(0.375) and m["reward_persuadee"] == pytest.approx(0.625)
    assert m["donate_rate"] == 0.75 and m["turn_cap_rate"] == 0.25 and m["invalid_rate"] == 0
    assert m["turns"] == pytest.approx((2 + 2 + 10 + 2) / 4)


def test_hear_finds_each_strategy_in_the_scripted_phrases():
    for s, phrases in SAY.items():
        if s in LABELS:
            assert all(s in hear(p) for p in phrases), s
    assert hear("Imagine the children. Would you donate?") == ["emotion-appeal", "ask"]
    assert hear("hello, how are things") == []
    assert "emotion-appeal" not in hear("the heartland")   # cues match at word edges


def test_personas_play_each_other_and_strategy_matters():
    """Every persuader against every persuadee, the held-out ones included: games end by the rules, nothing is
    invalid, and which strategies a persuader uses changes who gives (the matrix is not flat)."""
    scenarios = TASK.sample_scenarios(150, seed=1)
    rates = {}
    for pr in PERSUADER_PERSONAS:
        for pe in ALL_PERSUADEES:
            eps = play(TASK, {"persuader": ScriptedAgent(pr), "persuadee": ScriptedAgent(pe)}, scenarios)
            m = TASK.metrics([e.state for e in eps])
            assert m["invalid_rate"] == 0 and m["donate_rate"] == 1.0   # a scripted persuadee always decides
            rates[pr, pe] = m["success"]
    assert rates["storyteller", "sympathetic"] > rates["factual", "sympathetic"] + 0.3
    assert rates["factual", "analytical"] > rates["storyteller", "analytical"] + 0.3
    assert rates["storyteller", "contrarian"] < rates["pushy", "contrarian"] - 0.3
    assert max(rates.values()) - min(rates.values()) > 0.5


def test_persuadee_gives_more_the_more_it_is_moved():
    """The decision model by hand: a persuadee's log-odds add the human fit and its persona's likes."""
    p = PERSUADEE_PERSONAS["sympathetic"]
    state = play_texts(TASK, SC, ["imagine a child going to bed hungry tonight.", "oh."])
    z = ScriptedAgent.wish(p, state)
    assert z == pytest.approx(HUMAN_FIT["intercept"] + p.base + SC.mood + HUMAN_FIT["beta"]["emotion-appeal"]
                              + p.likes["emotion-appeal"])
    cold = play_texts(TASK, SC, ["would you donate?", "hmm."])
    assert ScriptedAgent.wish(p, cold) == pytest.approx(HUMAN_FIT["intercept"] + p.base - 0.5)


def test_attentive_persuadee_gives_to_a_persuader_who_listens():
    """Another rule family: the attentive persuadee's wish to give reads whether the persuader takes up what it said
    about itself, and no strategy. By hand, then in play: a persuader that echoes its words wins more donations
    than the scripted persuaders, none of which listens."""
    from dialogrl.game import Agent

    p = UNSEEN_PERSUADEES["attentive"]
    mention = p.mentions[0][0]   # 'i work night shifts as a nurse.'
    heard = play_texts(TASK, SC, ["hi there!", f"hi. {mention}", "a nurse? that must be hard work.", "it is."])
    missed = play_texts(TASK, SC, ["hi there!", f"hi. {mention}", "imagine a child going to bed hungry tonight.",
                                   "hmm."])
    assert ScriptedAgent.attentive_wish(p, heard) == pytest.approx(p.base + SC.mood + p.uptake)
    assert ScriptedAgent.attentive_wish(p, missed) == pytest.approx(p.base + SC.mood - p.ignored)
    plain = play_texts(TASK, SC, ["hi there!", "hello."])
    moving = play_texts(TASK, SC, ["imagine a child going to bed hungry tonight. i'll donate too.", "hello."])
    assert ScriptedAgent.attentive_wish(p, plain) == ScriptedAgent.attentive_wish(p, moving)  # strategies: none

    class Echo(Agent):   # says the persuadee's last line back to it; asks from its third turn
        def act(self, requests):
            out = []
            for r in requests:
                talk = r.state.talk_turns()
                out.append((talk[-1].text if talk else "hi!") + (" would you donate?" if len(talk) >= 4 else ""))
            return out

    scenarios = TASK.sample_scenarios(200, seed=2)
    echo = TASK.metrics([e.state for e in play(TASK, {"persuader": Echo(),
                                                      "persuadee": ScriptedAgent("attentive", 1)}, scenarios)])
    for name in PERSUADER_PERSONAS:
        m = TASK.metrics([e.state for e in play(TASK, {"persuader": ScriptedAgent(name),
                                                       "persuadee": ScriptedAgent("attentive", 1)}, scenarios)])
        assert m["invalid_rate"] == 0 and m["donate_rate"] == 1.0
        assert echo["success"] > m["success"] + 0.2, (name, echo["success"], m["success"])


def test_persona_likes_average_to_the_human_fit():
    for s in STRATEGIES:
        assert abs(sum(p.likes.get(s, 0.0) for p in PERSUADEE_PERSONAS.values())) < 1e-2, s
    assert set(PERSUADEE_PERSONAS) == set(PERSUADEE_PROFILES)
    assert all(PERSUADEE_PERSONAS[n].about == line for n, line in PERSUADEE_PROFILES.items())
    assert not set(UNSEEN_PERSUADEES) & set(PERSUADEE_PROFILES)
    assert math.isclose(sum(HUMAN_FIT["amounts"].values()), 1.0, abs_tol=1e-2)


def test_scripted_agents_are_deterministic_per_game_and_keep_to_their_role():
    scenarios = TASK.sample_scenarios(30, seed=2)
    agents = {"persuader": population("persuader", seed=1), "persuadee": ScriptedAgent(None, seed=2)}
    a = [e.transcript() for e in play(TASK, agents, scenarios)]
    b = [e.transcript() for e in play(TASK, agents, scenarios[::-1])][::-1]
    assert a == b   # each game plays the same whatever else is in the batch
    with pytest.raises(ValueError, match="cannot play the persuader"):
        play(TASK, {"persuader": ScriptedAgent("frugal"), "persuadee": ScriptedAgent(None)}, scenarios[:1])
    with pytest.raises(ValueError, match="unknown persona 'nobody'"):
        ScriptedAgent("nobody")
    with pytest.raises(ValueError, match="unknown persuadee persona"):
        population("persuadee", ["nobody"])


def test_populations_mix_personas_and_land_near_the_human_rate():
    eps = play(TASK, {"persuader": population("persuader", seed=1),
                      "persuadee": ScriptedAgent(None, seed=2)}, TASK.sample_scenarios(600, seed=77))
    assert {e.agents["persuader"] for e in eps} == set(PERSUADER_PERSONAS)
    assert {e.scenario.persona for e in eps} == set(PERSUADEE_PERSONAS)
    m = TASK.metrics([e.state for e in eps])
    assert 0.4 <= m["success"] <= 0.7   # the human persuadees: 49% (annotated dialogues), 54% (all)


def test_corpus_is_deterministic_and_alternates_views():
    a = persuasion_corpus(n_dialogues=40, seed=3)
    assert a == persuasion_corpus(n_dialogues=40, seed=3) and a != persuasion_corpus(n_dialogues=40, seed=4)
    check_corpus(a)
    assert "You are the persuader" in a[0][0]["content"] and "You are a worker" in a[1][0]["content"]
    both = persuasion_corpus(n_dialogues=10, seed=3, views="both")
    assert len(both) == 20 and both[0] == a[0] and both[3] == a[1]
    assert any("[DONATE $" in m["content"] for c in a for m in c)
    assert not any(p.about in m["content"] for p in UNSEEN_PERSUADEES.values() for c in a for m in c)


def test_registered_as_task_and_tiny_model():
    assert isinstance(make_task("persuasion", max_exchanges=3), PersuasionForGood) and "persuasion" in TASKS
    recipe = TINY_MODELS["tiny-persuasion"]
    assert recipe.corpus is persuasion_corpus and len(recipe.make_corpus(n_dialogues=4)) == 4


def test_bad_task_parameters_are_named():
    with pytest.raises(ValueError, match="max_exchanges"):
        PersuasionForGood(max_exchanges=0)
    with pytest.raises(ValueError, match="mood_sd"):
        PersuasionForGood(mood_sd=-1)
    with pytest.raises(ValueError, match="invalid_penalty"):
        PersuasionForGood(invalid_penalty=-0.1)
    with pytest.raises(ValueError, match="unknown profile"):
        PersuasionForGood(personas=["grumpy"])
    assert donate_marker(0.5) == "[DONATE $0.50]" and parse_marker(donate_marker(0.5))[0]["amount"] == 0.5


# ------------------------------------------------------------------------------------------------ the real data

@pytest.fixture(scope="module")
def p4g(shared_data):
    from dialogrl.envs.persuasion.data import load_p4g

    return load_p4g(shared_data / "persuasionforgood")


def test_loader_reads_the_release(p4g, tmp_path):
    from dialogrl.envs.persuasion.data import load_p4g

    assert len(p4g) == 1017 and sum(r.sentences is not None for r in p4g) == 300
    assert all(r.turns[0][0] == "persuader" for r in p4g)
    assert all(a[0] != b[0] for r in p4g for a, b in zip(r.turns, r.turns[1:]))   # roles alternate
    assert all(0 <= r.donation <= 2 for r in p4g)
    assert np.mean([r.donation > 0 for r in p4g]) == pytest.approx(545 / 1017)
    with pytest.raises(FileNotFoundError, match="full_dialog.csv"):
        load_p4g(tmp_path)


def test_strategy_classifier_beats_the_majority_label(p4g):
    clf = StrategyClassifier().fit(p4g)
    r = clf.report
    assert r["dialogues"] == 300 and r["held_out_dialogues"] == 60
    assert r["accuracy"] > r["majority_accuracy"] + 0.25 and r["macro_f1"] > 0.45
    assert set(clf.predict(["Imagine a child going to bed hungry.", "Would you like to donate some of it?"])) <= \
        set(LABELS)
    assert [len(x) for x in clf.label_turns(["Hi. How are you?", "Save the Children is great."])] == [2, 1]
    assert str(clf).startswith(f"persuader classifier: accuracy {r['accuracy']:.3f}") and "60 held-out" in str(clf)
    assert "not measured" in str(StrategyClassifier())


def test_persuadee_act_classifier_reads_the_persuadee_annotation(p4g):
    clf = StrategyClassifier(role="persuadee").fit(p4g)
    assert clf.report["dialogues"] == 300 and clf.report["accuracy"] > clf.report["majority_accuracy"] + 0.2
    acts = {a for r in p4g if r.responses for _, _, a in r.responses}
    assert {"agree-donation", "ask-org-info", "disagree-donation"} <= acts and "emotion-appeal" not in acts
    assert set(clf.predict(["Sure, I will donate one dollar.", "What does the charity do?"])) <= acts
    with pytest.raises(ValueError, match="persuader's or the persuadee's"):
        StrategyClassifier(role="charity")


def test_human_fit_constants_come_from_the_data(p4g):
    fit = fit_human_response(p4g)
    assert fit["n"] == 300 and fit["intercept"] == HUMAN_FIT["intercept"]
    assert fit["beta"] == pytest.approx(HUMAN_FIT["beta"], abs=0.006)
    assert fit["amounts"] == pytest.approx(HUMAN_FIT["amounts"], abs=0.0006)


def test_human_persuadee_corpus(shared_data):
    from dialogrl.envs.persuasion.data import p4g_human_corpus

    corpus = p4g_human_corpus(shared_data / "persuasionforgood")
    check_corpus(corpus)
    assert len(corpus) == 1017 and all(c[0]["role"] == "system" and "You are a worker" in c[0]["content"]
                                       for c in corpus)
    assert all(sum(m["role"] == "assistant" for m in c) <= 5 for c in corpus)
    assert all(c[-1]["role"] == "assistant" and c[-1]["content"].endswith("]") for c in corpus)
    gave = [parse_marker(c[-1]["content"])[0]["amount"] > 0 for c in corpus]
    assert np.mean(gave) == pytest.approx(545 / 1017)
    assert {p for p in PERSUADEE_PROFILES if any(PERSUADEE_PROFILES[p] in c[0]["content"] for c in corpus)} == \
        set(PERSUADEE_PROFILES)
    with pytest.raises(ValueError, match="--data"):
        p4g_human_corpus(None)


def test_strategy_labels_and_the_room_tests_reference_persuaders():
    """Each sentence's strategy: by the cue lexicon without a classifier ("other" where it hears none); the room
    test's references: every scripted persona and a single-strategy persuader per strategy."""
    from dialogrl.envs.persuasion import PERSUADER_PERSONAS, STRATEGIES, reference_persuaders, strategy_labels

    turns = ["Hello there. Every dollar saves a child's life.", "ok"]
    labels = strategy_labels(turns)
    assert len(labels) == 3 and labels[0] == "other" and labels[-1] == "other"
    refs = reference_persuaders()
    assert set(PERSUADER_PERSONAS) < set(refs) and len(refs) == len(PERSUADER_PERSONAS) + len(STRATEGIES)
