"""The shift estimators and the compounding check on Markov-chain 'dialogues' whose answers are known exactly."""
import json

import numpy as np
import pytest

from dialogrl.plots import compounding_fits, layout_problems, shift_curves
from dialogrl.theory import (
    ShiftEstimate,
    classifier_shift,
    compounding_check,
    likelihood_shift,
    returns_by_horizon,
    text_history_features,
)
from markov_toy import MarkovDialogue, derail_process, exact_history_kl, exact_history_tv, iid_process, markov_features

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


def _paired_returns(p, q, horizons, n, seed, terminal=False):
    """Per-dialogue returns of P and Q at every horizon, paired: each process plays n dialogues once, at the longest
    horizon, and every horizon reads their first H turns (the same dialogues at every horizon). P's and Q's
    dialogue i share their random numbers (common random numbers, as when both counterparts play scenario i with
    the same seed), so dialogue i of P and of Q is a pair."""
    xp = p.sample(n, max(horizons), np.random.default_rng(seed))
    xq = q.sample(n, max(horizons), np.random.default_rng(seed))
    if terminal:
        return [p.terminal_returns(xp, h) for h in horizons], [q.terminal_returns(xq, h) for h in horizons]
    return [p.returns(xp, h) for h in horizons], [q.returns(xq, h) for h in horizons]


HORIZONS = list(range(2, 11))


@pytest.mark.parametrize("name, verdict", [("compounding", "quadratic"), ("non-compounding", "not quadratic")])
def test_compounding_check(name, verdict, tmp_path):
    p, q = PAIRS[name]
    rp, rq = _paired_returns(p, q, HORIZONS, 4000, seed=3)
    eps = classifier_estimate(p, q, max(HORIZONS), N, seed=4).increments(clip=False)
    check = compounding_check(HORIZONS, rp, rq, eps, r_max=1.0)
    if verdict == "quadratic":
        assert check.verdict == "quadratic" and check.quadratic_ci[0] > 0 and check.linear_ci[0] > 0
    else:  # the false-positive control: no curvature where the dynamics do not carry mismatches forward
        assert check.verdict != "quadratic"
        assert check.quadratic_ci[0] <= 0 <= check.quadratic_ci[1]
    assert check.bound_holds and np.all(np.abs(check.gap) <= check.bound)
    exact_gap = np.array([p.expected_return(h) - q.expected_return(h) for h in HORIZONS])  # signed: P does better
    assert np.all(exact_gap > 0)
    covered = (check.gap_ci[:, 0] <= exact_gap) & (exact_gap <= check.gap_ci[:, 1])
    assert np.all(covered | (np.abs(check.gap - exact_gap) < 0.02))
    shift = classifier_estimate(p, q, 6, 1000, seed=5)
    fig = compounding_fits(check, shift, path=tmp_path / "c.png")
    assert (tmp_path / "c.png").exists() and layout_problems(fig) == []
    fig = shift_curves({name: shift}, path=tmp_path / "s.png")
    assert (tmp_path / "s.png").exists() and layout_problems(fig) == []
    h = np.array(HORIZONS, float)  # the fits are the OLS fits behind the reported coefficients
    assert np.isclose(np.polyfit(h, check.gap, 2)[0], check.quadratic_coef)
    assert np.allclose(check.fitted(h, 1), np.polyval(np.polyfit(h, check.gap, 1), h))
    assert np.allclose(check.fitted(h, 2), np.polyval(np.polyfit(h, check.gap, 2), h))
    d = check.as_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d  # plain JSON types
    assert set(d) >= {"horizons", "gap", "gap_se", "gap_ci", "context_shift", "bound", "quadratic_coef", "quadratic_ci",
                      "linear_coef", "linear_ci", "start_slope", "start_slope_ci", "tau2", "df",
                      "min_detectable_quadratic", "aic", "bic", "verdict", "bound_holds", "shift_quadratic_coef",
                      "r_max", "reward", "bound_test"}
    assert d["df"] == len(HORIZONS) - 3 and np.array(d["gap_ci"]).shape == (len(HORIZONS), 2)
    line = check.summary_line()
    assert line.startswith(f"verdict {check.verdict}: curvature {check.quadratic_coef:.4f}") and "bound holds" in line


