"""How the update lays a rollout's turns out: each turn a `Sample` (its exact prompt and completion ids, advantage,
and what the loss reads beside them); a role's turns of one game packed into one sequence when each prompt continues
the previous prompt and completion token for token (`chains`: the same log-probs as one pass per turn, for a fraction
of the tokens); chunks of whole chains by turns and tokens (`chunk_chains`, `chunk_tokens`: what one forward/backward
holds, which `dialogrl.estimate` sizes); PPO's minibatches of whole chains (`minibatches`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np


@dataclass
class Sample:
    """One turn of one role, ready for the loss: its exact prompt and completion ids and its advantage.
    With PPO also the critic's value of the state before the turn, V_old(s_t), and the value target G_t."""
    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    advantage: float
    value: float = 0.0
    ret: float = 0.0
    ref_logprobs: list[float] | None = None   # the completion under the frozen base model (the KL's reference)



def chains(samples: list[Sample]) -> list[list[int]]:
    """Runs of consecutive samples that are one sequence: each sample's prompt starts with the previous sample's
    prompt and completion, token for token (one role's turns of one game, when the chat template keeps earlier turns
    verbatim and the sampled tokens re-encode to themselves). A causal model scores every member's completion in
    exactly its own context inside the last member's sequence."""
    runs: list[list[int]] = []
    for i, s in enumerate(samples):
        if runs:
            prev = samples[runs[-1][-1]]
            n = len(prev.prompt_ids)
            m = n + len(prev.completion_ids)
            if (len(s.prompt_ids) >= m and s.prompt_ids[:n] == prev.prompt_ids
                    and s.prompt_ids[n:m] == prev.completion_ids):
                runs[-1].append(i)
                continue
        runs.append([i])
    return runs


def chunk_chains(samples: list[Sample], size: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices of `samples` in chunks of whole chains (`chains`) with at most `size` samples each and, with
    `max_tokens`, at most that many tokens (`chunk_tokens`); a chain over either limit is one chunk. The chains are
    sorted by sequence length so that each chunk pads little; the loss weighs each chunk by its share of tokens, so
    the order does not change the update."""
    ordered = sorted(chains(samples), key=lambda c: row_length(samples, c))
    chunks: list[list[int]] = []
    rows = longest_completion = 0   # the open chunk's chains and longest completion: its tokens counted as it grows
    for c in ordered:
        completion = max(len(samples[i].completion_ids) for i in c)
        # the chains come shortest first, so this one's row is the chunk's longest (chunk_tokens, without re-chaining)
        tokens = ((rows + 1) * row_length(samples, c)
                  + (len(chunks[-1]) + len(c) if chunks else 0) * max(longest_completion, completion))
        if chunks and len(chunks[-1]) + len(c) <= size and (max_tokens is None or tokens <= max_tokens):
            chunks[-1] += c
            rows, longest_completion = rows + 1, max(longest_completion, completion)
        else:
            chunks.append(list(c))
            rows, longest_completion = 1, completion
    return chunks


def row_length(samples: list[Sample], chain: list[int]) -> int:
    """The tokens of a chain's packed row: its last member's prompt and completion."""
    return len(samples[chain[-1]].prompt_ids) + len(samples[chain[-1]].completion_ids)


def chunk_tokens(samples: list[Sample], chunk: list[int]) -> int:
    """What one forward/backward chunk holds: its packed rows padded to the longest (hidden states through every
    layer) plus samples x the longest completion (the positions whose vocabulary-wide logits it computes)."""
    picked = [samples[i] for i in chunk]
    packed = chains(picked)
    rows = len(packed) * max(row_length(picked, c) for c in packed)
    return rows + len(chunk) * max(len(s.completion_ids) for s in picked)


def minibatches(samples: list[Sample], n: int, rng: random.Random) -> list[list[int]]:
    """Indices of `samples` in `n` minibatches (PPO's minibatches: one optimizer step each) of whole chains
    (`chains`: a role's turns of one game), the chains shuffled by `rng` and dealt out in turns of about equal
    count; each minibatch keeps the samples' order, so its chains pack as before. n = 1: every sample, unshuffled.
    With fewer chains than n, some minibatches are empty (still returned: every process takes the same steps)."""
    if n == 1:
        return [list(range(len(samples)))]
    games = chains(samples)
    rng.shuffle(games)
    bounds = np.linspace(0, len(samples), n + 1)   # cut the shuffled turns into n parts at whole chains
    out: list[list[int]] = [[] for _ in range(n)]
    done = 0
    for c in games:
        k = min(int(np.searchsorted(bounds, done + len(c) / 2, side="right")) - 1, n - 1)
        out[k] += c
        done += len(c)
    return [sorted(m) for m in out]
