"""Social scenes (notebook 02's game): the generator, the rules by hand-worked cases, malformed markers, the
relationship rules, the goal-relationship trade-off among scripted strategies, the scripted personas, the corpus,
the rule-based judge, and (on the real data) the SOTOPIA loaders and the hard scenes' ids. Fast: no model is built."""
import numpy as np
import pytest

from conftest import play_texts
from dialogrl.envs import TASKS, make_task
from dialogrl.envs.social import (
    AGENT_PERSONAS,
    ALL_PARTNERS,
    HARD_SCENES,
    PARTNERS,
    TRAIN_SCENES,
    UNSEEN_PARTNERS,
    ScriptedAgent,
    SocialScenario,
    SocialScenes,
    hear,
    parse_marker,
    population,
    profile_from_traits,
    relationship_trace,
)
from dialogrl.envs.social.corpus import social_corpus
from dialogrl.envs.social.judge import RuleJudge, stage_of
from dialogrl.envs.social.personas import first_person, swap_person
from dialogrl.rewards import DIMENSIONS
from dialogrl.rollout import play

TASK = SocialScenes()
SC = SocialScenario(TRAIN_SCENES["car"], PARTNERS["warm"], mood=0.0, id=3)


def test_generator_is_seeded_paired_and_keeps_hard_scenes_and_unseen_partners_out():
    a = TASK.sample_scenarios(400, seed=4)
    assert a == TASK.sample_scenarios(400, seed=4) and a != TASK.sample_scenarios(400, seed=5)
    assert [s.id for s in a] == list(range(400))
    assert {s.scene.name for s in a} == set(TRAIN_SCENES) and {s.partner.name for s in a} == set(PARTNERS)
    moods = np.array([s.mood for s in a])
    assert abs(moods.mean()) < 0.1 and 0.65 < moods.std() < 0.85
    hard = SocialScenes(scenes="hard", partners=list(UNSEEN_PARTNERS)).sample_scenarios(200, seed=1)
    assert {s.scene.name for s in hard} == set(HARD_SCENES) and all(s.scene.hard for s in hard)
    assert {s.partner.name for s in hard} == set(UNSEEN_PARTNERS)
    assert not set(TRAIN_SCENES) & set(HARD_SCENES) and len(HARD_SCENES) == 14


@pytest.mark.parametrize("marker, goal, success", [("[AGREE]", 10.0, True), ("[agree partly]", 5.0, False),
                                                   ("[ Agree   Partly ]", 5.0, False)])
def test_agreement_gives_one_closing_turn_and_scores_by_hand(marker, goal, success):
    state = play_texts(TASK, SC, ["hi! how are you doing?", "good.", "could you lend me your car?", f"ok {marker}"])
    assert not state.done and state.info["agreement"] in ("full", "partly")
    TASK.step(state, "thank you so much!")
    assert state.done and state.end_reason == "agree" and len(state.turns) == 5
    out = TASK.outcome(state)
    # favourability: greet+rapport 0.5 x warmth; the ask after rapport costs nothing; the closing thanks 0.5 x warmth
    w = PARTNERS["warm"].warmth
    assert out["agent"]["relationship"] == pytest.approx(0.5 * w + 0.5 * w, abs=1e-3)
    assert out["agent"]["goal"] == goal and out["agent"]["success"] == success
    assert out["agent"]["score"] == pytest.approx(goal / 10 + 0.1 * out["agent"]["relationship"])
    assert out["partner"]["score"] == pytest.approx(1 - goal / 10)


def test_refusal_does_not_end_the_game_and_the_turn_cap_does():
    state = play_texts(TASK, SC, ["could you lend me your car?", "no. [REFUSE]"] + ["hm", "hm"] * 4)
    assert state.done and state.end_reason == "turn_cap" and len(state.turns) == TASK.max_turns == 10
    assert state.info["refusals"] == 1 and TASK.outcome(state)["agent"]["goal"] == 0.0
    late = play_texts(TASK, SC, ["hi"] * 9 + ["fine [AGREE]"])   # an agreement on the last turn: no closing turn
    assert late.done and late.end_reason == "agree" and TASK.outcome(late)["agent"]["goal"] == 10.0
    with pytest.raises(RuntimeError, match="over"):
        TASK.step(late, "more")


