"""Embedded tiny models: small Qwen2-architecture chat models built locally from a dialogue corpus.

Nothing can be downloaded from a model hub on the machines this project is tested on, so the default profile builds
its own models. Each is a real transformers model with the code paths of a hub instruct model (Qwen2 blocks, a
byte-level BPE tokenizer, the ChatML chat template with `{% generation %}` markers), just 1-10M parameters:

    corpus   list of conversations, each a list of {"role": "system"|"user"|"assistant", "content": str}
    build_tiny(corpus, TinyConfig(), out_dir)   tokenizer -> config -> random init -> SFT warm start -> save_pretrained
    build_tiny_model("tiny-dond")               a named recipe from TINY_MODELS, cached under the user cache folder

The warm start is TRL's SFTTrainer with the loss on assistant turns only (`assistant_only_loss=True`): every role's
view of a dialogue is one conversation in which that role's own turns are the assistant's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dialogrl.envs import GAMES
from dialogrl.run import sha256_file, write_text
from dialogrl.tokens import assistant_tokens
from dialogrl.trl_compat import sft_trainer_class

# ChatML as Qwen instruct models write it, with TRL's generation markers around each assistant reply so that
# apply_chat_template(..., return_assistant_tokens_mask=True) marks the reply and its <|im_end|> (the stop token).
# Unlike Qwen's template there is no default system prompt: the tasks always write their own.
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # pad, turn start, turn end (= eos, as in Qwen)


@dataclass
class TinyConfig:
    """Sizes and warm-start settings of an embedded model (defaults: ~1.5M parameters, minutes on 2 CPU cores)."""
    vocab_size: int = 1024           # BPE vocabulary, special tokens and the 256 byte symbols included
    hidden_size: int = 160           # d_model
    num_layers: int = 4              # transformer blocks
    num_heads: int = 4               # query heads (head_dim = hidden_size / num_heads)
    num_kv_heads: int = 2            # grouped-query attention, as Qwen2
    intermediate_size: int = 512     # SwiGLU width
    max_positions: int = 1024        # longest context in tokens
    epochs: float = 1.0              # SFT passes over the corpus
    lr: float = 3e-3                 # peak learning rate (cosine decay, 5% warmup)
    batch_size: int = 16             # conversations per optimizer step
    max_length: int = 512            # SFT truncation, tokens
    bf16: bool = True                # bf16 autocast in the warm start where the device supports it (weights stay fp32)
    seed: int = 0                    # init, data order

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class TinyRecipe:
    """A named embedded model: where its corpus comes from and how big it is."""
    corpus: Callable[..., list[list[dict]]]           # returns a list of conversations
    corpus_kwargs: dict = field(default_factory=dict)
    config: TinyConfig = field(default_factory=TinyConfig)
    description: str = ""

    def make_corpus(self, **overrides) -> list[list[dict]]:
        return self.corpus(**{**self.corpus_kwargs, **overrides})


def collect_recipes() -> dict[str, TinyRecipe]:
    """Every registered game's embedded models (the TINY_MODELS of each package in dialogrl.envs.GAMES), by name:
    each recipe's corpus function imported from its "module:function" path, its config the defaults updated by the
    recipe's fields."""
    out: dict[str, TinyRecipe] = {}
    for game in GAMES.values():
        for name, r in game.TINY_MODELS.items():
            if name in out:
                raise ValueError(f"two games define the embedded model {name!r}")
            module, _, function = r["corpus"].partition(":")
            out[name] = TinyRecipe(corpus=getattr(importlib.import_module(module), function),
                                   corpus_kwargs=dict(r.get("corpus_kwargs", {})),
                                   config=TinyConfig(**r.get("config", {})), description=r.get("description", ""))
    return out


# The registry of embedded models, collected from the games (envs/<game>/__init__.py).
TINY_MODELS: dict[str, TinyRecipe] = collect_recipes()


