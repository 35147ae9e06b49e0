"""load_model: embedded/local/hub resolution, offline errors, named LoRA adapters with their own parameters."""
import pytest
import torch

from dialogrl.models import (
    ModelUnavailableError,
    adapter_parameters,
    adapter_state,
    add_adapters,
    base_model,
    check_model_name,
    load_adapter_state,
    load_model,
    resolve_model_path,
    use_adapter,
)


def test_unknown_hub_id_offline_names_the_id_and_the_embedded_alternative(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as on this machine, but without waiting for DNS
    with pytest.raises(ModelUnavailableError) as err:
        load_model("nobody-here/no-such-model-1234")
    msg = str(err.value)
    assert "nobody-here/no-such-model-1234" in msg and "offline" in msg and "tiny-dond" in msg


def test_unreachable_hub_is_detected_quickly_without_offline_mode(monkeypatch):
    import time

    from dialogrl import models

    monkeypatch.setattr(models, "hub_reachable", lambda timeout=3.0: False)
    t0 = time.time()
    with pytest.raises(ModelUnavailableError, match="offline"):
        resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct-not-cached")
    assert time.time() - t0 < 10


def test_model_name_kinds(tmp_path):
    assert check_model_name("tiny-dond") == "tiny"
    assert check_model_name(str(tmp_path)) == "local"
    assert check_model_name(tmp_path) == "local"    # a Path names a folder too (build_tiny_model returns one)
    with pytest.raises(TypeError, match="expected a str"):
        check_model_name(3)
    assert check_model_name("Qwen/Qwen2.5-0.5B-Instruct") == "hub"
    with pytest.raises(ValueError, match="unknown embedded model 'tiny-nope'"):
        check_model_name("tiny-nope")


def _train_step(model, tok, name):
    """One SGD step on the active adapter `name`, with a loss that touches every layer."""
    use_adapter(model, name)
    model.train()
    params = list(adapter_parameters(model, name).values())
    opt = torch.optim.SGD(params, lr=0.5)
    batch = tok(["how many red balls? there are 3."], return_tensors="pt")
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_two_adapters_each_train_only_their_own_parameters(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), adapters=["seller", "buyer"], device="cpu", lora_r=4)
    seller, buyer = adapter_parameters(model, "seller"), adapter_parameters(model, "buyer")
    assert seller and buyer and not set(seller) & set(buyer)
    snap = {n: p.detach().clone() for n, p in model.named_parameters()}

    _train_step(model, tok, "seller")
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, snap[n])}
    assert changed and changed <= set(seller)  # only the seller's LoRA weights moved
    # peft's B=0 init: one step moves B only; after the step B != 0, so both A and B train from here on
    assert any("lora_B" in n for n in changed)

    snap = {n: p.detach().clone() for n, p in model.named_parameters()}
    _train_step(model, tok, "buyer")
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, snap[n])}
    assert changed and changed <= set(buyer)
    assert all(torch.equal(p, snap[n]) for n, p in seller.items())


def test_an_adapters_state_is_a_copy_that_loads_back(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), adapters=["policy"], device="cpu", lora_r=4)
    state = adapter_state(model, "policy")
    assert set(state) == set(adapter_parameters(model, "policy"))
    _train_step(model, tok, "policy")
    moved = adapter_parameters(model, "policy")
    assert any(not torch.equal(moved[n], t) for n, t in state.items())   # a copy: the step left it as it was
    load_adapter_state(model, "policy", state)
    assert all(torch.equal(moved[n], t) for n, t in state.items())
    with pytest.raises(ValueError, match="other weights"):
        load_adapter_state(model, "policy", dict(list(state.items())[1:]))


