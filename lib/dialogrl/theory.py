"""Context distribution shift in multi-turn dialogue, and the check that it compounds quadratically.

Notation (one dialogue of H turns). x_i is what turn i adds to the dialogue; the context the policy answers at
turn t is c_t = (x_1, ..., x_{t-1}), and its reward there is r_t = r(c_t) in [0, R_max]. Training contexts come
from P (logged histories, or a simulator), deployment contexts from Q (the policy's own dialogues with humans).
Let D_i = TV(P(x_1..x_i), Q(x_1..x_i)), the shift of the history after turn i, and eps_i = D_i - D_{i-1} the shift
that turn i adds (D_0 = 0). Context c_t carries every earlier turn's shift, TV(c_t) = D_{t-1} = sum_{i<t} eps_i,
so a mismatch at turn i reaches all H - i later contexts (Delta_{t+1} <= Delta_t + eps_t) and

    |J_P(H) - J_Q(H)| <= R_max * sum_t TV(c_t) = R_max * sum_{i=1..H} (H - i) * eps_i,

which is O(H^2 eps) for a constant per-turn eps (the paper's Theorem 3.1). Whether the *measured* gap grows like H^2
depends on whether the dynamics carry a mismatch forward; `compounding_check` tests that on data.
With a terminal outcome reward instead (a game's score, a function of the whole dialogue x_1..x_H), the same argument
gives |J_P(H) - J_Q(H)| <= R_max * TV(P(x_1..x_H), Q(x_1..x_H)) = R_max * sum_{i=1..H} eps_i: turn H's own shift
counts, and the bound is linear in H for a constant eps (`compounding_check(..., reward="terminal")`).
The bound check is a test only with exact eps_i. The classifier estimates below are *lower* bounds of TV, so a
bound built from them is a lower estimate of the true bound: a gap above it does not refute the theorem, and
`CompoundingCheck.bound_test` says "indicative" then.

Estimators of the per-turn shift between two sets of dialogues:
  - `likelihood_shift`: when the generating agents expose log-probs, KL(P_{<=i} || Q_{<=i}) by the chain rule,
    sum_{j<=i} E_P[log p(x_j | x_<j) - log q(x_j | x_<j)], Monte Carlo over dialogues from P, with standard errors.
  - `classifier_shift`: from transcripts only, a classifier two-sample test per turn: the held-out accuracy acc of a
    classifier telling P's histories from Q's gives TV >= 2 * acc - 1 (balanced classes), with bootstrap CIs.
Validation processes with exact answers: `MarkovDialogue` (finite-state chains, exact TV/KL/returns).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


# ------------------------------------------------------------------------------------------------- estimators

@dataclass
class ShiftEstimate:
    """A per-turn shift curve: turns 1..H, the estimate and its 95% CI (and SE where it has one)."""
    kind: str                       # "kl" (cumulative, likelihood) or "tv_lower_bound" (classifier)
    turns: np.ndarray               # (H,)
    estimate: np.ndarray            # (H,) divergence of the histories after each turn, D_i
    lo: np.ndarray                  # (H,)
    hi: np.ndarray                  # (H,)
    se: np.ndarray | None = None    # (H,)
    extra: dict = field(default_factory=dict)

    def increments(self) -> np.ndarray:
        """eps_i = D_i - D_{i-1} (D_0 = 0), clipped at 0: the shift each turn adds."""
        return np.clip(np.diff(np.concatenate([[0.0], self.estimate])), 0.0, None)


def likelihood_shift(logp_p: np.ndarray, logp_q: np.ndarray, mask: np.ndarray | None = None) -> ShiftEstimate:
    """Per-turn KL(P_{<=i} || Q_{<=i}) from dialogues sampled from P, by the chain rule.

    logp_p, logp_q: (N, H) log-probabilities of each sampled turn x_j given its history, under P (the process that
        generated them) and under Q. For a language model, a turn's log-prob is the sum over its tokens.
    mask: (N, H) 1 where the turn exists (dialogues that ended early contribute 0 afterwards: both processes agree
        that an ended dialogue stays ended).
    Returns cumulative KL per turn with its standard error and a normal 95% CI; `extra["conditional"]` holds the
    per-turn increments E_P[KL(p(.|h) || q(.|h))].
    """
    logp_p, logp_q = np.asarray(logp_p, float), np.asarray(logp_q, float)
    if logp_p.shape != logp_q.shape or logp_p.ndim != 2:
        raise ValueError(f"logp_p and logp_q must both be (N, H); got {logp_p.shape} and {logp_q.shape}")
    m = np.ones_like(logp_p) if mask is None else np.asarray(mask, float)
    ratio = np.where(m > 0, logp_p - logp_q, 0.0)      # (N, H) log p(x_j|h) - log q(x_j|h)
    cum = np.cumsum(ratio, axis=1)                      # (N, H) log-likelihood ratio of the history
    n = cum.shape[0]
    est, se = cum.mean(0), cum.std(0, ddof=1) / np.sqrt(n)
    return ShiftEstimate("kl", np.arange(1, cum.shape[1] + 1), est, est - 1.96 * se, est + 1.96 * se, se,
                         extra={"conditional": ratio.mean(0), "n": n})


def classifier_shift(features_p: Sequence[np.ndarray], features_q: Sequence[np.ndarray], n_folds: int = 5,
                     n_boot: int = 1000, seed: int = 0, C: float = 1.0) -> ShiftEstimate:
    """Per-turn TV lower bound from a classifier two-sample test.

    features_p, features_q: per turn i, an (n, d) array of features of the histories (x_1..x_i) from P and Q.
    A logistic regression is cross-validated (n_folds) on balanced classes; its out-of-fold accuracy acc gives
    TV >= 2 * acc - 1 (clipped at 0), with a percentile bootstrap CI over the held-out predictions.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if len(features_p) != len(features_q):
        raise ValueError(f"{len(features_p)} turns of P features but {len(features_q)} of Q")
    rng = np.random.default_rng(seed)
    est, lo, hi, acc_all = [], [], [], []
    for xp, xq in zip(features_p, features_q):
        n = min(len(xp), len(xq))  # balanced classes: the bound 2*acc - 1 assumes equal priors
        xp, xq = np.asarray(xp, float)[rng.permutation(len(xp))[:n]], np.asarray(xq, float)[rng.permutation(len(xq))[:n]]
        X, y = np.vstack([xp, xq]), np.r_[np.zeros(n), np.ones(n)]
        if np.all(X.std(0) == 0):  # no feature varies: the classifier can only guess
            correct = rng.random(2 * n) < 0.5
        else:
            clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=2000))
            folds = StratifiedKFold(n_folds, shuffle=True, random_state=seed)
            correct = cross_val_predict(clf, X, y, cv=folds) == y
        boots = rng.choice(correct, size=(n_boot, len(correct)), replace=True).mean(1)
        acc = correct.mean()
        acc_all.append(acc)
        est.append(max(2 * acc - 1, 0.0))
        lo.append(max(2 * np.quantile(boots, 0.025) - 1, 0.0))
        hi.append(max(2 * np.quantile(boots, 0.975) - 1, 0.0))
    return ShiftEstimate("tv_lower_bound", np.arange(1, len(est) + 1), np.array(est), np.array(lo), np.array(hi),
                         extra={"accuracy": np.array(acc_all)})


