"""Context distribution shift in multi-turn dialogue, and the check that the gap it causes compounds quadratically.

Notation (one dialogue of H turns). x_i is what turn i adds to the dialogue; the context the policy answers at
turn t is c_t = (x_1, ..., x_{t-1}), and its reward there is r_t = r(c_t) in [0, R_max]. Training contexts come
from P (logged histories, or a simulator), deployment contexts from Q (the policy's own dialogues with humans).
Let D_i = TV(P(x_1..x_i), Q(x_1..x_i)), the shift of the history after turn i (D_0 = 0, and D_i <= 1 as every TV),
and eps_i = D_i - D_{i-1} the shift that turn i adds. Context c_t carries every earlier turn's shift,
TV(c_t) = D_{t-1}, so a mismatch at turn i reaches all H - i later contexts and

    |J_P(H) - J_Q(H)| <= R_max * sum_{t=1..H} min(1, D_{t-1}) = R_max * sum_{i=1..H} (H - i) * eps_i  (D below 1),

which is O(H^2 eps) for a constant per-turn eps (the paper's Theorem 3.1). With a terminal outcome reward instead
(a game's score, a function of the whole dialogue x_1..x_H), the same argument gives
|J_P(H) - J_Q(H)| <= R_max * min(1, D_H): turn H's own shift counts, the bound is linear in H for a constant eps
until D reaches 1, and it is never above R_max (`compounding_check(..., reward="terminal")`). Increments estimated
from data go up and down; the bound takes D_i = clip(eps_1 + .. + eps_i, 0, 1) from the unclipped increments
(`ShiftEstimate.increments(clip=False)`), since a sum of clipped increments overstates D and can exceed 1.
The bound check is a test only with exact eps_i. The classifier estimates below are *lower* bounds of TV, so a
bound built from them is a lower estimate of the true bound: a gap above it does not refute the theorem, and
`CompoundingCheck.bound_test` says "indicative" then.

Whether the *measured* gap grows like H^2 depends on whether the dynamics carry a mismatch forward;
`compounding_check` tests that on data. It takes per-scenario returns at K >= 4 horizons, the same evaluation
scenarios at every horizon and under P and Q, and works with the signed gap J_P - J_Q (an absolute value biases
small gaps upward and turns a sign change into a V). Pairing by scenario gives the gaps' covariance across
horizons; a between-horizon variance tau2 takes up what evaluation noise does not explain (e.g. one training run
per horizon), and intervals use t quantiles on K - 3 degrees of freedom. The verdict has three values:
"quadratic" (growth shown and positive curvature shown), "linear" (growth shown and the curvature shown smaller than
both what the design detects and pure H^2 growth at the measured rate) and "not shown" (flat, falling, U-shaped,
zig-zag or concave gaps, or too little data to tell). Curvature alone is not compounding: a U shape has it too.

Estimators of the per-turn shift between two sets of dialogues:
  - `likelihood_shift`: when the generating agents expose log-probs, KL(P_{<=i} || Q_{<=i}) by the chain rule,
    sum_{j<=i} E_P[log p(x_j | x_<j) - log q(x_j | x_<j)], Monte Carlo over dialogues from P, with standard errors.
  - `classifier_shift`: from transcripts only, a classifier two-sample test per turn: the held-out accuracy acc of a
    classifier telling P's histories from Q's gives TV >= 2 * acc - 1 (balanced classes), with bootstrap CIs.
The tests check both, and the compounding check, on Markov-chain dialogues with exact answers (tests/markov_toy.py).

In a game, `returns_by_horizon` plays the returns the check takes: at every horizon H, the policy for H against the
training-like counterpart (P) and the deployment counterpart (Q) on the same scenarios. Figures: `dialogrl.plots`
(`shift_curves`, `compounding_fits`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from dialogrl.evaluate import cross_play
from dialogrl.seeds import stream_seed

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

    def increments(self, clip: bool = True) -> np.ndarray:
        """eps_i = D_i - D_{i-1} (D_0 = 0): the shift each turn adds, clipped at 0 unless clip=False.

        Unclipped increments sum back to the estimate (sum_{j<=i} eps_j = D_i); clipped ones sum to more than D_i
        wherever a noisy estimate dips, so `compounding_check` takes the unclipped ones.
        """
        eps = np.diff(np.concatenate([[0.0], self.estimate]))
        return np.clip(eps, 0.0, None) if clip else eps


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
        xp = np.asarray(xp, float)[rng.permutation(len(xp))[:n]]
        xq = np.asarray(xq, float)[rng.permutation(len(xq))[:n]]
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


def history_shift(p: Sequence, q: Sequence, turns: int, n: int | None = None, seed: int = 0) -> ShiftEstimate:
    """classifier_shift between two sets of played dialogues (GameStates, or rollout Episodes with a `state`; the
    first n of each, all for None), on their talk histories after each turn 1..turns (`text_history_features`)."""
    def texts(dialogues):
        return [[t.text for t in getattr(d, "state", d).talk_turns()] for d in dialogues[:n]]

    p_texts, q_texts = texts(p), texts(q)
    return classifier_shift([text_history_features(p_texts, i) for i in range(1, turns + 1)],
                            [text_history_features(q_texts, i) for i in range(1, turns + 1)], seed=seed)


# ------------------------------------------------------------------------------------- the compounding check

@dataclass
class CompoundingCheck:
    """The signed gap and the shift against the horizon H, the linear and quadratic fits, the verdict and the bound.

    Arrays are per horizon; intervals are 95% unless named otherwise. See `compounding_check` for the rules.
    """
    horizons: np.ndarray
    gap: np.ndarray                  # J_P(H) - J_Q(H), signed: the mean of the per-scenario differences
    gap_se: np.ndarray               # its standard error (evaluation noise: sqrt(diag Sigma))
    gap_ci: np.ndarray               # (K, 2)
    context_shift: np.ndarray        # per_turn: sum_{t<=H} min(1, D_{t-1}); terminal: min(1, D_H)
    bound: np.ndarray                # r_max * context_shift: bounds |gap|
    quadratic_coef: float            # c in gap = a + b H + c H^2
    quadratic_ci: tuple[float, float]
    linear_coef: float               # b in gap = a + b H (the growth per turn)
    linear_ci: tuple[float, float]
    start_slope: float               # b + 2 c H_min of the quadratic fit: its slope at the smallest horizon
    start_slope_ci: tuple[float, float]
    tau2: float                      # between-horizon variance beyond evaluation noise (moments, >= 0)
    df: int                          # K - 3: degrees of freedom of the t quantiles
    min_detectable_quadratic: float  # delta: c detected at 80% power, two-sided 0.05, by this design
    equivalence_margin: float        # min(delta, c of pure H^2 growth at the measured slope): the "linear" margin
    aic: dict                        # {"linear": ..., "quadratic": ...}, Gaussian with cov Sigma + tau2 I; informative
    bic: dict
    verdict: str                     # "quadratic", "linear" or "not shown"
    bound_holds: bool                # every |gap| <= its bound
    shift_quadratic_coef: float      # the same quadratic fit of context_shift against H
    r_max: float = 1.0
    reward: str = "per_turn"         # "per_turn" (a reward at every context) or "terminal" (one outcome at the end)
    bound_test: str = "valid"        # "valid" with exact eps; "indicative" with lower bounds of TV (classifier eps)
    n_scenarios: int = 0             # evaluation scenarios per horizon (the pairs behind every gap)
    pure_quadratic_coef: float = float("nan")  # c of pure H^2 growth at the measured slope (what "quadratic" predicts)

    def as_dict(self) -> dict:
        def plain(v):
            if isinstance(v, np.ndarray):
                return plain(v.tolist())
            if isinstance(v, (list, tuple)):
                return [plain(x) for x in v]
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, (bool, np.bool_)):
                return bool(v)
            if isinstance(v, (int, np.integer)):
                return int(v)
            if isinstance(v, (float, np.floating)):
                return float(v) if np.isfinite(v) else None
            return v
        return {name: plain(getattr(self, name)) for name in self.__dataclass_fields__}

    def summary_line(self) -> str:
        """The verdict, the curvature with its interval beside what this design detects, and the bound, in a line."""
        return (f"verdict {self.verdict}: curvature {self.quadratic_coef:.4f} {np.round(self.quadratic_ci, 4)}, "
                f"detectable at 80% power {self.min_detectable_quadratic:.4f}; bound holds: {self.bound_holds} "
                f"({self.bound_test})")

    def fitted(self, grid: Sequence[float], degree: int) -> np.ndarray:
        """The OLS fit of the gap against H of `degree` (1: linear, 2: quadratic), evaluated at the horizons `grid`."""
        coef = _ols(self.horizons, degree)[1] @ self.gap                          # (degree + 1,) a, b[, c]
        return np.vander(np.asarray(grid, float), degree + 1, increasing=True) @ coef


def _ols(h: np.ndarray, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """Design X = [1, H, .., H^degree] and the OLS operator A = (X'X)^-1 X' (coefficients = A @ y), (p, K).

    The intercept stays free: where the gap is zero (H = 0 or H = 1) depends on how a task counts turns.
    """
    X = np.vander(np.asarray(h, float), degree + 1, increasing=True)
    return X, np.linalg.pinv(X)


def _gaussian_ic(resid: np.ndarray, V: np.ndarray, p: int) -> tuple[float, float]:
    """AIC and BIC of a fit whose residuals have covariance V (known): -2 log L + 2p, -2 log L + p log K."""
    sign, logdet = np.linalg.slogdet(V)
    if sign <= 0:
        return float("nan"), float("nan")
    m2ll = float(resid @ np.linalg.solve(V, resid) + logdet + len(resid) * np.log(2 * np.pi))
    return m2ll + 2 * p, m2ll + p * np.log(len(resid))


def _context_shift(h: np.ndarray, eps: np.ndarray, reward: str) -> np.ndarray:
    """D_i = clip(sum_{j<=i} eps_j, 0, 1) (D_0 = 0); terminal: D_H; per_turn: sum_{t=1..H} D_{t-1}."""
    D = np.r_[0.0, np.clip(np.cumsum(eps), 0.0, 1.0)]  # D[i] = D_i, i = 0..len(eps)
    if reward == "terminal":
        return np.array([D[int(H)] for H in h])
    return np.array([D[:int(H)].sum() for H in h])


def compounding_check(horizons: Sequence[int], returns_p: Sequence[np.ndarray], returns_q: Sequence[np.ndarray],
                      eps: Sequence[float], r_max: float = 1.0, reward: str = "per_turn", eps_exact: bool = True
                      ) -> CompoundingCheck:
    """Is growth of the signed gap J_P(H) - J_Q(H) with the horizon shown, and is it quadratic? Is it under the bound?

    horizons: the K >= 4 distinct horizons H_k (e.g. turn caps 2, 4, ..., 10).
    returns_p, returns_q: per horizon, the per-scenario returns under training-like contexts (P) and deployment
        contexts (Q), aligned by index: entry i is evaluation scenario i at every horizon and in both lists (so every
        array has the same length n). gap_k = mean_i (returns_p[k][i] - returns_q[k][i]), signed: the check asks
        whether P's advantage grows (pass Q as P for the other direction).
    eps: per-turn increments eps_1..eps_Hmax of the history divergence D_i in TV units, unclipped
        (`ShiftEstimate.increments(clip=False)`): D_i = clip(eps_1 + .. + eps_i, 0, 1).
    reward: "per_turn" (J sums a reward in [0, r_max] at every context: bound r_max * sum_{t=1..H} min(1, D_{t-1}),
        which is r_max * sum_i (H - i) eps_i while D stays below 1) or "terminal" (J is one outcome in [0, r_max] of
        the whole dialogue: bound r_max * min(1, D_H), never above r_max).
    eps_exact: False when eps are lower bounds of TV (classifier estimates): `bound_holds` is still computed, but
        `bound_test` is "indicative", since a lower estimate of the bound can be exceeded without contradiction.

    Inference. D is the (n, K) matrix of per-scenario differences; the gaps' covariance is Sigma = cov(D) / n, with
    the correlation across horizons that the shared scenarios give. The gaps are fitted by OLS, gap = a + b H and
    gap = a + b H + c H^2, and a coefficient vector A @ gap has covariance A (Sigma + tau2 I) A'. tau2 >= 0 is the
    between-horizon variance that evaluation noise does not explain (a separate training run per horizon, or a
    smooth curve that is not a parabola), by moments from the quadratic fit: tau2 = max(0, (RSS - tr(M Sigma)) /
    (K - 3)), M = I - X A the residual maker (E RSS = tr(M Sigma) + (K - 3) tau2). Intervals use t quantiles with
    df = K - 3: tau2 is estimated from K - 3 residuals only, and where it dominates the variance is a scaled
    chi^2_{K-3} variable, as in a Knapp-Hartung meta-regression; normal quantiles would claim precision that K = 5
    horizons do not have. Where evaluation noise dominates (tau2 ~ 0) the t quantiles are conservative.

    Verdict (the intervals are the 95% ones that `CompoundingCheck` reports, unless said otherwise):
      growth shown: the linear fit's slope b has its CI above 0, and the quadratic fit is not significantly falling
        at the smallest horizon (the upper end of the CI of b + 2 c H_min is >= 0). A U shape, whose parabola falls
        before it rises, has a positive slope and curvature but is not compounding.
      "quadratic": growth shown and the CI of c lies above 0.
      "linear": growth shown and c shown small: its 90% CI lies inside (-m, m) (two one-sided tests at 5%).
        m = min(delta, c_pure). delta = (t_{0.975,df} + t_{0.80,df}) SE(c), `min_detectable_quadratic`, is the
        curvature this design detects with 80% power. c_pure = b / slope(H^2 on H) is the curvature of pure H^2
        growth, gap = c H^2, with the measured slope b (b / (H_min + H_max) for evenly spaced horizons);
        and `equivalence_margin` holds m. Why c_pure: a margin proportional to SE(c) alone turns the two one-sided tests
        into |c / SE(c)| < t_{0.975} + t_{0.80} - t_{0.95}, a non-significance test, so an underpowered design would
        call even pure H^2 growth "linear". With m <= c_pure, "linear" needs the data to rule out H^2 compounding at
        the measured rate, at the 5% level whatever the power. m <= delta makes "linear" and "quadratic" exclusive.
      "not shown" otherwise: flat, falling, U-shaped, zig-zag or concave gaps, or too little data to tell.
    """
    h = np.asarray(horizons, float)
    eps = np.asarray(eps, float)
    K = len(h)
    if len(returns_p) != K or len(returns_q) != K:
        raise ValueError(f"returns_p and returns_q need one array per horizon ({K}); got {len(returns_p)} and "
                         f"{len(returns_q)}")
    if K < 4:
        raise ValueError(f"the check needs gaps at 4 or more horizons (got {K}): with 3 the quadratic fit is exact "
                         "and leaves nothing to test it against")
    if len(np.unique(h)) != K or np.any(h < 1) or np.any(h != np.round(h)):
        raise ValueError(f"horizons must be distinct positive integers; got {list(horizons)}")
    if h.max() > len(eps):
        raise ValueError(f"eps covers {len(eps)} turns but the longest horizon is {int(h.max())}")
    if reward not in ("per_turn", "terminal"):
        raise ValueError(f"reward={reward!r}: choose 'per_turn' or 'terminal'")
    rp = [np.asarray(r, float).ravel() for r in returns_p]
    rq = [np.asarray(r, float).ravel() for r in returns_q]
    lengths = {len(r) for r in rp + rq}
    if len(lengths) != 1:
        raise ValueError("returns_p and returns_q must hold the same evaluation scenarios at every horizon, paired "
                         "by index, so every array must have the same length; got lengths "
                         f"P {[len(r) for r in rp]}, Q {[len(r) for r in rq]}")
    n = lengths.pop()
    if n < 2:
        raise ValueError("the check needs 2 or more evaluation scenarios per horizon")
    from scipy import stats

    D = np.stack(rp, axis=1) - np.stack(rq, axis=1)          # (n, K) per-scenario differences
    gap = D.mean(0)
    Sigma = np.atleast_2d(np.cov(D, rowvar=False)) / n         # (K, K) covariance of the gaps
    gap_se = np.sqrt(np.diag(Sigma))
    z = stats.t.ppf(0.975, n - 1)
    gap_ci = np.c_[gap - z * gap_se, gap + z * gap_se]

    Xl, Al = _ols(h, 1)
    Xq, Aq = _ols(h, 2)
    beta_l, beta_q = Al @ gap, Aq @ gap
    M = np.eye(K) - Xq @ Aq
    resid_q = M @ gap
    df = K - 3
    tau2 = max(0.0, float(resid_q @ resid_q - np.trace(M @ Sigma)) / df)
    V = Sigma + tau2 * np.eye(K)
    cov_l, cov_q = Al @ V @ Al.T, Aq @ V @ Aq.T
    t975, t95, t80 = stats.t.ppf([0.975, 0.95, 0.80], df)

    def ci(est, se, t=t975):
        return float(est - t * se), float(est + t * se)

    b, se_b = float(beta_l[1]), float(np.sqrt(cov_l[1, 1]))
    c, se_c = float(beta_q[2]), float(np.sqrt(cov_q[2, 2]))
    w = np.array([0.0, 1.0, 2.0 * h.min()])                    # d/dH (a + b H + c H^2) at H_min
    start, se_start = float(w @ beta_q), float(np.sqrt(w @ cov_q @ w))
    lin_ci, quad_ci, start_ci = ci(b, se_b), ci(c, se_c), ci(start, se_start)
    delta = float((t975 + t80) * se_c)
    c_pure = b / float((Al @ h ** 2)[1])                       # pure H^2 growth with the measured slope b
    margin = min(delta, max(c_pure, 0.0))

    growth = lin_ci[0] > 0 and start_ci[1] >= 0
    if growth and quad_ci[0] > 0:
        verdict = "quadratic"
    elif growth and -margin < c - t95 * se_c and c + t95 * se_c < margin:
        verdict = "linear"
    else:
        verdict = "not shown"

    ctx = _context_shift(h, eps, reward)
    aic_l, bic_l = _gaussian_ic(gap - Xl @ beta_l, V, 2)
    aic_q, bic_q = _gaussian_ic(resid_q, V, 3)
    return CompoundingCheck(
        horizons=h, gap=gap, gap_se=gap_se, gap_ci=gap_ci, context_shift=ctx, bound=r_max * ctx,
        quadratic_coef=c, quadratic_ci=quad_ci, linear_coef=b, linear_ci=lin_ci, start_slope=start,
        start_slope_ci=start_ci, tau2=tau2, df=df, min_detectable_quadratic=delta, equivalence_margin=margin,
        aic={"linear": aic_l, "quadratic": aic_q}, bic={"linear": bic_l, "quadratic": bic_q}, verdict=verdict,
        bound_holds=bool(np.all(np.abs(gap) <= r_max * ctx + 1e-12)),
        shift_quadratic_coef=float((Aq @ ctx)[2]), r_max=float(r_max), reward=reward,
        bound_test="valid" if eps_exact else "indicative", n_scenarios=int(n), pure_quadratic_coef=float(c_pure))


# ------------------------------------------------------------------------------ the returns, played in a game

def returns_by_horizon(horizons: Sequence[int], task_at: Callable, policy_at: Callable, counterpart_p: Callable,
                       counterpart_q: Callable, scenarios: Sequence, role: str, metric: str = "score", seed: int = 0,
                       labels: tuple[str, str] = ("P", "Q")):
    """The per-scenario returns that `compounding_check` takes, played: at every horizon H, the policy for H plays
    the same scenarios against the training-like counterpart (P) and against the deployment counterpart (Q).

    task_at(H) -> the task whose dialogues end after H talk turns.
    policy_at(H, task) -> the policy's Agent at horizon H (e.g. one trained on that task, or one policy for all H).
    counterpart_p(), counterpart_q() -> the counterpart of one evaluation cell; called once per horizon, before
        either plays, so a counterpart that keeps state between games starts fresh at every horizon.
    scenarios: the evaluation scenarios, the same at every horizon and for both counterparts (the pairs of the check).
    role: the policy's role; `metric` is read from that role's side (`evaluate.game_rows`).
    Horizon H evaluates with seed stream_seed("horizons", seed, H) (`evaluate.cross_play`: every game its own seed,
    keyed by scenario, role and counterpart). Returns (returns_p, returns_q, games): per horizon an (n,) array of
    `metric` per scenario for P and for Q, in scenario order, and every game row with its horizon "H" and
    counterpart (`labels`).
    """
    if labels[0] == labels[1]:
        raise ValueError(f"labels must differ; got {labels}")
    returns_p, returns_q, frames = [], [], []
    for H in horizons:
        task = task_at(H)
        policy = policy_at(H, task)
        games = cross_play(task, {"policy": policy}, {labels[0]: counterpart_p(), labels[1]: counterpart_q()},
                           scenarios, roles=[role], seed=stream_seed("horizons", seed, H))
        for label, out in zip(labels, (returns_p, returns_q)):
            out.append(games.loc[games["counterpart"] == label, metric].to_numpy(dtype=float))
        frames.append(games.assign(H=H))
    return returns_p, returns_q, pd.concat(frames, ignore_index=True)
