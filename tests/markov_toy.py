"""Markov-chain 'dialogues' whose history divergences and returns are known exactly: the test processes of the shift
estimators and the compounding check in `dialogrl.theory`."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


@dataclass
class MarkovDialogue:
    """A finite-state 'dialogue': x_1 ~ init, x_{i+1} ~ trans[x_i]; the reward at turn t is reward[x_{t-1}]
    (reward0 at t = 1, before anything was said). Exact history TV/KL and returns are computable.

    init: (S,), trans: (S, S) row-stochastic, reward: (S,) in [0, R_max].
    """
    init: np.ndarray
    trans: np.ndarray
    reward: np.ndarray
    reward0: float = 1.0

    def __post_init__(self):
        self.init, self.trans, self.reward = (np.asarray(a, float) for a in (self.init, self.trans, self.reward))
        if not np.allclose(self.trans.sum(1), 1) or not np.isclose(self.init.sum(), 1):
            raise ValueError("init and every row of trans must sum to 1")

    def sample(self, n: int, horizon: int, rng: np.random.Generator) -> np.ndarray:
        """(n, horizon) integer states x_1..x_H."""
        S = len(self.init)
        x = np.empty((n, horizon), dtype=int)
        x[:, 0] = rng.choice(S, size=n, p=self.init)
        cum = np.cumsum(self.trans, axis=1)                            # (S, S)
        for t in range(1, horizon):
            u = rng.random(n)[:, None]
            x[:, t] = (u > cum[x[:, t - 1]]).sum(1)
        return x

    def logprob(self, x: np.ndarray) -> np.ndarray:
        """(n, H) log-probability of each x_i given the history, under this process."""
        lp = np.empty(x.shape)
        with np.errstate(divide="ignore"):
            lp[:, 0] = np.log(self.init[x[:, 0]])
            lp[:, 1:] = np.log(self.trans[x[:, :-1], x[:, 1:]])
        return lp

    def returns(self, x: np.ndarray, horizon: int) -> np.ndarray:
        """Per-dialogue return J = sum_{t=1..H} reward of context c_t = reward0 + sum_{t=2..H} reward[x_{t-1}]."""
        return self.reward0 + self.reward[x[:, :horizon - 1]].sum(1)

    def terminal_returns(self, x: np.ndarray, horizon: int) -> np.ndarray:
        """Per-dialogue outcome of the whole dialogue of `horizon` turns: reward[x_H] (a terminal reward)."""
        return self.reward[x[:, horizon - 1]]

    def expected_terminal(self, horizon: int) -> float:
        marg = self.init.copy()
        for _ in range(horizon - 1):
            marg = marg @ self.trans
        return float(marg @ self.reward)

    def expected_return(self, horizon: int) -> float:
        marg, total = self.init.copy(), self.reward0
        for _ in range(horizon - 1):
            total += marg @ self.reward
            marg = marg @ self.trans
        return float(total)

    def history_probs(self, i: int) -> np.ndarray:
        """Probability of every history (x_1..x_i), in itertools.product order: (S**i,)."""
        S = len(self.init)
        seqs = np.array(list(itertools.product(range(S), repeat=i)))
        p = self.init[seqs[:, 0]].copy()
        for t in range(1, i):
            p *= self.trans[seqs[:, t - 1], seqs[:, t]]
        return p


def exact_history_tv(p: MarkovDialogue, q: MarkovDialogue, horizon: int) -> np.ndarray:
    """D_i = TV(P(x_1..x_i), Q(x_1..x_i)) for i = 1..horizon, by enumeration (small state spaces)."""
    return np.array([0.5 * np.abs(p.history_probs(i) - q.history_probs(i)).sum() for i in range(1, horizon + 1)])


def exact_history_kl(p: MarkovDialogue, q: MarkovDialogue, horizon: int) -> np.ndarray:
    """KL(P(x_1..x_i) || Q(x_1..x_i)) for i = 1..horizon, by the chain rule over P's marginals."""
    def kl(a, b):
        nz = a > 0
        return float(np.sum(a[nz] * (np.log(a[nz]) - np.log(b[nz]))))
    out, marg, total = [], p.init.copy(), kl(p.init, q.init)
    out.append(total)
    row_kl = np.array([kl(p.trans[s], q.trans[s]) for s in range(len(p.init))])
    for _ in range(1, horizon):
        total += marg @ row_kl
        out.append(total)
        marg = marg @ p.trans
    return np.array(out)


def markov_features(x: np.ndarray, i: int) -> np.ndarray:
    """Sufficient statistics of a Markov history x_1..x_i: one-hot x_1 and the transition counts, (n, S + S*S).

    The log-likelihood ratio of two Markov chains is linear in them, so a logistic regression on these features
    is well specified and its accuracy approaches the Bayes accuracy 1/2 + TV/2.
    """
    S = int(x.max()) + 1 if x.size else 1
    S = max(S, 3)
    n = len(x)
    first = np.zeros((n, S))
    first[np.arange(n), x[:, 0]] = 1
    trans = np.zeros((n, S * S))
    for t in range(1, i):
        np.add.at(trans, (np.arange(n), x[:, t - 1] * S + x[:, t]), 1)
    return np.hstack([first, trans])


def derail_process(eps: float, off_reward: float = 0.3) -> MarkovDialogue:
    """Compounding: state 0 is on track; each turn it derails with prob. eps into off-track states 1/2, which
    are absorbing (they only switch between themselves), so a mismatch in eps is carried to every later turn."""
    trans = np.array([[1 - eps, eps / 2, eps / 2], [0, 0.5, 0.5], [0, 0.5, 0.5]])
    init = np.array([1 - eps, eps / 2, eps / 2])
    return MarkovDialogue(init, trans, np.array([1.0, off_reward, off_reward]))


def iid_process(eps: float, off_reward: float = 0.3) -> MarkovDialogue:
    """Non-compounding: every turn is off track with prob. eps, independently of the past; a mismatch in eps
    shifts each turn by the same amount and is not carried forward."""
    row = np.array([1 - eps, eps / 2, eps / 2])
    return MarkovDialogue(row, np.tile(row, (3, 1)), np.array([1.0, off_reward, off_reward]))