def text_history_features(dialogues: Sequence[Sequence[str]], turn: int, n_features: int = 2**12) -> np.ndarray:
    """Features of the first `turn` turns of each dialogue, for `classifier_shift` on transcripts.

    Hashed word uni- and bigrams of the joined history plus the word count of each of its turns (0 past the end).
    Returns (N, n_features + turn).
    """
    from sklearn.feature_extraction.text import HashingVectorizer

    vec = HashingVectorizer(n_features=n_features, ngram_range=(1, 2), alternate_sign=False, norm="l2")
    texts = [" ".join(d[:turn]) for d in dialogues]
    lengths = np.array([[len(d[i].split()) if i < len(d) else 0 for i in range(turn)] for d in dialogues], float)
    return np.hstack([vec.transform(texts).toarray(), lengths])


# ------------------------------------------------------------------------------------- the compounding check

@dataclass
class CompoundingCheck:
    """Gap and shift against the horizon H, linear vs quadratic fits, and the bound. All arrays are per H."""
    horizons: np.ndarray
    gap: np.ndarray                  # |J_P(H) - J_Q(H)|, measured
    gap_ci: np.ndarray               # (K, 2)
    context_shift: np.ndarray        # per_turn: sum_t TV(c_t) = sum_i (H - i) eps_i; terminal: TV(x_1..x_H) = sum_i eps_i
    bound: np.ndarray                # R_max * context_shift
    quadratic_coef: float            # c in gap = a + b H + c H^2
    quadratic_ci: tuple[float, float]
    linear_coef: float               # b in gap = a + b H
    aic: dict                        # {"linear": ..., "quadratic": ...}
    bic: dict
    verdict: str                     # "quadratic" or "linear"
    bound_holds: bool                # every measured gap <= its bound
    shift_quadratic_coef: float      # the same quadratic fit of context_shift against H
    r_max: float = 1.0
    reward: str = "per_turn"         # "per_turn" (a reward at every context) or "terminal" (one outcome at the end)
    bound_test: str = "valid"        # "valid" with exact eps; "indicative" with lower bounds of TV (classifier eps)

    def as_dict(self) -> dict:
        return {"horizons": self.horizons.tolist(), "gap": self.gap.tolist(), "bound": self.bound.tolist(),
                "quadratic_coef": self.quadratic_coef, "quadratic_ci": list(self.quadratic_ci),
                "linear_coef": self.linear_coef, "aic": self.aic, "bic": self.bic, "verdict": self.verdict,
                "bound_holds": self.bound_holds, "bound_test": self.bound_test, "reward": self.reward,
                "shift_quadratic_coef": self.shift_quadratic_coef}


