"""Batched sampling from a causal LM, reusing each dialogue's KV cache from one turn to the next.

A dialogue's context grows by a turn or two between two turns of the same role, so re-running the whole context
through the model every turn (as a fresh `generate` call does) spends most of the compute on tokens the model has
already seen. `sample_turns` takes, per row, the cached keys/values of an earlier context (`CachedPrefix`), keeps
the longest prefix that the new prompt shares with it, and runs only the rest. Rows of different cached lengths
share one batch through the attention mask; each row's layout is

    [pad ... | cached prefix (l_i) | pad ... | new prompt tokens]   then the sampled tokens, one per step,

with position ids that count only real tokens, so every row computes exactly what it would alone. Rows leave the
batch as soon as they sample a stop token; each leaves with its cache (prompt + completion, less the last token,
which was sampled but never fed back), ready for the row's next turn.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch


@dataclass
class CachedPrefix:
    """The keys and values of a token sequence: per layer, (kv_heads, T, head_dim) tensors."""
    ids: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _batch_cache(model, prefixes: list[CachedPrefix | None], lengths: list[int], width: int, device):
    """A DynamicCache (B, H, width, D) per layer with row b's first lengths[b] cached positions right-aligned."""
    from transformers import DynamicCache

    ref = next(p for p in prefixes if p is not None)
    layers = []
    for layer in range(len(ref.keys)):
        h, _, d = ref.keys[layer].shape
        k = torch.zeros(len(prefixes), h, width, d, dtype=ref.keys[layer].dtype, device=device)
        v = torch.zeros_like(k)
        for b, (p, n) in enumerate(zip(prefixes, lengths)):
            if n:
                k[b, :, width - n:] = p.keys[layer][:, :n]
                v[b, :, width - n:] = p.values[layer][:, :n]
        layers.append((k, v))
    return DynamicCache(ddp_cache_data=layers, config=model.config)


def _row_prefix(past, row: int, mask_row: torch.Tensor, ids: list[int]) -> CachedPrefix:
    real = mask_row.bool()
    return CachedPrefix(ids, [layer.keys[row][:, real].clone() for layer in past.layers],
                        [layer.values[row][:, real].clone() for layer in past.layers])


def sample_turns(model, prompts: Sequence[list[int]], pad_id: int, stop_ids: Sequence[int], max_new_tokens: int,
                 logprob_fn: Callable[[torch.Tensor], torch.Tensor],
                 prefixes: Sequence[CachedPrefix | None] | None = None, keep_cache: bool = False):
    """Sample one completion per prompt.

    prompts: token ids per row (B lists). prefixes: per row, an earlier context's cache or None.
    logprob_fn: (b, V) logits -> (b, V) log-probs of the sampling distribution (temperature, top-p).
    Returns (completions, logprobs, caches): per row the sampled ids (ending in a stop id when it stopped), their
    sampling log-probs, and, with keep_cache, the row's CachedPrefix for its next turn (else None).
    """
    dev = next(model.parameters()).device
    B = len(prompts)
    prefixes = list(prefixes) if prefixes is not None else [None] * B
    # reuse l_i cached tokens; at least the prompt's last token must run to give the next-token logits
    cached = [min(common_prefix(p.ids, q), len(q) - 1) if p is not None else 0 for p, q in zip(prefixes, prompts)]
    L = max(cached)
    suffix = [q[n:] for q, n in zip(prompts, cached)]
    M = max(len(s) for s in suffix)
    ids = torch.full((B, M), pad_id, dtype=torch.long)
    pos = torch.zeros((B, M), dtype=torch.long)
    mask = torch.zeros((B, L + M), dtype=torch.long)
    for b, (s, n) in enumerate(zip(suffix, cached)):
        ids[b, M - len(s):] = torch.tensor(s)
        pos[b, M - len(s):] = torch.arange(n, n + len(s))
        mask[b, L - n:L] = 1
        mask[b, L + M - len(s):] = 1
    ids, pos, mask = ids.to(dev), pos.to(dev), mask.to(dev)
    past = _batch_cache(model, prefixes, cached, L, dev) if L > 0 else None

    completions: list[list[int]] = [[] for _ in range(B)]
    logps: list[list[float]] = [[] for _ in range(B)]
    caches: list[CachedPrefix | None] = [None] * B
    stop = torch.tensor(list(stop_ids), device=dev)
    rows = torch.arange(B, device=dev)                                        # batch row -> prompt index
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
        next_pos = torch.tensor([len(q) for q in prompts], device=dev)        # real tokens so far
        for step in range(max_new_tokens):
            logp = logprob_fn(logits)                                         # (b, V)
            tok = torch.multinomial(logp.exp(), 1).squeeze(-1)                # (b,)
            lp = logp.gather(-1, tok[:, None]).squeeze(-1)
            for i, token, token_logp in zip(rows.tolist(), tok.tolist(), lp.tolist()):
                completions[i].append(token)
                logps[i].append(token_logp)
            live = ~torch.isin(tok, stop)
            last = step == max_new_tokens - 1
            leaving = torch.ones_like(live) if last else ~live
            if keep_cache:  # rows that leave now take their cache: prompt + completion[:-1]
                for b in leaving.nonzero().squeeze(-1).tolist():
                    i = int(rows[b])
                    caches[i] = _row_prefix(past, b, mask[b], list(prompts[i]) + completions[i][:-1])
            if last or not live.any():
                break
            if not live.all():
                keep = live.nonzero().squeeze(-1)
                past.batch_select_indices(keep)
                rows, mask, tok, next_pos = rows[keep], mask[keep], tok[keep], next_pos[keep]
            mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
            out = model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                        past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1]
            next_pos = next_pos + 1
    return completions, logps, caches
