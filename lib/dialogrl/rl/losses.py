"""Losses of the policy update, with the paper symbols on the lines that compute them.

Notation: pi_theta the policy being updated, pi_old the policy that sampled (its log-probs come with the rollout),
pi_ref a frozen reference; r = pi_theta / pi_old the importance ratio; A the advantage; eps the clip range.
Masks select the acting role's own tokens: a loss never touches the counterpart's tokens or the prompt.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from dialogrl.tokens import masked_mean


def policy_loss(logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                clip_eps: float = 0.2, clip_eps_high: float | None = None, level: str = "token",
                segments: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Clipped surrogate  L = -E[min(r A, clip(r, 1 - eps, 1 + eps_high) A)].

    logp, logp_old, adv, mask: (B, L) per token (adv repeated over an utterance's tokens).
    level="token": r_t = exp(logp_t - logp_old_t) per token, averaged over masked tokens.
    level="utterance": one ratio per utterance, r_u = exp(sum_{t in u} (logp_t - logp_old_t)) (the sequence-
        likelihood ratio, SocialRL), with `segments` (B, L) giving each token's utterance index (-1: none);
        averaged over utterances.
    Returns (loss, stats), the stats over the same tokens (or utterances) as the loss, without gradient:
        clipfrac   share where the ratio left [1 - eps, 1 + eps_high] (its gradient is clipped when A favours it)
        approx_kl  mean of (r - 1) - log r, the k3 estimate of KL(pi_old || pi_theta) (>= 0; CleanRL's approx_kl)
        ratio      mean r
    """
    hi = clip_eps if clip_eps_high is None else clip_eps_high
    # in float32 whatever the inputs: the sampler's log-probs may come from bf16 decoding, and an utterance's log-ratio
    # sums up to ~100 per-token differences, which bf16 (8 bits of mantissa) would round at every addition
    logp, logp_old, adv, mask = logp.float(), logp_old.float(), adv.float(), mask.float()
    if level == "token":
        log_ratio = (logp - logp_old) * mask
        ratio = torch.exp(log_ratio)                                            # r_t
        surr = torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + hi) * adv)
        loss = -masked_mean(surr, mask)
        return loss, _ratio_stats(ratio, log_ratio, clip_eps, hi, mask)
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
    if not n_seg:
        return loss, {"clipfrac": 0.0, "approx_kl": 0.0, "ratio": 1.0}
    return loss, _ratio_stats(ratio, log_ratio_u, clip_eps, hi)


@torch.no_grad()
def _ratio_stats(ratio: torch.Tensor, log_ratio: torch.Tensor, lo: float, hi: float,
                 mask: torch.Tensor | None = None) -> dict:
    """clipfrac, approx_kl and the mean ratio over the masked entries (all entries without a mask); no gradient."""
    mean = (lambda x: masked_mean(x, mask)) if mask is not None else torch.mean
    clipped = ((ratio < 1 - lo) | (ratio > 1 + hi)).float()
    approx_kl = (ratio - 1) - log_ratio                                      # k3: (r - 1) - log r
    return {"clipfrac": mean(clipped).item(), "approx_kl": mean(approx_kl).item(), "ratio": mean(ratio).item()}


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


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """How much of the returns' variance the critic explains: 1 - Var(G - V) / Var(G) over the batch (1: perfect,
    0: no better than a constant, < 0: worse). NaN when Var(G) = 0 (undefined), as in CleanRL."""
    values, returns = values.detach().double().flatten(), returns.detach().double().flatten()
    var = returns.var(unbiased=False).item() if returns.numel() else 0.0
    if var == 0.0:
        return math.nan
    return 1.0 - (returns - values).var(unbiased=False).item() / var


def chunk_loss(res: dict, chunk: Sequence, cfg, kl_coef: float, weight: float, per_turn: float
               ) -> tuple[torch.Tensor, dict]:
    """The loss of one chunk of a minibatch: the clipped surrogate over its turns' tokens, + vf_coef x the value loss
    (PPO), + kl_coef x the k3 KL to the reference, - entropy_coef x the entropy, each a mean over the chunk weighed by
    the chunk's share of what the minibatch's mean runs over (`weight`: its share of the tokens, for the token means;
    `per_turn`: its share of the turns, for the value loss and the utterance-level surrogate).

    res: the chunk's `Trainer.token_logprobs` ("logp", "old", "mask", with a critic "value", with entropy
    "entropy"); chunk: its samples (advantage, and value, ret, ref_logprobs where used); cfg: the TrainConfig.
    Returns (the weighted total, its terms' chunk means without gradient: clipfrac, approx_kl, ratio, and
    value_loss, value, kl, entropy where they apply)."""
    logp, old, mask = res["logp"], res["old"], res["mask"]
    adv = torch.zeros_like(logp)
    segments = torch.full_like(logp, -1, dtype=torch.long)
    for b, s in enumerate(chunk):
        adv[b] = s.advantage
        segments[b] = b
    loss, st = policy_loss(logp, old, adv, mask, clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high,
                           level=cfg.ratio_level, segments=segments)
    total = loss * (weight if cfg.ratio_level == "token" else per_turn)
    terms = {n: st[n] for n in ("clipfrac", "approx_kl", "ratio")}
    if "value" in res:
        v_old = torch.tensor([s.value for s in chunk], device=logp.device)
        ret = torch.tensor([s.ret for s in chunk], device=logp.device)
        vl = value_loss(res["value"], v_old, ret, torch.ones_like(ret), clip_eps=cfg.value_clip)
        total = total + cfg.vf_coef * vl * per_turn
        terms["value_loss"], terms["value"] = vl.item(), res["value"].mean().item()
    if kl_coef:
        ref = torch.zeros_like(logp)
        for b, s in enumerate(chunk):
            ref[b, ref.shape[1] - len(s.ref_logprobs):] = torch.tensor(s.ref_logprobs)
        kl = masked_mean(kl_k3(logp, ref), mask)
        total = total + kl_coef * kl * weight
        terms["kl"] = kl.item()
    if cfg.entropy_coef:
        ent = masked_mean(res["entropy"], mask)
        total = total - cfg.entropy_coef * ent * weight
        terms["entropy"] = ent.item()
    return total, terms
