"""The calibrated user's decision, learned apart from its talk (notebook 01's calibrated simulator).

Fine-tuned on the human logs, the 1.5M-parameter warm start writes the humans' words but does not decide as they do:
it accepts a proposal worth 0-1 of its 10 points about as often as one worth 8-10, with or without a note in its view
that states the worth (papers/01, "The calibration design of 2026-12-06"). As Lewis et al. (2017) trained a
selection module beside their language model (`SelectionClassifier`), the calibrated user has a decision module
beside its language model:

    model = AcceptanceModel(seed=k).fit(task, train_logs, "B")      # the logged humans' accept / hold-out decisions
    convs = decision_conversations(task, train_logs, "B")          # their views, each decision noted where it fell
    user = DecidingUser(LMAgent(*calibrate_sft(..., convs, ...)), model)   # the module decides, the model talks

`AcceptanceModel` is a logistic regression of the humans' decision on what the counterpart's standing proposal gives
them (one-hot points of 10) and how far the talk has gone (the answer's turn over the cap, its square, the product
with the worth, and the last chance to answer). `DecidingUser` draws the module's decision about each counterpart
turn after which a counterpart proposal stands, once per (seed, game, role, turn), so that a game plays the same in
any batch. To accept, it says what a logged human said when accepting (one of their accept turns, drawn the same
way). To hold out, its language model writes the turn; should that turn accept, its [accept] is struck out (the turn
stays talk, and the proposal stands), counted in `stats["overruled"]`. Its view marks each decision after the
counterpart's turn, "(you accept it)" or "(you hold out)" (NOTES), as the calibration corpus marks the humans' own
(`decision_conversations`): the fine-tuned model writes its talk knowing what was decided. The policy never sees a
mark. The uncalibrated simulator has no module (there is nothing to fit it on before calibration): the warm start
decides by itself, as the paper's prompt-based simulator. `compliance` counts how often a user's answers carried out
its module's decisions (1 for a DecidingUser; for its bare language model, how far the talk alone would follow).
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence

import numpy as np

from dialogrl.envs.dealnodeal.task import TOTAL_VALUE, DealOrNoDeal, complement, split_value
from dialogrl.game import ActRequest, GameState, StreamingAgent, Utterance, game_key

NOTES = {True: "(you accept it)", False: "(you hold out)"}
ACCEPT = re.compile(r"\[\s*accept\s*\]", re.I | re.A)   # the marker a held-out turn has struck out


def answer_points(task: DealOrNoDeal, state: GameState, role: str) -> list[tuple[int, int]]:
    """(i, worth) for each counterpart turn i after which a valid proposal of the counterpart stands, so that
    `role`'s next turn (i + 1) answers it; worth: the points of 10 that proposal gives `role`."""
    values, counts = state.scenario.values[task.roles.index(role)], state.scenario.counts
    out, standing = [], None   # (proposer, its share) while it stands
    for i, t in enumerate(state.turns):
        if t.phase != "talk":
            continue
        if t.invalid is None and t.action and t.action.get("type") == "propose":
            standing = (t.role, t.action["share"])
        if t.role != role and standing is not None and standing[0] != role:
            out.append((i, split_value(values, complement(counts, standing[1]))))
    return out


def accepted(state: GameState, i: int) -> bool | None:
    """Whether turn i + 1 (the answer to turn i) is a valid [accept]; None where the game has no turn i + 1."""
    if i + 1 >= len(state.turns):
        return None
    t = state.turns[i + 1]
    return bool(t.invalid is None and t.action and t.action.get("type") == "accept")


class AcceptanceModel:
    """P(accept) of a role's answer to the counterpart's standing proposal, fitted on logged games (module
    docstring), and the decision drawn from it per game (`decide`)."""

    def __init__(self, C: float = 1.0, seed: int = 0):
        self.C, self.seed, self.model, self.n_decisions, self.phrases = C, seed, None, 0, []

    @staticmethod
    def features(worth: Sequence[int], answer: Sequence[int], max_turns: int) -> np.ndarray:
        w, t = np.asarray(worth, dtype=int), np.asarray(answer, dtype=float) / max(max_turns - 1, 1)
        onehot = np.zeros((len(w), TOTAL_VALUE + 1))
        onehot[np.arange(len(w)), np.clip(w, 0, TOTAL_VALUE)] = 1.0
        last = (np.asarray(answer) >= max_turns - 2).astype(float)   # the counterpart may not answer after this
        return np.column_stack([onehot, t, t ** 2, t * w / TOTAL_VALUE, last])

    def fit(self, task: DealOrNoDeal, games: Sequence[GameState], role: str) -> AcceptanceModel:
        """Fit on every answer of `role` to a standing counterpart proposal in finished offer-protocol games."""
        from sklearn.linear_model import LogisticRegression

        if task.protocol != "offer":
            raise ValueError("the acceptance model reads proposals, which only the offer protocol has")
        rows = [(w, i + 1, accepted(g, i)) for g in games for i, w in answer_points(task, g, role)]
        rows = [r for r in rows if r[2] is not None]
        y = np.array([a for _, _, a in rows], dtype=int)
        if len(rows) < 20 or len(set(y)) < 2:
            raise ValueError(f"{len(rows)} decisions ({int(y.sum())} accepted) of role {role!r} to learn from; the "
                             "acceptance model needs 20 or more, of both kinds")
        X = self.features([w for w, _, _ in rows], [t for _, t, _ in rows], task.max_turns)
        self.model = LogisticRegression(C=self.C, max_iter=2000).fit(X, y)
        self.n_decisions = len(rows)
        # what the logged role said when it accepted: its words, said again when the module accepts
        self.phrases = sorted({g.turns[i + 1].text for g in games for i, _ in answer_points(task, g, role)
                               if accepted(g, i)})
        return self

    def prob(self, worth: Sequence[int], answer: Sequence[int], max_turns: int) -> np.ndarray:
        """P(accept) of answers at talk turns `answer` to proposals worth `worth` points of 10."""
        if self.model is None:
            raise ValueError("fit the acceptance model first")
        return self.model.predict_proba(self.features(worth, answer, max_turns))[:, 1]

    def rng(self, state: GameState, role: str, i: int) -> random.Random:
        return random.Random(f"{self.seed}/{game_key(state, 'decision', repr(state.scenario))}/{role}/{i}")

    def decide(self, task: DealOrNoDeal, state: GameState, role: str, i: int, worth: int) -> bool:
        """The decision about the proposal standing after turn i: one draw per (seed, game, role, turn)."""
        return self.rng(state, role, i).random() < float(self.prob([worth], [i + 1], task.max_turns)[0])

    def accept_phrase(self, state: GameState, role: str, i: int) -> str:
        """A logged acceptance (the role's own words in the logs it was fitted on), drawn for the answer to turn i."""
        rng = self.rng(state, role, i)
        rng.random()   # the decision's draw
        return rng.choice(self.phrases)


