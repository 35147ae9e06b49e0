"""Verbalized Sampling's prompt and answer format (Zhang et al. 2025), shared by the simulator wrapper
(`agents.VerbalizedSampling`) and the corpora that teach tiny models to answer it (`envs.persuasion.corpus`).

The `verbalized-sampling` package of the method's authors pins numpy < 2 and pulls API clients (openai, litellm,
google-genai), which this environment's pandas 3 and offline use rule out; this module writes the same layout (the
persona's system prompt with the VS instruction, the conversation so far in one user message) and the same JSON
schema ({"responses": [{"text", "probability"}, ...]}) in our own words and code.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

VS_MODES = ("random", "prob")


def vs_messages(messages: Sequence[dict], k: int, speaker: str = "You", counterpart: str = "Partner") -> list[dict]:
    """A role's chat view as a Verbalized Sampling prompt, in the layout of the method's released framework: the
    system prompt with the VS instruction added, and one user message holding the conversation so far (the role's own
    turns as `speaker`, its counterpart's as `counterpart`), asking for `k` candidate replies with probabilities as
    JSON:

        {"responses": [{"text": "...", "probability": 0.4}, ...]}
    """
    system = [m["content"] for m in messages if m["role"] == "system"]
    talk = [f"{speaker if m['role'] == 'assistant' else counterpart}: {m['content']}"
            for m in messages if m["role"] != "system"]
    instruction = (f"Give {k} different replies you might send next, each with the probability that you would send "
                   'it, as JSON only: {"responses": [{"text": reply, "probability": p}, ...]}, '
                   f"{k} items, the probabilities summing to 1.")
    return [{"role": "system", "content": " ".join(system + [instruction])},
            {"role": "user", "content": "Conversation so far:\n" + "\n".join(talk) + "\nYour candidate replies:"}]


def vs_answer(candidates: Sequence[tuple[str, float]]) -> str:
    """The JSON a VS prompt asks for, from (text, probability) pairs (what the tiny models are trained to write)."""
    return json.dumps({"responses": [{"text": t, "probability": round(float(p), 2)} for t, p in candidates]})


def parse_vs(text: str, k: int, tolerance: float = 0.05) -> tuple[list[tuple[str, float]] | None, str | None]:
    """Parse a VS answer into (candidates, problem). Never raises.

    candidates: (text, probability) pairs with the probabilities normalised to sum to 1, or None when the answer is
    unusable; problem: None, or why it is unusable ("not JSON", "no responses list", "k=3, asked for 5", "an empty
    reply", "a probability that is not a number in [0, 1]", "probabilities sum to 0"), or, with usable candidates,
    "probabilities sum to S" when they were renormalised from more than `tolerance` away from 1 (counted, not fatal).
    The JSON object may stand inside other text (the first '{' to the last '}').
    """
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start:end + 1]) if 0 <= start < end else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return None, "not JSON"
    items = data.get("responses")
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        return None, "no responses list"
    if len(items) != k:
        return None, f"k={len(items)}, asked for {k}"
    texts = [x.get("text") for x in items]
    if not all(isinstance(t, str) and t.strip() for t in texts):
        return None, "an empty reply"
    probs = [x.get("probability") for x in items]
    if not all(isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and 0 <= p <= 1
               for p in probs):
        return None, "a probability that is not a number in [0, 1]"
    total = float(sum(probs))
    if total <= 0:
        return None, "probabilities sum to 0"
    problem = None if abs(total - 1) <= tolerance else f"probabilities sum to {total:.2f}"
    return [(t.strip(), p / total) for t, p in zip(texts, probs)], problem


def problem_kind(problem: str) -> str:
    """The kind of a `parse_vs` problem, for counting: "wrong k" for any "k=N, asked for K", "probabilities off 1"
    for any renormalised sum, else the problem itself (the others carry no numbers)."""
    if problem.startswith("k="):
        return "wrong k"
    if problem.startswith("probabilities sum to") and problem != "probabilities sum to 0":
        return "probabilities off 1"
    return problem


def fallback_rate(stats: dict) -> float:
    """Fallbacks to raw text per turn of a VS simulator's counts (`agents.VerbalizedSampling.stats`)."""
    return stats["fallbacks"] / max(stats["turns"], 1)


def pooled_stats(stats: Sequence[dict]) -> dict:
    """The counts of several VS simulators (`agents.VerbalizedSampling.stats`, e.g. one per training run) in one
    record: the mean over simulators of the fallback rate (fallbacks per turn) and of attempts per turn, and the
    problems by kind summed."""
    kinds = sorted({kind for s in stats for kind in s["problems"]})
    return {"fallback_rate": float(np.mean([fallback_rate(s) for s in stats])),
            "attempts_per_turn": float(np.mean([s["attempts"] / max(s["turns"], 1) for s in stats])),
            "problems": {kind: sum(s["problems"].get(kind, 0) for s in stats) for kind in kinds}}
