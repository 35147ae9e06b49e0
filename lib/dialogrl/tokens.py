"""Token utilities shared by every trainer and metric: padding id lists, per-token log-probs, entropy, masked means.

    ids, attn, pos = pad(seqs, pad_id)                     # (B, L) each, left-padded: sequences end together
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1]
    logp = token_logprobs(logits, ids[:, 1:])              # (B, L-1): log pi(x_{t+1} | x_<=t)
    H = entropy(logits)                                    # (B, L-1)
    masked_mean(logp, attn[:, 1:])                         # mean over the real tokens only

Log-softmax runs in float32 (bf16 logits lose the small probabilities); divide by a sampling temperature before
calling, as `logits.float() / T`.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def pad(seqs: Sequence[Sequence[int]], pad_id: int, side: str = "left", device=None
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad id lists to one (B, L) batch: (ids, attention_mask, position_ids), all long tensors on `device`.

    side="left" (the default, as for generation and for scoring completions that end every row):
        [pad ... pad | x_0 ... x_n];  side="right": [x_0 ... x_n | pad ... pad].
    position_ids count the real tokens only (0 .. n-1) and are 0 on padding, so a padded row computes what it
    would alone; attention_mask is 1 on real tokens.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side={side!r}: choose 'left' or 'right'")
    B, L = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    pos = torch.zeros((B, L), dtype=torch.long)
    for b, s in enumerate(seqs):
        real = slice(L - len(s), L) if side == "left" else slice(0, len(s))
        ids[b, real] = torch.tensor(list(s), dtype=torch.long)
        attn[b, real] = 1
        pos[b, real] = torch.arange(len(s))
    return ids.to(device), attn.to(device), pos.to(device)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position: (..., V) logits and (...) target ids -> (...) float32."""
    return logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """H = -sum_v p_v log p_v of softmax(logits) per position: (..., V) -> (...) float32."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)


def token_logprobs_and_entropy(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs` and `entropy` from one log-softmax (one (..., V) tensor in memory, one backward)."""
    logp = logits.float().log_softmax(-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x over the entries where mask is nonzero, all of them together (a token-level mean, as in DAPO);
    0 when the mask is empty."""
    mask = mask.float()
    return (x * mask).sum() / mask.sum().clamp(min=1)
