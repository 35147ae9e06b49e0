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

from dialogrl.hub import head_dim, kv_bytes_per_token

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
    extra = config.num_attention_heads - config.num_key_value_heads
    return 2 * extra * head_dim(config) * (2 if precision in HALF else 4)


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


# ------------------------------------------------------------------------------------- a notebook's profile, whole

PROMPT_TOKENS = 256     # assumed: a game's first prompt (system prompt, scenario, private note) in tokens
FORWARD_MS = 25.0       # assumed: one batched decoding step of a 0.5-2B model on one GPU, in milliseconds
TFLOPS = 100.0          # assumed: the update's sustained bf16 TFLOP/s on one GPU (an H100's dense peak is near 990)
SFT_ROWS, SFT_LENGTH = 16, 512   # a full fine-tune's batch (calibration.calibrate_sft's defaults)
ROUND_FACTOR = 2.3      # passes per token of the longest game: bench/forwards.py measured 1.8-3.0 (one batch per agent)
STEMS = ("01_calibrated_interactive_rl", "02_socialrl", "03_scope_simulator_collapse", "04_ibrl_bilateral")


def workload(stem: str, p: dict) -> list[dict]:
    """What a notebook's training runs hold and do, from its parameters `p` (the cell's values under a profile): one
    record per kind of run: {"what", "model" (the trained one), "others" (frozen models on the device while it trains),
    "runs", "steps", "games" (per step), "turns" (per game, both roles), "tokens" (per turn), "trained_turns" (per game
    and adapter), "adapters", "lm_seats" (language-model agents in a game, each with its KV cache), "step_forwards"
    (sequential passes a step adds after its games: the LLM judge), "eval_cells" (evaluation plays of "eval_games"
    games per run), "sft" (full fine-tunes before training: their token counts)}. What a parameter does not say is an
    assumption of this module, stated with its constant (PROMPT_TOKENS)."""
    seeds, games = p["n_seeds"], p["scenarios_per_step"] * p["group_size"]
    base = {"steps": p["steps"], "games": games, "tokens": p["max_new_tokens"], "sft": [], "step_forwards": 0,
            "lm_seats": 2, "adapters": 1, "eval_games": p["eval_scenarios"]}
    if stem == "01_calibrated_interactive_rl":
        horizons = len(p["horizons"]) if p["train_each_horizon"] else 0
        model, turns = p["policy_model"], p["max_turns"]
        logs = (p.get("n_human_logs") or 2000) * (PROMPT_TOKENS + turns * p["max_new_tokens"])
        return [{**base, "what": "interactive and calibrated RL (a simulator in the user's seat)", "model": model,
                 "others": [model], "runs": seeds * (2 + horizons), "turns": turns, "trained_turns": turns // 2,
                 "eval_cells": 3, "sft": [logs, logs]},   # the calibrated simulator and the human proxy
                {**base, "what": "static context RL (one turn per logged context)", "model": model, "others": [],
                 "runs": seeds, "turns": 1, "trained_turns": 1, "lm_seats": 1, "eval_cells": 3}]
    if stem == "02_socialrl":
        trained = [m for m in p["methods"] if m != "base"]
        llm_judge = p["judge"] == "llm"
        return [{**base, "what": "the agent against its LM partner" + (", the LLM judge" if llm_judge else ""),
                 "model": p["policy_model"],
                 "others": [p["partner_model"] or p["policy_model"]] + ([p["judge_model"]] if llm_judge else []),
                 "runs": seeds * len(trained), "turns": 2 * p["max_exchanges"], "trained_turns": p["max_exchanges"],
                 "step_forwards": p["judge_max_new_tokens"] if llm_judge else 0,
                 "eval_cells": len(p["heldout_partners"]) + len(p["heldout_models"]) + len(p["heldout_packaged"])}]
    if stem == "03_scope_simulator_collapse":
        trained = [m for m in p["methods"] if m != "base"]
        cotrained = sum(m in ("cotrain", "population") for m in trained)
        panel = (len(p["heldout_personas"]) + len(p["heldout_corpus_seeds"]) + len(p["heldout_models"])
                 + len(p["heldout_packaged"]) + 1)   # + the human-fit persuadee
        run = {**base, "model": p["policy_model"], "others": [p["policy_model"]], "turns": 2 * p["max_exchanges"],
               "trained_turns": p["max_exchanges"], "eval_cells": panel + 1}
        frozen = {**run, "what": "the persuader against a frozen simulator", "runs": seeds * (len(trained) - cotrained)}
        if "vs" in trained:   # the longest game: the simulator's turns are Verbalized Sampling answers
            frozen["tokens"] = (p["max_new_tokens"] + p["vs_max_new_tokens"]) / 2
        cotrain = {**run, "what": "persuader and simulator co-trained (two adapters of one model)", "others": [],
                   "adapters": 2, "runs": seeds * cotrained}
        return [r for r in (frozen, cotrain) if r["runs"]]
    if stem == "04_ibrl_bilateral":
        out = []
        for task in p["tasks"]:
            panel = len(p[f"{task}_panel"]) + 1 + (len(p["telesales_packaged"]) if task == "telesales" else 0)
            heldout = p[f"{task}_heldout"]
            out.append({**base, "what": f"{task}: unilateral and IB-RL (two adapters of one model)",
                        "model": p[f"{task}_model"], "others": [heldout] if heldout else [], "adapters": 2,
                        "runs": seeds * (2 + bool(p["ablation"])), "turns": p["max_turns"],
                        "trained_turns": p["max_turns"] // 2, "eval_cells": 2 * (panel + 1)})
        return out
    raise ValueError(f"no workload for {stem!r}; known: {', '.join(STEMS)}")


def chunk_shape(context: int, turns: int, tokens: float, minibatch_turns: int = 64,
                minibatch_tokens: int | None = None) -> tuple[int, int]:
    """(row tokens, logit positions) of an update chunk as `rl.trainer` cuts it: whole games of one adapter, each a
    packed row of `context` tokens with `turns` completions of `tokens`, up to `minibatch_turns` turns and, with
    `minibatch_tokens`, up to that many row tokens plus positions (one game at least)."""
    rows = max(1, minibatch_turns // max(1, turns))
    if minibatch_tokens is not None:
        rows = max(1, min(rows, minibatch_tokens // int(context + turns * tokens)))
    return rows * context, int(rows * turns * tokens)


def estimate(stem: str, params: dict, minibatch_turns: int = 64, minibatch_tokens: int | None = None,
             forward_ms: float = FORWARD_MS, tflops: float = TFLOPS) -> list[dict]:
    """Peak memory (bytes) and wall time of each kind of training run of notebook `stem` under `params` (its
    parameters under a profile): [{"what", "runs", "peak" (the largest phase), "phases" ({"update", "decode"[, "sft"]},
    bytes), "seconds_per_run", "hours" (all its runs, one at a time), "chunk" (row tokens, logit positions)}].
    Time: each step's decoding as ROUND_FACTOR passes per token of the longest game (every turn at full length) at
    `forward_ms` a pass, the update's FLOPs at `tflops` (forward and input gradients, 4 x parameters a token, per epoch;
    the behaviour and reference passes, 2 x parameters a token each), evaluation plays alike, full fine-tunes at 6 x
    parameters a token. Hub models only (`hub.HUB_CONFIGS`). `minibatch_tokens` None: the profile's own."""
    from dialogrl.hub import HUB_CONFIGS, hub_config

    precision = "bf16" if params.get("bf16") else "no"
    lora_r = params.get("lora_r", 8)
    minibatch_tokens = minibatch_tokens if minibatch_tokens is not None else params.get("minibatch_tokens")
    epochs = params.get("epochs_per_step", 1)
    out = []
    for w in workload(stem, params):
        if w["model"] not in HUB_CONFIGS:
            raise ValueError(f"{stem}: the trained model {w['model']!r} has no committed config (hub.HUB_CONFIGS): "
                             "the estimate sizes hub models")
        config = hub_config(w["model"])
        n_params = param_count(config)
        others = sum(weight_bytes(hub_config(m), precision) for m in set(w["others"]) if m in HUB_CONFIGS)
        context = int(PROMPT_TOKENS + w["turns"] * w["tokens"])
        chunk = chunk_shape(context, w["trained_turns"], w["tokens"], minibatch_turns, minibatch_tokens)
        phases = {"update": update_memory(config, *chunk, precision, lora_r, w["adapters"],
                                          other_weights=others)["total"],
                  "decode": decode_memory(config, w["games"] * context * w["lm_seats"], w["games"] * w["lm_seats"],
                                          precision, other_weights=others)["total"]}
        if w["sft"]:   # float32 weights, gradients and AdamW's moments; a batch of SFT_ROWS x SFT_LENGTH tokens
            tokens = SFT_ROWS * SFT_LENGTH   # (calibration.calibrate_sft's), activations under bf16 autocast
            phases["sft"] = int(n_params * 16 + tokens * saved_bytes_per_token(config, precision, lora_r)[0]
                                * config.num_hidden_layers + tokens * config.vocab_size * 4 * LOGIT_COPIES)
        game_passes = ROUND_FACTOR * w["turns"] * w["tokens"]
        update_flops = n_params * w["games"] * context * w["adapters"] * (4 * epochs + 2 + 2 * bool(
            params.get("kl_coef")))
        step_s = (game_passes + w["step_forwards"]) * forward_ms / 1000 + update_flops / (tflops * 1e12)
        seconds = (w["steps"] * step_s + w["eval_cells"] * game_passes * forward_ms / 1000
                   + sum(6 * n_params * t for t in w["sft"]) / (tflops * 1e12))
        out.append({"what": w["what"], "runs": w["runs"], "peak": max(phases.values()), "phases": phases,
                    "seconds_per_run": seconds, "hours": w["runs"] * seconds / 3600, "chunk": chunk})
    return out


def profile_params(stem: str, profile: str = "gpu") -> dict:
    """The parameters a notebook runs with under `profile`: its parameters cell's values, the profile's file over
    them (as `params.resolve_profile` applies them)."""
    from dialogrl.params import cell_literals
    from dialogrl.reproduce import profile_parameters
    from dialogrl.run import repo_root

    root = repo_root()
    return {**cell_literals(stem), **profile_parameters(root / "notebooks" / f"{stem}.ipynb", profile,
                                                        params_dir=root / "params")}


def estimate_table(stem: str, profile: str = "gpu", gpu_memory: float = 80.0, **kwargs) -> str:
    """`python -m dialogrl estimate`'s markdown: each kind of run's peak memory and time under the profile, and
    whether it fits `gpu_memory` GiB."""
    rows = estimate(stem, profile_params(stem, profile), **kwargs)
    gib = 2**30
    lines = [f"{stem}, profile {profile}: predicted by dialogrl.estimate (prompt {PROMPT_TOKENS} tokens, "
             f"{kwargs.get('forward_ms', FORWARD_MS):g} ms a decoding pass, {kwargs.get('tflops', TFLOPS):g} "
             f"TFLOP/s in the update; every turn at full length)", "",
             "| runs of | runs | peak GiB (update / decode / sft) | update chunk (rows + logit positions) | "
             f"per run | all runs | fits {gpu_memory:g} GiB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ph = " / ".join(f"{r['phases'][k] / gib:.1f}" if k in r["phases"] else "-" for k in ("update", "decode", "sft"))
        lines.append(f"| {r['what']} | {r['runs']} | {r['peak'] / gib:.1f} ({ph}) | {r['chunk'][0]:,} + "
                     f"{r['chunk'][1]:,} | {r['seconds_per_run'] / 3600:.1f} h | {r['hours']:.1f} h | "
                     f"{'yes' if r['peak'] <= gpu_memory * gib else '**no**'} |")
    total = sum(r["hours"] for r in rows)
    lines += ["", f"All runs one at a time: {total:.1f} h."]
    return "\n".join(lines)
