"""Loading causal LMs and tokenizers, and named LoRA adapters on them.

    model, tok = load_model("tiny-dond")                              # embedded tiny model, built and cached locally
    model, tok = load_model("Qwen/Qwen2.5-0.5B-Instruct", bf16=True)  # hub id (needs internet or the local HF cache)
    model, tok = load_model("/path/to/checkpoint", adapters=["seller", "buyer"])
    use_adapter(model, "buyer")          # switch the active adapter; only its parameters require grad

Several adapters on one base model each own their parameters (`adapter_parameters(model, name)`), so every role of a
dialogue can have its own update path over one copy of the base weights.
"""
from __future__ import annotations

import contextlib
import json
import os
import warnings
import zlib
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

import torch

from dialogrl.hub import HUB_ID_PATTERN, hub_config, hub_reachable
from dialogrl.packaged import PACKAGED_MODELS, packaged_model_path
from dialogrl.parallel import worker_setup
from dialogrl.run import choose_device
from dialogrl.tiny import TINY_MODELS, build_tiny_model, cache_root, contents_problem, folder_problem

# Every linear layer of a Qwen2/Llama-style block; peft matches them by suffix.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

class ModelUnavailableError(OSError):
    """A model id that cannot be loaded here (offline, not cached, or unknown)."""


class ModelDamagedError(OSError):
    """A model folder whose files are damaged (truncated, garbled, missing): the message names the file and how to
    get it back."""


HALF_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}   # the half precisions, by their accelerate names


def resolve_precision(precision: str, device) -> str:
    """The precision ("no", "bf16" or "fp16") to run in on `device`: "bf16" on a CUDA GPU without bfloat16 support
    (Colab's T4, a V100: compute capability < 8) falls back to "fp16", with a warning; anything else is kept (CPUs
    and MPS compute in bf16, slowly or not). torch.cuda.is_bf16_supported() says True on a T4 by default, counting
    emulation (bf16 tensors exist, its matrix multiplies run without tensor cores): native support is what counts
    here. The one place that decides it: model weights (`load_model(bf16=True)`) and the trainer's autocast
    (`TrainConfig.mixed_precision`) both ask here."""
    if precision not in ("no", *HALF_DTYPES):
        raise ValueError(f"precision={precision!r}: choose one of no, bf16, fp16")
    if (precision == "bf16" and torch.device(device).type == "cuda" and torch.cuda.is_available()
            and not torch.cuda.is_bf16_supported(including_emulation=False)):
        warnings.warn("bf16 asked for, but this GPU has no bfloat16 (e.g. a T4 or V100): using fp16 instead "
                      "(weights stay float32; the trainer autocasts in float16 with loss scaling)", stacklevel=2)
        return "fp16"
    return precision


PRECISIONS = ("auto", "bf16", "fp16", "fp32")   # a notebook's `precision` knob


