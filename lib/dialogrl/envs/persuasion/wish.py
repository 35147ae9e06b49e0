"""The scripted persuadee's wish to give: the decision rule that the scripted persuadees play (`personas`) and that
marks the embedded persuadee's view (`PersuasionForGood.note`, `leaning`). A persuadee hears the persuasion
strategies in the persuader's words (`strategies.hear`, a cue lexicon) and its log-odds of giving are

    z = HUMAN_FIT["intercept"] + base + mood + sum over heard strategies s of beta_s * (1 + 0.25 * min(n_s - 1, 2))
        - COLD_ASK if asked before hearing any strategy - NAG * (asks beyond the second)
        - PRESSURE * (persuader turns that pressure: demands and insults, `strategies.pressured`)
    beta_s = HUMAN_FIT["beta"][s] + likes[s]

n_s counts the persuader turns in which s was heard. Fit to the human data where it can inform the model
(`strategies.fit_human_response` on the 300 annotated dialogues; `tests/test_persuasion.py` re-fits and checks these
constants): the intercept and the mean susceptibility beta_s of a population hearing strategy s (a regularised
logistic regression of "donated" on which strategies the persuader used: associations in observational data, not
causal effects), and the distribution of donated amounts. Designed, and stated here: each profile's deviations
LIKES from the mean (centred over the five profiles, so that they average to the human fit), its BASES willingness,
and PRESSURE (the annotation has no label for demands and insults).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from dialogrl.envs.persuasion.strategies import STRATEGIES, hear, pressured
from dialogrl.game import GameState, Turn

# strategies.fit_human_response(load_p4g(".../persuasionforgood")), rounded (C=0.3; 300 annotated dialogues, 49%
# gave; amounts: the donors' B6 within the $2 payment, 545 persuadees of 1,017)
HUMAN_FIT = {
    "intercept": 0.14,
    "beta": {"credibility-appeal": -0.5, "logical-appeal": 0.0, "emotion-appeal": 0.23, "personal-story": 0.38,
             "donation-information": 0.33, "foot-in-the-door": 0.05, "self-modeling": -0.22,
             "source-related-inquiry": 0.14, "task-related-inquiry": -0.15, "personal-related-inquiry": -0.3},
    "amounts": {0.05: 0.057, 0.1: 0.105, 0.15: 0.053, 0.2: 0.094, 0.25: 0.055, 0.3: 0.083, 0.5: 0.142, 1.0: 0.287,
                2.0: 0.125},
}
COLD_ASK = 0.5   # asked before any strategy was heard
NAG = 0.3        # per ask beyond the second
PRESSURE = 1.0   # per persuader turn that pressures (a demand or an insult: strategies.pressured)


def _centred(raw: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each strategy's deviations minus their mean over the profiles (so that they average to the human fit)."""
    mean = {s: sum(r.get(s, 0.0) for r in raw.values()) / len(raw) for s in STRATEGIES}
    return {p: {s: round(r.get(s, 0.0) - mean[s], 3) for s in STRATEGIES} for p, r in raw.items()}


# each profile of PERSUADEE_PROFILES: its likes (strategy -> log-odds beyond the human mean) and base willingness
LIKES = _centred({
    "sympathetic": {"emotion-appeal": 1.4, "personal-story": 1.2, "self-modeling": 0.6},
    "analytical": {"logical-appeal": 1.4, "donation-information": 1.0, "credibility-appeal": 0.6},
    "skeptical": {"credibility-appeal": 1.6, "donation-information": 0.6, "source-related-inquiry": 0.6},
    "frugal": {"foot-in-the-door": 1.6, "donation-information": 0.4},
    "sociable": {"personal-related-inquiry": 1.2, "task-related-inquiry": 0.8, "self-modeling": 0.8},
})
BASES = {"sympathetic": 0.3, "analytical": 0.0, "skeptical": -0.5, "frugal": -0.2, "sociable": 0.1}


def wish(likes: dict[str, float], base: float, mood: float, turns: Sequence[Turn]) -> float:
    """z, the log-odds of giving after the persuader's turns among `turns` (see the module docstring)."""
    heard: dict[str, int] = {}
    asks, cold, pushed = 0, False, 0
    for t in turns:
        if t.role != "persuader" or t.phase != "talk":
            continue
        said = hear(t.text)
        pushed += pressured(t.text)
        if "ask" in said:
            asks += 1
            cold = cold or not heard
        for s in said:
            if s != "ask":
                heard[s] = heard.get(s, 0) + 1
    z = HUMAN_FIT["intercept"] + base + mood
    z += sum((HUMAN_FIT["beta"][s] + likes.get(s, 0.0)) * (1 + 0.25 * min(k - 1, 2)) for s, k in heard.items())
    return z - COLD_ASK * cold - NAG * max(asks - 2, 0) - PRESSURE * pushed


def leaning(state: GameState, upto: int) -> str:
    """How the scenario's persuadee (its profile's rule and mood) leans after the persuader's turn `state.turns[upto]`,
    over the talk up to that turn, as one word: "giving" (sigmoid(z) >= 0.6), "unsure", or "keeping" (<= 0.4)."""
    sc = state.scenario
    z = wish(LIKES[sc.persona], BASES[sc.persona], sc.mood, state.turns[:upto + 1])
    p = 1 / (1 + math.exp(-z))
    return "giving" if p >= 0.6 else "keeping" if p <= 0.4 else "unsure"
