"""Batched sampling from a causal LM with continuous batching and per-dialogue KV-cache reuse.

A `DecodeBatch` holds the rows (one turn of one dialogue each) that decode together on one model. Rows join at
any step and leave as soon as they sample a stop token, so a multi-turn rollout keeps the batch full: when one
dialogue's turn ends, its next turn (the counterpart's reply, or the same model speaking for the other role) joins the
running batch instead of waiting for every other dialogue to finish the round.

A dialogue's context grows by a turn or two between two turns of the same role, so re-running the whole context
through the model every turn (as a fresh `generate` call does) spends most of the compute on tokens the model has
already seen. A row may bring the cached keys/values of an earlier context (`CachedPrefix`); it keeps the longest
prefix that its new prompt shares with it and runs only the rest. Rows of different lengths share the batch through
the attention mask; each row's layout in the batch cache is right-aligned,

    [pad ... | the row's real tokens (cached prefix, new prompt tokens, sampled tokens)]

with position ids that count only real tokens, so every row computes exactly what it would alone. Rows that join
are prefilled together in one forward pass and their caches are left-padded to the batch's width; columns that no
row uses any more are trimmed. Each row leaves with its cache (prompt + completion, less the last token, which was
sampled but never fed back), ready for the dialogue's next turn.
A row may bring its own random.Random (`add(..., rng=)`): its tokens are then drawn from that stream alone (one
uniform per token), so it samples the same whatever else is in the batch (dialogrl.seeds, stream "tokens").
The batch cache's layers (`GrowingLayer`) keep spare columns, so a decoding step writes its new keys and values in
place rather than copying the whole cache, and prefill passes compute logits only at each row's last position.

This is the engine for any HF causal LM. Qwen2/Llama-architecture models in fp32 on the CPU decode through the lean
engine of `dialogrl.agents.fastdecode` (same interface and results, a fraction of the per-step overhead); its
`decode_batch` picks the engine and its `sample_turns` samples one batch of prompts.

Both engines count their forward passes (`FORWARDS`; `counting_forwards()` reads the count of a block). On one
device the passes run one after another and each costs about the same at these batch sizes, so their number, not
the number of games, sets a rollout's decoding time: continuous batching keeps it near the longest game's own.
"""
from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import DynamicLayer


class ForwardCount:
    """Model forward passes run by the decoding engines (every prefill and decoding step, and the selection
    phase's scoring pass): `n` since the process started."""

    def __init__(self):
        self.n = 0

    def add(self) -> None:
        self.n += 1


FORWARDS = ForwardCount()


@contextlib.contextmanager
def counting_forwards() -> Iterator[ForwardCount]:
    """The decoding forward passes run inside the block: `with counting_forwards() as c: play(...)`, then `c.n`."""
    block, start = ForwardCount(), FORWARDS.n
    try:
        yield block
    finally:
        block.n = FORWARDS.n - start


@dataclass
class CachedPrefix:
    """The keys and values of a token sequence `ids`: kv (layers, 2, kv_heads, T, head_dim), keys at [:, 0]."""
    ids: list[int]
    kv: torch.Tensor


