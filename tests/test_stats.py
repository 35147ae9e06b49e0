"""Statistics over seeds (dialogrl.stats): intervals and their coverage, paired differences, power, claims."""
import numpy as np
import pandas as pd
import pytest

from dialogrl.stats import bootstrap_ci, paired_difference


def test_bootstrap_ci_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.normal(5, 1, 50), rng.normal(5, 1, 5000)
    lo, hi = bootstrap_ci(small)
    assert lo < small.mean() < hi
    lo2, hi2 = bootstrap_ci(large)
    assert hi2 - lo2 < (hi - lo) / 5 and lo2 < 5 < hi2
    assert bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_paired_difference(games):
    df, _ = games
    d = paired_difference(df, "greedy", "conceder", "agreed")
    assert d["n"] == 400 and d["lo"] < d["diff"] < d["hi"] < 0  # the greedy persona walks away more often
    same = paired_difference(df, "greedy", "greedy", "score")
    assert same["diff"] == 0 == same["lo"] == same["hi"]


def test_clustered_ci_counts_seed_to_seed_variation():
    from dialogrl.stats import clustered_ci

    rng = np.random.default_rng(0)
    # three training seeds whose means differ far more than the evaluation noise within each
    df = pd.DataFrame({"seed": np.repeat([0, 1, 2], 400),
                       "x": np.concatenate([rng.normal(m, 0.1, 400) for m in (0.0, 1.0, 2.0)])})
    lo, hi = clustered_ci(df, "x")
    plain = bootstrap_ci(df["x"].to_numpy())
    assert lo < df["x"].mean() < hi and (hi - lo) > 10 * (plain[1] - plain[0])
    # the t-interval on the three seed means by hand: 1 +- t_{0.975, 2} * 1 / sqrt(3)
    means = df.groupby("seed")["x"].mean()
    half = 4.302653 * means.std(ddof=1) / np.sqrt(3)
    assert np.allclose([lo, hi], [means.mean() - half, means.mean() + half], atol=1e-4)
    one = df[df["seed"] == 0]
    with pytest.warns(UserWarning, match="one training seed"):
        assert clustered_ci(one, "x") == bootstrap_ci(one["x"].to_numpy())  # one cluster: the bootstrap over games


def _simulated_games(rng, n_seeds, seed_sd, n_games=300, effect=0.0, scenario_sd=1.0):
    """Two methods' games, as the notebooks evaluate them: each training seed has its own draw of evaluation
    scenarios (scenario effects, SD scenario_sd), which both methods of that seed play; per seed and method a
    training-run effect (SD seed_sd, in game-SD units); unit game noise. The true mean of a is 0, of a - b `effect`."""
    rows = []
    for s in range(n_seeds):
        scen = rng.normal(0, scenario_sd, n_games)
        for method, mu in (("a", 0.0), ("b", -effect)):
            x = mu + rng.normal(0, seed_sd) + scen + rng.normal(0, 1, n_games)
            rows.append(pd.DataFrame({"method": method, "seed": s, "scenario": np.arange(n_games),
                                      "counterpart": "p", "x": x}))
    return pd.concat(rows, ignore_index=True)


@pytest.mark.parametrize("n_seeds", [3, 5])
@pytest.mark.parametrize("seed_sd", [0.0, 0.3, 1.0])
def test_intervals_cover_the_truth_with_few_seeds(n_seeds, seed_sd):
    """Coverage of the nominal 95% intervals over 200 simulated experiments: the method's mean (true 0) and the paired
    difference (true 0.2) must be covered >= 90% of the time. The old seed-then-game percentile bootstrap covered
    about 70-77% with 3 seeds and 83% with 5 (the reason for the t-interval)."""
    from dialogrl.stats import clustered_ci, paired_clustered

    rng = np.random.default_rng(1000 * n_seeds + int(10 * seed_sd))
    hits_mean = hits_diff = 0
    repeats = 200
    for _ in range(repeats):
        df = _simulated_games(rng, n_seeds, seed_sd, n_games=100, effect=0.2)
        a, b = df[df.method == "a"], df[df.method == "b"]
        lo, hi = clustered_ci(a, "x")
        hits_mean += lo <= 0.0 <= hi
        out = paired_clustered(a, b, "x")
        hits_diff += out["ci"][0] <= 0.2 <= out["ci"][1]
    print(f"{n_seeds} seeds, seed SD {seed_sd}: coverage mean {hits_mean / repeats:.3f}, "
          f"diff {hits_diff / repeats:.3f}")
    assert hits_mean / repeats >= 0.90 and hits_diff / repeats >= 0.90


