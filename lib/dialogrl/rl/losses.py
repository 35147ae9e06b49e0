"""Losses of the policy update, with the paper symbols on the lines that compute them.

Notation: pi_theta the policy being updated, pi_old the policy that sampled (its log-probs come with the rollout),
pi_ref a frozen reference; r = pi_theta / pi_old the importance ratio; A the advantage; eps the clip range.
Masks select the acting role's own tokens: a loss never touches the partner's tokens or the prompt.
"""
from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the masked entries (all tokens of the batch together, as in DAPO's token-level mean)."""
    mask = mask.float()
    return (x * mask).sum() / mask.sum().clamp(min=1)


def policy_loss(logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                clip_eps: float = 0.2, clip_eps_high: float | None = None, level: str = "token",
                segments: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate  L = -E[min(r A, clip(r, 1 - eps, 1 + eps_high) A)].

    logp, logp_old, adv, mask: (B, L) per token (adv repeated over an utterance's tokens).
    level="token": r_t = exp(logp_t - logp_old_t) per token, averaged over masked tokens.
    level="utterance": one ratio per utterance, r_u = exp(sum_{t in u} (logp_t - logp_old_t)) (the sequence-
        likelihood ratio, SocialRL), with `segments` (B, L) giving each token's utterance index (-1: none);
        averaged over utterances. Returns (loss, stats) with the clip fraction and the mean ratio.
    """
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    mask = mask.float()
    if level == "token":
        log_ratio = (logp - logp_old) * mask
        ratio = torch.exp(log_ratio)                                            # r_t
        surr = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + hi) * adv)
        loss = -masked_mean(surr, mask)
        clipped = masked_mean(((ratio < 1 - clip_eps) | (ratio > 1 + hi)).float(), mask)
        return loss, {"clip_frac": clipped.item(), "ratio": masked_mean(ratio, mask).item()}
    if level != "utterance":
        raise ValueError(f"level={level!r}: choose 'token' or 'utterance'")
    if segments is None:
        raise ValueError("level='utterance' needs segments (the utterance index of every token)")
    seg = torch.where(mask > 0, segments, torch.full_like(segments, -1))
    n_seg = int(seg.max().item()) + 1 if (seg >= 0).any() else 0
    flat_seg = seg.flatten()
    keep = flat_seg >= 0
    log_ratio_u = torch.zeros(n_seg, dtype=logp.dtype, device=logp.device).index_add(
        0, flat_seg[keep], (logp - logp_old).flatten()[keep])                    # log r_u = sum over its tokens
    adv_u = torch.zeros(n_seg, dtype=adv.dtype, device=adv.device).index_copy(
        0, flat_seg[keep], adv.flatten()[keep])                                 # A_u (shared by its tokens)
    ratio = torch.exp(log_ratio_u)
    surr = torch.minimum(ratio * adv_u, ratio.clamp(1 - clip_eps, 1 + hi) * adv_u)
    loss = -surr.mean() if n_seg else logp.sum() * 0
    clipped = ((ratio < 1 - clip_eps) | (ratio > 1 + hi)).float().mean() if n_seg else torch.tensor(0.0)
    return loss, {"clip_frac": clipped.item(), "ratio": ratio.mean().item() if n_seg else 1.0}


def value_loss(v: torch.Tensor, v_old: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip_eps: float | None = 0.2) -> torch.Tensor:
    """0.5 * E[max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2)]; no clipping with clip_eps=None."""
    err = (v - returns) ** 2
    if clip_eps is not None:
        v_clipped = v_old + (v - v_old).clamp(-clip_eps, clip_eps)
        err = torch.maximum(err, (v_clipped - returns) ** 2)
    return 0.5 * masked_mean(err, mask)


def kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi_theta || pi_ref): exp(ref - logp) - (ref - logp) - 1 >= 0 (Schulman)."""
    d = logp_ref - logp
    return torch.exp(d) - d - 1


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of softmax(logits): (B, L, V) -> (B, L)."""
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)
