"""A pretrained language model as a game's counterpart (agents.counterpart) on SmolLM2-135M-Instruct: decisions by
calibrated likelihood, games that end by the rules, and a decision that responds to the conversation where the
model makes one (the persuadee; bench/counterpart_check.py measures every game: papers/README.md, "Language-model
counterparts"); the margins are about half the effects measured on this fixed packaged model."""
import numpy as np
import pytest

from conftest import play_texts
from dialogrl.agents import LMAgent
from dialogrl.agents.counterpart import LMCounterpart, decision_scores
from dialogrl.envs import dealnodeal, persuasion, social, telesales
from dialogrl.envs.dealnodeal import DealOrNoDeal
from dialogrl.envs.persuasion import PersuasionForGood
from dialogrl.envs.social import SocialScenes
from dialogrl.envs.telesales import VehicleTeleSales
from dialogrl.game import Question
from dialogrl.rollout import play

GOOD = ["hi! thanks for chatting with me.", "imagine a child going to bed hungry tonight.",
        "save the children is a reputable charity, founded over 100 years ago.", "i'm donating part of mine too.",
        "would you consider giving part of your $2?"]
RUDE = ["give me your money for the charity, now.", "stop wasting my time and donate your $2.",
        "you are selfish if you keep it. donate.", "honestly, just hand it over already.", "donate. now."]


@pytest.fixture(scope="module")
def counterpart(smollm2):
    model, tok = smollm2
    return LMCounterpart(LMAgent(model, tok, max_new_tokens=16, temperature=0.7, name="smollm2"))


def test_the_answer_is_the_calibrated_one_not_the_most_likely(counterpart, monkeypatch):
    """Raw likelihood says yes (-0.5 vs -1.0); yes is even likelier without content (-0.2 vs -1.6): calibrated, no."""
    q = Question("Deal?", ("yes", "no"))
    monkeypatch.setattr(counterpart, "answer_logprobs", lambda chats, qs, prefixes=None: [{"yes": -0.5, "no": -1.0}])
    monkeypatch.setattr(counterpart, "neutral_logprobs", lambda q, system: {"yes": -0.2, "no": -1.6})
    task = PersuasionForGood()
    state = task.reset(task.sample_scenarios(1, 0)[0])
    from dialogrl.game import ActRequest

    r = ActRequest(task, state, "persuadee", task.view(state, "persuadee"))
    assert counterpart.answer([r], [[]], [""], [q]) == ["no"]


def test_a_counterpart_without_a_token_budget_decodes_a_bounded_cache(smollm2, counterpart):
    """A counterpart's LMAgent without a budget of its own gets the tokens whose KV cache fills CACHE_BYTES (SmolLM2-
    135M in float32: 30 layers x key and value x 3 heads x 64 x 4 bytes = 46,080 bytes a token); one with a budget
    keeps it."""
    from dialogrl.agents.counterpart import CACHE_BYTES

    assert counterpart.lm.max_batch_tokens == CACHE_BYTES // 46_080 == 46_603
    model, tok = smollm2
    assert LMCounterpart(LMAgent(model, tok, max_batch_tokens=500)).lm.max_batch_tokens == 500


def test_answers_must_start_with_distinct_words(counterpart):
    with pytest.raises(ValueError, match="share a first token"):
        counterpart.answer_logprobs([[{"role": "user", "content": "?"}]], [Question("?", ("yes", "Yes please"))])


def test_the_persuadee_gives_after_a_good_persuader_not_a_rude_one(counterpart):
    task = PersuasionForGood()
    scenarios = task.sample_scenarios(8, 3)
    scores = {}
    for name, lines in (("good", GOOD), ("rude", RUDE)):
        states = [play_texts(task, s, [t for line in lines[:-1] for t in (line, "okay.")] + [lines[-1]])
                  for s in scenarios]
        scores[name] = np.array([d["yes"] - d["no"] for d in decision_scores(counterpart, task, states,
                                                                             "persuadee")])
    # measured: good +0.36 (14 of 16 yes), rude -0.16 (1 of 16) over 16 scenarios
    assert scores["good"].mean() - scores["rude"].mean() > 0.25
    assert (scores["good"] > 0).mean() > (scores["rude"] > 0).mean() + 0.4


@pytest.mark.parametrize("game", ["persuasion", "telesales", "dealnodeal", "social"])
def test_games_against_the_language_model_end_by_the_rules(counterpart, game):
    """Two games per task, the counterpart's decisions written as valid markers (its own text may carry others)."""
    task, role, other = {
        "persuasion": (PersuasionForGood(max_exchanges=2), "persuadee", persuasion.ScriptedAgent("storyteller")),
        "telesales": (VehicleTeleSales(max_turns=4), "buyer", telesales.ScriptedAgent("hard-seller")),
        "dealnodeal": (DealOrNoDeal(max_turns=4), "B", dealnodeal.ScriptedAgent("greedy")),
        "social": (SocialScenes(max_exchanges=2), "partner", social.ScriptedAgent("balanced")),
    }[game]
    counterpart.stats.clear()
    episodes = play(task, {role: counterpart, task.other(role): other}, task.sample_scenarios(2, 0), seeds=[5, 6])
    assert all(e.state.done for e in episodes)
    for e in episodes:
        for t in e.state.turns:
            if t.role == role and t.invalid is not None:
                assert "[" in t.text[:-1]     # an invalid marker is the model's own text, never a chosen one
    assert counterpart.stats["turns"] == sum(t.role == role for e in episodes for t in e.state.turns)


def test_the_model_scores_sotopia_episodes_without_a_format_to_break(counterpart, shared_data):
    """The CPU judge of notebook 02's validation: SmolLM2's calibrated expected ratings of stored SOTOPIA episodes
    are finite and in range for every side (what they agree with GPT-4 on is the notebook's measure)."""
    from dialogrl.envs.social.data import load_sotopia_episodes
    from dialogrl.rewards import scored_episode_estimates

    episodes = load_sotopia_episodes(shared_data / "sotopia")[:2]
    dialogues = [(e.turns, e.names[i], (e.goals[i], e.goals[1 - i])) for e in episodes for i in (0, 1)]
    est = scored_episode_estimates(counterpart, dialogues)
    assert len(est) == 4 and not any(x["failed"] for x in est)
    assert all(0 <= x["goal"] <= 10 and -5 <= x["relationship"] <= 5 for x in est)
    assert len({round(x["goal"], 6) for x in est}) > 1   # it reads the dialogue: not one number for all