def test_active_adapter_changes_the_output(toy_model_dir):
    model, tok = load_model(str(toy_model_dir), adapters=["red", "blue"], device="cpu", lora_r=4)
    _train_step(model, tok, "red")
    batch = tok(["how many blue balls?"], return_tensors="pt")
    model.eval()
    with torch.no_grad():
        use_adapter(model, "red")
        out_a = model(**batch).logits
        use_adapter(model, "blue")
        out_b = model(**batch).logits
        with model.disable_adapter():
            out_base = model(**batch).logits
    assert not torch.allclose(out_a, out_b)
    assert torch.allclose(out_b, out_base)  # an untrained adapter (B = 0) is the base model
    with pytest.raises(ValueError, match="no adapter 'green'"):
        use_adapter(model, "green")


def test_use_adapter_leaves_the_model_as_peft_set_adapter_does(toy_model_dir):
    """use_adapter switches on the layers it found once (not peft's walk over every module): the active adapter of
    the model, its tuner and every LoRA layer, and which parameters require grad, are what peft's call leaves."""
    def status(model):
        layers = [m.active_adapter for m in model.modules() if hasattr(m, "lora_A")]
        return (model.active_adapter, model.base_model.active_adapter, layers,
                {n: p.requires_grad for n, p in model.named_parameters()})

    ours, _ = load_model(str(toy_model_dir), adapters=["red", "blue", "green"], device="cpu", lora_r=4)
    peft, _ = load_model(str(toy_model_dir), adapters=["red", "blue", "green"], device="cpu", lora_r=4)
    for name in ("blue", "red", "green", "red", "blue"):
        use_adapter(ours, name)
        peft.set_adapter(name)
        assert status(ours) == status(peft)
        assert {n for n, p in ours.named_parameters() if p.requires_grad} == set(adapter_parameters(ours, name))


def test_base_model_runs_the_base_and_gives_the_adapters_back(toy_model_dir):
    """`base_model` (peft's disable_adapter without its walks over every module) gives peft's base outputs, then the
    active adapter's outputs and trainable parameters again; `use_adapter`'s shortcut for the adapter already active
    still sees an adapter added since."""
    model, tok = load_model(str(toy_model_dir), adapters=["red", "blue"], device="cpu", lora_r=4)
    _train_step(model, tok, "red")
    batch = tok(["how many blue balls?"], return_tensors="pt")
    model.eval()
    use_adapter(model, "red")

    def trainable():
        return {n for n, p in model.named_parameters() if p.requires_grad}

    before = trainable()
    assert before and all(".red." in n for n in before)
    with torch.no_grad():
        out_red = model(**batch).logits
        with model.disable_adapter():
            out_peft = model(**batch).logits
        with base_model(model):
            out_base = model(**batch).logits
            assert not trainable()
        assert torch.equal(out_base, out_peft) and not torch.equal(out_base, out_red)
        assert torch.equal(model(**batch).logits, out_red) and trainable() == before
    model = add_adapters(model, ["green"])   # makes green active
    use_adapter(model, "red")
    assert trainable() == before


