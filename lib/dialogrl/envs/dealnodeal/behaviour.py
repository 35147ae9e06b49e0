"""How a role behaves in finished Deal or No Deal games: the statistics notebook 01 compares between a simulator and
the humans it imitates (`calibration.behaviour_distance(sim, human, BEHAVIOUR_SCALES)`), and its decisions on what
the counterpart offered it (`decisions`; `calibration.acceptance_curve(..., DECISION_BINS)`)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dialogrl.envs.dealnodeal.acceptance import accepted, answer_points
from dialogrl.envs.dealnodeal.task import DealOrNoDeal, complement, split_value
from dialogrl.game import GameState


def behaviour_stats(task: DealOrNoDeal, games: Sequence[GameState], role: str) -> dict[str, float]:
    """Statistics of how `role` behaves in finished Deal or No Deal games (either protocol).

    acceptance_rate  share of the role's answers to a standing proposal of the counterpart that accept it
    concession       mean drop, in the role's own points, between its consecutive proposals
    opening_demand   own points of its first proposal
    words_per_turn   mean words per talk turn (markers included)
    turns            talk turns per game (both roles)
    agreement        share of games that end in agreement
    Statistics with no instance in the games (e.g. proposals under the selection protocol) are NaN.
    """
    answers, accepts, concessions, openings, words, turns, agreed = 0, 0, [], [], [], [], []
    for state in games:
        values = state.scenario.values[task.roles.index(role)]
        standing, last_own = None, None
        talk = state.talk_turns()
        turns.append(len(talk))
        agreed.append(float(task.outcome(state)[role].get("agreed", False)))
        for t in talk:
            act = t.action or {}
            kind = act.get("type") if t.invalid is None else "invalid"
            if t.role == role:
                words.append(len(t.text.split()))
                if standing is not None and standing != role:
                    answers += 1
                    accepts += kind == "accept"
                if kind == "propose":
                    own = split_value(values, act["share"])
                    if last_own is None:
                        openings.append(own)
                    else:
                        concessions.append(last_own - own)
                    last_own = own
            if kind == "propose":
                standing = t.role
    nan = float("nan")
    return {"acceptance_rate": accepts / answers if answers else nan,
            "concession": float(np.mean(concessions)) if concessions else nan,
            "opening_demand": float(np.mean(openings)) if openings else nan,
            "words_per_turn": float(np.mean(words)) if words else nan,
            "turns": float(np.mean(turns)) if turns else nan,
            "agreement": float(np.mean(agreed)) if agreed else nan}


# the scale of each statistic in the distance: a typical spread, so that no statistic dominates by its units
BEHAVIOUR_SCALES = {"acceptance_rate": 1.0, "concession": 1.0, "opening_demand": 10.0, "words_per_turn": 10.0,
                    "turns": 10.0, "agreement": 1.0}


# the bins of an acceptance curve: points of 10 that a proposal gives the deciding role (fixed before any simulator
# was measured: two points a bin, the top one 8-10)
DECISION_BINS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 10))


def decisions(task: DealOrNoDeal, games: Sequence[GameState], role: str) -> list[tuple[int, bool]]:
    """`role`'s decisions on what the counterpart offered it, as (points of 10 it would get, accepted) pairs.

    offer protocol: every answer of `role` to a standing valid proposal of the counterpart, accepted iff the answer is
        a valid [accept] (a counter-proposal, talk, [no deal] or an invalid turn is not).
    selection protocol (the human logs: no offer markers): one per game in which the counterpart selected a share,
        what that selection leaves `role`, accepted iff the game ended in agreement (the two selections match); a game
        whose counterpart selected no agreement has nothing offered and is left out.
    """
    i = task.roles.index(role)
    other = task.other(role)
    out = []
    for state in games:
        values, counts = state.scenario.values[i], state.scenario.counts
        if task.protocol == "selection":
            theirs = state.info.get("selections", {}).get(other)
            if theirs is not None:
                out.append((split_value(values, complement(counts, theirs)), task.deal(state) is not None))
            continue
        for turn, worth in answer_points(task, state, role):
            answer = accepted(state, turn)
            if answer is not None:   # the game went on to the role's answer
                out.append((worth, answer))
    return out
