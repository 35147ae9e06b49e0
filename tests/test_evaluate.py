"""Cross-play evaluation (dialogrl.evaluate): its grid of games, transcripts, outcome rows, seeding and scenarios."""
import json

import numpy as np
import pandas as pd

from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.evaluate import cross_play
from dialogrl.stats import summarize

TASK = DealOrNoDeal()


def test_cross_play_grid(games):
    df, path = games
    assert len(df) == 2 * 2 * 2 * 100  # policies x counterparts x roles x scenarios
    table = summarize(df)
    assert set(table["policy"]) == {"greedy", "conceder"} and (table["n"] == 200).all()
    assert (table["score_lo"] <= table["score"]).all() and (table["score"] <= table["score_hi"]).all()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 2 * 2 * 2 * 2 and {"policy", "counterpart", "role", "turns", "outcome"} <= set(lines[0])


def test_game_rows_carry_the_tasks_own_outcome_fields():
    from dialogrl.envs.telesales import ScriptedAgent as Seller
    from dialogrl.envs.telesales import VehicleTeleSales
    from dialogrl.evaluate import game_rows
    from dialogrl.rollout import play

    task = VehicleTeleSales()
    eps = play(task, {"seller": Seller("fair", 0), "buyer": Seller(None, 1)},
               task.sample_scenarios(20, seed=0))
    rows = game_rows(task, eps, "seller")
    assert {"sale", "good_sale", "feasible", "n_invalid"} <= set(rows[0])
    assert np.mean([r["good_sale"] for r in rows]) == task.metrics([e.state for e in eps])["success_at_1"]


def test_evaluating_the_same_policy_twice_gives_identical_rows(toy_model_dir):
    """Every cell starts from the same random state: LM agents through seed_everything, scripted counterparts by
    drawing per utterance from (seed, scenario, role, turn) instead of a private stream that runs on across cells."""
    from dialogrl.agents import LMAgent
    from dialogrl.models import load_model

    model, tok = load_model(str(toy_model_dir), device="cpu")
    lm = LMAgent(model, tok, max_new_tokens=12)
    scripted = ScriptedAgent("erratic", 3)  # the noisiest persona: most draws per game
    panel = {"erratic": ScriptedAgent("erratic", 4), "fair": ScriptedAgent("fair", 4)}
    scenarios = TASK.sample_scenarios(12, seed=9)
    df = cross_play(TASK, {"lm-1": lm, "scripted-1": scripted, "lm-2": lm, "scripted-2": scripted}, panel, scenarios,
                    seed=5)
    cols = ["counterpart", "role", "scenario", "score", "counterpart_score", "agreed", "invalid_rate", "turns"]
    for name in ("lm", "scripted"):
        first = df[df.policy == f"{name}-1"][cols].reset_index(drop=True)
        second = df[df.policy == f"{name}-2"][cols].reset_index(drop=True)
        pd.testing.assert_frame_equal(first, second)
    again = cross_play(TASK, {"scripted-1": scripted}, panel, scenarios, seed=5)
    pd.testing.assert_frame_equal(again[cols], df[df.policy == "scripted-1"][cols].reset_index(drop=True))


def test_cross_play_returns_the_games_it_played():
    scenarios = TASK.sample_scenarios(10, seed=8)
    policies, panel = {"greedy": ScriptedAgent("greedy", 0)}, {"fair": ScriptedAgent("fair", 1)}
    df, played = cross_play(TASK, policies, panel, scenarios, roles=["B"], return_episodes=True)
    assert list(played) == [("greedy", "fair", "B")] and len(played["greedy", "fair", "B"]) == 10
    assert [e.outcome["B"]["score"] for e in played["greedy", "fair", "B"]] == df["score"].tolist()
    assert df.equals(cross_play(TASK, policies, panel, scenarios, roles=["B"]))  # the same games either way


def test_cross_play_takes_each_counterparts_own_scenarios():
    from dialogrl.envs.dealnodeal import DealOrNoDeal, ScriptedAgent
    from dialogrl.evaluate import cross_play

    task = DealOrNoDeal(max_turns=6)
    scenarios = task.sample_scenarios(5, seed=0)
    panel = {"fair": ScriptedAgent("fair"), "greedy": ScriptedAgent("greedy")}
    mine = cross_play(task, {"p": ScriptedAgent("fair")}, panel, {"fair": scenarios, "greedy": scenarios[:2]},
                      roles=["A"], seed=3)
    together = cross_play(task, {"p": ScriptedAgent("fair")}, panel, scenarios, roles=["A"], seed=3)
    assert mine.groupby("counterpart").size().to_dict() == {"fair": 5, "greedy": 2}
    expected = pd.concat([together[together["counterpart"] == "fair"],
                          together[together["counterpart"] == "greedy"].head(2)], ignore_index=True)
    pd.testing.assert_frame_equal(mine, expected)   # the same games: each game's seed keys on its scenario