def test_bf16_flag(toy_model_dir):
    model, _ = load_model(str(toy_model_dir), bf16=True, device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_bf16_falls_back_to_fp16_autocast_over_float32_weights_on_a_gpu_without_it(monkeypatch, toy_model_dir):
    """Colab's T4: CUDA is there, bfloat16 is not. One function decides, for the weights and the trainer's autocast."""
    import warnings

    from dialogrl import models
    from dialogrl.models import resolve_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # a T4 as torch 2.x answers for it: bf16 "supported" when emulation counts (the default), not natively
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    with pytest.warns(UserWarning, match="no bfloat16.*fp16"):
        assert resolve_precision("bf16", "cuda") == "fp16"
    with pytest.warns(UserWarning, match="no bfloat16"):
        assert resolve_precision("bf16", torch.device("cuda", 0)) == "fp16"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [resolve_precision(p, "cuda") for p in ("no", "fp16")] == ["no", "fp16"]
        assert resolve_precision("bf16", "cpu") == "bf16"                     # CPUs compute in bf16
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
        assert resolve_precision("bf16", "cuda") == "bf16"                    # an A100, an H100
    with pytest.raises(ValueError, match="precision='fp8'"):
        resolve_precision("fp8", "cuda")
    # load_model asks it: bf16 weights where bf16 runs; where it falls back to fp16 the weights stay float32 (fp16
    # weights overflow in Qwen2-family models; the trainer's fp16 autocast and loss scaling give the speed)
    monkeypatch.setattr(models, "resolve_precision", lambda precision, device: "fp16" if precision == "bf16" else "no")
    model, _ = load_model(str(toy_model_dir), bf16=True, device="cpu")
    assert next(model.parameters()).dtype == torch.float32
    monkeypatch.setattr(models, "resolve_precision", lambda precision, device: precision)
    model, _ = load_model(str(toy_model_dir), bf16=True, device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16


def test_adapter_init_depends_on_its_name_not_on_the_rng_state(toy_model_dir):
    torch.manual_seed(1)
    m1, _ = load_model(str(toy_model_dir), adapters=["seller", "buyer"], device="cpu")
    torch.manual_seed(2)
    torch.rand(100)
    m2, _ = load_model(str(toy_model_dir), adapters=["seller", "buyer"], device="cpu")
    for name in ("seller", "buyer"):
        p1, p2 = adapter_parameters(m1, name), adapter_parameters(m2, name)
        assert all(torch.equal(p1[n], p2[n]) for n in p1)
    a, b = adapter_parameters(m1, "seller"), adapter_parameters(m1, "buyer")
    assert any(not torch.equal(x, b[n.replace(".seller.", ".buyer.")]) for n, x in a.items() if "lora_A" in n)
    state = torch.random.get_rng_state()
    load_model(str(toy_model_dir), adapters=["x"], device="cpu")
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is left as it was


def test_grouped_query_attention_without_copies_matches_transformers_sdpa(toy_model_dir):
    """load_model's CPU attention (shared key/value heads read in place) gives transformers' SDPA numbers, padding
    mask and gradients included."""
    from transformers import AutoModelForCausalLM

    model, _ = load_model(str(toy_model_dir), device="cpu")
    reference = AutoModelForCausalLM.from_pretrained(str(toy_model_dir), attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa_grouped"
    assert model.config.num_key_value_heads < model.config.num_attention_heads     # the grouped case is exercised
    torch.manual_seed(0)
    ids = torch.randint(3, 40, (3, 17))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0                                                                # a left-padded row
    for m in (model, reference):
        m.train()
        m.zero_grad()
    ours = model(input_ids=ids, attention_mask=mask).logits
    theirs = reference(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert torch.allclose(ours[real], theirs[real], atol=1e-5)
    ours[real].square().mean().backward()
    theirs[real].square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), name


def test_the_precision_knob_maps_to_weights_and_autocast(monkeypatch):
    """`precision` (a notebook knob) -> load_model's bf16 weights and the trainer's mixed_precision: fp32 on a CPU
    under auto; bf16 where a GPU has it; fp16 (float32 weights, fp16 autocast with loss scaling) where it does not."""
    import warnings

    import torch

    from dialogrl import models

    assert models.precision_settings("auto", "cpu") == {"bf16": False, "mixed_precision": "no"}
    assert models.precision_settings("fp32", "cpu") == {"bf16": False, "mixed_precision": "no"}
    assert models.precision_settings("fp16", "cpu") == {"bf16": False, "mixed_precision": "fp16"}
    assert models.precision_settings("bf16", "cpu") == {"bf16": True, "mixed_precision": "bf16"}
    with pytest.raises(ValueError, match="precision='half': choose one of auto, bf16, fp16, fp32"):
        models.precision_settings("half")
    monkeypatch.setattr(models, "choose_device", lambda device="auto": torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for native, expect in ((True, {"bf16": True, "mixed_precision": "bf16"}),       # an H100
                           (False, {"bf16": False, "mixed_precision": "fp16"})):    # a T4
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True, n=native: n)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            assert models.precision_settings("auto") == expect
            assert models.precision_settings("bf16") == expect
