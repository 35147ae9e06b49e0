"""Advantage estimators for multi-turn, multi-role dialogue.

Group baselines (no critic), for outcome rewards of whole dialogues:
    GRPO:  A_i = (R_i - mean_g R) / (std_g R + eps)      over the dialogues of one scenario group g
    RLOO:  A_i = R_i - mean_{j in g, j != i} R_j          (leave-one-out baseline)
Isolated vs pooled: with isolation each role is baselined only against its own rewards (groups are split by role),
pooled puts both roles' rewards in one group.

Turn-level GAE with a critic (SocialRL), for rewards that may arrive at any turn of a role:
    delta_t = R_t + gamma * V(s_{t+1}) - V(s_t),  V(s_{T+1}) = 0 after the role's last turn
    A_t = sum_l (gamma * lam)^l * delta_{t+l}  =  delta_t + gamma * lam * A_{t+1}
    G_t = A_t + V(s_t)   (the value target)
Every token of an utterance gets its turn's advantage (`expand_to_tokens`), or advantages are computed per token
with rewards on each utterance's last token (`token_gae`).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch


def group_advantages(rewards: torch.Tensor, groups: Sequence[Hashable], kind: str = "grpo",
                     roles: Sequence[Hashable] | None = None, isolate: bool = True, eps: float = 1e-6,
                     scale: bool = True) -> torch.Tensor:
    """Group-baseline advantages for one scalar reward per sample.

    rewards: (N,) one reward per (dialogue, role) sample. groups: (N,) scenario-group key per sample.
    kind: "grpo" (minus the group mean, divided by the group std when `scale`) or "rloo" (minus the leave-one-out mean).
    roles, isolate: with isolate=True (and roles given) the baseline group is (group, role); else (group) alone.
    Groups of one sample get advantage 0. Returns (N,).
    """
    if kind not in ("grpo", "rloo"):
        raise ValueError(f"kind={kind!r}: choose 'grpo' or 'rloo'")
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    keys = [(g, r) for g, r in zip(groups, roles)] if (isolate and roles is not None) else list(groups)
    adv = torch.zeros_like(rewards)
    index: dict = {}
    for i, k in enumerate(keys):
        index.setdefault(k, []).append(i)
    for idx in index.values():
        r = rewards[idx]
        n = len(idx)
        if n < 2:
            continue
        if kind == "grpo":
            a = r - r.mean()
            if scale:
                a = a / (r.std(unbiased=False) + eps)
        else:
            a = (r - (r.sum() - r) / (n - 1))  # R_i - mean of the others
        adv[idx] = a
    return adv


def turn_gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None, gamma: float = 0.95,
             lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over a role's turns.

    rewards, values: (B, T) per-turn rewards R_t and critic values V(s_t) of each role-trajectory, left-aligned;
    mask: (B, T) 1 on real turns (trajectories may have different lengths; V = 0 after the last real turn).
    Returns (advantages, returns), both (B, T), zero on padding.
    """
    rewards, values = torch.as_tensor(rewards, dtype=torch.float32), torch.as_tensor(values, dtype=torch.float32)
    mask = torch.ones_like(rewards) if mask is None else torch.as_tensor(mask, dtype=torch.float32)
    B, T = rewards.shape
    adv = torch.zeros_like(rewards)
    next_value = torch.zeros(B)
    next_adv = torch.zeros(B)
    for t in reversed(range(T)):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]        # delta_t = R_t + gamma V(s_{t+1}) - V(s_t)
        a = delta + gamma * lam * next_adv                                # A_t = delta_t + gamma lam A_{t+1}
        adv[:, t] = a * m
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_adv = torch.where(m > 0, a, next_adv)
    return adv, (adv + values) * mask


def token_gae(token_rewards: torch.Tensor, token_values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
              lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token GAE over a role's own tokens (others masked out and skipped).

    token_rewards: (B, L) rewards placed on tokens (e.g. each utterance's reward on its last token);
    token_values: (B, L) the critic's value at every token; mask: (B, L) 1 on the role's own action tokens.
    Masked positions are skipped: the next value after an own token is the value at the next own token.
    """
    B, L = token_rewards.shape
    compact_r = torch.zeros(B, L)
    compact_v = torch.zeros(B, L)
    compact_m = torch.zeros(B, L)
    positions = []
    for b in range(B):
        pos = mask[b].nonzero().squeeze(-1)
        positions.append(pos)
        n = len(pos)
        compact_r[b, :n], compact_v[b, :n], compact_m[b, :n] = token_rewards[b, pos], token_values[b, pos], 1
    adv_c, ret_c = turn_gae(compact_r, compact_v, compact_m, gamma, lam)
    adv, ret = torch.zeros(B, L), torch.zeros(B, L)
    for b, pos in enumerate(positions):
        adv[b, pos], ret[b, pos] = adv_c[b, :len(pos)], ret_c[b, :len(pos)]
    return adv, ret


def expand_to_tokens(turn_values: Sequence[float], token_counts: Sequence[int]) -> torch.Tensor:
    """The same value for every token of an utterance: [a1, a2], [2, 3] -> [a1, a1, a2, a2, a2]."""
    return torch.repeat_interleave(torch.as_tensor(turn_values, dtype=torch.float32),
                                   torch.as_tensor(token_counts, dtype=torch.long))


def whiten(x: torch.Tensor, mask: torch.Tensor | None = None, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (batch-level advantage normalisation)."""
    m = torch.ones_like(x) if mask is None else mask.float()
    n = m.sum().clamp(min=1)
    mean = (x * m).sum() / n
    var = (((x - mean) * m) ** 2).sum() / n
    return (x - mean) / (var.sqrt() + eps) * m
