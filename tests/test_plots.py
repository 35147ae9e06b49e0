"""Every figure function renders a small run's data readably: axis labels, tick labels apart, legends off the data,
no matplotlib warning; learning-curve bands are t-intervals over seeds, like the headline figures."""
import warnings

import matplotlib
import numpy as np
import pandas as pd
import pytest

from dialogrl import plots
from dialogrl.calibration import acceptance_curve
from dialogrl.plots import bars_with_ci, crossplay_heatmap
from dialogrl.stats import summarize, t_interval

matplotlib.use("Agg")


def curve_rows(methods=("base", "socialrl", "outcome_ppo"), seeds=3, steps=12):
    rng = np.random.default_rng(0)
    return [{"method": m, "seed": s, "step": t, "rollout/success_at_1": min(1.0, 0.2 + 0.04 * t * (i > 0)
                                                                             + rng.normal(0, 0.05))}
            for i, m in enumerate(methods) for s in range(seeds) for t in range(1, steps + 1)]


def check(fig):
    assert plots.layout_problems(fig) == []
    matplotlib.pyplot.close(fig)


@pytest.fixture(autouse=True)
def warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_learning_curve_bands_are_t_intervals_over_seeds(tmp_path):
    rows = curve_rows()
    bands = plots.curve_bands(pd.DataFrame(rows), "rollout/success_at_1", hue="method")
    at = bands[(bands.method == "socialrl") & (bands.step == 5)].iloc[0]
    vals = [r["rollout/success_at_1"] for r in rows if r["method"] == "socialrl" and r["step"] == 5]
    assert (at["lo"], at["hi"]) == pytest.approx(t_interval(vals)) and at["n"] == 3
    fig = plots.learning_curves(rows, y="rollout/success_at_1", hue="method", path=tmp_path / "l.png")
    assert fig.axes[0].get_ylabel() == "success at 1 (training rollouts)"  # not the raw key
    check(fig)


def test_a_legend_that_would_cover_the_curves_is_caught():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    for k in range(4):
        ax.plot(np.arange(30), np.full(30, 0.9 - 0.01 * k), label=f"a long legend entry {k}")
    ax.set(xlabel="step", ylabel="reward")
    ax.legend(loc="upper right")
    assert any("legend covers" in p for p in plots.layout_problems(fig))
    ax.get_legend().remove()
    ax.set_xticks(range(30), [f"counterpart-{k}" for k in range(30)])
    assert any("overlap" in p for p in plots.layout_problems(fig))
    plt.close(fig)


def test_crossplay_drops_empty_lanes_and_slants_long_names(tmp_path):
    cells = [("base", "train-single", 0.3), ("base", "heldout-generous", 0.5), ("single", "train-single", 0.8),
             ("single", "heldout-generous", 0.4), ("vs", "heldout-generous", 0.45), ("vs", "nobody-played", None)]
    table = pd.DataFrame(cells, columns=["policy", "counterpart", "success"])
    fig = plots.crossplay_heatmap(table, "success", path=tmp_path / "c.png")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["train-single", "heldout-generous"]
    check(fig)


def test_bars_tradeoff_and_weights_render_readably(tmp_path):
    table = pd.DataFrame({"method": ["base", "socialrl", "outcome_ppo", "socialrl_grpo"], "goal": [0.3, 0.5, 0.45, 0.4],
                          "relationship": [0.1, 1.0, 0.4, 0.8]})
    for col in ("goal", "relationship"):
        table[f"{col}_lo"], table[f"{col}_hi"] = table[col] - 0.05, table[col] + 0.05
    check(plots.bars_with_ci(table, "goal", x="method", path=tmp_path / "b.png"))
    check(plots.tradeoff_plane(table, "goal", "relationship", path=tmp_path / "t.png"))
    weights = {s: {d: 1 / 6 for d in ("goal_progress", "rapport", "empathy", "clarity", "persuasion", "respect")}
               for s in ("opening", "negotiation", "closing")}
    check(plots.weights_heatmap(weights, path=tmp_path / "w.png"))


def test_compounding_axis_follows_the_data_not_a_far_bound(tmp_path):
    from dialogrl.theory import compounding_check

    h = np.arange(1, 9)
    rng = np.random.default_rng(1)
    returns_p = [0.02 * H * H + rng.normal(0, 0.3, 200) for H in h]   # per-scenario returns, quadratic growth
    returns_q = [np.zeros(200) for _ in h]
    check_ = compounding_check(h, returns_p, returns_q, eps=[0.5] * 8)   # the bound grows to 6.5
    fig = plots.compounding_fits(check_, path=tmp_path / "c.png")
    lo, hi = fig.axes[-1].get_ylim()
    assert hi < check_.bound.max() and hi > max(np.mean(r) for r in returns_p)  # the data fill the axes
    assert "beyond the axes" in " ".join(t.get_text() for t in fig.axes[-1].get_legend().get_texts())
    check(fig)


