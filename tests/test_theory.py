"""The shift estimators and the compounding check on Markov-chain 'dialogues' whose answers are known exactly."""
import numpy as np
import pytest

from dialogrl.theory import (MarkovDialogue, classifier_shift, compounding_check, derail_process, exact_history_kl,
                             exact_history_tv, iid_process, likelihood_shift, markov_features, plot_compounding,
                             text_history_features)

H = 8
N = 3000
PAIRS = {"compounding": (derail_process(0.02), derail_process(0.10)),
         "non-compounding": (iid_process(0.02), iid_process(0.10))}


def classifier_estimate(p, q, horizon, n, seed):
    rng = np.random.default_rng(seed)
    xp, xq = p.sample(n, horizon, rng), q.sample(n, horizon, rng)
    return classifier_shift([markov_features(xp[:, :i], i) for i in range(1, horizon + 1)],
                            [markov_features(xq[:, :i], i) for i in range(1, horizon + 1)], seed=seed)


def test_exact_answers_by_hand():
    p, q = PAIRS["compounding"]
    # on track throughout is the only history P makes more often: TV_i = 0.98^i - 0.90^i
    i = np.arange(1, 5)
    assert np.allclose(exact_history_tv(p, q, 4), 0.98 ** i - 0.90 ** i)
    kl_row = 0.98 * np.log(0.98 / 0.90) + 0.02 * np.log(0.02 / 0.10)  # KL of the on-track rows (= init)
    # chain rule: turn 1 adds kl(init); later turns add kl_row times P(on track before)
    assert np.allclose(exact_history_kl(p, q, 3), [kl_row, kl_row * (1 + 0.98), kl_row * (1 + 0.98 + 0.98 ** 2)])
    assert p.expected_return(1) == 1.0
    assert np.isclose(p.expected_return(3), 1 + (0.98 + 0.02 * 0.3) + (0.98 ** 2 + (1 - 0.98 ** 2) * 0.3))


@pytest.mark.parametrize("name", PAIRS)
def test_likelihood_estimator_recovers_the_exact_kl(name):
    p, q = PAIRS[name]
    x = p.sample(N, H, np.random.default_rng(0))
    est = likelihood_shift(p.logprob(x), q.logprob(x))
    exact = exact_history_kl(p, q, H)
    assert np.all((est.lo <= exact) & (exact <= est.hi)), (est.estimate, exact)
    assert np.all(np.diff(exact) > 0)  # the histories drift further apart every turn


@pytest.mark.parametrize("name", PAIRS)
def test_classifier_estimator_recovers_the_exact_tv(name):
    p, q = PAIRS[name]
    est = classifier_estimate(p, q, 6, N, seed=1)
    exact = exact_history_tv(p, q, 6)
    assert np.all((est.lo <= exact) & (exact <= est.hi)), (est.estimate, exact)


def test_classifier_sees_no_shift_between_identical_processes():
    p = derail_process(0.05)
    est = classifier_estimate(p, p, 4, 2000, seed=2)
    assert np.all(est.lo <= 0.0 + 1e-12) and np.all(est.estimate < 0.06)


def _returns(p, q, horizons, n, seed):
    rng = np.random.default_rng(seed)
    rp, rq = [], []
    for h in horizons:  # a separate experiment per horizon, as when each turn cap is its own run
        rp.append(p.returns(p.sample(n, h, rng), h))
        rq.append(q.returns(q.sample(n, h, rng), h))
    return rp, rq


HORIZONS = list(range(2, 11))


@pytest.mark.parametrize("name, verdict", [("compounding", "quadratic"), ("non-compounding", "linear")])
def test_compounding_check(name, verdict, tmp_path):
    p, q = PAIRS[name]
    rp, rq = _returns(p, q, HORIZONS, 4000, seed=3)
    eps = classifier_estimate(p, q, max(HORIZONS), N, seed=4).increments()
    check = compounding_check(HORIZONS, rp, rq, eps, r_max=1.0, n_boot=500)
    assert check.verdict == verdict
    if verdict == "quadratic":
        assert check.quadratic_ci[0] > 0
    else:  # the false-positive control: no curvature where the dynamics do not carry mismatches forward
        assert check.quadratic_ci[0] <= 0 <= check.quadratic_ci[1]
    assert check.bound_holds and np.all(check.gap <= check.bound)
    exact_gap = [abs(p.expected_return(h) - q.expected_return(h)) for h in HORIZONS]
    assert np.all((check.gap_ci[:, 0] <= exact_gap) & (exact_gap <= check.gap_ci[:, 1]) | (np.abs(check.gap - exact_gap) < 0.02))
    fig = plot_compounding(check, classifier_estimate(p, q, 6, 1000, seed=5), path=tmp_path / "c.png")
    assert (tmp_path / "c.png").exists() and fig is not None
    assert set(check.as_dict()) >= {"quadratic_coef", "quadratic_ci", "verdict", "bound_holds"}


def test_terminal_reward_bound_counts_the_last_turn():
    """An outcome reward at the end depends on turn H's own shift: sum_i (H - i) eps_i misses it, sum_i eps_i not."""
    start = np.array([1.0, 0.0, 0.0])  # both processes open the same way: eps_1 = 0
    p, q = derail_process(0.05), derail_process(0.2)
    p, q = MarkovDialogue(start, p.trans, p.reward), MarkovDialogue(start, q.trans, q.reward)
    eps = np.diff(np.r_[0.0, exact_history_tv(p, q, max(HORIZONS))])
    rng = np.random.default_rng(0)
    rp = [p.terminal_returns(p.sample(4000, h, rng), h) for h in HORIZONS]
    rq = [q.terminal_returns(q.sample(4000, h, rng), h) for h in HORIZONS]
    exact_gap = np.array([abs(p.expected_terminal(h) - q.expected_terminal(h)) for h in HORIZONS])
    assert exact_gap[0] > 0.05 and eps[0] == 0
    terminal = compounding_check(HORIZONS, rp, rq, eps, n_boot=200, reward="terminal")
    per_turn = compounding_check(HORIZONS, rp, rq, eps, n_boot=200, reward="per_turn")
    assert terminal.bound_holds and np.all(exact_gap <= terminal.bound + 1e-12)
    assert not per_turn.bound_holds and per_turn.bound[0] == 0  # the per-turn form does not apply to this reward
    assert terminal.bound_test == "valid" and terminal.as_dict()["reward"] == "terminal"
    lower = compounding_check(HORIZONS, rp, rq, eps, n_boot=200, reward="terminal", eps_exact=False)
    assert lower.bound_test == "indicative"
    with pytest.raises(ValueError, match="reward='outcome'"):
        compounding_check(HORIZONS, rp, rq, eps, reward="outcome")


def test_check_rejects_bad_input():
    with pytest.raises(ValueError, match="3 or more horizons"):
        compounding_check([2, 3], [np.ones(3)] * 2, [np.ones(3)] * 2, np.ones(3))
    with pytest.raises(ValueError, match="eps covers 2 turns"):
        compounding_check([2, 3, 4], [np.ones(3)] * 3, [np.ones(3)] * 3, np.ones(2))
    with pytest.raises(ValueError, match="sum to 1"):
        MarkovDialogue(np.ones(2), np.eye(2) * 2, np.ones(2))


def test_text_features_for_transcripts():
    dialogues = [["i want the hats", "ok deal"], ["give me the books"]]
    X = text_history_features(dialogues, 2, n_features=64)
    assert X.shape == (2, 66) and X[1, -1] == 0 and X[0, -2] == 4
