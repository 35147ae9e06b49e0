"""Embedded tiny models: build, save/load both ways, chat template, assistant masks, caching."""
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import TOY_CONFIG, make_toy_corpus
from dialogrl.models import load_model
from dialogrl.run import seed_everything
from dialogrl.tiny import TINY_MODELS, TinyConfig, build_tiny, check_corpus, corpus_hash

CHAT = [{"role": "system", "content": "You count balls."},
        {"role": "user", "content": "how many red balls? there are 3."}]


def test_build_writes_a_qwen2_model_with_its_record(toy_model_dir):
    info = json.loads((toy_model_dir / "tiny_build.json").read_text())
    config = json.loads((toy_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    model = AutoModelForCausalLM.from_pretrained(toy_model_dir)
    assert info["n_parameters"] == sum(p.numel() for p in model.parameters())
    assert info["last_loss"] < 0.5 * info["first_loss"]  # the warm start learned something


def test_default_config_is_in_the_1_to_10M_range():
    from dialogrl.tiny import make_model, train_tokenizer

    tok = train_tokenizer(["book hat ball " * 50], TinyConfig().vocab_size)
    n = sum(p.numel() for p in make_model(tok, TinyConfig()).parameters())
    assert 1e6 <= n <= 10e6


def test_chat_template_behaves_like_qwen_chatml(toy_model_dir):
    tok = AutoTokenizer.from_pretrained(toy_model_dir)
    text = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou count balls.<|im_end|>\n"
                    "<|im_start|>user\nhow many red balls? there are 3.<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_assistant_mask_covers_the_reply_and_its_stop_token(toy_model_dir):
    tok = AutoTokenizer.from_pretrained(toy_model_dir)
    conv = CHAT + [{"role": "assistant", "content": "3 red balls."}, {"role": "user", "content": "thanks"}]
    out = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids = [i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tok.decode(ids) == "3 red balls.<|im_end|>"


def test_loads_through_load_model_and_generates_the_learned_format(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    assert tok.padding_side == "left"
    enc = tok.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    seed_everything(0)
    out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    reply = tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    assert reply.endswith("balls.") and out[0, -1].item() in (tok.eos_token_id, tok.pad_token_id)


def test_loaded_tokenizer_splits_text_exactly_as_the_saved_one(toy_model_dir):
    """AutoTokenizer would rebuild a Qwen2 tokenizer with Qwen's digit-splitting pre-tokenizer; the model was
    trained with the saved byte-level one, so load_model must give exactly the saved tokenizer."""
    from tokenizers import Tokenizer

    saved = Tokenizer.from_file(str(toy_model_dir / "tokenizer.json"))
    _, tok = load_model(str(toy_model_dir), device="cpu")
    text = "there are 13 red balls, $ 2500 and 7 hats; i'd take 10."
    assert tok(text, add_special_tokens=False)["input_ids"] == saved.encode(text, add_special_tokens=False).ids


def test_same_seed_same_sampled_generation(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), device="cpu")
    enc = tok.apply_chat_template([CHAT] * 4, add_generation_prompt=True, return_tensors="pt", return_dict=True,
                                  padding=True)

    def sample(seed):
        seed_everything(seed)
        return model.generate(**enc, max_new_tokens=16, do_sample=True, temperature=1.5)

    assert torch.equal(sample(1), sample(1))


def test_cache_is_keyed_by_config_and_corpus(tmp_path, monkeypatch, toy_corpus):
    monkeypatch.setenv("DIALOGRL_CACHE", str(tmp_path))
    small = TinyConfig(**{**TOY_CONFIG.to_dict(), "epochs": 0.2})
    first = build_tiny(toy_corpus, small, name="toy")
    stamp = (first / "tiny_build.json").stat().st_mtime
    assert build_tiny(toy_corpus, small, name="toy") == first  # reused, not rebuilt
    assert (first / "tiny_build.json").stat().st_mtime == stamp
    assert first.parent == tmp_path / "tiny" and corpus_hash(toy_corpus, small) in first.name
    killed = first.parent / f".{first.name}-x1y2z3"   # what a build killed mid-way (SIGKILL) leaves aside
    (killed / "sft").mkdir(parents=True)
    other = first.parent / ".tiny-other-0123456789abcdef-x1y2z3"   # another model's build: not this lock's
    other.mkdir()
    assert build_tiny(toy_corpus, small, name="toy") == first and not killed.exists() and other.exists()
    assert corpus_hash(make_toy_corpus(seed=1), small) != corpus_hash(toy_corpus, small)


def test_a_damaged_cached_model_is_named_before_it_loads_and_built_again(tmp_path, monkeypatch, toy_corpus):
    """A build records each file's size and SHA-256: 4 KiB of other bytes inside the weights (the same size: once it
    loaded silently, with NaN logits) or a truncated tokenizer is named with the file before anything loads, and the
    next build of that model builds it again. A record from before manifests gets one, unless its weights are bad."""
    from dialogrl.models import ModelDamagedError

    monkeypatch.setenv("DIALOGRL_CACHE", str(tmp_path))
    small = TinyConfig(**{**TOY_CONFIG.to_dict(), "epochs": 0.2})
    folder = build_tiny(toy_corpus, small, name="toy")
    record = json.loads((folder / "tiny_build.json").read_text())
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(record["files"])
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8192:-4096] = bytes(range(256)) * 16
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelDamagedError, match=r"toy-.*is damaged: model.safetensors is not the file its build "
                                                r"wrote.*Delete the folder and build it again"):
        load_model(str(folder), device="cpu")
    with pytest.warns(UserWarning, match="is damaged: model.safetensors.*building it again"):
        assert build_tiny(toy_corpus, small, name="toy") == folder
    load_model(str(folder), device="cpu")                       # whole again
    tokenizer = folder / "tokenizer.json"
    text = tokenizer.read_bytes()
    tokenizer.write_bytes(text[:1000])
    with pytest.raises(ModelDamagedError, match="tokenizer.json has 1,000 bytes where its build wrote"):
        load_model(str(folder), device="cpu")
    tokenizer.write_bytes(text)

    info = json.loads((folder / "tiny_build.json").read_text())
    del info["files"]                                           # a build from before the manifests
    (folder / "tiny_build.json").write_text(json.dumps(info))
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(weights))
    first = sorted(tensors)[0]
    nan = torch.full_like(tensors[first], float("nan"))
    save_file({**tensors, first: nan}, str(weights), metadata={"format": "pt"})
    with pytest.raises(ModelDamagedError, match=f"model.safetensors holds NaN or inf \\(in {first}\\)"):
        load_model(str(folder), device="cpu")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    load_model(str(folder), device="cpu")                       # the record gets its manifest now
    assert "model.safetensors" in json.loads((folder / "tiny_build.json").read_text())["files"]
    import shutil

    plain = tmp_path / "plain"                                  # a folder without a record (a hub snapshot, say)
    shutil.copytree(folder, plain)
    (plain / "tiny_build.json").unlink()
    (plain / "model.safetensors").write_bytes((plain / "model.safetensors").read_bytes()[:5000])
    with pytest.raises(ModelDamagedError, match="plain: model.safetensors does not load"):
        load_model(str(plain), device="cpu")