def _fits(h: np.ndarray, y: np.ndarray) -> tuple:
    """OLS fits y = a + b H and y = a + b H + c H^2. Returns both fitted results (statsmodels).

    The intercept stays free: where the gap is zero (H = 0 or H = 1) depends on how a task counts turns.
    """
    import statsmodels.api as sm

    lin = sm.OLS(y, np.c_[np.ones_like(h), h]).fit()
    quad = sm.OLS(y, np.c_[np.ones_like(h), h, h ** 2]).fit()
    return lin, quad


def compounding_check(horizons: Sequence[int], returns_p: Sequence[np.ndarray], returns_q: Sequence[np.ndarray],
                      eps: Sequence[float], r_max: float = 1.0, n_boot: int = 2000, seed: int = 0,
                      criterion: str = "bic", reward: str = "per_turn", eps_exact: bool = True) -> CompoundingCheck:
    """Does the performance gap grow quadratically with the horizon, and does it stay under the bound?

    horizons: the K horizons H_k at which the gap was measured (e.g. turn caps 2, 4, ..., 10).
    returns_p, returns_q: per horizon, the per-dialogue returns J under training-like contexts (P) and deployment
        contexts (Q); the gap is |mean(P) - mean(Q)|, bootstrapped by resampling dialogues.
    eps: the per-turn shifts eps_1..eps_Hmax (e.g. ShiftEstimate.increments()), in TV units.
    reward: "per_turn" (J sums a reward in [0, r_max] at every context: bound r_max * sum_i (H - i) eps_i) or
        "terminal" (J is one outcome in [0, r_max] of the whole dialogue: bound r_max * sum_{i<=H} eps_i).
    eps_exact: False when eps are lower bounds of TV (classifier estimates): `bound_holds` is still computed, but
        `bound_test` is "indicative", since a lower estimate of the bound can be exceeded without contradiction.
    Fits gap = a + b H and gap = a + b H + c H^2; `verdict` is "quadratic" when the quadratic model wins on
    `criterion` (AIC or BIC) and the 95% bootstrap CI of c lies above 0, else "linear".
    """
    h = np.asarray(horizons, float)
    eps = np.asarray(eps, float)
    if len(returns_p) != len(h) or len(returns_q) != len(h):
        raise ValueError("returns_p and returns_q need one array per horizon")
    if len(h) < 3:
        raise ValueError("the check needs gaps at 3 or more horizons")
    if h.max() > len(eps):
        raise ValueError(f"eps covers {len(eps)} turns but the longest horizon is {int(h.max())}")
    if criterion not in ("aic", "bic"):
        raise ValueError(f"criterion={criterion!r}: choose 'aic' or 'bic'")
    if reward not in ("per_turn", "terminal"):
        raise ValueError(f"reward={reward!r}: choose 'per_turn' or 'terminal'")
    rp = [np.asarray(r, float) for r in returns_p]
    rq = [np.asarray(r, float) for r in returns_q]
    gap = np.array([abs(a.mean() - b.mean()) for a, b in zip(rp, rq)])
    # per-turn rewards: sum_{t=1..H} TV(c_t) = sum_{i=1..H} (H - i) eps_i; terminal: TV(x_1..x_H) = sum_{i=1..H} eps_i
    weight = (lambda H, i: H - i) if reward == "per_turn" else (lambda H, i: 1.0)
    ctx = np.array([sum(weight(H, i) * eps[i - 1] for i in range(1, int(H) + 1)) for H in h])
    lin, quad = _fits(h, gap)
    rng = np.random.default_rng(seed)
    boot_c, boot_gaps = [], []
    for _ in range(n_boot):
        g = np.array([abs(rng.choice(a, len(a)).mean() - rng.choice(b, len(b)).mean()) for a, b in zip(rp, rq)])
        boot_gaps.append(g)
        boot_c.append(_fits(h, g)[1].params[2])
    boot_gaps = np.array(boot_gaps)
    c_lo, c_hi = np.quantile(boot_c, [0.025, 0.975])
    ic = {"linear": float(getattr(lin, criterion)), "quadratic": float(getattr(quad, criterion))}
    verdict = "quadratic" if ic["quadratic"] < ic["linear"] and c_lo > 0 else "linear"
    return CompoundingCheck(
        horizons=h, gap=gap, gap_ci=np.quantile(boot_gaps, [0.025, 0.975], axis=0).T, context_shift=ctx,
        bound=r_max * ctx, quadratic_coef=float(quad.params[2]), quadratic_ci=(float(c_lo), float(c_hi)),
        linear_coef=float(lin.params[1]), aic={"linear": float(lin.aic), "quadratic": float(quad.aic)},
        bic={"linear": float(lin.bic), "quadratic": float(quad.bic)}, verdict=verdict,
        bound_holds=bool(np.all(gap <= r_max * ctx + 1e-12)), shift_quadratic_coef=float(_fits(h, ctx)[1].params[2]),
        r_max=r_max, reward=reward, bound_test="valid" if eps_exact else "indicative")


