"""Cross-play evaluation, bootstrap CIs, paired differences, transcripts and the heatmap."""
import json

import numpy as np
import pandas as pd
import pytest

from dialogrl.agents import ScriptedAgent
from dialogrl.envs import DealOrNoDeal
from dialogrl.evaluate import bootstrap_ci, cross_play, paired_difference, summarize
from dialogrl.plots import bars_with_ci, crossplay_heatmap

TASK = DealOrNoDeal()


def test_bootstrap_ci_covers_the_mean_and_shrinks_with_n():
    rng = np.random.default_rng(0)
    small, large = rng.normal(5, 1, 50), rng.normal(5, 1, 5000)
    lo, hi = bootstrap_ci(small)
    assert lo < small.mean() < hi
    lo2, hi2 = bootstrap_ci(large)
    assert hi2 - lo2 < (hi - lo) / 5 and lo2 < 5 < hi2
    assert bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)


@pytest.fixture(scope="module")
def games(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "transcripts.jsonl"
    policies = {"greedy": ScriptedAgent("greedy", 0), "conceder": ScriptedAgent("conceder", 0)}
    panel = {"fair": ScriptedAgent("fair", 1), "stubborn": ScriptedAgent("stubborn", 1)}
    df = cross_play(TASK, policies, panel, TASK.sample_scenarios(100, seed=5), transcripts=path, n_transcripts=2)
    return df, path


def test_cross_play_grid(games):
    df, path = games
    assert len(df) == 2 * 2 * 2 * 100  # policies x counterparts x seats x scenarios
    table = summarize(df)
    assert set(table["policy"]) == {"greedy", "conceder"} and (table["n"] == 200).all()
    assert (table["score_lo"] <= table["score"]).all() and (table["score"] <= table["score_hi"]).all()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 2 * 2 * 2 * 2 and {"policy", "counterpart", "seat", "turns", "outcome"} <= set(lines[0])


def test_paired_difference(games):
    df, _ = games
    d = paired_difference(df, "greedy", "conceder", "agreed")
    assert d["n"] == 400 and d["lo"] < d["diff"] < d["hi"] < 0  # the greedy persona walks away more often
    same = paired_difference(df, "greedy", "greedy", "score")
    assert same["diff"] == 0 == same["lo"] == same["hi"]


def test_figures(games, tmp_path):
    df, _ = games
    table = summarize(df)
    crossplay_heatmap(table, "score", path=tmp_path / "heat.png")
    bars_with_ci(summarize(df, by=("policy",)), "agreed", path=tmp_path / "bars.png")
    assert (tmp_path / "heat.png").stat().st_size > 1000 and (tmp_path / "bars.png").stat().st_size > 1000


def test_clustered_ci_counts_seed_to_seed_variation():
    import pandas as pd

    from dialogrl.evaluate import clustered_ci

    rng = np.random.default_rng(0)
    # three training seeds whose means differ far more than the evaluation noise within each
    df = pd.DataFrame({"seed": np.repeat([0, 1, 2], 400),
                       "x": np.concatenate([rng.normal(m, 0.1, 400) for m in (0.0, 1.0, 2.0)])})
    lo, hi = clustered_ci(df, "x")
    plain = bootstrap_ci(df["x"].to_numpy())
    assert lo < df["x"].mean() < hi and (hi - lo) > 10 * (plain[1] - plain[0])
    one = df[df["seed"] == 0]
    assert clustered_ci(one, "x") == bootstrap_ci(one["x"].to_numpy())  # one cluster: the plain bootstrap


def test_game_rows_carry_the_tasks_own_outcome_fields():
    from dialogrl.envs.telesales import TelesalesAgent, VehicleTeleSales
    from dialogrl.evaluate import game_rows
    from dialogrl.rollout import play

    task = VehicleTeleSales()
    eps = play(task, {"seller": TelesalesAgent("fair", 0), "buyer": TelesalesAgent(None, 1)},
               task.sample_scenarios(20, seed=0))
    rows = game_rows(task, eps, "seller")
    assert {"sale", "good_sale", "feasible", "n_invalid"} <= set(rows[0])
    assert np.mean([r["good_sale"] for r in rows]) == task.metrics([e.state for e in eps])["success_at_1"]


def test_paired_clustered_pairs_by_scenario_and_seed():
    from dialogrl.evaluate import paired_clustered

    rng = np.random.default_rng(0)
    rows = lambda shift, seeds: pd.DataFrame([{"counterpart": "p", "scenario": k, "seed": s,
                                               "score": k % 5 + shift + 0.1 * rng.standard_normal()}
                                              for s in seeds for k in range(40)])
    a, b = rows(1.0, [0, 1, 2]), rows(0.0, [0, 1, 2])
    out = paired_clustered(a, b, "score")
    # the scenario effect (k % 5, spread 1.4) cancels in the pairs: the CI is tight around +1
    assert out["games"] == 120 and abs(out["diff"] - 1.0) < 0.05 and out["holds"] and out["ci"][1] - out["ci"][0] < 0.1
    base = rows(0.0, [0])  # one seed (a warm start): every seed of a pairs with it
    assert paired_clustered(a, base, "score")["games"] == 120
    with pytest.raises(ValueError, match="missing"):
        paired_clustered(a.drop(columns="scenario"), b, "score")
    with pytest.raises(ValueError, match="no game of a pairs"):
        paired_clustered(a, b.assign(counterpart="q"), "score")
