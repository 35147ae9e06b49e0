"""Advantages and losses against hand-computed values."""
import math

import pytest
import torch

from dialogrl.rl.advantages import expand_to_tokens, group_advantages, token_gae, turn_gae, whiten
from dialogrl.rl.losses import explained_variance, kl_k3, policy_loss, value_loss
from dialogrl.tokens import entropy, masked_mean


def test_grpo_and_rloo_by_hand():
    r = torch.tensor([1.0, 3.0, 5.0, 10.0, 10.0])
    g = ["a", "a", "a", "b", "b"]
    std = math.sqrt(((1 - 3) ** 2 + 0 + (5 - 3) ** 2) / 3)
    assert torch.allclose(group_advantages(r, g, "grpo"), torch.tensor([-2 / std, 0, 2 / std, 0, 0]), atol=1e-5)
    assert torch.allclose(group_advantages(r, g, "grpo", scale=False), torch.tensor([-2.0, 0, 2, 0, 0]))
    # RLOO: 1 - (3+5)/2 = -3, 3 - 3 = 0, 5 - 2 = 3
    assert torch.allclose(group_advantages(r, g, "rloo"), torch.tensor([-3.0, 0, 3, 0, 0]))
    assert group_advantages(torch.tensor([4.0]), ["x"], "rloo").item() == 0  # a group of one has no baseline


def test_isolated_vs_pooled_roles():
    # one scenario group, two dialogues, each with a reward for role A and role B
    r = torch.tensor([8.0, 2.0, 6.0, 4.0])
    g = ["s", "s", "s", "s"]
    roles = ["A", "B", "A", "B"]
    iso = group_advantages(r, g, "rloo", roles=roles, isolate=True)
    pooled = group_advantages(r, g, "rloo", roles=roles, isolate=False)
    assert torch.allclose(iso, torch.tensor([2.0, -2.0, -2.0, 2.0]))  # A: 8 vs 6; B: 2 vs 4
    assert torch.allclose(pooled, torch.tensor([8 - 4.0, 2 - 6.0, 6 - 14 / 3, 4 - 16 / 3]))


def test_turn_gae_by_hand():
    # one role, 3 turns, the outcome at the end: R = [0, 0, 1], V = [0.5, 0.6, 0.7]
    g, lam = 0.9, 0.8
    adv, ret = turn_gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]]), gamma=g, lam=lam)
    d2 = 1.0 - 0.7                      # V after the last turn is 0
    d1 = 0.0 + g * 0.7 - 0.6
    d0 = 0.0 + g * 0.6 - 0.5
    a2, a1 = d2, d1 + g * lam * d2
    a0 = d0 + g * lam * a1
    assert torch.allclose(adv, torch.tensor([[a0, a1, a2]]), atol=1e-6)
    assert torch.allclose(ret, adv + torch.tensor([[0.5, 0.6, 0.7]]))
    # lam = 1 and V = 0: the advantage is the discounted return to go
    adv, _ = turn_gae(torch.tensor([[1.0, 0.0, 2.0]]), torch.zeros(1, 3), gamma=0.5, lam=1.0)
    assert torch.allclose(adv, torch.tensor([[1 + 0.25 * 2, 0.5 * 2, 2.0]]))


def test_turn_gae_respects_padding():
    r = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    v = torch.tensor([[0.2, 0.3, 9.0], [0.2, 0.3, 0.4]])
    m = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv, ret = turn_gae(r, v, m, gamma=1.0, lam=1.0)
    assert adv[0, 2] == 0 and ret[0, 2] == 0
    assert torch.allclose(adv[0, :2], torch.tensor([1 - 0.2, 1 - 0.3]))  # V(9.0) on padding is never used


def test_token_gae_skips_the_counterparts_tokens():
    # own tokens at 0, 1, 3 (2 is the counterpart's); reward on token 3, zero values, gamma = lam = 1
    r = torch.tensor([[0.0, 0.0, 5.0, 1.0]])
    m = torch.tensor([[1, 1, 0, 1]])
    adv, _ = token_gae(r, torch.zeros(1, 4), m, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, torch.tensor([[1.0, 1.0, 0.0, 1.0]]))  # the counterpart's reward 5 never counts


def test_expand_and_whiten():
    assert torch.equal(expand_to_tokens([1.0, -2.0], [2, 3]), torch.tensor([1.0, 1, -2, -2, -2]))
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    w = whiten(x, torch.tensor([1, 1, 1, 0]))
    assert torch.allclose(w[:3].mean(), torch.tensor(0.0), atol=1e-6) and w[3] == 0


def test_token_policy_loss_by_hand():
    logp_old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.5, 0.9, 1.0]]))  # ratios 1.5, 0.9, 1.0
    adv = torch.tensor([[1.0, -1.0, 5.0]])
    mask = torch.tensor([[1, 1, 0]])  # the third token is the counterpart's
    loss, stats = policy_loss(logp, logp_old, adv, mask, clip_eps=0.2)
    # token 1: min(1.5*1, 1.2*1) = 1.2 ; token 2: min(0.9*-1, 0.9*-1) = -0.9
    assert torch.isclose(loss, torch.tensor(-(1.2 - 0.9) / 2))
    assert stats["clipfrac"] == 0.5
    # approx_kl = mean over the role's tokens of (r - 1) - log r
    assert stats["approx_kl"] == pytest.approx(((0.5 - math.log(1.5)) + (-0.1 - math.log(0.9))) / 2)
    assert stats["ratio"] == pytest.approx(1.2)