@dataclass
class Finished:
    """A row that left the batch: its key, sampled ids (ending in a stop id when it stopped), their sampling
    log-probs, and (with keep_cache) its cache for the dialogue's next turn."""
    key: Hashable
    completion: list[int]
    logprobs: list[float]
    cache: CachedPrefix | None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def sample_categorical(probs: torch.Tensor, rngs: Sequence[random.Random | None] | None = None) -> torch.Tensor:
    """One index per row of `probs` (B, V) (non-negative, unnormalised), by inverse CDF: u ~ U[0, row mass), the
    first index whose cumulative mass exceeds u. The distribution of torch.multinomial(probs, 1), from one uniform
    draw per row; about 15x faster on CPU, where multinomial costs ~11 us per row.

    rngs: per row, its own random.Random (the row's token stream, dialogrl.seeds: the row then samples the same in
    any batch) or None (the global torch generator); rngs=None: every row from the global generator.
    """
    dtype = torch.float64 if probs.device.type == "cpu" else torch.float32   # MPS has no float64
    cdf = probs.to(dtype).cumsum(-1)                                          # (B, V)
    if rngs is None:
        u01 = torch.rand(probs.shape[0], 1, dtype=dtype, device=probs.device)
    else:
        u01 = torch.tensor([r.random() if r is not None else math.nan for r in rngs], dtype=torch.float64)[:, None]
        if None in rngs:                                                      # rows without a stream of their own
            missing = u01.isnan()
            u01[missing] = torch.rand(int(missing.sum()), dtype=torch.float64)
        u01 = u01.to(device=probs.device, dtype=dtype)                       # (B, 1)
    u = u01 * cdf[:, -1:]
    # a u rounded up to the whole mass would fall past the end: the last index with mass is the cap
    cap = torch.searchsorted(cdf, cdf[:, -1:].contiguous(), right=False)
    return torch.minimum(torch.searchsorted(cdf, u, right=True), cap).squeeze(-1)


def _cache(model, layers: list[tuple[torch.Tensor, torch.Tensor]]):
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    cache.layers = [GrowingLayer(k, v) for k, v in layers]
    return cache