def precision_settings(precision: str, device="auto") -> dict:
    """What a notebook's `precision` knob sets, on `device` ("auto": the device load_model picks): {"bf16": the
    weights in bfloat16 (`load_model(bf16=...)`, decoding too), "mixed_precision": the update's autocast
    (`TrainConfig.mixed_precision`)}.

        fp32   float32 weights, no autocast (the CPU default)
        bf16   bfloat16 weights and bf16 autocast (a GPU of compute capability 8+: A100, H100, L4, RTX 30xx/40xx)
        fp16   float32 weights and fp16 autocast with loss scaling, its skipped steps counted (`skipped_steps`): a GPU
               without bf16 (Colab's T4, a V100)
        auto   bf16 where bf16 runs natively, fp16 on a CUDA GPU without it, fp32 on a CPU (or MPS)

    bf16 asked for on a GPU without it becomes fp16 with a warning (`resolve_precision`)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: choose one of {', '.join(PRECISIONS)}")
    dev = torch.device(choose_device(device))
    if precision == "auto":
        precision = "bf16" if dev.type == "cuda" else "fp32"
    if precision == "fp32":
        return {"bf16": False, "mixed_precision": "no"}
    resolved = resolve_precision(precision, dev)   # bf16 without native support: fp16
    return {"bf16": resolved == "bf16", "mixed_precision": resolved}


def sdpa_grouped(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, is_causal=None,
                 **kwargs):
    """transformers' SDPA attention, except that on CPU grouped-query heads read the shared key/value heads in place.

    transformers copies each key/value head once per query head (`repeat_kv`) whenever a padding mask is given,
    because CUDA kernels would fall back to the slow path with `enable_gqa`; on CPU the copy is pure overhead (a third
    of a batched decoding step at our tiny models' sizes) and `enable_gqa=True` gives the same numbers.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = getattr(module, "num_key_value_groups", 1)
    if query.device.type != "cpu" or groups == 1 or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    causal = query.shape[2] > 1 and attention_mask is None and causal
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, is_causal=causal,
                                                           enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


@worker_setup   # a model sent to a spawned worker names it there too
def attention() -> str:
    """The attention implementation every model here loads with: `sdpa_grouped`, registered with transformers (and
    in every spawned worker of `parallel.map_runs`, where the models a run captured arrive naming it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register("sdpa_grouped", sdpa_grouped)
    AttentionMaskInterface.register("sdpa_grouped", sdpa_mask)   # the same masks as "sdpa"
    return "sdpa_grouped"


def _embedded_names() -> list[str]:
    return sorted(TINY_MODELS)


def check_model_name(name: str | os.PathLike) -> str:
    """Classify a model name as 'tiny', 'packaged' (a pretrained model shipped in a PyPI package, `packaged.py`),
    'local' or 'hub' (a path-like names a local folder); raise ValueError naming the choices if it is none of them."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise TypeError(f"model name {name!r}: expected a str (an embedded or hub name) or a path to a model folder")
    embedded = _embedded_names()
    if name in embedded:
        return "tiny"
    if name in PACKAGED_MODELS:
        return "packaged"
    if name.startswith("tiny-"):
        raise ValueError(f"unknown embedded model {name!r}; embedded models: {', '.join(embedded)}")
    path = Path(name).expanduser()
    if path.is_dir():
        return "local"
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:
        raise ValueError(f"no model folder at {name!r}")
    if HUB_ID_PATTERN.match(name):
        return "hub"
    raise ValueError(f"{name!r} is neither an embedded model ({', '.join(embedded)}), a packaged pretrained model "
                     f"({', '.join(sorted(PACKAGED_MODELS))}), an existing local folder, nor a hub id of the form "
                     "'org/name'")


def resolve_model_path(name: str | os.PathLike) -> str:
    """Turn a model name into something `from_pretrained` can open without a long network timeout.

    Embedded names are built (or taken from the cache) and give a local folder; packaged names are converted from
    their package's GGUF file once and cached (`packaged.packaged_model_path`). Hub ids are returned as they are when
    they are in the local HF cache or the hub is reachable; otherwise a ModelUnavailableError names the id, says the
    machine is offline, and points at the embedded models.
    """
    kind = check_model_name(name)
    name = os.fspath(name)
    if kind == "tiny":
        return str(build_tiny_model(name))
    if kind == "packaged":
        return str(packaged_model_path(name))
    if kind == "local":
        check_model_folder(Path(name).expanduser())
        return str(Path(name).expanduser())
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str) or hub_reachable():
        return name
    raise ModelUnavailableError(
        f"cannot load {name!r}: this machine is offline (the Hugging Face hub is unreachable) and the model is not in "
        f"the local cache. Use an embedded model instead ({', '.join(repr(n) for n in _embedded_names())}), "
        f"a packaged pretrained one ({', '.join(repr(n) for n in sorted(PACKAGED_MODELS))}), "
        "or a local folder saved with save_pretrained.")


def check_model_folder(folder: Path) -> None:
    """Raise ModelDamagedError when a model folder the cache made (an embedded build: tiny_build.json; a converted
    packaged model: packaged.json) no longer holds the files its record lists (`tiny.folder_problem`). A folder
    outside the model cache is the user's (a copy, perhaps with its own chat template saved into it): not checked."""
    if not folder.resolve().is_relative_to(cache_root().resolve()):
        return

    for record, again in (("tiny_build.json", "build it again: `python -m dialogrl build-tiny NAME` (its name is in "
                           "tiny_build.json), or run the notebook that uses it"),
                          ("packaged.json", "its next load converts it again from the installed package")):
        if (folder / record).exists():
            problem = folder_problem(folder, record)
            if problem is not None:
                raise ModelDamagedError(f"the model folder {folder} is damaged: {problem}. Delete the folder and "
                                        f"{again}.")


