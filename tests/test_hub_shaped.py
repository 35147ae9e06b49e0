"""Models of the gpu profiles' hub models' shapes, random weights, built offline from the committed configs: what the
GPU checks and the memory model measure before any download."""
import pytest
import torch

from dialogrl.agents import LMAgent
from dialogrl.hub import HUB_CONFIGS, hub_config, kv_bytes_per_token
from dialogrl.models import hub_shaped_model

TOY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
       "num_key_value_heads": 2}


def test_the_committed_configs_give_the_known_cache_sizes():
    # SmolLM2-1.7B: 192 KiB a token in bf16 (issue 52's figure); the Qwen2.5 models' two KV heads keep theirs small
    kib = {h: kv_bytes_per_token(hub_config(h)) / 1024 for h in HUB_CONFIGS}
    assert kib == {"Qwen/Qwen2.5-0.5B-Instruct": 12.0, "Qwen/Qwen2.5-1.5B-Instruct": 28.0,
                   "HuggingFaceTB/SmolLM2-1.7B-Instruct": 192.0}
    with pytest.raises(ValueError, match="no committed config"):
        hub_config("org/unknown")


@pytest.mark.parametrize("hub_id", list(HUB_CONFIGS))
def test_a_toy_of_each_shape_speaks_through_the_family_template(hub_id):
    model, tok = hub_shaped_model(hub_id, **TOY)
    assert model.config.vocab_size == HUB_CONFIGS[hub_id]["vocab_size"] >= len(tok)   # the real LM head's size
    assert model.config.model_type == HUB_CONFIGS[hub_id]["model_type"] and not model.training
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert ("<|im_start|>assistant" in text) and (("Qwen" in text) == hub_id.startswith("Qwen"))
    said = LMAgent(model, tok, max_new_tokens=6).generate([[{"role": "user", "content": "hi"}]])[0]
    assert 1 <= len(said.completion_ids) <= 6 and isinstance(said.text, str)
    again, _ = hub_shaped_model(hub_id, **TOY)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))   # seeded