def cache_root() -> Path:
    """$DIALOGRL_CACHE, else $XDG_CACHE_HOME/dialogrl, else ~/.cache/dialogrl."""
    if os.environ.get("DIALOGRL_CACHE"):
        return Path(os.environ["DIALOGRL_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "dialogrl"


@contextlib.contextmanager
def cache_lock(folder: Path):
    """Held while `folder` is made in the model cache: a second process (a pytest-xdist worker, a notebook run beside
    another) that wants the same folder waits, then finds it made, instead of building it again beside the first.
    An advisory lock on a file next to the folder (POSIX; elsewhere nothing is locked)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks
        yield
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------- cache integrity
# A model folder the cache holds (an embedded build, a converted packaged model) ends in a record, tiny_build.json or
# packaged.json, whose `files` list every other file's size and SHA-256 as written. A folder is taken as built only
# when its files still match: a disk error, a half-copied cache or a stray write is found before the model loads.

def file_manifest(folder: Path, record: str) -> dict[str, dict]:
    """{path in the folder: {"size", "sha256"}} of every file of a model folder but its record."""
    return {str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != record and not p.name.startswith(".")}


VERIFIED = ".verified.json"   # beside a record: each file's (size, mtime) when its hash last matched


def folder_problem(folder: Path, record: str) -> str | None:
    """What is wrong with a model folder the cache holds, or None when it is whole: its record readable, each file
    the record lists present, of its size, and of its SHA-256. Hashes are computed again only for a file written
    since they last matched (its size and mtime against `VERIFIED`), so a whole folder costs a few stat calls. A
    record written before records kept a manifest gets one now, if every weights file loads and holds only finite
    numbers and every JSON parses."""
    path = folder / record
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return f"its record {record} cannot be read ({type(err).__name__}: {err})"
    files = info.get("files")
    if files is None:
        problem = contents_problem(folder)
        if problem is None:
            info["files"] = file_manifest(folder, record)
            write_text(path, json.dumps(info, indent=2) + "\n")
        return problem
    stats = {}
    for name, meta in files.items():
        file = folder / name
        if not file.is_file():
            return f"{name} is missing"
        st = file.stat()
        if st.st_size != meta["size"]:
            return f"{name} has {st.st_size:,} bytes where its build wrote {meta['size']:,}"
        stats[name] = [st.st_size, st.st_mtime_ns]
    try:
        seen = json.loads((folder / VERIFIED).read_text())
    except (OSError, ValueError):
        seen = {}
    changed = [name for name in files if seen.get(name) != stats[name]]
    for name in changed:
        if sha256_file(folder / name) != files[name]["sha256"]:
            return f"{name} is not the file its build wrote (another SHA-256, the same size)"
    if changed:
        with contextlib.suppress(OSError):        # a read-only cache: verified again next time
            write_text(folder / VERIFIED, json.dumps(stats))
    return None


def contents_problem(folder: Path) -> str | None:
    """The first JSON file that does not parse, or weights file that does not load or holds NaN or inf; None."""
    from safetensors.torch import load_file

    for file in sorted(folder.rglob("*.json")):
        try:
            json.loads(file.read_text())
        except (OSError, ValueError) as err:
            return f"{file.name} does not parse ({err})"
    for file in sorted(folder.rglob("*.safetensors")):
        try:
            tensors = load_file(str(file))
        except Exception as err:   # safetensors raises its own error type for a truncated or garbled file
            return f"{file.name} does not load ({err})"
        bad = next((n for n, t in tensors.items() if t.is_floating_point() and not torch.isfinite(t).all()), None)
        if bad is not None:
            return f"{file.name} holds NaN or inf (in {bad})"
    return None


def corpus_hash(corpus: list[list[dict]], config: TinyConfig) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(config.to_dict(), sort_keys=True).encode())
    h.update(json.dumps(corpus, sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def check_corpus(corpus: list[list[dict]]) -> None:
    """Raise ValueError naming the first malformed conversation (not a list of role/content messages)."""
    if not corpus:
        raise ValueError("empty corpus: give at least one conversation")
    for i, conv in enumerate(corpus):
        if not isinstance(conv, list) or not conv:
            raise ValueError(f"conversation {i} is not a non-empty list of messages")
        for j, m in enumerate(conv):
            if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                    or not isinstance(m.get("content"), str):
                raise ValueError(f"conversation {i}, message {j}: expected {{'role': system|user|assistant, "
                                 f"'content': str}}, got {m!r}")
        if not any(m["role"] == "assistant" for m in conv):
            raise ValueError(f"conversation {i} has no assistant turn: nothing to learn from")


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on `texts`, wrapped for transformers, with the ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>"], model_max_length=None,
                                  clean_up_tokenization_spaces=False)
    tok.chat_template = CHATML_TEMPLATE
    tok.padding_side = "left"
    return tok


def make_model(tok, cfg: TinyConfig):
    """A randomly initialised Qwen2ForCausalLM sized by `cfg`, with tied input/output embeddings."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True, bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.eos_token_id, tok.pad_token_id], pad_token_id=tok.pad_token_id,
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0)
    return model


def _bf16_supported() -> bool:
    if torch.cuda.is_available():   # native only: a T4 "supports" bf16 by emulation (see models.resolve_precision)
        return torch.cuda.is_bf16_supported(including_emulation=False)
    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def sft_warm_start(model, tok, corpus: list[list[dict]], cfg: TinyConfig, work_dir: str | Path) -> dict:
    """Supervised warm start with TRL's SFTTrainer, loss on assistant tokens only. Returns the training log summary.

    A chat template with `{% generation %}` markers (the embedded models') gives TRL the conversations; another (a
    hub model's, which TRL patches for a few known templates only) gives it the tokens and their assistant mask from
    `tokens.assistant_tokens`, the same tokens the human-turn NLL reads."""
    from datasets import Dataset
    from trl import SFTConfig
    from trl.chat_template_utils import has_generation_markers

    marked = tok.chat_template is not None and has_generation_markers(tok.chat_template)
    if marked:
        data = Dataset.from_list([{"messages": conv} for conv in corpus])
    else:
        data = Dataset.from_list([dict(zip(("input_ids", "assistant_masks"), assistant_tokens(tok, conv)))
                                  for conv in corpus])
    steps = max(1, int(cfg.epochs * len(corpus) / cfg.batch_size))
    args = SFTConfig(
        output_dir=str(work_dir), num_train_epochs=cfg.epochs, per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr, lr_scheduler_type="cosine", warmup_steps=max(1, steps // 20), weight_decay=0.0,
        max_length=cfg.max_length, assistant_only_loss=marked, packing=False, gradient_checkpointing=False,
        optim="adamw_torch", bf16=cfg.bf16 and _bf16_supported(), fp16=False, use_cpu=not torch.cuda.is_available(),
        train_sampling_strategy="group_by_length",  # batches of similar length: less padding
        pad_to_multiple_of=64,  # few distinct batch shapes: CPU kernel caches (oneDNN) stay small
        seed=cfg.seed, data_seed=cfg.seed, logging_steps=max(1, steps // 10), save_strategy="no",
        report_to="none", disable_tqdm=True, dataset_num_proc=None, dataloader_pin_memory=False,
    )
    trainer = sft_trainer_class()(model=model, args=args, train_dataset=data, processing_class=tok)
    out = trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    return {"train_loss": out.training_loss, "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None, "steps": trainer.state.global_step}


def build_tiny(corpus: list[list[dict]], cfg: TinyConfig | None = None, out_dir: str | Path | None = None,
               name: str = "tiny") -> Path:
    """Build an embedded model from a corpus of chat conversations and save it to `out_dir` with save_pretrained.

    The folder then loads with `load_model(out_dir)` or `AutoModelForCausalLM.from_pretrained(out_dir)`, and holds
    `tiny_build.json` with the config, corpus size, parameter count, warm-start losses and build time.
    With out_dir=None the model goes to the cache, keyed by a hash of config and corpus, and is reused if there.
    """
    cfg = cfg or TinyConfig()
    check_corpus(corpus)
    key = corpus_hash(corpus, cfg)
    if out_dir is None:
        out_dir = cache_root() / "tiny" / f"{name}-{key}"
        with cache_lock(out_dir):
            # a build killed before its own cleanup (SIGKILL, a lost session) left its folder aside; under this
            # lock no other build of this model runs, so every such folder is stale
            for stale in out_dir.parent.glob(f".{out_dir.name}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            problem = folder_problem(out_dir, "tiny_build.json") if (out_dir / "tiny_build.json").exists() else None
            if problem is not None:
                warnings.warn(f"the cached embedded model {out_dir} is damaged: {problem}; building it again",
                              stacklevel=2)
            if problem is not None or not (out_dir / "tiny_build.json").exists():
                _build(corpus, cfg, out_dir, name, key)
        return out_dir
    _build(corpus, cfg, Path(out_dir), name, key)
    return Path(out_dir)


def _build(corpus: list[list[dict]], cfg: TinyConfig, out_dir: Path, name: str, key: str) -> None:
    t0 = time.time()
    print(f"building the embedded model {name} from {len(corpus)} conversations (minutes on a CPU; once: then it "
          f"loads from {out_dir})", flush=True)
    texts = [f"{m['role']}\n{m['content']}" for conv in corpus for m in conv]  # role names as ChatML writes them
    tok = train_tokenizer(texts, cfg.vocab_size)
    model = make_model(tok, cfg)
    n_params = sum(p.numel() for p in model.parameters())
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))  # built aside, then renamed
    try:
        stats = sft_warm_start(model, tok, corpus, cfg, tmp / "sft")
        shutil.rmtree(tmp / "sft", ignore_errors=True)
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        info = {"name": name, "key": key, "config": cfg.to_dict(), "n_conversations": len(corpus),
                "n_parameters": n_params, "vocab_size": len(tok), "build_seconds": round(time.time() - t0, 1),
                **stats, "files": file_manifest(tmp, "tiny_build.json")}
        (tmp / "tiny_build.json").write_text(json.dumps(info, indent=2) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def warm_start(name: str, n_dialogues: int | None = None, corpus_seed: int | None = None,
               build_seed: int | None = None, **corpus) -> str:
    """A notebook's model parameter as a loadable model: the name of an embedded recipe (TINY_MODELS) is built here
    (cached) on `n_dialogues` conversations (None or 0: the recipe's), its corpus drawn with `corpus_seed` (None: the
    recipe's) and `corpus`'s further arguments, its build seeded with `build_seed`; a hub id or a local folder is
    returned as it is (the same model for every seed)."""
    if name not in TINY_MODELS:
        return name
    overrides = {"n_dialogues": n_dialogues} if n_dialogues else {}
    if corpus_seed is not None:
        overrides["seed"] = corpus_seed
    return str(build_tiny_model(name, build_seed=build_seed, **overrides, **corpus))


def build_tiny_model(name: str, force: bool = False, out_dir: str | Path | None = None, build_seed: int | None = None,
                     **corpus_overrides) -> Path:
    """Build (or fetch from the cache) the embedded model `name` from TINY_MODELS; returns its folder.

    build_seed: the seed of the build (initialisation and the warm start's data order; None keeps the recipe's, 0).
        Two builds of one recipe differ like two training runs, and so do builds on two machines (CPU kernels and
        bf16 support differ), so experiments build one warm start per training seed and count the build as part of
        the replication unit.
    corpus_overrides replace the recipe's corpus arguments (e.g. source=<local copy of the human logs>).
    """
    if name not in TINY_MODELS:
        raise ValueError(f"unknown embedded model {name!r}; embedded models: {', '.join(sorted(TINY_MODELS))}")
    memo = (name, str(out_dir), build_seed, json.dumps(corpus_overrides, sort_keys=True, default=str),
            str(cache_root()))
    if not force and memo in _BUILT and (_BUILT[memo] / "tiny_build.json").exists():
        return _BUILT[memo]  # this process already made (and hashed) the corpus
    recipe = TINY_MODELS[name]
    config = recipe.config if build_seed is None else dataclasses.replace(recipe.config, seed=build_seed)
    corpus = recipe.make_corpus(**corpus_overrides)
    if force and out_dir is None:
        out_dir = cache_root() / "tiny" / f"{name}-{corpus_hash(corpus, config)}"
    _BUILT[memo] = build_tiny(corpus, config, out_dir=out_dir, name=name)
    return _BUILT[memo]


_BUILT: dict[tuple, Path] = {}


def build_info(path: str | Path) -> dict:
    """The tiny_build.json of a built model folder."""
    return json.loads((Path(path) / "tiny_build.json").read_text())

