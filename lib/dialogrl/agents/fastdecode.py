"""A lean decoding engine for Qwen2/Llama-architecture models: plain torch ops over the HF model's weights.

`FastDecodeBatch` has the interface and the behaviour of `agents.sampling.DecodeBatch` (continuous batching, per-
dialogue KV-cache reuse, the sampled ids and their sampling log-probs per row) without the HF forward's per-step
Python work (mask building, cache bookkeeping, ~20 module calls per layer). Per step it runs one fused QKV matmul,
RoPE, one SDPA call, one output matmul, one fused gate/up matmul and one down matmul per layer.

The KV cache is one static buffer of slots, one slot per live row, each row's tokens left-aligned,

    kv: (layers, 2, slots, kv_heads, T_cap, head_dim)      row b's column t holds its token at position t,

so a row's position ids are its column indices, its attention mask is `column <= position`, and a decoding step
writes each row's new keys/values at its own column in place. Rows leave by swap-remove (the last slot moves into
the hole: one row's copy, not the batch's), so the live rows are always slots 0..B-1 and every layer attends over
views of the buffer, never a gathered copy.

LoRA: a peft model runs with its active adapter as the effective weights W + scale * B @ A of each wrapped linear
(with peft's adapters disabled, `models.base_model`, the base W). They are rebuilt whenever the adapter state
(active adapter, disabled, scale) or any weight they read changes: each step compares the `_version` counter and
storage of every source tensor (optimizer steps and `copy_` under no_grad bump it), so a trainer's update between
rollouts is seen without an explicit call; `LeanModel.invalidate()` forces a rebuild (e.g. after writing through
`.data`, which the counters do not see).

`lean_supported(model)` says whether a model can run here; `decode_batch` (and `sample_turns`, which the agents
call) pick this engine or the HF path (`sampling.DecodeBatch`: other architectures and, by default, bf16 or GPU).
"""
from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dialogrl.agents.sampling import FORWARDS, CachedPrefix, DecodeBatch, Finished, RowQueue, common_prefix

SHRINK_SLOTS = 64   # a slot buffer of more slots shrinks when its live rows fall to a quarter of it: many agents, each
#                     with a few last games, held their largest batch's buffers at once (a room test over 29 seeds)
STATIC_ROPE = ("default", "linear", "llama3", "yarn")   # rope types whose inverse frequencies do not depend on length


def _inner(model):
    """The HF causal LM under a peft wrapper (peft injects its LoRA layers into it in place)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def lean_supported(model) -> bool:
    """True for a Qwen2/Llama-style decoder (full attention, static RoPE, no o/MLP biases, plain LoRA if any)."""
    inner = _inner(model)
    cfg = inner.config
    core = getattr(inner, "model", None)
    if cfg.model_type not in ("qwen2", "llama") or core is None or not hasattr(core, "layers"):
        return False
    if getattr(cfg, "use_sliding_window", False) or any(t != "full_attention" for t in getattr(cfg, "layer_types",
                                                                                           None) or []):
        return False
    if getattr(core.rotary_emb, "rope_type", "default") not in STATIC_ROPE:
        return False
    o_proj = core.layers[0].self_attn.o_proj
    if getattr(cfg, "mlp_bias", False) or getattr(o_proj, "base_layer", o_proj).bias is not None:
        return False
    for m in inner.modules():
        if hasattr(m, "lora_A"):
            if any(m.use_dora.values()) or any(getattr(m, "lora_bias", {}).values()):
                return False
            if not isinstance(getattr(m, "base_layer", None), torch.nn.Linear):
                return False   # LoRA on the embedding or another non-linear module
    return True


@dataclass
class LayerWeights:
    """One block's weights, (out, in) as nn.Linear stores them; q/k/v and gate/up fused along `out`."""
    ln1: torch.Tensor        # (H,)
    qkv: torch.Tensor        # ((nh + 2 kvh) d, H)
    qkv_bias: torch.Tensor | None
    o: torch.Tensor          # (H, nh d)
    ln2: torch.Tensor        # (H,)
    gate_up: torch.Tensor    # (2 I, H)
    down: torch.Tensor       # (H, I)
    lora: dict | None = None  # training: per fused weight its adapters' (spans, factors), see `_LoRALinear`


