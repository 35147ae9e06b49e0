"""The update's forward: a batch of turns laid out as packed rows (`batching.chains`: a role's turns of one game in
one sequence), one pass of the decoder body over them, and the log-probs of each turn's completion tokens computed at
the completion positions only (with a hub model's 150k-word vocabulary, logits over every position would dominate the
update's memory); the critic (`ValueHead`) reads the hidden state at a turn's last prompt token.
`Trainer.token_logprobs` and `Trainer.values` read these.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch

from dialogrl.agents.fastdecode import hidden as lean_hidden
from dialogrl.rl.batching import Sample, chains
from dialogrl.tokens import pad, token_logprobs, token_logprobs_and_entropy


def packed_forward(model, batch: Sequence[Sample], pad_id: int, device, lean_model=None,
                   autocast: Callable = contextlib.nullcontext, pack: bool = True, hidden_only: bool = False):
    """One forward pass over `batch` laid out as packed rows (`chains`; one row per sample without `pack`): a row is
    the last member's prompt and completion (its prompt only with `hidden_only`), right-padded: a real token's
    position is its column. Returns the last hidden states (B, L, H) (final norm applied), the ids, and per sample its
    row and the position where its completion starts in that row. lean_model: `fastdecode.LeanModel` of `model`, whose
    packed forward gives the same numbers without the padding (None: the model's own); autocast: the update's.

    No attention mask: every real token sits before its row's padding, so causal attention alone gives it exactly the
    keys it would see unpadded (the padding's own outputs are never read), and SDPA may take its causal kernel, which
    can skip the keys after each query (a padding mask forces the full square; on the CPU at rows of about 500 tokens
    the two measured alike)."""
    runs = chains(batch) if pack else [[i] for i in range(len(batch))]
    rows = [batch[c[-1]].prompt_ids + ([] if hidden_only else batch[c[-1]].completion_ids) for c in runs]
    ids, _, _ = pad(rows, pad_id, side="right", device=device)
    row_of, start = [0] * len(batch), [0] * len(batch)
    for r, c in enumerate(runs):
        for i in c:
            row_of[i], start[i] = r, len(batch[i].prompt_ids)
    if lean_model is not None:   # fastdecode.hidden: the same numbers, packed
        return lean_hidden(lean_model, rows), ids, row_of, start
    with autocast():   # the decoder body alone: no LM head here (`completion_logprobs` applies it where needed; the
        # causal LM's own call with logits_to_keep=1 still ran the head, through a copy of its weight per row under
        # bf16 autocast: rows x vocabulary x hidden x 2 bytes, 272 MB a row for Qwen2.5-0.5B) and no position ids: a
        # row's positions are its columns (given ones that restart at 0 on the padding would read to transformers as
        # packed sequences, and it would build a mask for them)
        out = model.get_decoder()(input_ids=ids, attention_mask=None, use_cache=False)
    return out.last_hidden_state, ids, row_of, start


def completion_logprobs(model, hidden: torch.Tensor, ids: torch.Tensor, row_of: list[int], start: list[int],
                        batch: Sequence[Sample], temperature: float = 1.0,
                        autocast: Callable = contextlib.nullcontext, with_entropy: bool = False) -> dict:
    """Log-probs of each sample's completion tokens from `packed_forward`'s hidden states, at `temperature` (the
    sampler's): "logp" (S, K) with K the longest completion (each sample's completion right-aligned in its row of the
    result), the rollout's sampling log-probs "old" and the completion "mask" in the same layout, and with
    `with_entropy` the per-token "entropy". The LM head runs at the completion positions only."""
    dev = ids.device
    S, K = len(batch), max(len(s.completion_ids) for s in batch)
    cmask, old = torch.zeros((S, K)), torch.zeros((S, K))
    rows, cols = torch.zeros((S, K), dtype=torch.long), torch.zeros((S, K), dtype=torch.long)
    for b, s in enumerate(batch):
        n = len(s.completion_ids)
        cmask[b, K - n:] = 1
        old[b, K - n:] = torch.tensor(s.logprobs)
        rows[b] = row_of[b]
        # the position whose logits predict completion token k is start + k - 1; padding columns reuse the first
        cols[b] = start[b] - 1 + torch.arange(K).sub(K - n).clamp(min=0)
    rows, cols, cmask = rows.to(dev), cols.to(dev), cmask.to(dev)
    with autocast():
        logits = model.get_output_embeddings()(hidden[rows, cols])      # (S, K, V)
    logits = logits.float() / temperature
    targets = ids[rows, (cols + 1).clamp(max=ids.shape[1] - 1)]
    if with_entropy:
        logp, ent = token_logprobs_and_entropy(logits, targets)
    else:
        logp = token_logprobs(logits, targets)                          # (S, K)
    res = {"logp": torch.where(cmask > 0, logp, torch.zeros_like(logp)), "old": old.to(dev), "mask": cmask}
    if with_entropy:
        res["entropy"] = ent * cmask
    return res


class ValueHead(torch.nn.Module):
    """The critic V(s): a linear map of the role's last hidden state at the last prompt token, zero-initialised."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.linear = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)
