"""The warm-start corpus of `tiny-persuasion`: scripted persuader and persuadee dialogues as chat conversations, and
persuadee turns in the Verbalized Sampling format (k candidate replies with their probabilities)."""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from dialogrl.envs.persuasion.personas import PERSUADEE_PERSONAS, ScriptedAgent, population
from dialogrl.envs.persuasion.task import PersuasionForGood
from dialogrl.game import GameState, check_views, conversations
from dialogrl.rollout import play
from dialogrl.verbalized import vs_answer, vs_messages

VS_SPEAKERS = {"speaker": "You", "counterpart": "Persuader"}   # how a persuadee's VS prompt names the two sides


def persona_replies(task: PersuasionForGood, state: GameState, k: int, seed: int = 0,
                    draws: int = 40) -> list[tuple[str, float]]:
    """The scenario persona's reply distribution at `state` (the persuadee to speak): `draws` replies of the scripted
    persona under different seeds (each its own phrasing and its own threshold of giving), the `k` most frequent
    distinct ones with their frequencies renormalised over those k (fewer when it has fewer distinct replies)."""
    persona = PERSUADEE_PERSONAS[state.scenario.persona]
    counts = Counter(ScriptedAgent(persona, seed=seed * 10_000 + j).utter(task, state, "persuadee")
                     for j in range(draws))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    total = sum(c for _, c in top)
    return [(text, c / total) for text, c in top]


def persuasion_corpus(n_dialogues: int = 6000, seed: int = 0, persuaders: Sequence[str] | None = None,
                      max_exchanges: int = 5, views: str = "one", vs_share: float = 0.0,
                      vs_k: int = 5) -> list[list[dict]]:
    """Scripted persona dialogues as chat conversations, the warm-start corpus of `tiny-persuasion`.

    Each game draws a persuader persona from `persuaders` (all of PERSUADER_PERSONAS by default); its persuadee plays
    the persona its scenario names, so a persuadee's prompt matches its behaviour. views="both" gives each game
    twice, once from each role's view; "one" one role's view per game, alternating (persuader first).
    vs_share: the share of the persuadee's conversations written instead as one Verbalized Sampling example (the
    VS prompt of `agents.vs_messages` at one of its turns, drawn uniformly, and as the answer `vs_k` candidate
    replies from the persona's reply distribution there, `persona_replies`), so that one model both answers plainly
    and verbalizes its distribution when asked.
    """
    check_views(views)  # before playing the games
    if not 0 <= vs_share <= 1:
        raise ValueError(f"vs_share={vs_share!r}: must be in [0, 1]")
    task = PersuasionForGood(max_exchanges=max_exchanges)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    persuader = population("persuader", persuaders, seed=seed * 2 + 1)
    persuadee = ScriptedAgent(None, seed=seed * 2 + 2)
    states = [ep.state for ep in play(task, {"persuader": persuader, "persuadee": persuadee}, scenarios)]
    out = conversations(task, states, views)
    if vs_share:
        rng = random.Random(f"vs/{seed}")
        per_game = len(task.roles) if views == "both" else 1
        for i, conv in enumerate(out):
            state = states[i // per_game]
            if "You are a worker" not in conv[0]["content"] or rng.random() >= vs_share:
                continue
            turns = [t for t, x in enumerate(state.turns) if x.role == "persuadee"]
            t = rng.choice(turns)
            before = GameState(state.scenario, state.turns[:t])
            prompt = vs_messages(task.view(before, "persuadee"), vs_k, **VS_SPEAKERS)
            out[i] = prompt + [{"role": "assistant", "content": vs_answer(persona_replies(task, before, vs_k,
                                                                                       seed=seed + t))}]
    return out