def test_clipfrac_respects_clip_eps_high_and_ratio_one_gives_zeros():
    logp_old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[1.25, 0.7, 1.1]]))  # ratios 1.25, 0.7, 1.1
    mask, adv = torch.ones(1, 3), torch.ones(1, 3)
    _, stats = policy_loss(logp, logp_old, adv, mask, clip_eps=0.2)             # range [0.8, 1.2]: 1.25, 0.7 out
    assert stats["clipfrac"] == pytest.approx(2 / 3)
    _, stats = policy_loss(logp, logp_old, adv, mask, clip_eps=0.2, clip_eps_high=0.3)  # [0.8, 1.3]: only 0.7
    assert stats["clipfrac"] == pytest.approx(1 / 3)
    _, stats = policy_loss(logp_old, logp_old, adv, mask)                        # r = 1 everywhere
    assert stats == {"clipfrac": 0.0, "approx_kl": 0.0, "ratio": 1.0}


def test_utterance_level_ratio_by_hand():
    logp_old = torch.zeros(1, 4)
    logp = torch.tensor([[0.1, 0.2, -0.05, 0.0]])
    adv = torch.tensor([[2.0, 2.0, -1.0, 0.0]])
    segments = torch.tensor([[0, 0, 1, -1]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, stats = policy_loss(logp, logp_old, adv, mask, clip_eps=0.2, level="utterance", segments=segments)
    r0, r1 = math.exp(0.3), math.exp(-0.05)  # r_u = exp(sum of its tokens' log-ratios)
    expected = -(min(r0 * 2, 1.2 * 2) + min(r1 * -1, max(min(r1, 1.2), 0.8) * -1)) / 2
    assert math.isclose(loss.item(), expected, rel_tol=1e-6)
    # the diagnostics are per utterance too: r0 = 1.35 is clipped, r1 = 0.95 is not
    assert stats["clipfrac"] == 0.5
    assert stats["approx_kl"] == pytest.approx(((r0 - 1 - 0.3) + (r1 - 1 + 0.05)) / 2, rel=1e-5)
    with pytest.raises(ValueError, match="segments"):
        policy_loss(logp, logp_old, adv, mask, level="utterance")


def test_an_utterance_ratio_from_bf16_log_probs_is_summed_in_float32():
    """96 tokens of bf16 log-probs (a bf16 sampler and forward): the utterance's log-ratio is the float32 sum of their
    differences, as if they had come in float32 (summed in bf16 it drifts by the rounding of every addition)."""
    g = torch.Generator().manual_seed(0)
    logp_old = (-2 * torch.rand(1, 96, generator=g)).bfloat16()
    logp = (logp_old.float() + 0.01 * torch.randn(1, 96, generator=g)).bfloat16()
    adv, mask = torch.ones(1, 96, dtype=torch.bfloat16), torch.ones(1, 96)
    segments = torch.zeros(1, 96, dtype=torch.long)   # one utterance
    loss, stats = policy_loss(logp, logp_old, adv, mask, clip_eps=10.0, level="utterance", segments=segments)
    exact = torch.exp((logp.double() - logp_old.double()).sum()).item()
    assert loss.dtype == torch.float32
    assert stats["ratio"] == pytest.approx(exact, rel=1e-5) and loss.item() == pytest.approx(-exact, rel=1e-5)


def test_policy_gradient_reaches_only_masked_tokens():
    logp = torch.zeros(1, 3, requires_grad=True)
    loss, _ = policy_loss(logp, torch.zeros(1, 3), torch.ones(1, 3), torch.tensor([[0, 1, 0]]))
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 2] == 0 and logp.grad[0, 1] != 0


def test_value_loss_clipping_by_hand():
    v, v_old, ret = torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.tensor([[2.0]])
    # unclipped (1-2)^2 = 1; clipped V = 0.2 -> (0.2-2)^2 = 3.24; max = 3.24
    assert torch.isclose(value_loss(v, v_old, ret, torch.ones(1, 1), clip_eps=0.2), torch.tensor(0.5 * 3.24))
    assert torch.isclose(value_loss(v, v_old, ret, torch.ones(1, 1), clip_eps=None), torch.tensor(0.5))


def test_explained_variance_by_hand():
    G = torch.tensor([1.0, 2.0, 3.0, 4.0])                                      # Var(G) = 1.25
    assert explained_variance(G, G) == 1.0                                      # a perfect critic
    assert explained_variance(torch.full((4,), 7.0), G) == pytest.approx(0.0)  # a constant: explains nothing
    # V = G - [0.5, -0.5, 0.5, -0.5]: Var(G - V) = 0.25, 1 - 0.25 / 1.25 = 0.8
    assert explained_variance(G - torch.tensor([0.5, -0.5, 0.5, -0.5]), G) == pytest.approx(0.8)
    assert explained_variance(-G, G) == pytest.approx(1 - 5.0 / 1.25)          # worse than a constant: < 0
    assert math.isnan(explained_variance(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 2.0])))  # Var(G) = 0
    assert math.isnan(explained_variance(torch.tensor([]), torch.tensor([])))


def test_k3_kl_and_entropy():
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    assert torch.isclose(kl_k3(logp, ref), torch.tensor(0.5 - math.log(0.5) - 1))
    assert kl_k3(logp, logp).item() == 0
    assert torch.isclose(entropy(torch.zeros(1, 1, 4)), torch.tensor([[math.log(4)]]))
    assert masked_mean(torch.tensor([1.0, 3.0]), torch.tensor([1, 0])) == 1.0