def test_terminal_reward_bound_counts_the_last_turn():
    """An outcome reward at the end depends on turn H's own shift: r_max * min(1, D_H) holds it, the per-turn form
    r_max * sum_t min(1, D_{t-1}) misses it."""
    start = np.array([1.0, 0.0, 0.0])  # both processes open the same way: eps_1 = 0
    p, q = derail_process(0.05), derail_process(0.2)
    p, q = MarkovDialogue(start, p.trans, p.reward), MarkovDialogue(start, q.trans, q.reward)
    eps = np.diff(np.r_[0.0, exact_history_tv(p, q, max(HORIZONS))])
    rp, rq = _paired_returns(p, q, HORIZONS, 4000, seed=0, terminal=True)
    exact_gap = np.array([p.expected_terminal(h) - q.expected_terminal(h) for h in HORIZONS])
    assert exact_gap[0] > 0.05 and eps[0] == 0
    terminal = compounding_check(HORIZONS, rp, rq, eps, reward="terminal")
    per_turn = compounding_check(HORIZONS, rp, rq, eps, reward="per_turn")
    assert terminal.bound_holds and np.all(np.abs(exact_gap) <= terminal.bound + 1e-12)
    assert np.allclose(terminal.bound, exact_history_tv(p, q, max(HORIZONS))[np.array(HORIZONS) - 1])  # D_H itself
    assert np.all(terminal.bound <= terminal.r_max)
    assert not per_turn.bound_holds and per_turn.bound[0] == 0  # the per-turn form does not apply to this reward
    assert terminal.bound_test == "valid" and terminal.as_dict()["reward"] == "terminal"
    lower = compounding_check(HORIZONS, rp, rq, eps, reward="terminal", eps_exact=False, r_max=10.0)
    assert lower.bound_test == "indicative" and np.all(lower.bound <= 10.0)
    with pytest.raises(ValueError, match="reward='outcome'"):
        compounding_check(HORIZONS, rp, rq, eps, reward="outcome")


def test_bound_uses_the_divergence_not_the_sum_of_clipped_increments():
    """Noisy up-and-down increments (as from a classifier estimate) whose clipped sum is 2: D_i = clip(cumsum, 0, 1)
    stays at most 0.8, and the terminal bound r_max * min(1, D_H) never exceeds r_max."""
    eps = np.tile([0.4, -0.3], 5)                        # cumsum 0.4, 0.1, 0.5, ..., 0.8, 0.5; clipped sum 2.0
    assert np.clip(eps, 0, None).sum() > 1
    hs = [2, 4, 6, 8, 10]
    rp, rq = [np.arange(5.0)] * 5, [np.arange(5.0) - 1] * 5   # gap 1 at every horizon
    D = np.clip(np.cumsum(eps), 0, 1)
    terminal = compounding_check(hs, rp, rq, eps, r_max=10.0, reward="terminal")
    assert np.allclose(terminal.bound, 10.0 * D[np.array(hs) - 1]) and np.all(terminal.bound <= 10.0)
    per_turn = compounding_check(hs, rp, rq, eps, r_max=10.0, reward="per_turn")
    assert np.allclose(per_turn.bound, [10.0 * np.r_[0.0, D][:h].sum() for h in hs])
    # a divergence that reaches 1: the terminal bound saturates at r_max, the per-turn one grows by r_max a turn
    big = compounding_check(hs, rp, rq, np.full(10, 0.3), r_max=10.0, reward="terminal")
    assert np.allclose(big.bound, [6.0, 10.0, 10.0, 10.0, 10.0])
    big = compounding_check(hs, rp, rq, np.full(10, 0.3), r_max=10.0, reward="per_turn")
    assert np.allclose(big.bound, 10.0 * np.array([0.3, 0.3 + 0.6 + 0.9, 1.8 + 2, 1.8 + 4, 1.8 + 6]))
    # while D stays below 1 the per-turn bound is R_max * sum_i (H - i) eps_i (the paper's form)
    small = np.linspace(0.01, 0.02, 10)
    per_turn = compounding_check(hs, rp, rq, small, r_max=10.0, reward="per_turn")
    assert np.allclose(per_turn.bound, [10.0 * sum((h - i) * small[i - 1] for i in range(1, h + 1)) for h in hs])
    # the unclipped increments of a ShiftEstimate sum back to its estimate; the clipped ones (default) do not
    est = ShiftEstimate("tv_lower_bound", np.arange(1, 5), np.array([0.2, 0.1, 0.3, 0.25]), np.zeros(4), np.ones(4))
    assert np.allclose(np.cumsum(est.increments(clip=False)), est.estimate)
    assert np.allclose(est.increments(), [0.2, 0.0, 0.2, 0.0])