def test_paired_clustered_pairs_by_scenario_and_seed():
    from dialogrl.stats import paired_clustered

    rng = np.random.default_rng(0)

    def rows(shift, seeds):
        return pd.DataFrame([{"counterpart": "p", "scenario": k, "seed": s,
                              "score": k % 5 + shift + 0.1 * rng.standard_normal()} for s in seeds for k in range(40)])

    a, b = rows(1.0, [0, 1, 2]), rows(0.0, [0, 1, 2])
    out = paired_clustered(a, b, "score")
    # the scenario effect (k % 5, spread 1.4) cancels in the pairs: the CI is tight around +1
    assert out["games"] == 120 and abs(out["diff"] - 1.0) < 0.05 and out["holds"] and out["ci"][1] - out["ci"][0] < 0.1
    assert out["seeds"] == 3 and out["interval"] == "t over 3 seeds"
    base = rows(0.0, [0])  # one seed (a warm start): every seed of a pairs with it
    assert paired_clustered(a, base, "score")["games"] == 120
    with pytest.raises(ValueError, match="missing"):
        paired_clustered(a.drop(columns="scenario"), b, "score")
    with pytest.raises(ValueError, match="no game of a pairs"):
        paired_clustered(a, b.assign(counterpart="q"), "score")


def test_paired_clustered_counts_the_games_it_leaves_out():
    from dialogrl.stats import paired_clustered

    a = pd.DataFrame({"counterpart": "p", "scenario": np.arange(10), "seed": np.repeat([0, 1], 5), "x": 1.0})
    b = pd.DataFrame({"counterpart": "p", "scenario": np.arange(2, 12), "seed": np.repeat([0, 1], 5), "x": 0.0})
    with pytest.warns(UserWarning, match="4 of 10 games of a and 4 of 10 games of b have no match"):
        out = paired_clustered(a, b, "x", keys=("counterpart", "scenario"))
    assert out["games"] == 6 and out["diff"] == 1.0  # seed 0 pairs scenarios 2-4, seed 1 scenarios 7-9


def test_mde_has_the_power_it_claims():
    """At the MDE the t-test over seeds rejects 80% of the time, at 0 5%; for many seeds the MDE approaches
    (z_.975 + z_.8) sd / sqrt(n)."""
    from scipy import stats

    from dialogrl.stats import mde

    rng = np.random.default_rng(0)
    for n in (3, 5, 10):
        effect = mde(1.0, n)
        x = rng.normal(effect, 1.0, size=(20000, n))
        p = stats.ttest_1samp(x, 0.0, axis=1).pvalue
        assert 0.78 < (p < 0.05).mean() < 0.82, n
        x0 = rng.normal(0.0, 1.0, size=(20000, n))
        assert 0.04 < (stats.ttest_1samp(x0, 0.0, axis=1).pvalue < 0.05).mean() < 0.06
    assert mde(1.0, 2000) == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) / np.sqrt(2000), rel=0.01)
    assert mde(2.0, 5) == pytest.approx(2 * mde(1.0, 5)) and np.isnan(mde(1.0, 1)) and mde(0.0, 3) == 0.0


def test_seeds_for_reproduces_the_hand_computed_sample_size():
    """The seeds a confirmatory design needs: the one-sample two-sided t-test at alpha 0.05 and 80% power needs 10
    units for an effect of 1 sd (power 0.803 at 10, 0.748 at 9: noncentral t, as G*Power's one-sample table) and 34
    for 0.5 sd (0.808 at 34, 0.795 at 33); an effect no number of seeds reaches gives None."""
    from dialogrl.stats import mde, seeds_for

    assert seeds_for(1.0, 1.0) == 10 and seeds_for(0.5, 1.0) == 34 and seeds_for(-0.5, 1.0) == 34
    assert mde(1.0, 10) <= 1.0 < mde(1.0, 9)
    assert seeds_for(0.05, 0.06) == 14      # notebook 04's headline comparison (issue 69's table: "about 16")
    assert seeds_for(1e-4, 1.0) is None and seeds_for(0.1, float("nan")) is None and seeds_for(0.1, 0.0) == 2