def plot_compounding(check: CompoundingCheck, shift: ShiftEstimate | None = None, path=None, title: str = ""):
    """Left: per-turn shift with its CI (if given). Right: measured gap against H with both fits and the bound."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if shift is not None else 1, figsize=(11 if shift is not None else 6, 3.8))
    axes = np.atleast_1d(axes)
    if shift is not None:
        ax = axes[0]
        ax.plot(shift.turns, shift.estimate, "o-", label=shift.kind)
        ax.fill_between(shift.turns, shift.lo, shift.hi, alpha=0.25)
        ax.set_xlabel("turn i")
        ax.set_ylabel("shift of the history after turn i")
        ax.legend()
    ax = axes[-1]
    h = check.horizons
    lin, quad = _fits(h, check.gap)
    ax.errorbar(h, check.gap, yerr=[check.gap - check.gap_ci[:, 0], check.gap_ci[:, 1] - check.gap],
                fmt="o", color="black", capsize=3, label="measured gap")
    grid = np.linspace(h.min(), h.max(), 100)
    ax.plot(grid, lin.params[0] + lin.params[1] * grid, "--", label=f"linear (BIC {check.bic['linear']:.1f})")
    ax.plot(grid, quad.params[0] + quad.params[1] * grid + quad.params[2] * grid ** 2, "-",
            label=f"quadratic (BIC {check.bic['quadratic']:.1f})")
    form = "sum (H-i) eps_i" if check.reward == "per_turn" else "sum eps_i"
    kind = "" if check.bound_test == "valid" else ", eps lower bounds"
    ax.plot(h, check.bound, "s:", color="grey", label=f"bound R_max {form}{kind}")
    ax.set_xlabel("horizon H (turns)")
    ax.set_ylabel("|J_P - J_Q|")
    ax.set_title(title or f"verdict: {check.verdict}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


# ---------------------------------------------------------------------- synthetic processes with exact answers

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
