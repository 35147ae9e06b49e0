"""The warm-start corpus of `tiny-dond`: scripted persona self-play as chat conversations."""
from __future__ import annotations

from collections.abc import Sequence

from dialogrl.envs.dealnodeal.personas import population
from dialogrl.envs.dealnodeal.task import DealOrNoDeal
from dialogrl.game import check_views, conversations
from dialogrl.rollout import play


def dond_corpus(n_dialogues: int = 9000, seed: int = 0, personas: Sequence[str] | None = None,
                max_turns: int = 10, views: str = "one", style: str | None = None) -> list[list[dict]]:
    """Scripted persona self-play dialogues as chat conversations, the warm-start corpus of `tiny-dond`.

    Each game pairs two personas drawn from `personas` (all by default) on a scenario drawn with `seed`.
    views="both" gives each game twice, once from each role's view (its own turns as assistant); "one" gives one
    role's view per game, alternating. Scenario seeds here are `seed` itself; evaluation draws from other seeds.
    """
    check_views(views)  # before playing the games
    task = DealOrNoDeal(protocol="offer", max_turns=max_turns)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    pop_a = population("A", personas, seed=seed * 2 + 1, style=style)
    pop_b = population("B", personas, seed=seed * 2 + 2, style=style)
    return conversations(task, [ep.state for ep in play(task, {"A": pop_a, "B": pop_b}, scenarios)], views)