def test_variance_components_and_design_mde():
    from dialogrl.stats import design_mde, mde, variance_components

    rng = np.random.default_rng(1)
    tau, sigma, n, m = 0.5, 2.0, 40, 200
    rows = [{"seed": s, "scenario": k, "counterpart": c, "diff": shift + rng.normal(0, sigma)}
            for s in range(n) for shift in [rng.normal(0, tau)] for k in range(m) for c in ("x",)]
    comp = variance_components(pd.DataFrame(rows))
    assert comp["seeds"] == n and comp["units"] == m
    assert comp["sigma2"] == pytest.approx(sigma ** 2, rel=0.05)
    assert comp["tau2"] == pytest.approx(tau ** 2, rel=0.5)
    # the design's sd is sqrt(tau2 + sigma2 / units): more seeds shrink the MDE, more scenarios only the second term
    assert design_mde(comp, 10, m) == pytest.approx(mde(np.sqrt(comp["tau2"] + comp["sigma2"] / m), 10))
    assert design_mde(comp, 20, m) < design_mde(comp, 10, m)
    assert design_mde(comp, 10, 10 * m) > mde(np.sqrt(comp["tau2"]), 10)


def test_power_analysis_of_a_paired_claim():
    from dialogrl.stats import power_analysis

    rng = np.random.default_rng(2)

    def rows(shift, seed_shifts):
        return pd.DataFrame([{"counterpart": c, "scenario": k, "seed": s, "score": k % 3 + shift + d + rng.normal()}
                             for s, d in enumerate(seed_shifts) for k in range(30) for c in ("p", "q")])

    a, b = rows(0.5, [0.3, -0.2, 0.1, 0.0]), rows(0.0, [0.0, 0.0, 0.0, 0.0])
    out = power_analysis(a, b, "score", paper_effect=1.0)
    assert out["seeds"] == 4 and out["games"] == 240 and out["units"] == 30
    assert 0 < out["mde"] and out["detectable"] == (out["mde"] <= 1.0) and out["paper_effect"] == 1.0
    assert power_analysis(a, b, "score", paper_effect=None)["detectable"] is None
    one = power_analysis(a[a.seed == 0], b[b.seed == 0], "score", paper_effect=1.0)  # one seed: no MDE, no nan
    assert one["seeds"] == 1 and one["mde"] is None and one["detectable"] is None and one["tau2"] is None


def test_counterpart_gap_is_the_training_counterpart_minus_the_held_out_mean_per_game():
    from dialogrl.stats import counterpart_gap

    train = pd.DataFrame({"seed": [0, 0, 1], "scenario": [0, 1, 0], "score": [8.0, 6.0, 5.0]})
    heldout = pd.DataFrame({"seed": [0, 0, 0, 1], "scenario": [0, 0, 1, 7], "score": [4.0, 6.0, 6.0, 1.0]})
    gap = counterpart_gap(train, heldout, "score")
    assert gap[["seed", "scenario", "score"]].values.tolist() == [[0, 0, 3.0], [0, 1, 0.0]]  # seed 1's has no match
    assert set(gap["counterpart"]) == {"-"}


def test_a_summary_table_as_a_summary_entry_and_long_rows():
    from dialogrl.stats import ci_dict, ci_long, mean_ci, summarize, t_interval

    games = pd.DataFrame({"method": ["a"] * 4 + ["b"] * 4, "seed": [0, 0, 1, 1] * 2,
                          "score": [1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 1.0, 1.0]})
    t = summarize(games, by=("method",), metrics=("score",))
    entry = ci_dict(t, "score")
    assert list(entry) == ["a", "a_ci", "b", "b_ci"] and entry["a"] == 2.5
    assert entry["a_ci"] == [t.loc[0, "score_lo"], t.loc[0, "score_hi"]]
    rows = ci_long(t, "score", metric="score")
    assert rows.columns.tolist() == ["metric", "method", "mean", "lo", "hi", "games", "seeds"]
    assert rows["games"].tolist() == [4, 4] and rows["seeds"].tolist() == [2, 2]
    assert mean_ci("m", [1.0, 2.0, 4.0]) == {"m": pytest.approx(7 / 3), "m_ci": list(t_interval([1.0, 2.0, 4.0]))}
    assert mean_ci("m", [3.0]) == {"m": 3.0}   # one seed: no interval


def test_rank_agreement_with_fisher_intervals_by_hand():
    from dialogrl.stats import fisher_ci, rank_agreement

    lo, hi = fisher_ci(0.5, 28)   # z = atanh(0.5) = 0.5493, se = 1 / 5
    assert (lo, hi) == (pytest.approx(np.tanh(0.5493061 - 0.392)), pytest.approx(np.tanh(0.5493061 + 0.392)))
    frame = pd.DataFrame({"gpt4_goal": [1, 2, 3, 4, 5, 6], "judge_goal": [2, 1, 4, 3, 6, 5],
                          "gpt4_relationship": [0, 1, 2, 3, 4, 5], "judge_relationship": [3] * 6})
    out = rank_agreement(frame, "judge")
    assert out["goal_spearman"] == pytest.approx(1 - 6 * 6 / (6 * 35))   # d = +-1 at every rank
    assert out["goal_spearman_ci"] == fisher_ci(out["goal_spearman"], 6)
    assert out["relationship_spearman"] is None and out["relationship_spearman_ci"] is None   # a constant judge