# ----------------------------------------------------------------- known answers for the verdict, by simulation

H5 = np.array([2.0, 4.0, 6.0, 8.0, 10.0])
SHAPES = {  # true mean gaps J_P - J_Q at H5, and the verdict each must get
    "quadratic": (0.05 * H5 ** 2, "quadratic"),                          # c = 0.05
    "linear": (0.3 * H5, "linear"),                                      # b = 0.3, c = 0
    "flat": (np.full(5, 0.5), "not shown"),
    "concave": (0.9 * H5 - 0.04 * H5 ** 2, "not shown"),                 # c = -0.04, still rising at H = 10
    "U": (np.array([0.76, 0.17, 0.10, 0.80, 1.33]), "not shown"),        # a real measurement, not a parabola
    "U (parabola)": (0.3 + 0.04 * (H5 - 4) ** 2, "not shown"),           # c = 0.04 > 0 but falls at H = 2
    "zig-zag": (1.0 + 0.3 * (-1.0) ** np.arange(5), "not shown"),        # alternating, no trend
}
N_SCEN, N_REP = 300, 200


def _scenario_returns(mean_gap, rng, noise=0.5, run_sd=0.0):
    """Per-scenario returns at H5, paired: scenario i has a difficulty shared by P, Q and all horizons (SD 3) and
    its own P - Q difference shared by all horizons (SD 1); each horizon and side adds independent noise (SD
    `noise`), and each horizon's gap an optional run effect (SD `run_sd`, as when each horizon is its own training
    run). A return varies by about 3.2 points across scenarios; the per-scenario difference by 1.2 (noise 0.5)."""
    s = rng.normal(0, 3, (N_SCEN, 1))
    u = rng.normal(0, 1, (N_SCEN, 1))
    base = 5 + 0.2 * H5
    rp = base + mean_gap + rng.normal(0, run_sd, 5) + s + u + rng.normal(0, noise, (N_SCEN, 5))
    rq = base + s + rng.normal(0, noise, (N_SCEN, 5))
    return list(rp.T), list(rq.T)


def _power_only_linear(check):
    """"linear" with the margin delta = min_detectable_quadratic alone (not capped at pure H^2 growth)."""
    from scipy import stats

    t975, t95, t80 = stats.t.ppf([0.975, 0.95, 0.80], check.df)
    se_c = check.min_detectable_quadratic / (t975 + t80)
    growth = check.linear_ci[0] > 0 and check.start_slope_ci[1] >= 0
    small = abs(check.quadratic_coef) + t95 * se_c < check.min_detectable_quadratic
    return check.verdict != "quadratic" and growth and small


def _verdict_rates(mean_gap, seed, **kw):
    rng = np.random.default_rng(seed)
    verdicts, deltas, power_only = [], [], []
    for _ in range(N_REP):
        check = compounding_check(H5, *_scenario_returns(mean_gap, rng, **kw), np.full(10, 0.01))
        verdicts.append(check.verdict)
        deltas.append(check.min_detectable_quadratic)
        power_only.append(_power_only_linear(check))
    rates = {v: verdicts.count(v) / N_REP for v in ("quadratic", "linear", "not shown")}
    rates["linear, power-only margin"] = float(np.mean(power_only))
    return rates, float(np.median(deltas))