class GrowingLayer(DynamicLayer):
    """A DynamicLayer holding (B, heads, T, dim) keys/values as views of a buffer with spare columns: appending a
    decoded token writes in place instead of concatenating (copying) the whole cache at every step."""

    def __init__(self, keys, values):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._reserve(keys, values, spare=64)

    def _reserve(self, keys, values, spare):
        B, h, T, d = keys.shape
        self._k, self._v = keys.new_empty(B, h, T + spare, d), values.new_empty(B, h, T + spare, d)
        self._k[:, :, :T], self._v[:, :, :T] = keys, values
        self.keys, self.values = self._k[:, :, :T], self._v[:, :, :T]

    def update(self, key_states, value_states, *args, **kwargs):
        T, n = self.keys.shape[2], key_states.shape[2]
        if T + n > self._k.shape[2]:
            self._reserve(self.keys, self.values, spare=max(64, T + n))
        self._k[:, :, T:T + n], self._v[:, :, T:T + n] = key_states, value_states
        self.keys, self.values = self._k[:, :, :T + n], self._v[:, :, :T + n]
        return self.keys, self.values

    def batch_select_indices(self, indices):
        T = self.keys.shape[2]
        self._k, self._v = self._k[indices], self._v[indices]
        self.keys, self.values = self._k[:, :, :T], self._v[:, :, :T]

    def drop_columns(self, first: int):
        """Forget the first `first` columns (no row uses them any more); a view, no copy."""
        self._k, self._v = self._k[:, :, first:], self._v[:, :, first:]
        self.keys, self.values = self.keys[:, :, first:], self.values[:, :, first:]


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Zeros before `t` along `dim` up to `width`: the cache and mask columns of rows joining a running batch
    (id lists are padded by `dialogrl.tokens.pad`)."""
    extra = width - t.shape[dim]
    if extra == 0:
        return t
    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t.new_zeros(shape), t], dim=dim)


class RowQueue:
    """What both decoding engines share: their settings, the rows waiting to join (`add`), the live rows' keys and
    prompts, and when the waiting rows join (the batch is empty, or at least `join_fraction` of the live rows wait).

    max_tokens: a token budget on the live rows (None: none): rows join in their order only while every live row's
    prompt and turn length (the most cache it can hold) fit in it, so a decoding batch's KV cache is bounded by
    tokens, not by its count of rows; a row alone always joins an empty batch. Rows sampled from their own streams
    (a game's) decode the same under any budget."""

    def __init__(self, model, pad_id: int, stop_ids: Sequence[int], max_new_tokens: int,
                 logprob_fn: Callable[[torch.Tensor], torch.Tensor], keep_cache: bool = False,
                 join_fraction: float = 0.25, max_tokens: int | None = None):
        self.pad_id, self.max_new_tokens, self.max_tokens = pad_id, max_new_tokens, max_tokens
        self.logprob_fn, self.keep_cache, self.join_fraction = logprob_fn, keep_cache, join_fraction
        self.device = next(model.parameters()).device
        self.stop = torch.tensor(list(stop_ids), device=self.device)
        self.queue: list[tuple[Hashable, list[int], CachedPrefix | None]] = []
        self.keys: list[Hashable] = []
        self.prompts: list[list[int]] = []
        self.rngs: dict[Hashable, random.Random] = {}   # the rows that sample from their own stream, by key
        # a row's own adapter, sampling distribution and turn length (a batch several agents share), by key
        self.adapters: dict[Hashable, str] = {}
        self.logprob_fns: dict[Hashable, Callable[[torch.Tensor], torch.Tensor]] = {}
        self.limits: dict[Hashable, int] = {}

    def __len__(self) -> int:
        return len(self.keys) + len(self.queue)

    def add(self, key: Hashable, prompt: Sequence[int], prefix: CachedPrefix | None = None,
            rng: random.Random | None = None, adapter: str | None = None,
            logprob_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
            max_new_tokens: int | None = None) -> None:
        """Queue a row: its key (unique among the batch's rows), prompt ids, an earlier context's cache or None,
        and the random.Random its tokens are sampled from (None: the global torch generator). In a batch that
        several agents share (`SharedBatch`, the HF engine only): the row's LoRA adapter (peft's "__base__": none),
        its sampling distribution and its turn length; None: the batch's own."""
        if len(prompt) == 0:
            raise ValueError("empty prompt: a row needs at least one token to predict from")
        self.queue.append((key, list(prompt), prefix))
        for table, value in ((self.rngs, rng), (self.adapters, adapter), (self.logprob_fns, logprob_fn),
                             (self.limits, max_new_tokens)):
            if value is not None:
                table[key] = value

    def _forget(self, key: Hashable) -> None:
        """Drop a row's own settings once it has left."""
        for table in (self.rngs, self.adapters, self.logprob_fns, self.limits):
            table.pop(key, None)

    def logprobs(self, logits: torch.Tensor) -> torch.Tensor:
        """The live rows' sampling log-probs (B, V): the batch's `logprob_fn`, or each row's own where it has one."""
        if not self.logprob_fns:
            return self.logprob_fn(logits)
        fns = [self.logprob_fns.get(k, self.logprob_fn) for k in self.keys]
        groups: dict[int, list[int]] = {}
        for b, fn in enumerate(fns):
            groups.setdefault(id(getattr(fn, "__self__", fn)), []).append(b)   # one call per agent
        out = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
        for rows in groups.values():
            index = torch.tensor(rows, device=logits.device)
            out[index] = fns[rows[0]](logits[index]).float()
        return out

    def sample(self, logp: torch.Tensor) -> torch.Tensor:
        """One token per live row from its log-probs (B, V), each from the row's own stream where it has one."""
        rngs = [self.rngs.get(k) for k in self.keys] if self.rngs else None
        return sample_categorical(logp.exp(), rngs)                           # (B,)

    def prefill(self) -> dict[Hashable, torch.Tensor]:
        """Join every waiting row (one prefill forward, cached prefixes reused; the caller sized them: the budget is
        not applied) and return every live row's next-token logits (V,) by key, sampling nothing: to score how a
        prompt would go on (agents.counterpart)."""
        if self.queue:
            budget, self.max_tokens = self.max_tokens, None
            try:
                self._join()
            finally:
                self.max_tokens = budget
        return {k: self.logits[b] for b, k in enumerate(self.keys)}

    def _tokens(self, key: Hashable, prompt: Sequence[int]) -> int:
        """The most cache a row can hold: its prompt and its turn length."""
        return len(prompt) + self.limits.get(key, self.max_new_tokens)

    def _admitted(self) -> int:
        """How many queued rows, in order, join now: all of them without a budget; with one, those that fit beside
        the live rows (one at least when none is live)."""
        if self.max_tokens is None:
            return len(self.queue)
        held, n = sum(self._tokens(k, p) for k, p in zip(self.keys, self.prompts)), 0
        for key, prompt, _ in self.queue:
            held += self._tokens(key, prompt)
            if held > self.max_tokens and (n or self.keys):
                break
            n += 1
        return n

    def _take(self) -> list[tuple[Hashable, list[int], CachedPrefix | None]]:
        """The queued rows that join now (`_admitted`), out of the queue."""
        n = self._admitted()
        rows, self.queue = self.queue[:n], self.queue[n:]
        return rows

    def _join_due(self) -> bool:
        return (bool(self.queue) and (not self.keys or len(self.queue) >= self.join_fraction * len(self.keys))
                and self._admitted() > 0)


class DecodeBatch(RowQueue):
    """Rows sampling together on one model; `add` queues a row, each `step` samples one token for every live row.

        batch = DecodeBatch(model, pad_id, stop_ids, max_new_tokens=48, logprob_fn=agent.sampling_logprobs)
        batch.add(key, prompt_ids, prefix=None)
        while batch:
            for done in batch.step(): ...        # Finished rows

    Queued rows join the live batch (one prefill forward for all of them) when the batch is empty or when at least
    `join_fraction` of the live rows are waiting, so joins are batched rather than one forward pass each.
    logprob_fn: (b, V) logits -> (b, V) log-probs of the sampling distribution (temperature, top-p).
    """

    def __init__(self, model, pad_id: int, stop_ids: Sequence[int], max_new_tokens: int,
                 logprob_fn: Callable[[torch.Tensor], torch.Tensor], keep_cache: bool = False,
                 join_fraction: float = 0.25, max_tokens: int | None = None):
        super().__init__(model, pad_id, stop_ids, max_new_tokens, logprob_fn, keep_cache, join_fraction, max_tokens)
        self.model = model
        # live rows (besides keys and prompts): sampled ids and log-probs; batch tensors: the cache, its (B, W) mask,
        # the next position per row and the logits of each row's next token
        self.completions: list[list[int]] = []
        self.logps: list[list[float]] = []
        self.past = self.mask = self.next_pos = self.logits = None

    # ------------------------------------------------------------------------------------------- joining
    def _prefill(self, rows: list[tuple[Hashable, list[int], CachedPrefix | None]]):
        """One forward pass over the queued rows' uncached prompt tokens: (layers, mask, next_pos, logits)."""
        prompts = [q for _, q, _ in rows]
        prefixes = [p for _, _, p in rows]
        # reuse l_i cached tokens; at least the prompt's last token must run to give the next-token logits
        cached = [min(common_prefix(p.ids, q), len(q) - 1) if p is not None else 0 for p, q in zip(prefixes, prompts)]
        B, L = len(rows), max(cached)
        suffix = [q[n:] for q, n in zip(prompts, cached)]
        M = max(len(s) for s in suffix)
        ids = torch.full((B, M), self.pad_id, dtype=torch.long)
        pos = torch.zeros((B, M), dtype=torch.long)
        mask = torch.zeros((B, L + M), dtype=torch.long)
        for b, (s, n) in enumerate(zip(suffix, cached)):
            ids[b, M - len(s):] = torch.tensor(s)
            pos[b, M - len(s):] = torch.arange(n, n + len(s))
            mask[b, L - n:L] = 1
            mask[b, L + M - len(s):] = 1
        dev = self.device
        ids, pos, mask = ids.to(dev), pos.to(dev), mask.to(dev)
        past = None
        if L > 0:
            ref = next(p for p in prefixes if p is not None)
            layers = []
            for layer in range(ref.kv.shape[0]):
                h, _, d = ref.kv.shape[2:]
                k = torch.zeros(B, h, L, d, dtype=ref.kv.dtype, device=dev)
                v = torch.zeros_like(k)
                for b, (p, n) in enumerate(zip(prefixes, cached)):
                    if n:
                        k[b, :, L - n:] = p.kv[layer, 0, :, :n]
                        v[b, :, L - n:] = p.kv[layer, 1, :, :n]
                layers.append((k, v))
            past = _cache(self.model, layers)
        out = self._forward(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=past,
                            use_cache=True, logits_to_keep=1, **self._adapter_names([k for k, _, _ in rows]))
        layers = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        next_pos = torch.tensor([len(q) for q in prompts], device=dev)
        return layers, mask, next_pos, out.logits[:, -1]

    def _join(self) -> None:
        rows = self._take()
        layers, mask, next_pos, logits = self._prefill(rows)
        self.keys += [k for k, _, _ in rows]
        self.prompts += [q for _, q, _ in rows]
        self.completions += [[] for _ in rows]
        self.logps += [[] for _ in rows]
        if self.past is None:
            self.past, self.mask, self.next_pos, self.logits = _cache(self.model, layers), mask, next_pos, logits
            return
        width = max(self.mask.shape[1], mask.shape[1])
        merged = [(torch.cat([_left_pad(k0, width, 2), _left_pad(k1, width, 2)]),
                   torch.cat([_left_pad(v0, width, 2), _left_pad(v1, width, 2)]))
                  for (k0, v0), (k1, v1) in zip(((layer.keys, layer.values) for layer in self.past.layers), layers)]
        self.past = _cache(self.model, merged)
        self.mask = torch.cat([_left_pad(self.mask, width, 1), _left_pad(mask, width, 1)])
        self.next_pos = torch.cat([self.next_pos, next_pos])
        self.logits = torch.cat([self.logits, logits])

    def _forward(self, **inputs):
        """One counted forward pass in eval mode: no dropout while sampling, and peft refuses a mixed-adapter batch in
        training mode. A model left in training mode (after an SFT, say) goes back to it after the pass."""
        FORWARDS.add()
        training = self.model.training
        if training:
            self.model.eval()
        try:
            return self.model(**inputs)
        finally:
            if training:
                self.model.train()

    def _adapter_names(self, keys: list[Hashable]) -> dict:
        """The forward's `adapter_names` (peft's mixed-adapter batch: each row through its own LoRA adapter) where
        rows name their adapters; {} otherwise (the model's active adapter for every row)."""
        return {"adapter_names": [self.adapters.get(k, "__base__") for k in keys]} if self.adapters else {}

    # ------------------------------------------------------------------------------------------ decoding
    @torch.no_grad()
    def step(self) -> list[Finished]:
        """Join waiting rows if due, sample one token per live row, feed the continuing rows; the rows that left."""
        if self._join_due():
            self._join()
        if not self.keys:
            return []
        logp = self.logprobs(self.logits)                                     # (B, V)
        tok = self.sample(logp)                                               # (B,)
        lp = logp.gather(-1, tok[:, None]).squeeze(-1)
        for b, (t, logprob) in enumerate(zip(tok.tolist(), lp.tolist())):
            self.completions[b].append(t)
            self.logps[b].append(logprob)
        lengths = torch.tensor([len(c) for c in self.completions], device=self.device)
        limits = (torch.tensor([self.limits.get(k, self.max_new_tokens) for k in self.keys], device=self.device)
                  if self.limits else self.max_new_tokens)
        live = ~torch.isin(tok, self.stop) & (lengths < limits)
        finished = []
        for b in (~live).nonzero().squeeze(-1).tolist():
            cache = None
            if self.keep_cache:   # prompt + completion[:-1]: the last sampled token was never fed back
                real = self.mask[b].bool()
                cache = CachedPrefix(self.prompts[b] + self.completions[b][:-1],
                                     torch.stack([torch.stack([layer.keys[b][:, real], layer.values[b][:, real]])
                                                  for layer in self.past.layers]))
            finished.append(Finished(self.keys[b], self.completions[b], self.logps[b], cache))
            self._forget(self.keys[b])
        if not live.all():
            keep = live.nonzero().squeeze(-1)
            kept = keep.tolist()
            self.keys, self.prompts = [self.keys[b] for b in kept], [self.prompts[b] for b in kept]
            self.completions, self.logps = [self.completions[b] for b in kept], [self.logps[b] for b in kept]
            if not kept:
                self.past = self.mask = self.next_pos = self.logits = None
                return finished
            self.past.batch_select_indices(keep)
            self.mask, tok, self.next_pos = self.mask[keep], tok[keep], self.next_pos[keep]
            first = int(self.mask.any(0).int().argmax())                      # columns no row uses any more
            if first > 0:
                for layer in self.past.layers:
                    layer.drop_columns(first)
                self.mask = self.mask[:, first:]
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.keys), 1)], dim=1)
        out = self._forward(input_ids=tok[:, None], attention_mask=self.mask, position_ids=self.next_pos[:, None],
                            past_key_values=self.past, use_cache=True, **self._adapter_names(self.keys))
        self.past, self.logits = out.past_key_values, out.logits[:, -1]
        self.next_pos = self.next_pos + 1
        return finished