@pytest.mark.parametrize("texts, reason", [
    (["[AGREE]"], "the agent cannot [AGREE]"),
    (["hi", "[YES]"], "malformed marker"),
    (["hi", "[AGREE] [AGREE]"], "2 markers"),
    (["hi", "ok [AGREE"], "unbalanced"),
    (["hi", "[AGRÉE]"], "not ASCII"),
])
def test_invalid_markers_are_forfeited_counted_and_penalised(texts, reason):
    state = play_texts(TASK, SC, texts)
    bad = state.turns[-1]
    assert bad.invalid is not None and reason in bad.invalid and "agreement" not in state.info
    assert TASK.outcome(state)[bad.role]["n_invalid"] == 1
    assert TASK.metrics([state])["invalid_rate"] == pytest.approx(1 / len(texts))


def test_parse_marker_never_raises_on_junk():
    for text in ["", "[", "]]", "[AGREE PARTLY PLEASE]", "[refuse]", "x" * 100_000 + "[AGREE]", "\x00[agree]"]:
        action, invalid = parse_marker(text)
        assert action["type"] in ("talk", "agree", "refuse")
    assert parse_marker("fine. [refuse]") == ({"type": "refuse"}, None)


def test_relationship_rules_by_hand():
    g = PARTNERS["guarded"]
    sc = SocialScenario(TRAIN_SCENES["car"], g, mood=0.0)
    # a cold ask (-0.3); pressure (-1.0 x pride); a second ask (free); after a refusal a third, bare ask: beyond the
    # second (-0.4 x pride) and ignoring the refusal (-0.3 x pride)
    state = play_texts(TASK, sc, ["could you lend me your car?", "no [REFUSE]", "come on, you have to.", "no.",
                                  "could you lend me your car?", "no [REFUSE]", "would you lend me your car?"])
    p = g.pride
    assert relationship_trace(state) == pytest.approx([-0.3, -0.3 - p, -0.3 - p, -0.3 - p - 0.7 * p], abs=1e-3)
    # warm acts wear off: the third rapport turn adds nothing
    w = g.warmth
    warm = play_texts(TASK, sc, ["how are you doing?", "ok", "how are you doing?", "ok", "how are you doing?"])
    assert relationship_trace(warm) == pytest.approx([0.5 * w, 0.75 * w, 0.75 * w], abs=1e-3)
    assert hear("i know you need the car on monday.", TRAIN_SCENES["car"]) == ["empathy", "concern"]


def test_literal_partner_reads_concrete_terms_and_no_acts():
    """Another rule family: the literal partner (a TermsProfile) reads the concrete terms of the agent's turns
    (terms.py) and none of the acts the rule judge reads. By hand, then in play: an agent that states terms wins
    more agreements from it than any scripted agent."""
    from dialogrl.envs.social import TermsProfile, partner_trace
    from dialogrl.envs.social.personas import terms_wish
    from dialogrl.envs.social.task import terms_trace
    from dialogrl.envs.social.terms import concrete_terms, names_request
    from dialogrl.game import Agent

    car = TRAIN_SCENES["car"]   # the partner needs the car on monday; the request: for the weekend
    assert concrete_terms("i'd bring it back by 6pm on sunday and fill the tank for $40.", car) == {
        "6pm", "sunday", "$40"}
    assert concrete_terms("i'll have it back before monday, for the weekend.", car) == set()   # the scene's own
    assert concrete_terms("two hours, half an hour, 3 days", None) == {"two hours", "half an hour", "3 days"}
    assert names_request("could you lend me your car?", car) and not names_request("how are you?", car)
    p = UNSEEN_PARTNERS["literal"]
    assert isinstance(p, TermsProfile)
    sc = SocialScenario(car, p, mood=0.0)
    z0 = p.base - car.stake - 0.8 + 0.15 * sc.relationship
    vague = play_texts(TASK, sc, ["hi! could you lend me your car?", "what exactly? [REFUSE]"])
    warm = play_texts(TASK, sc, ["i understand, you're the best, thank you. could you lend me your car?", "hm."])
    firm = play_texts(TASK, sc, ["i'd bring it back by 6pm on sunday. could you lend me your car?", "hm."])
    assert terms_wish(p, vague) == pytest.approx(z0 - p.vague) == terms_wish(p, warm)   # kind words: nothing
    assert terms_wish(p, firm) == pytest.approx(z0 + 2 * p.terms)
    # its favourability is its own (the relationship score); the act rules' trace is what the judge reads
    assert partner_trace(vague) == terms_trace(vague) == [-0.5] and partner_trace(firm) == [0.5]
    assert TASK.outcome(firm)["agent"]["relationship"] == 0.5
    assert partner_trace(play_texts(TASK, SC, ["how are you doing?"])) == [0.5 * SC.partner.warmth]

    class Specific(Agent):   # states terms and the request every turn
        def act(self, requests):
            return [f"i'd need it from 9am to 5pm on friday, two hours at most. could you {r.state.scenario.scene.ask}?"
                    for r in requests]

    task = SocialScenes(scenes="hard", partners=["literal"])
    scenarios = task.sample_scenarios(200, seed=4)
    specific = task.metrics([e.state for e in play(task, {"agent": Specific(), "partner": ScriptedAgent(None, 2)},
                                                   scenarios)])
    for name in AGENT_PERSONAS:
        m = task.metrics([e.state for e in play(task, {"agent": ScriptedAgent(name, 1),
                                                       "partner": ScriptedAgent(None, 2)}, scenarios)])
        assert m["invalid_rate"] == 0 and m["turns"] <= task.max_turns
        assert specific["goal_rate"] > m["goal_rate"] + 0.2, (name, specific["goal_rate"], m["goal_rate"])