@pytest.mark.parametrize("name", SHAPES)
def test_verdict_known_answers(name):
    """The design (n = 300, horizon noise SD 0.5, no run effects): a gap's SE is 0.07, of which 0.04 is specific to
    its horizon (the scenario's own P - Q difference is shared by all horizons and drops out of slope and
    curvature), and the design detects a curvature of min_detectable_quadratic ~ 0.015 (80% power, df = 2). The
    effect sizes are well above it: the quadratic's c = 0.05 (3x), the concave c = -0.04 (2.7x); "linear" for 0.3 H
    must rule out pure H^2 growth at that slope, c = 0.3 / 12 = 0.025 (1.7x); the parabolic U falls at H = 2 with
    slope -0.16, 7 horizon-level SEs of that slope. The real U is no parabola: tau2 takes up the misfit (median
    min_detectable_quadratic 0.07), and its slope b = 0.09 is not shown."""
    mean_gap, expected = SHAPES[name]
    rates, delta = _verdict_rates(mean_gap, seed=list(SHAPES).index(name))
    print(f"{name}: {rates}, median min_detectable_quadratic {delta:.4f}")
    assert rates[expected] >= 0.8, rates
    if name in ("linear", "flat"):
        assert rates["quadratic"] <= 0.10, rates
    if expected == "not shown":
        assert rates["linear"] + rates["quadratic"] <= 0.10, rates


@pytest.mark.parametrize("name", ["quadratic", "concave"])
def test_underpowered_design_does_not_call_curvature_linear(name):
    """With 8 times the noise (min_detectable_quadratic ~ 0.12, above both curvatures), a margin of the detectable
    size alone calls these gaps "linear" most of the time (|c| / SE(c) below 2.4 is all it asks at df = 2); the
    margin capped at pure H^2 growth keeps them "not shown"."""
    rates, delta = _verdict_rates(SHAPES[name][0], seed=10, noise=4.0)
    print(f"{name}, underpowered: {rates}, median min_detectable_quadratic {delta:.4f}")
    assert delta > 0.1 and rates["linear"] <= 0.05, rates
    assert rates["linear, power-only margin"] >= 0.5, rates  # the flaw that the cap removes


@pytest.mark.parametrize("name", ["linear", "flat"])
def test_run_effects_between_horizons_do_not_make_curvature(name):
    """Each horizon its own training run: run effects of SD 0.3 on the gap, 3x its evaluation SE (0.1). tau2 takes
    them up (with t quantiles on K - 3 = 2 df); the false "quadratic" rate stays at most 10%."""
    rates, delta = _verdict_rates(SHAPES[name][0], seed=20, noise=1.0, run_sd=0.3)
    print(f"{name}, run effects: {rates}, median min_detectable_quadratic {delta:.4f}")
    assert rates["quadratic"] <= 0.10, rates


def test_pairing_uses_the_shared_scenarios():
    """The gaps' SEs come from per-scenario differences: far below the unpaired SEs when scenarios matter."""
    rp, rq = _scenario_returns(SHAPES["linear"][0], np.random.default_rng(0))
    check = compounding_check(H5, rp, rq, np.full(10, 0.01))
    unpaired = np.sqrt([a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b) for a, b in zip(rp, rq)])
    assert np.all(check.gap_se < 0.5 * unpaired)
    assert np.allclose(check.gap, [a.mean() - b.mean() for a, b in zip(rp, rq)])  # signed