def load_tokenizer(name: str):
    """The model's tokenizer. A folder saved with a plain `tokenizers` backend (the embedded models) loads exactly
    as saved: AutoTokenizer would pick the tokenizer class of the model type (Qwen2Tokenizer for a Qwen2 config)
    and replace the saved pre-tokenizer with that class's own, so digits would split differently from training."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    path = resolve_model_path(name)
    config = Path(path) / "tokenizer_config.json"
    plain = config.exists() and json.loads(config.read_text()).get("tokenizer_class") in (
        "TokenizersBackend", "PreTrainedTokenizerFast")
    tok = (PreTrainedTokenizerFast if plain else AutoTokenizer).from_pretrained(path)
    if tok.pad_token is None:  # Llama-style tokenizers ship without one
        tok.pad_token = tok.eos_token
    return tok


def load_model(name: str | os.PathLike, *, adapters: Sequence[str] = (), device: str = "auto", bf16: bool = False,
               lora_r: int = 8, lora_alpha: int = 16, lora_dropout: float = 0.0):
    """Load a causal LM and its tokenizer; optionally add named LoRA adapters.

    name: an embedded tiny name ('tiny-dond'), a packaged pretrained model ('smollm2-135m-instruct'), a local
        folder (a str or a Path), or a hub id ('Qwen/Qwen2.5-0.5B-Instruct').
    adapters: names of LoRA adapters to add (one per role, say); the first is active. Empty: the plain model.
    device: 'auto' (cuda > mps > cpu) or a torch device string.
    bf16: load weights in bfloat16 (for GPUs; CPU runs stay fp32 by default); on a GPU without bfloat16
        (`resolve_precision`: fp16, with a warning) the weights stay float32, never float16.
    Returns (model, tokenizer); the model is on `device` and in eval mode.
    """
    dev = choose_device(device)
    path = resolve_model_path(name)
    # bf16 weights where bf16 runs; where it falls back to fp16 (a T4) the weights stay float32 (the trainer's fp16
    # autocast and loss scaling give the speed): Qwen2-family activations overflow in float16 weights
    dtype = torch.bfloat16 if resolve_precision("bf16" if bf16 else "no", dev) == "bf16" else torch.float32
    from transformers import AutoModelForCausalLM

    try:
        tok = load_tokenizer(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention())
    except Exception as err:   # a folder's truncated or garbled file: transformers' errors do not name it

        problem = contents_problem(Path(path)) if Path(path).is_dir() else None
        if problem is None:    # the files are whole: the error is another's (a library, the config's contents)
            raise
        raise ModelDamagedError(f"cannot load the model folder {path}: {problem}") from err
    model = model.to(dev)
    if adapters:
        model = add_adapters(model, adapters, r=lora_r, alpha=lora_alpha, dropout=lora_dropout)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"  # batched generation pads on the left
    model.eval()
    return model, tok


def _lora_config(r: int, alpha: int, dropout: float):
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(LORA_TARGETS),
                      bias="none", task_type="CAUSAL_LM")


def add_adapters(model, names: Sequence[str], r: int = 8, alpha: int = 16, dropout: float = 0.0, init_seed: int = 0):
    """Wrap `model` with peft and add one LoRA adapter per name (each with its own parameters); the first is active.

    Returns the PeftModel. Adapters are initialised as peft does (B = 0), so every adapter starts as the base model;
    the random A of each adapter is drawn from a generator seeded by (init_seed, name), so the same name gets the
    same initialisation whatever ran before, without touching the global RNG.
    """
    from peft import PeftModel, get_peft_model

    names = list(names)
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"adapter names must be distinct and non-empty, got {names}")
    if isinstance(model, PeftModel):
        clash = set(model.peft_config).intersection(names)
        if clash:
            raise ValueError(f"adapter(s) {sorted(clash)} already exist on this model")
    for i, n in enumerate(names):
        with _seeded(f"{init_seed}/{n}", model):  # each adapter's init depends on its name, not on call order
            if i == 0 and not isinstance(model, PeftModel):
                model = get_peft_model(model, _lora_config(r, alpha, dropout), adapter_name=n)
            else:
                model.add_adapter(n, _lora_config(r, alpha, dropout))
    use_adapter(model, names[0])
    return model


@contextlib.contextmanager
def _seeded(key: str, model):
    """Fork the torch RNGs (CPU and the model's CUDA device) and seed them from `key` for the duration."""
    dev = next(model.parameters()).device
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(zlib.crc32(key.encode()))
        yield


def use_adapter(model, name: str) -> None:
    """Make `name` the active adapter: generation and forward passes use it, and only its parameters require grad.

    Free when `name` is already active and no adapter was added or removed since; otherwise what peft's set_adapter
    does, on the adapter layers and parameters found once per model (and set of adapters): peft's own call walks
    every module and every parameter of each layer (2-4 ms on a CPU for a tiny model), and two agents that take
    turns (IB-RL's seller and buyer) switch before each of their decoding steps: a third of a rollout's time.
    Models with auxiliary trainable modules, merged or partly frozen adapters take peft's call."""
    if name not in model.peft_config:
        raise ValueError(f"no adapter {name!r} on this model; adapters: {sorted(model.peft_config)}")
    key = (name, tuple(model.peft_config))
    if model.__dict__.get("_dialogrl_active") == key and model.active_adapter == name:
        return
    switch = _adapter_switch(model)
    if switch is None:
        model.set_adapter(name)
    else:
        for layer, params in switch:
            for adapter, p in params:
                p.requires_grad_(adapter == name)
            layer._active_adapter = [name]
        model.base_model.active_adapter = name   # as PeftModel.set_adapter and its tuner's set_adapter leave them
        model.active_adapter = name
    model.__dict__["_dialogrl_active"] = key


def _adapter_switch(model) -> list | None:
    """Per LoRA layer of `model`, its adapters' parameters as (adapter, parameter) pairs (cached with the set of
    adapters), or None where peft's set_adapter must run (auxiliary modules, merged or partly frozen adapters)."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    key = tuple(model.peft_config)
    found = model.__dict__.get("_dialogrl_switch")
    if found is None or found[0] != key:
        switch = []
        for m in model.modules():
            if isinstance(m, AuxiliaryTrainingWrapper):
                switch = None
                break
            if isinstance(m, BaseTunerLayer):
                if m.merged or m.frozen_peft_weight_names:
                    switch = None
                    break
                params = []
                for layer_name in m.adapter_layer_names:
                    for adapter, sub in getattr(m, layer_name).items():
                        leaves = [sub] if isinstance(sub, torch.Tensor) else list(sub.parameters())
                        params += [(adapter, p) for p in leaves if p.is_leaf]
                switch.append((m, params))
        found = (key, switch)
        model.__dict__["_dialogrl_switch"] = found
    return found[1]


def base_model(model):
    """A context in which `model` runs as its base model (its adapters disabled, as peft's `disable_adapter` does
    for LoRA), or nothing for a plain model."""
    return _adapters_disabled(model) if hasattr(model, "peft_config") else contextlib.nullcontext()


@contextlib.contextmanager
def _adapters_disabled(model):
    """peft's `disable_adapter` for LoRA without its per-call walk over every module (`get_model_status`, then two
    more walks: about 18 ms on a CPU, paid before each decoding step of an agent without an adapter): the adapter
    layers are found once per model (and set of adapters), each is switched off, and back on if it was on."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

    key = tuple(model.peft_config)
    found = model.__dict__.get("_dialogrl_layers")
    if found is None or found[0] != key:
        found = (key, [m for m in model.modules() if isinstance(m, (BaseTunerLayer, AuxiliaryTrainingWrapper))])
        model.__dict__["_dialogrl_layers"] = found
    layers, was = found[1], model._adapters_disabled
    enabled = [not m.disable_adapters for m in layers]
    try:
        for m in layers:
            m.enable_adapters(False)
        model._adapters_disabled = True
        yield
    finally:
        for m, on in zip(layers, enabled):
            if on:
                m.enable_adapters(True)
        model._adapters_disabled = was