@pytest.mark.parametrize("corpus, needle", [
    ([], "empty corpus"),
    ([[{"role": "user", "content": "hi"}]], "no assistant turn"),
    ([[{"role": "bot", "content": "hi"}]], "conversation 0, message 0"),
    ([[{"role": "assistant", "content": 3}]], "conversation 0, message 0"),
])
def test_malformed_corpus_is_named(corpus, needle):
    with pytest.raises(ValueError, match=needle):
        check_corpus(corpus)


def test_registry_names_are_tiny_prefixed():
    assert TINY_MODELS and all(name.startswith("tiny-") for name in TINY_MODELS)


def test_warm_start_builds_embedded_recipes_and_passes_other_models_through(monkeypatch):
    from dialogrl import tiny

    calls = []
    monkeypatch.setattr(tiny, "build_tiny_model", lambda name, **kw: calls.append((name, kw)) or f"/cache/{name}")
    assert tiny.warm_start("HuggingFaceTB/SmolLM2-135M-Instruct", 100, build_seed=3) == \
        "HuggingFaceTB/SmolLM2-135M-Instruct"                      # a hub id (or a folder): the same for every seed
    assert tiny.warm_start("tiny-dond", 100, build_seed=3) == "/cache/tiny-dond"
    assert tiny.warm_start("tiny-social", None, corpus_seed=1, partners=["prickly"]) == "/cache/tiny-social"
    assert tiny.warm_start("tiny-dond", 0) == "/cache/tiny-dond"   # 0 or None: the recipe's own size
    assert calls == [("tiny-dond", {"build_seed": 3, "n_dialogues": 100}),
                     ("tiny-social", {"build_seed": None, "seed": 1, "partners": ["prickly"]}),
                     ("tiny-dond", {"build_seed": None})]