def test_check_rejects_bad_input():
    with pytest.raises(ValueError, match="4 or more horizons"):
        compounding_check([2, 3, 4], [np.ones(3)] * 3, [np.ones(3)] * 3, np.ones(4))
    with pytest.raises(ValueError, match="eps covers 2 turns"):
        compounding_check([2, 3, 4, 5], [np.ones(3)] * 4, [np.ones(3)] * 4, np.ones(2))
    with pytest.raises(ValueError, match="same length"):  # a horizon with fewer scenarios
        compounding_check([2, 3, 4, 5], [np.ones(3)] * 3 + [np.ones(2)], [np.ones(3)] * 4, np.ones(5))
    with pytest.raises(ValueError, match="same length"):  # P and Q on different scenarios
        compounding_check([2, 3, 4, 5], [np.ones(3)] * 4, [np.ones(4)] * 4, np.ones(5))
    with pytest.raises(ValueError, match="one array per horizon"):
        compounding_check([2, 3, 4, 5], [np.ones(3)] * 3, [np.ones(3)] * 4, np.ones(5))
    with pytest.raises(ValueError, match="distinct"):
        compounding_check([2, 3, 3, 5], [np.ones(3)] * 4, [np.ones(3)] * 4, np.ones(5))
    with pytest.raises(ValueError, match="sum to 1"):
        MarkovDialogue(np.ones(2), np.eye(2) * 2, np.ones(2))


def test_text_features_for_transcripts():
    dialogues = [["i want the hats", "ok deal"], ["give me the books"]]
    X = text_history_features(dialogues, 2, n_features=64)
    assert X.shape == (2, 66) and X[1, -1] == 0 and X[0, -2] == 4


def test_returns_by_horizon_plays_paired_games():
    """Scripted negotiators at turn caps 2..8: P's and Q's returns per horizon are the policy's scores on the same
    scenarios, in scenario order, each horizon from its own seed, stream_seed("horizons", seed, H) (as cross_play
    would play it alone)."""
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.evaluate import cross_play
    from dialogrl.seeds import stream_seed

    scenarios = DealOrNoDeal().sample_scenarios(20, seed=3)
    hs, calls = [2, 4, 6, 8], []

    def policy_at(H, task):
        calls.append((H, task.max_turns))
        return ScriptedAgent("greedy", 0)

    rp, rq, games = returns_by_horizon(hs, lambda H: DealOrNoDeal(max_turns=H), policy_at,
                                       lambda: ScriptedAgent("fair", 1), lambda: ScriptedAgent("stubborn", 1),
                                       scenarios, role="A", seed=100, labels=("sim", "proxy"))
    assert calls == [(H, H) for H in hs] and len(rp) == len(rq) == 4 and all(len(r) == 20 for r in rp + rq)
    assert set(games["counterpart"]) == {"sim", "proxy"} and list(games["H"].unique()) == hs
    alone = cross_play(DealOrNoDeal(max_turns=6), {"policy": ScriptedAgent("greedy", 0)},
                       {"sim": ScriptedAgent("fair", 1)}, scenarios, roles=["A"], seed=stream_seed("horizons", 100, 6))
    assert np.array_equal(rp[2], alone["score"].to_numpy(float))
    assert list(games[(games["H"] == 6) & (games["counterpart"] == "sim")]["scenario"]) == [s.id for s in scenarios]
    check = compounding_check(hs, rp, rq, np.full(8, 0.05), r_max=10.0, reward="terminal")
    assert check.n_scenarios == 20
    with pytest.raises(ValueError, match="labels must differ"):
        returns_by_horizon(hs, DealOrNoDeal, policy_at, None, None, scenarios, role="A", labels=("x", "x"))


def test_history_shift_reads_played_games_or_their_states():
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.rollout import play
    from dialogrl.theory import history_shift

    task = DealOrNoDeal(max_turns=6)
    scenarios = task.sample_scenarios(90, seed=0)
    greedy = play(task, {"A": ScriptedAgent("fair"), "B": ScriptedAgent("greedy")}, scenarios)
    giving = play(task, {"A": ScriptedAgent("fair"), "B": ScriptedAgent("accommodating")}, scenarios)
    est = history_shift(greedy, [e.state for e in giving], 4, n=80, seed=0)
    assert list(est.turns) == [1, 2, 3, 4]
    assert np.array_equal(est.estimate, history_shift([e.state for e in greedy], giving, 4, n=80, seed=0).estimate)
    # turn 1 is the same agent's opening on the same scenarios; from the counterpart's first reply on, the interval of
    # the shift excludes zero
    assert est.estimate[0] == 0 and (est.lo[1:] > 0).all()
    assert not history_shift(greedy, greedy, 4, n=80, seed=0).estimate.any()   # games against themselves: no shift