class LeanModel:
    """The decoder's forward over a slot KV cache, with weights taken from the HF model (LoRA folded in)."""

    def __init__(self, model):
        self.model, inner = model, _inner(model)
        cfg, core = inner.config, inner.model
        self.core, self.lm_head = core, inner.lm_head
        self.n_layers = len(core.layers)
        attn = core.layers[0].self_attn
        self.nh, self.kvh = cfg.num_attention_heads, cfg.num_key_value_heads
        self.d = getattr(attn, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
        self.H, self.eps = cfg.hidden_size, cfg.rms_norm_eps
        self.lora = [m for m in inner.modules() if hasattr(m, "lora_A")]
        self.cos = self.sin = None
        self._key, self._sources, self.w = None, [], None

    # ---------------------------------------------------------------------------------------------- weights
    def _adapter_state(self) -> tuple:
        m = self.lora[0] if self.lora else None
        if m is None:
            return ()
        return (m.disable_adapters, m.merged, tuple((a, m.scaling.get(a)) for a in m.active_adapters))

    def _linear(self, m) -> torch.Tensor:
        """The effective (out, in) weight of a linear layer: W, plus each active LoRA adapter's scale * B @ A."""
        if not hasattr(m, "lora_A"):
            self._sources.append(m.weight)
            return m.weight
        W = m.base_layer.weight
        self._sources.append(W)
        if m.disable_adapters or m.merged:
            return W
        for a in m.active_adapters:
            if a in m.lora_A:
                self._sources += [m.lora_A[a].weight, m.lora_B[a].weight]
                W = W + m.get_delta_weight(a).to(W.dtype)   # peft keeps adapters in fp32 beside bf16 weights
        return W

    def _bias(self, m) -> torch.Tensor | None:
        b = getattr(m, "base_layer", m).bias
        if b is not None:
            self._sources.append(b)
        return b

    @torch.no_grad()
    def _build(self) -> None:
        self.w = self._layers()
        self._key = self._state()

    def _fused(self, mods, lora: dict, name: str) -> torch.Tensor:
        """The effective weights of linear layers fused along `out`. Under grad, where the base weights are frozen,
        the weight is built outside the graph and `lora[name]` gets the adapters' (spans, factors) for
        `_LoRALinear`; otherwise it is built in the graph (a loss reaches what it is made of through it)."""
        frozen = torch.is_grad_enabled() and not any(getattr(m, "base_layer", m).weight.requires_grad for m in mods)
        with torch.no_grad() if frozen else contextlib.nullcontext():
            ws = [self._linear(m) for m in mods]
        if frozen:
            spans, factors, lo = [], [], 0
            for m, W in zip(mods, ws):
                if hasattr(m, "lora_A") and not (m.disable_adapters or m.merged):
                    for a in m.active_adapters:
                        if a in m.lora_A:
                            spans.append((lo, lo + W.shape[0], m.scaling[a]))
                            factors += [m.lora_A[a].weight, m.lora_B[a].weight]
                lo += W.shape[0]
            lora[name] = (spans, factors)
        return torch.cat(ws) if len(ws) > 1 else ws[0]

    def _layers(self) -> list[LayerWeights]:
        """Every block's effective weights, built from the HF model's tensors; under grad with the adapters'
        factors beside them (`_fused`). Records their sources."""
        self._sources = []
        layers = []
        for block in self.core.layers:
            at, mlp, lora = block.self_attn, block.mlp, {}
            qkv_b = [self._bias(m) for m in (at.q_proj, at.k_proj, at.v_proj)]
            layers.append(LayerWeights(
                ln1=block.input_layernorm.weight,
                qkv=self._fused((at.q_proj, at.k_proj, at.v_proj), lora, "qkv"),
                qkv_bias=torch.cat(qkv_b) if all(b is not None for b in qkv_b) else None,
                o=self._fused((at.o_proj,), lora, "o"), ln2=block.post_attention_layernorm.weight,
                gate_up=self._fused((mlp.gate_proj, mlp.up_proj), lora, "gate_up"),
                down=self._fused((mlp.down_proj,), lora, "down"), lora=lora or None))
            self._sources += [block.input_layernorm.weight, block.post_attention_layernorm.weight]
        self._sources += [self.core.embed_tokens.weight, self.core.norm.weight, self.lm_head.weight]
        return layers

    def _state(self) -> tuple:
        return self._adapter_state(), tuple((t._version, t.data_ptr()) for t in self._sources)

    def invalidate(self) -> None:
        """Rebuild the effective weights before the next forward (for changes the version counters miss)."""
        self._key = None

    def weights(self) -> list[LayerWeights]:
        if self._key is None or self._key != self._state():
            self._build()
        return self.w

    # ------------------------------------------------------------------------------------------------- RoPE
    def _rope(self, n: int) -> None:
        """cos/sin tables (positions, d) for positions < n, as the HF rotary embedding computes them (fp32)."""
        if self.cos is not None and self.cos.shape[0] >= n:
            return
        rot = self.core.rotary_emb
        n = max(n, 2 * (self.cos.shape[0] if self.cos is not None else 512))
        pos = torch.arange(n, device=rot.inv_freq.device, dtype=torch.float32)
        freqs = pos[:, None] * rot.inv_freq.float()[None]               # (n, d/2)
        emb = torch.cat([freqs, freqs], dim=-1)
        dtype = self.core.embed_tokens.weight.dtype
        self.cos = (emb.cos() * rot.attention_scaling).to(dtype)
        self.sin = (emb.sin() * rot.attention_scaling).to(dtype)

    # ---------------------------------------------------------------------------------------------- forward
    @torch.no_grad()
    def forward(self, kv: torch.Tensor, ids: torch.Tensor, start: torch.Tensor, first: int,
                last: torch.Tensor | None = None) -> torch.Tensor:
        """Run `ids` (B, M) for the rows in slots first..first+B-1, row b's tokens at positions start[b] + j.

        kv: (layers, 2, slots, kvh, T_cap, d), written in place at those positions; the rows attend to their own
        columns up to each query's position. last: (B,) index of each row's last real token in `ids` (rows right-
        padded; the padding is never computed), or None for M = 1. Returns the next-token logits (B, V) at each
        row's last real token.
        """
        w = self.weights()
        B, M = ids.shape
        nh, kvh, d, H = self.nh, self.kvh, self.d, self.H
        heads, groups = nh + kvh, nh // kvh                  # heads that RoPE turns; query heads per key/value head
        S, T_cap = kv.shape[2], kv.shape[4]
        dev = ids.device
        pos = start[:, None] + torch.arange(M, device=dev)                        # (B, M) positions = columns
        T = int(start.max()) + M                                                 # columns any query may see
        self._rope(T)
        # the real tokens, packed, so that no matmul runs on padding: N = B when decoding, the rows' lengths summed
        # in a prefill; `real` indexes them in the flattened (B M) layout, `row` and `tpos` are their row and position
        if last is None:
            real, row, tpos = None, torch.arange(B, device=dev), pos.view(-1)
            x = F.embedding(ids.view(-1), self.core.embed_tokens.weight)          # (N, H)
        else:
            real = (torch.arange(M, device=dev) <= last[:, None]).view(-1).nonzero().squeeze(-1)
            row, tpos = real // M, pos.view(-1)[real]
            x = F.embedding(ids.view(-1)[real], self.core.embed_tokens.weight)
        N = tpos.shape[0]
        # RoPE over all nh + 2 kvh heads of the fused qkv at once: q and k heads rotate, v heads get cos 1, sin 0
        cos, sin = self.cos[tpos][:, None], self.sin[tpos][:, None]              # (N, 1, d)
        cos = torch.cat([cos.expand(N, heads, d), cos.new_ones(N, kvh, d)], dim=1)   # (N, nh + 2 kvh, d)
        sin = torch.cat([sin.expand(N, heads, d), sin.new_zeros(N, kvh, d)], dim=1)
        # where each new key/value row goes in a layer's flat (2 S kvh T_cap, d) view: [n, j] for j < kvh the key
        # head j, for j >= kvh the value head j - kvh, of slot first + row[n] at column tpos[n]
        j = torch.arange(2 * kvh, device=dev)
        head_row = (j // kvh) * S * kvh + (first + row[:, None]) * kvh + j % kvh  # (N, 2 kvh)
        dest = (head_row * T_cap + tpos[:, None]).view(-1)                       # (N 2 kvh,)
        if M == 1:   # decoding: an additive mask over the columns, one row per (row, kv head, query head of it)
            bias = torch.zeros(B, 1, 1, T, device=dev, dtype=cos.dtype).masked_fill_(
                torch.arange(T, device=dev) > pos[:, None, None], float("-inf"))
            bias = bias.expand(B, kvh, groups, T).reshape(B * kvh, groups, T)
        else:
            mask = (torch.arange(T, device=dev) <= pos[..., None])[:, None]     # (B, 1, M, T)
        for layer, lw in enumerate(w):
            h = F.rms_norm(x, (H,), lw.ln1, self.eps)
            qkv = F.linear(h, lw.qkv, lw.qkv_bias).view(N, heads + kvh, d)
            qkv = torch.addcmul(qkv * cos, torch.cat([-qkv[..., d // 2:], qkv[..., :d // 2]], dim=-1), sin)
            kv[layer].view(-1, d).index_copy_(0, dest, qkv[:, nh:].reshape(-1, d))
            K, V = kv[layer, 0, first:first + B, :, :T], kv[layer, 1, first:first + B, :, :T]  # (B, kvh, T, d)
            if M == 1:   # the query heads that share a key/value head as `groups` rows of one matmul
                q = qkv[:, :nh].reshape(B * kvh, groups, d)
                scores = torch.baddbmm(bias, q, K.reshape(B * kvh, T, d).transpose(1, 2), alpha=d ** -0.5)
                p = scores.softmax(-1, dtype=torch.float32).to(q.dtype)         # in float32, as transformers' eager
                a = torch.bmm(p, V.reshape(B * kvh, T, d)).view(B, nh * d)
            else:        # queries back in the padded (B, M) layout for SDPA, the outputs packed again
                q = qkv.new_zeros(B * M, nh, d).index_copy_(0, real, qkv[:, :nh])
                a = F.scaled_dot_product_attention(q.view(B, M, nh, d).transpose(1, 2), K, V, attn_mask=mask,
                                                   enable_gqa=True)              # (B, nh, M, d)
                a = a.transpose(1, 2).reshape(B * M, nh * d)[real]              # (N, nh d)
            x = torch.addmm(x, a, lw.o.t())                                       # x + attn @ W_o^T
            h = F.rms_norm(x, (H,), lw.ln2, self.eps)
            g, u = (h @ lw.gate_up.t()).chunk(2, dim=-1)                         # (N, I) each
            x = torch.addmm(x, F.silu(g) * u, lw.down.t())                       # x + SwiGLU
        if last is not None:
            x = x[(last + 1).cumsum(0) - 1]                                       # (B, H) each row's last token
        x = F.rms_norm(x, (H,), self.core.norm.weight, self.eps)
        return x @ self.lm_head.weight.t()                                       # (B, V)


class _LoRALinear(torch.autograd.Function):
    """x @ W^T (+ bias) for an effective weight W = W0 + sum_i s_i B_i A_i held outside the graph, whose backward
    gives the adapters their gradients through the low rank: for g_i the output gradient's columns of factor pair i,
    dA_i = s_i (g_i B_i)^T x and dB_i = s_i g_i^T (x A_i^T). The (out, in) gradient of W itself, one N x in x out
    matmul per linear layer (a third of the layer's work), is never formed. The same gradients as autograd's
    through W0 + s B A, to float error."""

    @staticmethod
    def forward(ctx, x, weight, bias, spans, *factors):
        ctx.spans = spans
        ctx.save_for_backward(x, weight, *factors)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, g):
        x, weight, *factors = ctx.saved_tensors
        dx = g @ weight.to(g.dtype) if ctx.needs_input_grad[0] else None
        grads = []
        for (lo, hi, scale), A, B in zip(ctx.spans, factors[0::2], factors[1::2]):
            gi, xi = g[:, lo:hi].to(A.dtype), x.to(A.dtype)   # peft keeps adapters in fp32 beside bf16 weights
            # (r, N) @ (N, k) products: with the long N as the inner dimension of a thin left factor BLAS runs
            # them 5-15x faster than the same products written with the transposes outside (measured)
            grads += [((B.t() @ gi.t()) @ xi).mul_(scale), ((xi @ A.t()).t() @ gi).t().mul_(scale)]
        return (dx, None, None, None, *grads)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora: dict | None, name: str):
    """A fused linear layer of `hidden`: through `_LoRALinear` where its adapters' factors were collected."""
    if lora and lora.get(name) and lora[name][0]:
        spans, factors = lora[name]
        return _LoRALinear.apply(x, weight, bias, spans, *factors)
    return F.linear(x, weight, bias)


def lean_trainable(model) -> bool:
    """Whether `LeanModel.hidden` can stand in for the HF decoder in a training forward: a supported model
    (`lean_supported`) whose LoRA layers apply no dropout while training (the effective weights W + scale * B @ A
    are the adapter's function only without it)."""
    if not lean_supported(model):
        return False
    return all(isinstance(d, torch.nn.Identity) for m in _inner(model).modules() if hasattr(m, "lora_dropout")
               for d in m.lora_dropout.values())


def hidden(lean: LeanModel, rows: Sequence[Sequence[int]]) -> torch.Tensor:
    """The decoder's final-normed hidden states of `rows` laid out right-padded, (B, L, H) (zeros on padding), as
    the HF decoder gives them at each row's real positions 0..len-1: the trainer's packed forward, differentiable.

    Every linear layer runs on the rows' real tokens only, packed (N, H): no matmul on padding, q/k/v and gate/up
    fused into one matmul each, and LoRA as the effective weight W + scale * B @ A (one matmul per layer instead of
    three thin ones and a scaled add; under grad the adapters get their gradients through the low rank,
    `_LoRALinear`). Attention runs row by row on each row's own tokens, SDPA's causal kernel at the row's length: no
    padding at all (in one padded batch a chunk's attention computed its longest row's square for every row: about
    1.7x the work, and 2x the time measured on the CPU at rows of 240-500 tokens). Without grad the cached effective
    weights (rebuilt when a source tensor changes) serve."""
    w = lean._layers() if torch.is_grad_enabled() else lean.weights()
    dev = lean.core.embed_tokens.weight.device
    nh, kvh, d, H, eps = lean.nh, lean.kvh, lean.d, lean.H, lean.eps
    lens = [len(r) for r in rows]
    B, L = len(rows), max(lens)
    lean._rope(L)
    col = torch.cat([torch.arange(n) for n in lens]).to(dev)                    # (N,) each real token's position
    flat = torch.repeat_interleave(torch.arange(B), torch.tensor(lens)).to(dev) * L + col   # its place in (B L)
    N = flat.shape[0]
    x = F.embedding(torch.tensor([t for r in rows for t in r], device=dev), lean.core.embed_tokens.weight)
    cos, sin = lean.cos[col][:, None], lean.sin[col][:, None]                  # (N, 1, d)
    for lw in w:
        h = F.rms_norm(x, (H,), lw.ln1, eps)
        qkv = _linear(h, lw.qkv, lw.qkv_bias, lw.lora, "qkv").view(N, nh + 2 * kvh, d)
        qk, v = qkv[:, :nh + kvh], qkv[:, nh + kvh:]
        qk = torch.addcmul(qk * cos, torch.cat([-qk[..., d // 2:], qk[..., :d // 2]], dim=-1), sin)   # RoPE
        heads = torch.cat([qk, v], dim=1).transpose(0, 1)                       # (heads, N, d)
        a = torch.cat([F.scaled_dot_product_attention(r[None, :nh], r[None, nh:nh + kvh], r[None, nh + kvh:],
                                                      is_causal=True, enable_gqa=True)[0]
                       for r in heads.split(lens, dim=1)], dim=1)                # (nh, N, d)
        x = x + _linear(a.transpose(0, 1).reshape(N, nh * d), lw.o, None, lw.lora, "o")
        h = F.rms_norm(x, (H,), lw.ln2, eps)
        g, u = _linear(h, lw.gate_up, None, lw.lora, "gate_up").chunk(2, dim=-1)
        x = x + _linear(F.silu(g) * u, lw.down, None, lw.lora, "down")
    x = F.rms_norm(x, (H,), lean.core.norm.weight, eps)
    return x.new_zeros(B * L, H).index_copy(0, flat, x).view(B, L, H)


class FastDecodeBatch(RowQueue):
    """`sampling.DecodeBatch` on a `LeanModel` and a slot KV cache: the same interface, the same rows' results.

    Per live row b (slot b): `lens[b]` tokens in its cache (prompt + fed-back sampled tokens), `n_new[b]` sampled
    tokens so far in `sampled[b]` / `sampled_lp[b]`, and `logits[b]` for its next token.
    """

    def __init__(self, model, pad_id: int, stop_ids: Sequence[int], max_new_tokens: int,
                 logprob_fn: Callable[[torch.Tensor], torch.Tensor], keep_cache: bool = False,
                 join_fraction: float = 0.25, max_tokens: int | None = None):
        super().__init__(model, pad_id, stop_ids, max_new_tokens, logprob_fn, keep_cache, join_fraction, max_tokens)
        self.lean = LeanModel(model)   # (self.keys and self.prompts: the live rows in slot order)
        self.kv = self.lens = self.n_new = self.sampled = self.sampled_lp = self.logits = None

    # ------------------------------------------------------------------------------------------- buffers
    def _reserve(self, slots: int, cols: int) -> None:
        """Grow the slot buffers to at least `slots` rows and `cols` columns (zeros: masked columns stay finite)."""
        m, dev = self.lean, self.device
        S, T = (self.kv.shape[2], self.kv.shape[4]) if self.kv is not None else (0, 0)
        if slots <= S and cols <= T:
            return
        S2 = S if slots <= S else max(slots, S + S // 2)
        T2 = T if cols <= T else max(cols + 64, T + T // 2)
        dtype = self.lean.core.embed_tokens.weight.dtype
        kv = torch.zeros(m.n_layers, 2, S2, m.kvh, T2, m.d, dtype=dtype, device=dev)
        sampled = torch.zeros(S2, self.max_new_tokens, dtype=torch.long, device=dev)
        sampled_lp = torch.zeros(S2, self.max_new_tokens, device=dev)
        B = len(self.keys)
        if self.kv is not None and B:
            kv[:, :, :B, :, :T] = self.kv[:, :, :B]
            sampled[:B], sampled_lp[:B] = self.sampled[:B], self.sampled_lp[:B]
        self.kv, self.sampled, self.sampled_lp = kv, sampled, sampled_lp

    # ------------------------------------------------------------------------------------------- joining
    def _join(self) -> None:
        """Prefill the queued rows into slots B..B+k-1: their cached prefixes copied in, the rest in one forward."""
        if self.adapters or self.logprob_fns or self.limits:
            raise ValueError("the lean engine decodes every row with the batch's one adapter, distribution and turn "
                             "length: a batch that agents share (sampling.SharedBatch) runs on the HF engine")
        rows = self._take()
        prompts = [q for _, q, _ in rows]
        # reuse n_i cached tokens; at least the prompt's last token must run to give the next-token logits
        cached = [min(common_prefix(p.ids, q), len(q) - 1) if p is not None else 0 for _, q, p in rows]
        suffix = [q[n:] for q, n in zip(prompts, cached)]
        B, k, M = len(self.keys), len(rows), max(len(s) for s in suffix)
        self._reserve(B + k, max(cached) + M)
        for i, ((_, _, p), n) in enumerate(zip(rows, cached)):
            if n:
                self.kv[:, :, B + i, :, :n] = p.kv[:, :, :, :n]
        ids = torch.full((k, M), self.pad_id, dtype=torch.long)
        for i, s in enumerate(suffix):
            ids[i, :len(s)] = torch.tensor(s)
        dev = self.device
        start = torch.tensor(cached, device=dev)
        last = torch.tensor([len(s) - 1 for s in suffix], device=dev)
        FORWARDS.add()
        logits = self.lean.forward(self.kv, ids.to(dev), start, B, last)
        lens = torch.tensor([len(q) for q in prompts], device=dev)
        self.keys += [key for key, _, _ in rows]
        self.prompts += prompts
        if B == 0:
            self.lens, self.n_new, self.logits = lens, torch.zeros_like(lens), logits
            return
        self.lens, self.n_new = torch.cat([self.lens, lens]), torch.cat([self.n_new, torch.zeros_like(lens)])
        self.logits = torch.cat([self.logits, logits])

    def _leave(self, gone: list[int]) -> torch.Tensor:
        """Swap-remove the rows in `gone` (sorted): survivors from the tail move into the holes below the new size.
        Returns the survivors' old slots in their new order (to reorder per-row tensors of this step)."""
        B = len(self.keys)
        B2 = B - len(gone)
        holes = [b for b in gone if b < B2]
        gone_set = set(gone)
        movers = [b for b in range(B2, B) if b not in gone_set]
        order = list(range(B2))
        for h, m in zip(holes, movers):
            order[h] = m
        if holes:
            T = self.kv.shape[4]
            hi, mi = torch.tensor(holes, device=self.device), torch.tensor(movers, device=self.device)
            self.kv[:, :, hi, :, :T] = self.kv[:, :, mi, :, :T]
            self.sampled[hi], self.sampled_lp[hi] = self.sampled[mi], self.sampled_lp[mi]
        self.keys = [self.keys[b] for b in order]
        self.prompts = [self.prompts[b] for b in order]
        keep = torch.tensor(order, dtype=torch.long, device=self.device)
        self.lens, self.n_new = self.lens[keep], self.n_new[keep]
        S = self.kv.shape[2]
        if B2 and S > SHRINK_SLOTS and B2 <= S // 4:   # a few stragglers: their slots move to a buffer of their size
            S2 = max(2 * B2, SHRINK_SLOTS)                  # (the same values), the large one goes
            self.kv = self.kv[:, :, :S2].clone()
            self.sampled, self.sampled_lp = self.sampled[:S2].clone(), self.sampled_lp[:S2].clone()
        return keep

    # ------------------------------------------------------------------------------------------ decoding
    @torch.no_grad()
    def step(self) -> list[Finished]:
        """Join waiting rows if due, sample one token per live row, feed the continuing rows; the rows that left."""
        if self._join_due():
            self._join()
        B = len(self.keys)
        if not B:
            return []
        logp = self.logprob_fn(self.logits)                                   # (B, V)
        tok = self.sample(logp)                                               # (B,)
        lp = logp.gather(-1, tok[:, None]).squeeze(-1)
        rows = torch.arange(B, device=self.device)
        self.sampled[rows, self.n_new], self.sampled_lp[rows, self.n_new] = tok, lp
        self.n_new += 1
        done = torch.isin(tok, self.stop) | (self.n_new >= self.max_new_tokens)
        finished = []
        if done.any():
            gone = done.nonzero().squeeze(-1).tolist()
            lens, n_new = self.lens.tolist(), self.n_new.tolist()
            for b in gone:
                completion = self.sampled[b, :n_new[b]].tolist()
                cache = None
                if self.keep_cache:   # prompt + completion[:-1]: the last sampled token was never fed back
                    cache = CachedPrefix(self.prompts[b] + completion[:-1], self.kv[:, :, b, :, :lens[b]].clone())
                finished.append(Finished(self.keys[b], completion, self.sampled_lp[b, :n_new[b]].tolist(), cache))
                self._forget(self.keys[b])
            keep = self._leave(gone)
            tok = tok[keep]
            if not self.keys:   # the slot buffers go with the last row, not kept at their largest for later games
                self.lens = self.n_new = self.logits = self.kv = self.sampled = self.sampled_lp = None
                return finished
        self._reserve(len(self.keys), int(self.lens.max()) + 1)
        FORWARDS.add()
        self.logits = self.lean.forward(self.kv, tok[:, None], self.lens, 0)
        self.lens = self.lens + 1
        return finished


def decode_batch(model, pad_id: int, stop_ids: Sequence[int], max_new_tokens: int,
                 logprob_fn: Callable[[torch.Tensor], torch.Tensor], keep_cache: bool = False,
                 join_fraction: float = 0.25, lean: bool | None = None, max_tokens: int | None = None):
    """A decode batch for `model` (the DecodeBatch interface): the lean engine (`dialogrl.agents.fastdecode`) where it
    supports the model, else the HF forward (`DecodeBatch`); max_tokens: its token budget (`sampling.RowQueue`).

    lean: None (the lean engine for supported fp32 models on the CPU, where the HF forward's Python overhead
    dominates a tiny model's step; on a GPU, or in bf16, the HF path keeps its kernels, numerics and memory as they
    are), True (wherever supported), False (always the HF path).
    """
    if uses_lean(model, lean):
        return FastDecodeBatch(model, pad_id, stop_ids, max_new_tokens, logprob_fn, keep_cache, join_fraction,
                               max_tokens)
    return DecodeBatch(model, pad_id, stop_ids, max_new_tokens, logprob_fn, keep_cache, join_fraction, max_tokens)


def uses_lean(model, lean: bool | None = None) -> bool:
    """Whether `decode_batch(model, ..., lean=lean)` decodes on the lean engine (else on the HF forward)."""
    p = next(model.parameters())
    auto = p.device.type == "cpu" and p.dtype == torch.float32
    return lean is not False and (lean or auto) and lean_supported(model)


def sample_turns(model, prompts: Sequence[list[int]], pad_id: int, stop_ids: Sequence[int], max_new_tokens: int,
                 logprob_fn: Callable[[torch.Tensor], torch.Tensor],
                 prefixes: Sequence[CachedPrefix | None] | None = None, keep_cache: bool = False,
                 lean: bool | None = None, rngs: Sequence[random.Random | None] | None = None,
                 max_tokens: int | None = None):
    """Sample one completion per prompt in one DecodeBatch (all rows start together, or as many as `max_tokens`
    lets live at once: `sampling.RowQueue`).

    prompts: token ids per row. prefixes: per row, an earlier context's cache or None. lean: see `decode_batch`.
    rngs: per row, the random.Random its tokens are drawn from, or None (the global torch generator).
    Returns (completions, logprobs, caches), per row in order.
    """
    batch = decode_batch(model, pad_id, stop_ids, max_new_tokens, logprob_fn, keep_cache=keep_cache, lean=lean,
                         max_tokens=max_tokens)
    none = [None] * len(prompts)
    for i, (q, p, rng) in enumerate(zip(prompts, prefixes if prefixes is not None else none, rngs or none)):
        batch.add(i, q, p, rng)
    done: dict[int, Finished] = {}
    while batch:
        for f in batch.step():
            done[f.key] = f
    rows = [done[i] for i in range(len(prompts))]
    return [f.completion for f in rows], [f.logprobs for f in rows], [f.cache for f in rows]