def test_profiles_from_big_five_follow_the_stated_rules():
    p = profile_from_traits("x", "about", "Openness to Experience - High; Conscientiousness - Low; Extraversion - High;"
                            " Agreeableness - High; Neuroticism - High", "Cautious")
    assert (p.warmth, p.pride, p.pushover, p.pragmatism, p.base) == (1.45, 1.1, 1.0, 0.8, 0.4)
    low = ("Openness to Experience - Low; Conscientiousness - High; Extraversion - Low; Agreeableness - Low; "
           "Neuroticism - Low")
    assert profile_from_traits("y", "a", low, "Analytical").pragmatism == 1.3
    with pytest.raises(ValueError, match="big_five"):
        profile_from_traits("z", "a", "Openness - High", "")


def _metrics(agent, scenes="train", n=600):
    task = SocialScenes(scenes=scenes, partners=list(ALL_PARTNERS))
    eps = play(task, {"agent": ScriptedAgent(agent, seed=1), "partner": ScriptedAgent(None, seed=2)},
               task.sample_scenarios(n, seed=11))
    return task.metrics([e.state for e in eps])


def test_goal_and_relationship_trade_off_among_scripted_strategies():
    """Pushing wins concessions and costs the relationship; flattery wins the relationship and never the goal; the
    balanced strategy (rapport, the partner's concern, a reasoned ask, thanks) does well on both."""
    m = {name: _metrics(name) for name in ("pushy", "flatterer", "balanced")}
    assert m["pushy"]["goal"] > m["flatterer"]["goal"] + 3 and m["flatterer"]["goal"] == 0.0
    assert m["flatterer"]["relationship"] > m["pushy"]["relationship"] + 2
    assert m["balanced"]["goal"] > m["pushy"]["goal"] + 1 and m["balanced"]["relationship"] > 1.0
    # against a pushover, pressure buys agreement: pushy's partial-or-full rate beats a polite direct ask's
    pliant = SocialScenes(partners=["pliant"])
    sc = pliant.sample_scenarios(600, seed=3)
    rate = {a: pliant.metrics([e.state for e in play(pliant, {"agent": ScriptedAgent(a, seed=1),
                                                                 "partner": ScriptedAgent(None, seed=2)}, sc)])
            for a in ("pushy", "direct")}
    assert rate["pushy"]["agree_rate"] > rate["direct"]["agree_rate"] - 0.05
    assert rate["pushy"]["relationship"] < rate["direct"]["relationship"] - 1


def test_hard_scenes_are_harder():
    assert _metrics("balanced", "hard")["goal_rate"] < _metrics("balanced", "train")["goal_rate"]