def test_mean_claim_is_the_mean_with_its_interval_over_seeds():
    from dialogrl.stats import clustered_ci, mean_claim

    d = pd.DataFrame({"seed": [0, 0, 1, 1, 2], "scenario": [0, 1, 0, 1, 0], "score": [1.0, 3.0, 2.0, 2.0, 5.0]})
    c = mean_claim(d, "score")
    assert c == {"diff": 2.6, "ci": list(clustered_ci(d, "score")), "games": 5, "seeds": 3}


def test_mismatch_is_the_gap_to_the_training_counterpart_beyond_the_bases():
    from dialogrl.stats import counterpart_gap, mean_claim, mismatch, paired_clustered

    rows = []
    for seed in (0, 1, 2):
        for sc in (0, 1):
            for method, vs_train in (("m", 9.0 + seed), ("base", 6.0)):
                rows += [{"method": method, "seed": seed, "scenario": sc, "counterpart": "train", "score": vs_train},
                         {"method": method, "seed": seed, "scenario": sc, "counterpart": "x", "score": 5.0 + sc},
                         {"method": method, "seed": seed, "scenario": sc, "counterpart": "y", "score": 3.0 + sc}]
    games = pd.DataFrame(rows)
    r = mismatch(games, "m", "train", ["x", "y"], "score")
    m, b = games[games["method"] == "m"], games[games["method"] == "base"]
    gap = counterpart_gap(m[m["counterpart"] == "train"], m[m["counterpart"] != "train"], "score")
    base_gap = counterpart_gap(b[b["counterpart"] == "train"], b[b["counterpart"] != "train"], "score")
    assert r["gap"] == mean_claim(gap, "score") and r["base_gap"] == mean_claim(base_gap, "score")
    assert r["gap"]["diff"] == pytest.approx(10.0 - 4.5) and r["base_gap"]["diff"] == pytest.approx(6.0 - 4.5)
    assert r["minus_base"] == paired_clustered(gap, base_gap, "score", keys=["scenario"])
    assert r["minus_base"]["diff"] == pytest.approx(4.0) and r["minus_base"]["seeds"] == 3
    # the base against another name for the same counterpart (its games against `train-m`), and no training one
    renamed = games.assign(counterpart=np.where((games["method"] == "base") & (games["counterpart"] == "train"),
                                                "train-m", games["counterpart"]))
    assert mismatch(renamed, "m", "train", ["x", "y"], "score", base_train="train-m") == r
    assert mismatch(games[games["counterpart"] != "train"], "m", "train", ["x", "y"], "score") is None


def test_per_group_means_over_seeds_and_change_over_training():
    from dialogrl.stats import change_over_training, mean_ci, mean_ci_by

    frame = pd.DataFrame({"method": ["b", "b", "a", "a", "a"], "seed": [0, 1, 0, 1, 2],
                          "x": [1.0, 2.0, 4.0, np.nan, 6.0]})
    assert mean_ci_by(frame, "x") == {**mean_ci("b", [1.0, 2.0]), **mean_ci("a", [4.0, 6.0])}
    assert list(mean_ci_by(frame, "x")) == ["b", "b_ci", "a", "a_ci"]   # in the order of appearance
    curves = pd.DataFrame({"method": ["a"] * 6 + ["b"] * 2, "seed": [0, 0, 0, 1, 1, 1, 0, 0],
                           "step": [-1, 0, 1, -1, 0, 1, -1, 3], "r": [0.1, np.nan, 0.5, 0.2, 0.3, 0.2, 0.0, 1.0]})
    out = change_over_training(curves, "r")
    assert out["a"] == pytest.approx(np.mean([0.4, 0.0])) and out["a_ci"] == mean_ci("a", [0.4, 0.0])["a_ci"]
    assert out == {**mean_ci("a", [0.5 - 0.1, 0.2 - 0.2]), "b": 1.0}   # one seed: no interval


def test_by_counterpart_is_each_methods_mean_per_counterpart_in_the_methods_order():
    from dialogrl.stats import by_counterpart

    games = pd.DataFrame({"method": ["a", "a", "b", "b"], "counterpart": ["x", "y", "x", "y"],
                          "success": [1.0, 0.0, 0.5, 0.25]})
    entry, table = by_counterpart(games, "success", ["b", "a"])
    assert list(table.index) == ["b", "a"] and entry == {"b": {"x": 0.5, "y": 0.25}, "a": {"x": 1.0, "y": 0.0}}
