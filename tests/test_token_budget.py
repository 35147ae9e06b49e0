"""Every model call bounded by a token budget (issue 71): a decoding batch admits rows while their prompts and turn
lengths fit in `max_tokens` (sampling.RowQueue), so a judge's long prompts or a population's games wait instead of
filling a GPU; the scoring passes of a language-model counterpart chunk by tokens too. Rows sampled from their own
streams decode the same under any budget, on either engine."""
from __future__ import annotations

import random

import pytest
import torch

from dialogrl.agents import LMAgent
from dialogrl.agents.counterpart import chunks
from dialogrl.agents.fastdecode import sample_turns
from dialogrl.agents.sampling import DecodeBatch
from dialogrl.models import load_model


@pytest.fixture(scope="module")
def toy(dond_toy_dir):
    return load_model(str(dond_toy_dir), device="cpu")


def prompts(tok, n: int = 6) -> list[list[int]]:
    rng = random.Random(0)
    return [tok.encode(" ".join(rng.choice(["book", "hat", "ball", "deal", "no", "yes", "two", "one"])
                                for _ in range(rng.randint(5, 40)))) for _ in range(n)]


@pytest.mark.parametrize("lean", [None, False])   # the lean engine (CPU fp32) and the HF forward
def test_a_budget_smaller_than_the_batch_decodes_the_same_rows_in_turns(toy, lean, monkeypatch):
    model, tok = toy
    ps, limit = prompts(tok), 12
    agent = LMAgent(model, tok, max_new_tokens=limit)
    whole = sum(len(p) + limit for p in ps)
    budget = max(len(p) + limit for p in ps) + 10   # about two rows at a time, far less than the batch

    def run(max_tokens):
        live = []
        real = DecodeBatch.step if lean is False else None
        if real is not None:   # the HF engine: record how many tokens its live rows could hold, step by step
            def spy(self):
                live.append(sum(self._tokens(k, p) for k, p in zip(self.keys, self.prompts)))
                return real(self)
            monkeypatch.setattr(DecodeBatch, "step", spy)
        out = sample_turns(model, ps, tok.pad_token_id, agent.stop_ids, limit, agent.sampling_logprobs, lean=lean,
                           rngs=[random.Random(i) for i in range(len(ps))], max_tokens=max_tokens)
        monkeypatch.undo()
        return out[:2], live

    (free, _), (bounded, live) = run(None), run(budget)
    assert budget < whole
    assert free[0] == bounded[0]                                   # the same tokens, row by row
    assert all(torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4) for a, b in zip(free[1], bounded[1]))
    if lean is False:
        assert live and max(live) <= budget                        # never more live than the budget holds


def test_an_agent_with_a_budget_generates_as_without_one(toy):
    model, tok = toy
    chats = [[{"role": "user", "content": f"Offer {k} books and {k + 1} hats, please."}] for k in range(5)]
    rngs = lambda: [random.Random(k) for k in range(5)]   # noqa: E731
    free = LMAgent(model, tok, max_new_tokens=10).generate(chats, rngs())
    bounded = LMAgent(model, tok, max_new_tokens=10, max_batch_tokens=40).generate(chats, rngs())
    assert [u.completion_ids for u in free] == [u.completion_ids for u in bounded]
    with pytest.raises(ValueError, match="max_batch_tokens=0: a positive token budget"):
        LMAgent(model, tok, max_batch_tokens=0)


def test_scoring_chunks_by_rows_and_by_tokens():
    ps = [[0] * n for n in (5, 7, 30, 2, 2, 2)]
    assert chunks(ps, rows=4) == [range(0, 4), range(4, 6)]
    assert chunks(ps, rows=32, tokens=12) == [range(0, 2), range(2, 3), range(3, 6)]   # 30 tokens: alone
    assert chunks([], rows=4, tokens=10) == []
