"""The warm-start corpus of `tiny-telesales`: scripted seller and buyer dialogues as chat conversations."""
from __future__ import annotations

from collections.abc import Sequence

from dialogrl.envs.telesales.personas import ScriptedAgent, population
from dialogrl.envs.telesales.task import VehicleTeleSales
from dialogrl.game import check_views, conversations
from dialogrl.rollout import play


def telesales_corpus(n_dialogues: int = 7000, seed: int = 0, sellers: Sequence[str] | None = None,
                     max_turns: int = 10, views: str = "one", style: str | None = None) -> list[list[dict]]:
    """Scripted persona dialogues as chat conversations, the warm-start corpus of `tiny-telesales`.

    Each game draws a seller persona from `sellers` (all by default); its buyer plays the persona its scenario
    names, so a buyer's prompt matches its behaviour. views="both" gives each game twice, once from each role's
    view (its own turns as assistant); "one" gives one role's view per game, alternating (seller first).
    Scenario seeds here are `seed` itself; evaluation draws from other seeds.
    """
    check_views(views)  # before playing the games
    task = VehicleTeleSales(max_turns=max_turns)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    seller = population("seller", sellers, seed=seed * 2 + 1, style=style)
    buyer = ScriptedAgent(None, seed=seed * 2 + 2, style=style)
    episodes = play(task, {"seller": seller, "buyer": buyer}, scenarios)
    return conversations(task, [ep.state for ep in episodes], views)