def test_personas_are_deterministic_and_role_checked():
    sc = TASK.sample_scenarios(30, seed=2)
    agents = {"agent": population("agent", seed=1), "partner": ScriptedAgent(None, seed=2)}
    a = [[t.text for t in e.state.turns] for e in play(TASK, agents, sc)]
    b = [[t.text for t in e.state.turns] for e in play(TASK, agents, sc)]
    assert a == b and set(AGENT_PERSONAS) >= {"balanced", "pushy", "flatterer"}
    with pytest.raises(ValueError, match="cannot play the partner"):
        play(TASK, {"agent": ScriptedAgent("pushy"), "partner": ScriptedAgent("pushy")}, sc[:1])
    with pytest.raises(ValueError, match="unknown persona"):
        ScriptedAgent("nobody")
    with pytest.raises(ValueError, match="unknown partner persona"):
        population("partner", ["nobody"])


def test_scripted_texts_read_as_the_speaker_says_them():
    assert first_person("keep your car safe; you need it on monday") == "keep my car safe; i need it on monday"
    assert swap_person("lend me your car for one day") == "lend you my car for one day"
    for s in list(TRAIN_SCENES.values()) + list(HARD_SCENES.values()):
        # the partner offers the agent's request back ("cover half of your shift") and states its own goal as its own
        assert "me" not in swap_person(s.partial).split(), s.name
        assert not set(first_person(s.concern).replace(";", " ").replace(":", " ").split()) & {"your", "you"}, s.name
        assert "concern" in hear(s.ack, s), s.name


def test_corpus_is_deterministic_and_private():
    a = social_corpus(40, seed=1)
    assert a == social_corpus(40, seed=1) and a != social_corpus(40, seed=2)
    assert [c[0]["content"].count("Your goal") for c in a[:4]] == [1, 0, 1, 0]   # agent view, partner view, ...
    partner_views = [c for c in a if "You are the partner" in c[0]["content"]]
    assert partner_views and all("[AGREE]" in c[0]["content"] for c in partner_views)
    text = " ".join(m["content"] for c in a for m in c)
    assert not any(s.setting in text for s in HARD_SCENES.values())
    assert not any(p.about in text for p in UNSEEN_PARTNERS.values())


def test_task_is_registered_and_bad_parameters_are_named():
    assert TASKS["social"] is SocialScenes and isinstance(make_task("social"), SocialScenes)
    for kwargs, name in [({"max_exchanges": 0}, "max_exchanges"), ({"mood_sd": -1}, "mood_sd"),
                         ({"relationship_weight": -0.1}, "relationship_weight"), ({"scenes": "easy"}, "scenes"),
                         ({"scenes": ["nowhere"]}, "scenes"), ({"partners": ["nobody"]}, "partners")]:
        with pytest.raises(ValueError, match=name):
            SocialScenes(**kwargs)


# ------------------------------------------------------------------------------------------------ the judge

def test_rule_judge_writes_two_to_four_criteria_per_dimension_and_reads_stages_from_context():
    sc = TASK.sample_scenarios(200, seed=7)
    eps = play(TASK, {"agent": population("agent", seed=1), "partner": ScriptedAgent(None, seed=2)}, sc)
    judge = RuleJudge()
    stages = []
    for e in eps:
        js = judge.judge(TASK, e.state, "agent")
        assert len(js) == sum(t.role == "agent" for t in e.state.turns)
        for j in js:
            assert set(j.criteria) == set(DIMENSIONS)
            assert all(2 <= len(j.criteria[d]) <= 4 for d in DIMENSIONS), {d: len(j.criteria[d]) for d in DIMENSIONS}
            assert all(0.0 <= v <= 1.0 for v in j.scores().values())
            stages.append(j.stage)
    assert set(stages) == {"early", "mid", "late"}
    # the same turn count, different stages: the stage follows the context
    asked = play_texts(TASK, SC, ["could you lend me your car?", "hm"])
    chat = play_texts(TASK, SC, ["how are you doing?", "hm"])
    assert stage_of(asked, 0, False) == "mid" and stage_of(chat, 0, False) == "early"
    agreed = play_texts(TASK, SC, ["hi, could you lend me your car?", "ok [AGREE]", "thanks!"])
    assert stage_of(agreed, 2, False) == "late"
    with pytest.raises(ValueError, match="agent"):
        judge.judge(TASK, agreed, "partner")