class SharedBatch:
    """One `DecodeBatch` for every agent of one model that asks for it (`LMAgent(share_batch=True)` on the HF
    engine): each row decodes through its own agent's LoRA adapter (peft's mixed-adapter batch), sampling
    distribution and turn length, so two roles played by adapters of one model (a policy and its simulator, IB-RL's
    seller and buyer) take one forward pass a decoding step instead of one each.

        shared = SharedBatch.of(model, pad_id, stop_ids)
        shared.batch.add((owner, n), prompt_ids, adapter="seller", logprob_fn=..., max_new_tokens=48)
        if shared.due(seen): shared.step()          # then shared.collect(owner): that owner's finished rows

    Rows are keyed (owner, key). `step` runs one pass for every live row and holds each owner's finished rows until
    it collects them. An owner steps the batch only when no one has stepped it since its own last look (`due`), so
    agents that take turns advancing (the rollout engine advances each busy agent once a round) share one pass a
    round. Its passes run in eval mode (`DecodeBatch._forward`), whatever mode the model is left in.
    """

    def __init__(self, batch: DecodeBatch):
        self.batch, self.steps = batch, 0
        self.outbox: dict[Hashable, list[Finished]] = {}

    @classmethod
    def of(cls, model, pad_id: int, stop_ids: Sequence[int]) -> SharedBatch:
        """The model's shared batch (made on first use, kept on the model object)."""
        shared = getattr(model, "_dialogrl_shared_batch", None)
        if shared is None:
            batch = DecodeBatch(model, pad_id, stop_ids, max_new_tokens=1, logprob_fn=_no_default, keep_cache=True)
            shared = cls(batch)
            model._dialogrl_shared_batch = shared
        return shared

    def due(self, seen: int) -> bool:
        """Whether an owner whose last look was at step `seen` should step the batch (no one stepped it since)."""
        return seen == self.steps

    def step(self) -> None:
        for f in self.batch.step():
            self.outbox.setdefault(f.key[0], []).append(f)
        self.steps += 1

    def collect(self, owner: Hashable) -> list[Finished]:
        return self.outbox.pop(owner, [])


def _no_default(logits: torch.Tensor) -> torch.Tensor:
    raise ValueError("a SharedBatch row needs its own logprob_fn (add(..., logprob_fn=))")