def adapter_parameters(model, name: str) -> dict[str, torch.nn.Parameter]:
    """The parameters that belong to adapter `name` (lora_A/lora_B weights), by parameter name."""
    if name not in model.peft_config:
        raise ValueError(f"no adapter {name!r} on this model; adapters: {sorted(model.peft_config)}")
    key = f".{name}."
    return {n: p for n, p in model.named_parameters() if key in n and "lora_" in n}


def adapter_state(model, name: str) -> dict[str, torch.Tensor]:
    """A copy of adapter `name`'s weights (detached, on their device): what `load_adapter_state` puts back."""
    return {n: p.detach().clone() for n, p in adapter_parameters(model, name).items()}


def load_adapter_state(model, name: str, state: dict[str, torch.Tensor]) -> None:
    """Adapter `name`'s weights set to `state` (an `adapter_state` of a model of the same shape)."""
    params = adapter_parameters(model, name)
    if set(state) != set(params):
        raise ValueError(f"the state has other weights than adapter {name!r}: {sorted(set(state) ^ set(params))[:3]}")
    with torch.no_grad():
        for n, t in state.items():
            params[n].copy_(t)


def hub_shaped_model(hub_id: str, device: str = "cpu", bf16: bool = False, seed: int = 0, **overrides):
    """A model of a hub model's shape (its committed config, `overrides` applied) with random weights, and a
    tokenizer for it, built offline: the packaged SmolLM2 tokenizer (its 49,152 ids fit every config here) with the
    family's chat template (SmolLM2's own; Qwen2.5's from TRL's shipped templates). Returns (model, tokenizer), the
    model on `device` in eval mode: what `models.load_model` gives for the real one, for measuring memory and time.
    A random model samples from its whole vocabulary; ids past the tokenizer's decode to nothing, so its turns read
    short, while its token counts, cache and logits are the real model's size."""
    from transformers import AutoModelForCausalLM

    config = hub_config(hub_id, **overrides)
    tok = load_tokenizer(str(packaged_model_path("smollm2-135m-instruct")))
    if config.model_type == "qwen2":
        tok.chat_template = (files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    dev = torch.device(device)
    dtype = torch.bfloat16 if bf16 and resolve_precision("bf16", dev) == "bf16" else torch.float32
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention())
    return model.to(dev).eval(), tok