def test_rule_judge_scores_good_turns_above_bad_ones():
    judge = RuleJudge()
    good = play_texts(TASK, SC, ["hi! how are you doing?", "fine, busy week.",
                                 "i know you need the car on monday. it would help me a lot, could you lend me your "
                                 "car for the weekend?"])
    bad = play_texts(TASK, SC, ["hi! how are you doing?", "fine, busy week.",
                                "come on, you have to lend me your car, don't be so selfish"])
    g, b = judge.judge(TASK, good)[1].scores(), judge.judge(TASK, bad)[1].scores()
    assert g["strategic_positioning"] > b["strategic_positioning"]
    assert g["relational_attunement"] > b["relational_attunement"]
    assert sum(g.values()) > sum(b.values())


def test_episode_estimates_read_agreement_and_warmth():
    turns = [("A", "hi! how are you? could you help me move on sunday?"), ("B", "sure, deal.")]
    assert RuleJudge.episode_estimates(turns, "A")["goal"] == 10.0
    assert RuleJudge.episode_estimates([("A", "how are you?"), ("B", "fine.")], "A")["goal"] == 0.0
    rude = RuleJudge.episode_estimates([("A", "come on, you have to, don't be so selfish"), ("B", "no.")], "A")
    assert rude["relationship"] < 0 < RuleJudge.episode_estimates(turns, "A")["relationship"]


# -------------------------------------------------------------------------------------------- real data

def test_sotopia_loaders_and_the_hard_scene_ids(shared_data):
    from dialogrl.envs.social.data import load_sotopia_episodes, load_sotopia_profiles

    eps = load_sotopia_episodes(shared_data / "sotopia")
    assert len(eps) == 28 and {e.env_id for e in eps} == set(HARD_SCENES)
    ids = (shared_data / "sotopia" / "env_ids.txt").read_text().split("SOTOPIA-ALL")[0]
    assert all(i in ids for i in HARD_SCENES)
    for e in eps:
        assert len(e.turns) >= 3 and {s for s, _ in e.turns} <= set(e.names)
        assert e.scores is not None and 0 <= e.scores["agent1"]["goal"] <= 10
        assert -5 <= e.scores["agent2"]["relationship"] <= 5 and all(e.goals)
    profiles = load_sotopia_profiles(shared_data / "sotopia")
    assert len(profiles) == 40
    made = [profile_from_traits(p["first_name"], p["personality_and_values"], p["big_five"],
                                p["decision_making_style"]) for p in profiles]
    assert len({(m.warmth, m.pride, m.pushover) for m in made}) > 5
    with pytest.raises(FileNotFoundError, match="SOTOPIA"):
        load_sotopia_episodes(shared_data)


def test_the_judges_validation_set_both_sides_of_each_scored_episode():
    from dialogrl.envs.social.data import SotopiaEpisode, scored_sides, validation_rows

    turns = [("Ann", "Could you lend me 50 dollars?"), ("Bo", "Not this week.")]
    scores = {"agent1": {"goal": 7.0, "relationship": 1.0}, "agent2": {"goal": 3.0, "relationship": -1.0}}
    episodes = [SotopiaEpisode("p0", "e", ("Ann", "Bo"), ("borrow", "save"), turns, [], None),   # not scored
                SotopiaEpisode("p1", "e", ("Ann", "Bo"), ("borrow", "save"), turns, [], scores),
                SotopiaEpisode("p2", "e", ("Cy", "Di"), ("ask", "refuse"), turns, [], scores)]
    sides = scored_sides(episodes, 1)
    assert [(s.episode.pk, s.side) for s in sides] == [("p1", "agent1"), ("p1", "agent2")]
    assert sides[1].dialogue == (turns, "Bo", ("save", "borrow")) and sides[1].reference == scores["agent2"]
    assert len(scored_sides(episodes, 5)) == 4
    rows = validation_rows(sides, {"judge": [{"goal": 6.0, "relationship": 0.5}, {"goal": 2.0, "relationship": 0.0}]})
    assert rows[1] == {"episode": "p1", "side": "agent2", "gpt4_goal": 3.0, "gpt4_relationship": -1.0,
                       "judge_goal": 2.0, "judge_relationship": 0.0}
