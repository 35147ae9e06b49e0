"""Token utilities: the padding layout, per-token log-probs, entropy and masked means against direct computations."""
import math

import pytest
import torch

from dialogrl.tokens import entropy, masked_mean, pad, token_logprobs, token_logprobs_and_entropy


def test_left_padding_layout_and_positions():
    ids, attn, pos = pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert attn.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]  # positions count real tokens only: row 2 starts at 0
    assert ids.dtype == attn.dtype == pos.dtype == torch.long


def test_right_padding_layout_and_positions():
    ids, attn, pos = pad([[5], [6, 7, 8]], pad_id=9, side="right")
    assert ids.tolist() == [[5, 9, 9], [6, 7, 8]]
    assert attn.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert pos.tolist() == [[0, 0, 0], [0, 1, 2]]
    with pytest.raises(ValueError, match="side='middle'"):
        pad([[1]], 0, side="middle")


def test_token_logprobs_equal_a_direct_computation():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, generator=g)
    targets = torch.tensor([[0, 4, 2], [1, 1, 3]])
    direct = torch.tensor([[math.log(torch.softmax(logits[b, t], -1)[targets[b, t]].item()) for t in range(3)]
                           for b in range(2)])
    got = token_logprobs(logits, targets)
    assert got.shape == (2, 3) and torch.allclose(got, direct, atol=1e-6)
    assert token_logprobs(logits.bfloat16(), targets).dtype == torch.float32  # log-softmax in float32


def test_entropy_of_uniform_is_log_v_and_the_joint_form_matches():
    assert torch.allclose(entropy(torch.zeros(2, 3, 7)), torch.full((2, 3), math.log(7)))
    assert entropy(torch.tensor([[0.0, -1e4]])).item() == pytest.approx(0.0, abs=1e-6)  # one certain token
    logits, targets = torch.randn(4, 6, 11), torch.randint(0, 11, (4, 6))
    logp, ent = token_logprobs_and_entropy(logits, targets)
    assert torch.equal(logp, token_logprobs(logits, targets)) and torch.equal(ent, entropy(logits))


def test_masked_mean_ignores_masked_entries():
    x = torch.tensor([[1.0, 100.0], [3.0, -50.0]])
    assert masked_mean(x, torch.tensor([[1, 0], [1, 0]])).item() == 2.0
    assert masked_mean(x, torch.tensor([[True, True], [True, True]])).item() == pytest.approx(13.5)
    assert masked_mean(x, torch.zeros(2, 2)).item() == 0.0  # an empty mask: 0, not NaN
