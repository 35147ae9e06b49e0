"""The warm-start corpus of `tiny-persuasion`: scripted persuader and persuadee dialogues as chat conversations."""
from __future__ import annotations

from collections.abc import Sequence

from dialogrl.envs.base import check_views, conversations
from dialogrl.envs.persuasion.personas import PersuasionAgent, persuasion_population
from dialogrl.envs.persuasion.task import PersuasionForGood
from dialogrl.rollout import play


def persuasion_corpus(n_dialogues: int = 6000, seed: int = 0, persuaders: Sequence[str] | None = None,
                      max_exchanges: int = 5, views: str = "one") -> list[list[dict]]:
    """Scripted persona dialogues as chat conversations, the warm-start corpus of `tiny-persuasion`.

    Each game draws a persuader persona from `persuaders` (all of PERSUADER_PERSONAS by default); its persuadee plays
    the persona its scenario names, so a persuadee's prompt matches its behaviour. views="both" gives each game
    twice, once from each role's view; "one" one role's view per game, alternating (persuader first).
    """
    check_views(views)  # before playing the games
    task = PersuasionForGood(max_exchanges=max_exchanges)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    persuader = persuasion_population("persuader", persuaders, seed=seed * 2 + 1)
    persuadee = PersuasionAgent(None, seed=seed * 2 + 2)
    episodes = play(task, {"persuader": persuader, "persuadee": persuadee}, scenarios)
    return conversations(task, [ep.state for ep in episodes], views)
