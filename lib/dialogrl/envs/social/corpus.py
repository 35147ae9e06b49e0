"""The warm-start corpus of `tiny-social`: scripted agent and partner dialogues over the training scenes."""
from __future__ import annotations

from collections.abc import Sequence

from dialogrl.envs.social.personas import ScriptedAgent, population
from dialogrl.envs.social.task import SocialScenes
from dialogrl.game import check_views, conversations
from dialogrl.rollout import play


def social_corpus(n_dialogues: int = 6000, seed: int = 0, agents: Sequence[str] | None = None,
                  partners: Sequence[str] | None = None, max_exchanges: int = 5,
                  views: str = "one") -> list[list[dict]]:
    """Scripted persona dialogues as chat conversations, the warm-start corpus of `tiny-social`.

    Each game draws an agent persona from `agents` (all of AGENT_PERSONAS by default) and a training scene; its
    partner plays the profile its scenario names (PARTNERS by default, or `partners` by name), so a partner's prompt
    matches its behaviour. The SOTOPIA-hard scenes and the unseen partners are never in it. views="both" gives each
    game twice, once from each role's view; "one" one role's view per game, alternating (agent first).
    """
    check_views(views)  # before playing the games
    task = SocialScenes(max_exchanges=max_exchanges, scenes="train", partners=partners)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    agent = population("agent", agents, seed=seed * 2 + 1)
    partner = ScriptedAgent(None, seed=seed * 2 + 2)
    states = [ep.state for ep in play(task, {"agent": agent, "partner": partner}, scenarios)]
    return conversations(task, states, views)
