"""Peak accelerator memory of training and decoding, predicted from a model's config and the work in tokens.

    from dialogrl.estimate import update_memory, decode_memory
    from dialogrl.hub import hub_config
    config = hub_config("Qwen/Qwen2.5-0.5B-Instruct")
    update_memory(config, row_tokens=8192, logit_positions=2048, precision="bf16", lora_r=16)["total"]   # bytes

An update chunk (`rl.trainer.chunk_tokens`: packed rows padded to the longest, and the completion positions whose
vocabulary-wide logits it computes) holds, at its peak:
  weights      every parameter of the model, in the weights' dtype (float32 unless bf16);
  adapters     each trained LoRA adapter's float32 parameters, gradients and AdamW's two moments (16 bytes each);
  activations  what autograd keeps for the backward pass, per row token and layer: counted, not assumed, by
               `saved_bytes_per_token` on a one- and a two-layer model of the config's width on CPU, through the
               trainer's precision path (bf16 weights, float32 adapters, bf16 autocast); on a CUDA GPU transformers'
               SDPA copies every key/value head once per query head when rows are padded (`repeat_kv`), which the
               CPU path does not, so that copy is added there;
  logits       the log-softmax over the vocabulary at every completion position: at its peak, in the backward
               pass, 3 float32 copies live (the log-softmax kept for backward, the gradient through the gather, the
               log-softmax's own gradient; in the forward pass at most that), in float32 and under bf16 autocast
               alike, as measured on CPU.
Decoding holds the weights, every live game's KV cache (`hub.kv_bytes_per_token` per token of its context) and one
step's logits per running row.

What it leaves out: the allocator's fragmentation and the framework's workspace (a few hundred MiB on a GPU), and
any model beside the one given (pass `other_weights`). tests/test_estimate.py checks the update's prediction against
the peak memory of `Trainer.update` measured on CPU.
"""
from __future__ import annotations

import functools

import torch

from dialogrl.hub import kv_bytes_per_token

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}
ADAPTER_STATE_BYTES = 16        # float32 parameter, gradient and AdamW's two moments, per trained LoRA parameter
LOGIT_COPIES = 3                # float32 (S, K, V) tensors alive at the update's logits peak (see above)


def param_count(config) -> int:
    """Every parameter of a causal LM of this config (built on the meta device: no memory, exact)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def lora_param_count(config, r: int) -> int:
    """The parameters of one LoRA adapter of rank r on every linear layer of each block (`models.LORA_TARGETS`)."""
    h, i = config.hidden_size, config.intermediate_size
    head = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q, kv = config.num_attention_heads * head, config.num_key_value_heads * head
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]   # q k v o gate up down: (in, out)
    return config.num_hidden_layers * r * sum(a + b for a, b in shapes)


def weight_bytes(config, precision: str = "no") -> int:
    """The model's weights: bf16 weights where the precision is bf16; float32 otherwise (fp16 autocast keeps float32
    weights, `models.load_model`)."""
    return param_count(config) * (2 if precision == "bf16" else 4)


@functools.cache
def _saved_bytes(spec: tuple, layers: int, precision: str, lora_r: int, tokens: int) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    from dialogrl.models import add_adapters, attention

    kwargs = dict(spec)
    config = AutoConfig.for_model(kwargs.pop("model_type"), **{**kwargs, "num_hidden_layers": layers,
                                                               "vocab_size": 512})   # the body does not see V
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention())
        model = add_adapters(model, ["estimate"], r=lora_r)
    model.train()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    ids = torch.randint(0, 512, (1, tokens), generator=torch.Generator().manual_seed(0))
    autocast = (torch.autocast("cpu", dtype=HALF[precision]) if precision in HALF
                else torch.autocast("cpu", enabled=False))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast:
        model.get_base_model().model(input_ids=ids)
    return sum(saved.values())


def saved_bytes_per_token(config, precision: str = "no", lora_r: int = 8, tokens: int = 64) -> tuple[float, float]:
    """What autograd keeps for the backward pass of the decoder body with LoRA on every block's linear layers, per
    token: (per layer, once per model), counted on CPU (`tokens` tokens, one and two layers; the body's own saved
    tensors, parameters not counted)."""
    spec = tuple(sorted((k, v) for k, v in config.to_diff_dict().items()
                        if k in ("model_type", "hidden_size", "intermediate_size", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                                 "tie_word_embeddings", "hidden_act")))
    one, two = (_saved_bytes(spec, n, precision, lora_r, tokens) for n in (1, 2))
    return (two - one) / tokens, (2 * one - two) / tokens


def repeat_kv_bytes(config, precision: str = "no") -> int:
    """Per token and layer: the key and value copies transformers' SDPA makes on a GPU for padded rows (every key/value
    head repeated once per query head), which the CPU path avoids (`models.sdpa_grouped`)."""
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    extra = config.num_attention_heads - config.num_key_value_heads
    return 2 * extra * head * (2 if precision in HALF else 4)


def update_memory(config, row_tokens: int, logit_positions: int, precision: str = "no", lora_r: int = 8,
                  adapters: int = 1, device: str = "cuda", other_weights: int = 0) -> dict:
    """Peak bytes of one update chunk: `row_tokens` packed row positions (padding included) and `logit_positions`
    completion positions (`rl.trainer.chunk_tokens` is their sum). adapters: trained LoRA adapters held with their
    optimizer state; other_weights: bytes of other models on the same device (frozen counterparts, a judge).
    Returns {"weights", "adapters", "activations", "logits", "total"} in bytes."""
    per_layer, once = saved_bytes_per_token(config, precision, lora_r)
    if device == "cuda":
        per_layer += repeat_kv_bytes(config, precision)
    out = {"weights": weight_bytes(config, precision) + other_weights,
           "adapters": adapters * lora_param_count(config, lora_r) * ADAPTER_STATE_BYTES,
           "activations": int(row_tokens * (per_layer * config.num_hidden_layers + once)),
           "logits": logit_positions * config.vocab_size * 4 * LOGIT_COPIES}
    out["total"] = sum(out.values())
    return out


def decode_memory(config, context_tokens: int, rows: int, precision: str = "no", other_weights: int = 0) -> dict:
    """Peak bytes of decoding: `rows` games at once holding `context_tokens` tokens of KV cache in all (their prompts
    and turns so far), one step's float32 logits per row (and their log-softmax). Returns {"weights", "kv_cache",
    "logits", "total"}."""
    out = {"weights": weight_bytes(config, precision) + other_weights,
           "kv_cache": context_tokens * kv_bytes_per_token(config, 2 if precision in HALF else 4),
           "logits": rows * config.vocab_size * 4 * 2}
    out["total"] = sum(out.values())
    return out