def decision_conversations(task: DealOrNoDeal, games: Sequence[GameState], role: str) -> list[list[dict]]:
    """`role`'s view of each finished game in which it spoke, each counterpart turn it answered marked with what it
    decided (NOTES): the calibration corpus of a DecidingUser's language model."""
    out = []
    for state in games:
        if not any(t.role == role for t in state.talk_turns()):
            continue
        marks = {i: NOTES[accepted(state, i)] for i, _ in answer_points(task, state, role)
                 if accepted(state, i) is not None}
        out.append(task.view(state, role, note=lambda i, marks=marks: marks.get(i, "")))
    return out


def decision_marks(model: AcceptanceModel, task: DealOrNoDeal, state: GameState, role: str) -> dict[int, bool]:
    """{counterpart turn i: the module's decision about the proposal standing after it} in a game so far."""
    return {i: model.decide(task, state, role, i, w) for i, w in answer_points(task, state, role)}


class DecidingUser(StreamingAgent):
    """A user whose accept / hold-out decisions are an AcceptanceModel's and whose talk is a language model's `lm`
    (an LMAgent, its own: not also speaking for another role of the same games); module docstring. It streams:
    held-out turns join `lm`'s running batch, acceptances are answered at once. `stats`: "turns", "accepted" (by the
    module), "overruled" (turns of `lm` whose [accept] was struck out: only the module accepts)."""

    def __init__(self, lm, model: AcceptanceModel, name: str | None = None):
        self.lm, self.model, self.name = lm, model, name or lm.name
        self._asked: dict[int, ActRequest] = {}   # id(the request lm answers) -> the game's request
        self._ready: list[tuple[ActRequest, Utterance]] = []
        self.stats = {"turns": 0, "accepted": 0, "overruled": 0}

    def submit(self, requests: Sequence[ActRequest]) -> None:
        asks = []
        for r in requests:
            if r.state.info.get("phase") == "select":
                asks.append(r)
                self._asked[id(r)] = r
                continue
            self.stats["turns"] += 1
            marks = decision_marks(self.model, r.task, r.state, r.role)
            now = len(r.state.turns) - 1   # the counterpart's turn this one answers
            if marks.get(now):
                self.stats["accepted"] += 1
                self._ready.append((r, Utterance(self.model.accept_phrase(r.state, r.role, now))))
                continue
            ask = ActRequest(r.task, r.state, r.role, r.task.view(
                r.state, r.role, note=lambda i, marks=marks: NOTES[marks[i]] if i in marks else ""))
            self._asked[id(ask)] = r
            asks.append(ask)
        if asks:
            self.lm.submit(asks)

    def busy(self) -> bool:
        return bool(self._ready) or bool(self._asked)

    def advance(self) -> list[tuple[ActRequest, Utterance]]:
        done, self._ready = self._ready, []
        if not self._asked:
            return done
        for ask, u in self.lm.advance():
            r = self._asked.pop(id(ask))
            if r.state.info.get("phase") != "select" and ACCEPT.search(u.text):   # held out: no acceptance
                self.stats["overruled"] += 1
                u = Utterance(" ".join(ACCEPT.sub(" ", u.text).split()) or "hmm")
            done.append((r, u))
        return done

    def clear_cache(self) -> None:
        self.lm.clear_cache()


def compliance(model: AcceptanceModel, task: DealOrNoDeal, games: Sequence[GameState], role: str) -> dict:
    """How often `role`'s answers carried out the module's decision in finished games: {"decisions", "followed",
    "rate", "accepted_when_told", "held_when_told"} (the last two: the share of each kind carried out; nan without
    one)."""
    told = {True: [], False: []}
    for state in games:
        for i, decision in decision_marks(model, task, state, role).items():
            if accepted(state, i) is not None:
                told[decision].append(accepted(state, i) == decision)
    done = told[True] + told[False]

    def rate(x: list) -> float:
        return float(np.mean(x)) if x else float("nan")
    return {"decisions": len(done), "followed": int(sum(done)), "rate": rate(done),
            "accepted_when_told": rate(told[True]), "held_when_told": rate(told[False])}