def test_judge_agreement_and_reply_spread_render_readably(tmp_path):
    rng = np.random.default_rng(0)
    val = pd.DataFrame({f"{j}_{k}": rng.integers(0, 10, 12).astype(float)
                        for j in ("gpt4", "judge", "smol") for k in ("goal", "relationship")})
    rho = {"judge": {"goal_spearman": 0.4, "relationship_spearman": None},
           "smol": {"goal_spearman": -0.1, "relationship_spearman": 0.2}}
    fig = plots.agreement_scatter(val, {"judge": "rule judge", "smol": "smollm2 (scored)"}, rho,
                                  path=tmp_path / "a.png")
    check(fig)
    assert [ax.get_title() for ax in fig.axes][:2] == ["goal: Spearman 0.40", "relationship: Spearman nan"]
    spread = pd.DataFrame({"simulator": ["reference", "single", "vs"] * 4, "state": np.repeat(range(4), 3),
                           "similarity": rng.random(12), "act_entropy": rng.random(12), "model": "smollm2"})
    check(plots.spread_bars(spread, path=tmp_path / "s.png"))
    assert (tmp_path / "a.png").exists() and (tmp_path / "s.png").exists()


def test_stack_columns_puts_logged_columns_under_one_name():
    rows = pd.DataFrame({"method": ["a", "a", "b"], "seed": [0, 0, 1], "step": [0, 1, 0],
                         "reward/x": [0.1, np.nan, 0.3], "eval/y": [np.nan, 0.5, 0.6]})
    long = plots.stack_columns(rows, {"train": "reward/x", "held out": "eval/y"}, var="against", value="reward")
    assert long.columns.tolist() == ["method", "seed", "step", "reward", "against"]
    assert long[["step", "reward", "against"]].values.tolist() == [[0, 0.1, "train"], [0, 0.3, "train"],
                                                                    [1, 0.5, "held out"], [0, 0.6, "held out"]]


def test_acceptance_curves_band_the_seeds_and_draw_the_humans_as_one_line(tmp_path):
    """Notebook 01's calibration figure: a simulator over seeds gets its t-band; the humans' logs, one curve with no
    seed, one line; a bin nobody decided in is left out."""
    bins = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 10))
    rows = [{"simulator": "human (held-out logs)", **r}
            for r in acceptance_curve([(w, w >= 6) for w in range(11)], bins)]
    for seed, lean in enumerate((0.6, 0.7, 0.8)):
        rows += [{"simulator": "calibrated", "seed": seed, **r}
                 for r in acceptance_curve([(w, w / 10 < lean) for w in range(8)], bins)]   # nothing above 7
    frame = pd.DataFrame(rows)
    fig = plots.acceptance_curves(frame, path=tmp_path / "acceptance.png", units="seed")
    assert (tmp_path / "acceptance.png").stat().st_size > 0
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert set(lines) == {"human (held-out logs)", "calibrated (3 seeds)"}
    assert len(lines["calibrated (3 seeds)"].get_xdata()) == 4 and len(lines["human (held-out logs)"].get_xdata()) == 5
    check(fig)


def test_figures(games, tmp_path):
    df, _ = games
    table = summarize(df)
    crossplay_heatmap(table, "score", path=tmp_path / "heat.png")
    bars_with_ci(summarize(df, by=("policy",)), "agreed", path=tmp_path / "bars.png")
    assert (tmp_path / "heat.png").stat().st_size > 1000 and (tmp_path / "bars.png").stat().st_size > 1000


def test_bars_accept_a_zero_width_interval_off_by_rounding(tmp_path):
    # every seed alike: the interval has no width, and the pooled mean can sit a rounding error outside it
    table = pd.DataFrame({"method": ["a", "b"], "reward": [0.165625, 0.2], "reward_lo": [0.16562500000000002, 0.1],
                          "reward_hi": [0.16562500000000002, 0.3]})
    bars_with_ci(table, "reward", x="method", path=tmp_path / "bars.png")
    assert (tmp_path / "bars.png").exists()
    with pytest.raises(ValueError, match="does not contain its estimate"):
        bars_with_ci(table.assign(reward_lo=[0.2, 0.1]), "reward", x="method")


def test_crossplay_heatmap_averages_games_per_pairing(tmp_path):
    import matplotlib.pyplot as plt

    games = pd.DataFrame({"method": ["a", "a", "b", "b"], "counterpart": ["x", "x", "x", "y"],
                          "score": [1.0, 3.0, 5.0, 7.0]})
    fig = crossplay_heatmap(games, "score", policy="method", path=tmp_path / "h.png")
    # a's two games averaged; the pairing nobody played (a, y) stays blank
    assert [t.get_text() for t in fig.axes[0].texts] == ["2.00", "5.00", "7.00"]
    assert (tmp_path / "h.png").exists()
    plt.close(fig)


def test_headline_bars_each_metric_and_returns_entries_and_rows(tmp_path):
    games = pd.DataFrame({"method": ["base", "base", "trained", "trained"] * 2, "seed": [0, 1, 0, 1] * 2,
                          "success": [0.0, 1.0, 1.0, 1.0] * 2, "reward": [0.1, 0.2, 0.5, 0.7] * 2})
    entries, table = plots.headline(games, ["trained", "base"], {"win": "success", "reward": "reward"},
                                    tmp_path / "headline_{key}.png", "held-out {key}", task="toy")
    assert list(entries) == ["win", "reward"] and list(entries["win"])[:2] == ["trained", "trained_ci"]
    assert (tmp_path / "headline_win.png").exists() and (tmp_path / "headline_reward.png").exists()
    assert list(table.columns[:3]) == ["task", "metric", "method"] and len(table) == 4
