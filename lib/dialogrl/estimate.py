"""Peak accelerator memory of training and decoding, predicted from a model's config and the work in tokens.

    from dialogrl.estimate import update_memory, decode_memory
    from dialogrl.hub import hub_config
    config = hub_config("Qwen/Qwen2.5-0.5B-Instruct")
    update_memory(config, row_tokens=8192, logit_positions=2048, precision="bf16", lora_r=16)["total"]   # bytes

An update chunk (`rl.batching.chunk_tokens`: packed rows padded to the longest, and the completion positions whose
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
any model beside the one given (pass `other_weights`), and a prefill's activations. tests/test_estimate.py checks
the update's prediction against the peak memory of `Trainer.update` measured on CPU, and a run in a spawned
`parallel.map_runs` worker, a trained model and two frozen ones sent with it, against its resident set: its models
once when it starts, its decoding and update peaks within 30% (measured 0.99, 1.06 and 1.01 of the prediction). On
the host, a spawned worker holds its models' bytes beside them while it unpickles them (about twice their weights
for that moment; then once, or none where they go to a GPU).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from dialogrl.hub import HUB_CONFIGS, head_dim, hub_config, kv_bytes_per_token
from dialogrl.models import add_adapters, attention
from dialogrl.packaged import PACKAGED_MODELS

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
    h, i, head = config.hidden_size, config.intermediate_size, head_dim(config)
    q, kv = config.num_attention_heads * head, config.num_key_value_heads * head
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]   # q k v o gate up down: (in, out)
    return config.num_hidden_layers * r * sum(a + b for a, b in shapes)


def value_bytes(precision: str) -> int:
    """Bytes of a stored weight (and of a KV cache entry: the engines decode in the weights' dtype): bf16 where the
    precision is bf16; float32 otherwise (fp16 autocast keeps float32 weights, `models.load_model`)."""
    return 2 if precision == "bf16" else 4


def model_bytes(name: str, precision: str = "no") -> int:
    """The weights of a model a notebook names: a hub model with a committed config (`hub.HUB_CONFIGS`), a packaged
    one (`packaged.PACKAGED_MODELS`' n_parameters); 0 for the embedded tiny models (a few million parameters) and
    anything unnamed."""
    if name in HUB_CONFIGS:
        return weight_bytes(hub_config(name), precision)
    packaged = PACKAGED_MODELS.get(name)
    return packaged.n_parameters * value_bytes(precision) if packaged else 0


def weight_bytes(config, precision: str = "no") -> int:
    """The model's weights: bf16 weights where the precision is bf16; float32 otherwise (fp16 autocast keeps float32
    weights, `models.load_model`)."""
    return param_count(config) * value_bytes(precision)


@functools.cache
def _saved_bytes(spec: tuple, layers: int, precision: str, lora_r: int, tokens: int) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

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


def saved_bytes_per_token(config, precision: str = "no", lora_r: int = 8, tokens: int = 64
                          ) -> tuple[float, float, float]:
    """What autograd keeps for the backward pass of the decoder body with LoRA on every block's linear layers:
    (bytes per token and layer, per token once per model, per layer whatever the tokens), counted on CPU (one and two
    layers, `tokens` and twice as many tokens; the body's own saved tensors, parameters not counted). The last is
    zero but for fp16 autocast over float32 weights (a GPU without bf16): each linear layer keeps the float16 copy of
    its frozen weight that its backward multiplies by."""
    spec = tuple(sorted((k, v) for k, v in config.to_diff_dict().items()
                        if k in ("model_type", "hidden_size", "intermediate_size", "num_attention_heads",
                                 "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                                 "tie_word_embeddings", "hidden_act")))
    one, two, one2, two2 = (_saved_bytes(spec, n, precision, lora_r, t) for t in (tokens, 2 * tokens) for n in (1, 2))
    per_layer, once = ((two2 - one2) - (two - one)) / tokens, ((2 * one2 - two2) - (2 * one - two)) / tokens
    return per_layer, once, max(0.0, (two - one) - per_layer * tokens)


def repeat_kv_bytes(config, precision: str = "no") -> int:
    """Per token and layer: the key and value copies transformers' SDPA makes on a GPU for padded rows (every key/value
    head repeated once per query head), which the CPU path avoids (`models.sdpa_grouped`)."""
    extra = config.num_attention_heads - config.num_key_value_heads
    return 2 * extra * head_dim(config) * (2 if precision in HALF else 4)


def update_memory(config, row_tokens: int, logit_positions: int, precision: str = "no", lora_r: int = 8,
                  adapters: int = 1, device: str = "cuda", other_weights: int = 0) -> dict:
    """Peak bytes of one update chunk: `row_tokens` packed row positions (padding included) and `logit_positions`
    completion positions (`rl.batching.chunk_tokens` is their sum). adapters: trained LoRA adapters held with their
    optimizer state; other_weights: bytes of other models on the same device (frozen counterparts, a judge).
    Returns {"weights", "adapters", "activations", "logits", "total"} in bytes."""
    per_layer, once, fixed = saved_bytes_per_token(config, precision, lora_r)
    if device == "cuda":
        per_layer += repeat_kv_bytes(config, precision)
    out = {"weights": weight_bytes(config, precision) + other_weights,
           "adapters": adapters * lora_param_count(config, lora_r) * ADAPTER_STATE_BYTES,
           "activations": int(row_tokens * (per_layer * config.num_hidden_layers + once)
                              + fixed * config.num_hidden_layers),
           "logits": logit_positions * config.vocab_size * 4 * LOGIT_COPIES}
    out["total"] = sum(out.values())
    return out


def decode_memory(config, context_tokens: int, rows: int, precision: str = "no", other_weights: int = 0) -> dict:
    """Peak bytes of decoding: `rows` games at once holding `context_tokens` tokens of KV cache in all (their prompts
    and turns so far; in the weights' dtype: the engines decode without autocast), one step's float32 logits per row
    (and their log-softmax). Returns {"weights", "kv_cache",
    "logits", "total"}."""
    out = {"weights": weight_bytes(config, precision) + other_weights,
           "kv_cache": context_tokens * kv_bytes_per_token(config, value_bytes(precision)),
           "logits": rows * config.vocab_size * 4 * 2}
    out["total"] = sum(out.values())
    return out


# ------------------------------------------------------------------------------------- a notebook's profile, whole

PROMPT_TOKENS = 256     # assumed: a game's first prompt (system prompt, scenario, private note) in tokens
SFT_ROWS, SFT_LENGTH = 16, 512   # a full fine-tune's batch (calibration.calibrate_sft's defaults; a notebook's
#                                  calibration_batch_size replaces the first); logits counted whole (TRL's fused
#                                  log-prob kernel, where it runs, holds fewer)
ROUND_FACTOR = 2.3      # passes per token of the longest game: bench/forwards.py measured 1.8-3.0 (one batch per agent)
PROCESS_BYTES = 2**30   # assumed: what each run's process holds beyond its tensors (CUDA context, allocator slack)


@dataclass(frozen=True)
class Device:
    """The GPU a profile is sized for, as the estimate assumes it (none of these rates is measured here: no GPU).

    forward_ms: one batched decoding pass when the GPU is otherwise idle; small models decode at the pace of Python
        and kernel launches, whatever the batch (the passes of runs that share the GPU interleave in that idle time);
    bandwidth: sustained memory bandwidth in GB/s: the GPU's own time for a pass is the bytes it reads (the
        weights, the batch's KV caches) over it, which bounds how many runs can share it;
    tflops: the update's sustained rate (compute-bound: runs that share the GPU do not overlap there);
    bf16: native bfloat16; without it a run keeps float32 weights under fp16 autocast (`models.resolve_precision`)."""
    name: str
    memory_gib: float
    forward_ms: float
    bandwidth: float
    tflops: float
    bf16: bool


DEVICES = {"gpu": Device("one 80 GB GPU (H100)", 80.0, 25.0, 2000.0, 100.0, True),    # 3.35 TB/s, 990 TFLOP/s peak
           "colab": Device("Colab's T4 (15 GiB usable)", 15.0, 40.0, 200.0, 20.0, False)}   # 320 GB/s, 65 peak


def calibrated(device: Device, report: dict, source: str = "the gpu_check report") -> Device:
    """`device` with the rates `bench/gpu_check.py` measured on a real GPU in place of the assumed ones: its report's
    "rates" (forward_ms, tflops, memory_gib) and its GPU's name; a ValueError naming `source` when it has none (a
    report written without CUDA, or before the rates stage existed)."""
    rates = report.get("rates") if isinstance(report, dict) else None
    if not rates or not all(isinstance(rates.get(k), (int, float)) for k in ("forward_ms", "tflops")):
        raise ValueError(f"{source}: no measured rates (forward_ms, tflops): run bench/gpu_check.py on a CUDA GPU "
                         "with its library stages")
    name = f"{report.get('device_name', 'a GPU')} (rates measured by gpu_check, {report.get('date', '?')})"
    memory = rates.get("memory_gib") if isinstance(rates.get("memory_gib"), (int, float)) else device.memory_gib
    return Device(name, memory, float(rates["forward_ms"]), device.bandwidth, float(rates["tflops"]),
                  bool(rates.get("bf16", device.bf16)))


def workload(paper, p: dict) -> list[dict]:
    """What a notebook's training runs hold and do, from its parameters `p` (the cell's values under a profile): one
    record per kind of run, from its paper's `workload` (`paper`: a `rl.methods.Paper`; `rl.methods.paper(stem)` finds
    one by its notebook's stem): {"what", "model" (the trained one),
    "others" (every other model a run's process holds: its frozen counterparts and judge, and the held-out models it
    plays, copied in with the run or loaded there; each copy counted), "main" (the models the notebook's own process
    holds while the runs go and beside its fine-tunes before them), "runs", "steps",
    "games" (per step), "turns" (per game, both roles), "tokens" (per turn), "trained_turns" (per game and adapter),
    "adapters", "lm_agents" (language-model agents in a game, each with its KV cache), "judge" (None, or the LLM
    judge a step runs after its games: {"model", "rows" (its prompts a step), "tokens" (a prompt and its answer, at
    most), "answer" (its answer's tokens), "budget" (the tokens its decoding batch holds at once; None: every row)}),
    "eval_plays" (a run's evaluations of "eval_games" games a counterpart, in plays of two language-model agents: a
    play of m such agents, each with its own batch, counts m / 2), "sft" (the full fine-tunes before the runs, one at
    a time in the notebook's process: their tokens),
    "check_plays" (the design checks before the runs, one at a time, counted alike: a counterpart's probe is a play
    of one, a room test one play of every seed's counterpart and base policy)}. The paper starts from `base` below,
    which also carries "curve" (the learning curve's evaluations) and "prompt_tokens" (PROMPT_TOKENS: what a
    parameter does not say is an assumption of this module, stated with its constant)."""
    base = {"steps": p["steps"], "games": p["scenarios_per_step"] * p["group_size"], "tokens": p["max_new_tokens"],
            "sft": [], "judge": None, "lm_agents": 2, "adapters": 1,
            "eval_games": p["eval_scenarios"], "check_plays": 0,
            "curve": p["steps"] // p["eval_every"] if p.get("eval_every") else 0,
            "prompt_tokens": PROMPT_TOKENS}
    return paper.workload(p, base)


def chunk_shape(context: int, turns: int, tokens: float, minibatch_turns: int = 64,
                minibatch_tokens: int | None = None) -> tuple[int, int]:
    """(row tokens, logit positions) of an update chunk as `rl.batching` cuts it: whole games of one adapter, each a
    packed row of `context` tokens with `turns` completions of `tokens`, up to `minibatch_turns` turns and, with
    `minibatch_tokens`, up to that many row tokens plus positions (one game at least)."""
    rows = max(1, minibatch_turns // max(1, turns))
    if minibatch_tokens is not None:
        rows = max(1, min(rows, minibatch_tokens // int(context + turns * tokens)))
    return rows * context, int(rows * turns * tokens)


def estimate(paper, params: dict, device: Device = DEVICES["gpu"], minibatch_turns: int = 64,
             minibatch_tokens: int | None = None) -> list[dict]:
    """Peak memory (bytes) and wall time of each kind of training run of a paper's notebook (`paper`: its
    `rl.methods.Paper`) under `params` (its parameters under a profile) on `device`: [{"what", "runs", "at_once",
    "peak" (a run's largest phase), "phases" ({"update", "decode"[, "sft"]}, bytes), "main" (the notebook's process:
    the models it holds while the runs go), "worker" (a run's process: its peak with every model copy it holds),
    "memory" (the main process and the runs at once, each process with PROCESS_BYTES, or a full fine-tune before
    them), "seconds_per_run" (a run's training and evaluation), "hours" (all its runs, `processes` at a time: in waves
    as far as decoding goes), "chunk" (row tokens, logit positions)}].
    Time: each step's decoding as ROUND_FACTOR passes per token of the longest game (every turn at full length),
    evaluation plays alike; a pass takes the device's `forward_ms`, or, when the runs at once need more of the GPU's
    own time than that, their passes' bytes over its bandwidth. The update's FLOPs (forward and input gradients, 4 x
    parameters a token, per epoch; the behaviour and reference passes, 2 x parameters a token each) and full
    fine-tunes (6 x parameters a token) at `tflops`, one run at a time. Hub models only (`hub.HUB_CONFIGS`).
    `minibatch_tokens` None: the profile's own."""
    # the notebook's precision knob (models.precision_settings) on this device; a notebook with the older bf16 knob
    # (04, until its confirmatory run is done) reads as auto where it asks for bf16, fp32 where not
    knob = params.get("precision", "auto" if params.get("bf16") else "fp32")
    precision = "no" if knob == "fp32" else "fp16" if knob == "fp16" or not device.bf16 else "bf16"
    lora_r = params.get("lora_r", 8)
    minibatch_tokens = minibatch_tokens if minibatch_tokens is not None else params.get("minibatch_tokens")
    epochs = params.get("epochs_per_step", 1)
    out = []
    for w in workload(paper, params):
        if w["model"] not in HUB_CONFIGS:
            raise ValueError(f"{paper.stem}: the trained model {w['model']!r} has no committed config "
                             "(hub.HUB_CONFIGS): the estimate sizes hub models")
        config = hub_config(w["model"])
        n_params = param_count(config)
        # every copy a worker holds beside its trained model (its frozen counterparts, the judge, the held-out panel
        # it plays: loaded there or copied in with the run's closure), and what the notebook's own process holds
        others = sum(model_bytes(m, precision) for m in w["others"])
        main = sum(model_bytes(m, precision) for m in w.get("main", [])) + PROCESS_BYTES   # also beside the sft
        context = int(PROMPT_TOKENS + w["turns"] * w["tokens"])
        chunk = chunk_shape(context, w["trained_turns"], w["tokens"], minibatch_turns, minibatch_tokens)
        games = max(w["games"], w["eval_games"]) * w["lm_agents"]   # an evaluation cell plays all its games at once
        phases = {"update": update_memory(config, *chunk, precision, lora_r, w["adapters"],
                                          other_weights=others)["total"],
                  "decode": decode_memory(config, games * context, games, precision, other_weights=others)["total"]}
        judge_passes = 0
        if w.get("judge") and w["judge"]["model"] in HUB_CONFIGS:   # its batch's caches, as many at once as fit
            phases["judge"], judge_passes = judge_memory(w["judge"], precision, weight_bytes(config, precision)
                                                         + others)
        if w["sft"]:   # float32 weights, gradients and AdamW's moments; a batch of sequences of SFT_LENGTH tokens
            tokens = params.get("calibration_batch_size", SFT_ROWS) * SFT_LENGTH   # activations under autocast
            per_layer, once, fixed = saved_bytes_per_token(config, precision, lora_r)
            phases["sft"] = int(n_params * 16 + (tokens * per_layer + fixed) * config.num_hidden_layers
                                + tokens * once + tokens * config.vocab_size * 4 * LOGIT_COPIES)
        at_once = max(1, min(params.get("processes", 1), w["runs"]))
        # a pass of one agent's batch reads its weights and its games' caches (half full on average)
        pass_bytes = weight_bytes(config, precision) + w["games"] * context / 2 * kv_bytes_per_token(
            config, value_bytes(precision))
        pass_s = max(device.forward_ms / 1000, at_once * pass_bytes / (device.bandwidth * 1e9))
        game_passes = ROUND_FACTOR * w["turns"] * w["tokens"]
        decode_s = (w["steps"] * (game_passes + judge_passes) + w["eval_plays"] * game_passes) * pass_s
        checks_s = w["check_plays"] * game_passes * device.forward_ms / 1000
        update_flops = n_params * w["games"] * context * w["adapters"] * (4 * epochs + 2 + 2 * bool(
            params.get("kl_coef")))
        compute_s = w["steps"] * update_flops / (device.tflops * 1e12)
        before_s = sum(6 * n_params * t for t in w["sft"]) / (device.tflops * 1e12) + checks_s   # one at a time
        run_peak = max(v for k, v in phases.items() if k != "sft")   # the fine-tunes run before, in the notebook
        out.append({"what": w["what"], "runs": w["runs"], "at_once": at_once, "peak": max(phases.values()),
                    "phases": phases, "main": main, "worker": run_peak + PROCESS_BYTES,
                    "memory": max(main + at_once * (run_peak + PROCESS_BYTES),
                                  phases.get("sft", 0) + main),
                    "seconds_per_run": decode_s + compute_s,
                    "hours": (math.ceil(w["runs"] / at_once) * decode_s + w["runs"] * compute_s + before_s) / 3600,
                    "chunk": chunk})
    return out


def judge_memory(judge: dict, precision: str, weights: int) -> tuple[int, int]:
    """An LLM judge's step (a workload's "judge"): (its peak bytes: `weights`, every model the run holds, its own
    among them, and the caches of the rows its decoding batch holds at once with their logits; the sequential passes
    it takes: its answer's tokens once per wave of the rows that fit its budget)."""
    config = hub_config(judge["model"])
    total = judge["rows"] * judge["tokens"]
    held = min(total, judge["budget"] or total)
    rows = max(1, min(judge["rows"], held // judge["tokens"]))
    memory = (weights + held * kv_bytes_per_token(config, value_bytes(precision))
              + rows * config.vocab_size * 4 * 2)
    return int(memory), judge["answer"] * math.ceil(judge["rows"] / rows)


def fit_processes(paper, params: dict, device: Device = DEVICES["gpu"], **kwargs) -> int:
    """The most runs at once, up to the profile's `processes`, whose processes (the notebook's and each run's, every
    model copy counted) fit the device's memory by `estimate`; 0 when not even one does."""
    for n in range(max(1, params.get("processes", 1)), 0, -1):
        rows = estimate(paper, {**params, "processes": n}, device, **kwargs)
        if all(r["memory"] <= device.memory_gib * 2**30 for r in rows):
            return n
    return 0
