"""A learned selection step for Deal or No Deal's selection protocol (logistic regressions on the talk)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dialogrl.envs.dealnodeal.task import ITEMS, DealOrNoDeal
from dialogrl.game import GameState


class SelectionClassifier:
    """A learned selection step for Deal or No Deal's selection protocol: from one role's view of the finished talk
    (the pool, its own values, who said what), the split it believes was agreed, or 'no agreement'.

    Lewis et al. (2017) trained a selection module on the human logs beside the language model. Small LMs scoring
    every split by their own likelihood almost never agree (about 5% of role pairs on held-out human talk with the
    1.5M-parameter warm start), so this is the same module as logistic regressions: per item type, the role's own
    count or 'no agreement', from speaker-tagged word 1-3 grams of the talk (`Y_` own words, `T_` the counterpart's)
    and one-hot pool counts and own values. A prediction is always a valid split of the pool (own count <= pool).
    Fit it on logged games, then give it to the task: `DealOrNoDeal(protocol="selection", selector=clf)`.
    """

    NONE = -1  # the class of 'no agreement'

    def __init__(self, n_features: int = 2**16, C: float = 1.0):
        self.n_features, self.C, self.models, self.roles = n_features, C, None, ("A", "B")

    def features(self, states: Sequence[GameState], roles: Sequence[str]):
        import scipy.sparse as sp
        from sklearn.feature_extraction.text import HashingVectorizer

        vec = HashingVectorizer(n_features=self.n_features, ngram_range=(1, 3), alternate_sign=False, norm="l2")
        texts, onehot = [], np.zeros((len(states), 3 * 8 + 3 * 11))
        for k, (state, role) in enumerate(zip(states, roles)):
            texts.append(" | ".join(" ".join(f"{'Y' if t.role == role else 'T'}_{w}" for w in t.text.lower().split())
                                    for t in state.talk_turns()))
            counts, values = state.scenario.counts, state.scenario.values[self.roles.index(role)]
            for i in range(3):
                onehot[k, 8 * i + counts[i]] = 1
                onehot[k, 24 + 11 * i + values[i]] = 1
        return sp.hstack([vec.transform(texts), sp.csr_matrix(onehot)]).tocsr()

    def fit(self, task: DealOrNoDeal, games: Sequence[GameState]) -> SelectionClassifier:
        """Fit on finished games whose selections are known (e.g. replayed human logs): both roles of each."""
        from sklearn.linear_model import LogisticRegression

        self.roles = task.roles
        rows = [(g, r) for g in games for r in task.roles if r in g.info.get("selections", {})]
        if len(rows) < 20:
            raise ValueError(f"{len(rows)} selections to learn from; the selection classifier needs 20 or more")
        X = self.features([g for g, _ in rows], [r for _, r in rows])
        shares = [g.info["selections"][r] for g, r in rows]
        self.models = []
        for i in range(3):
            y = np.array([self.NONE if s is None else s[i] for s in shares])
            self.models.append(LogisticRegression(C=self.C, max_iter=2000).fit(X, y))
        return self

    def predict(self, states: Sequence[GameState], roles: Sequence[str]) -> list[str]:
        """The selection text of each (state, role): 'book=N hat=N ball=N' (own share) or 'no agreement'."""
        if self.models is None:
            raise RuntimeError("the selection classifier is not fitted: call fit(task, games) first")
        X = self.features(states, roles)
        probs = [m.predict_proba(X) for m in self.models]               # per item: (N, classes)
        p_none = np.mean([p[:, list(m.classes_).index(self.NONE)] if self.NONE in m.classes_ else np.zeros(len(p))
                          for p, m in zip(probs, self.models)], axis=0)  # (N,) mean over items
        out = []
        for k, state in enumerate(states):
            if p_none[k] > 0.5:
                out.append("no agreement")
                continue
            share = []
            for i, (p, m) in enumerate(zip(probs, self.models)):
                allowed = [(p[k][j], c) for j, c in enumerate(m.classes_) if 0 <= c <= state.scenario.counts[i]]
                share.append(max(allowed)[1] if allowed else 0)
            out.append(" ".join(f"{item}={n}" for item, n in zip(ITEMS, share)))
        return out

    def exact(self, games: Sequence[GameState]) -> float:
        """The share of (game, role) of `games` (held-out logs) whose logged selection text it predicts exactly."""
        pairs = [(g, r) for g in games for r in self.roles]
        said = self.predict([g for g, _ in pairs], [r for _, r in pairs])
        logged = [next(t.text for t in g.turns if t.phase == "select" and t.role == r) for g, r in pairs]
        return float(np.mean([a == b for a, b in zip(said, logged)]))

    def __call__(self, state: GameState, role: str) -> str:
        return self.predict([state], [role])[0]
