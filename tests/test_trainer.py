"""The trainer: token-in/token-out ratios, per-role masks and isolation, and a learning test."""
import pytest
import torch

from conftest import TOY_CONFIG
from dialogrl.agents import ScriptedAgent, dond_corpus
from dialogrl.envs import DealOrNoDeal
from dialogrl.models import adapter_parameters, load_model
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.run import seed_everything
from dialogrl.tiny import TinyConfig, build_tiny

TASK = DealOrNoDeal()


@pytest.fixture(scope="module")
def dond_dir(tmp_path_factory):
    cfg = TinyConfig(**{**TOY_CONFIG.to_dict(), "max_length": 512, "epochs": 1.0})
    return build_tiny(dond_corpus(300, seed=0, views="one"), cfg, out_dir=tmp_path_factory.mktemp("d") / "m")


def make_trainer(path, **cfg):
    model, tok = load_model(str(path), adapters=["A", "B"], device="cpu", lora_r=4)
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(adapter="B", trainable=True, lr=1e-2)}
    config = TrainConfig(**{"steps": 1, "scenarios_per_step": 4, "group_size": 2, "max_new_tokens": 16, **cfg})
    return Trainer(TASK, model, tok, roles, config)


def test_first_update_ratio_is_one_for_every_role_and_adapter(dond_dir):
    trainer = make_trainer(dond_dir)
    seed_everything(0)
    episodes, groups = trainer.rollout(0)
    for adapter, samples in trainer.samples(episodes, groups).items():
        assert samples and {s.role for s in samples} == {adapter}
        from dialogrl.models import use_adapter
        use_adapter(trainer.model, adapter)
        with torch.no_grad():
            logp, old, mask = trainer.token_logprobs(samples)
        ratio = torch.exp((logp - old) * mask)
        assert (ratio - 1).abs().max().item() < 1e-4  # recomputed = sampled, token for token


def test_loss_gradient_reaches_only_the_roles_own_completion_tokens(dond_dir):
    trainer = make_trainer(dond_dir)
    seed_everything(1)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"][:4]
    from dialogrl.rl.losses import policy_loss
    logp, old, mask = trainer.token_logprobs(samples)
    logp.retain_grad()
    adv = torch.ones_like(logp)
    policy_loss(logp, old, adv, mask)[0].backward()
    assert (logp.grad[mask == 0] == 0).all() and (logp.grad[mask == 1] != 0).all()
    # the masked positions are exactly each turn's sampled completion
    for b, s in enumerate(samples):
        assert int(mask[b].sum()) == len(s.completion_ids)


def test_a_step_for_one_role_leaves_the_other_untouched(dond_dir):
    trainer = make_trainer(dond_dir)
    seed_everything(2)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)
    for s in samples["A"]:
        s.advantage = 1.0  # whatever the toy rewards were: the update must move A
    b_before = {n: p.detach().clone() for n, p in adapter_parameters(trainer.model, "B").items()}
    a_before = {n: p.detach().clone() for n, p in adapter_parameters(trainer.model, "A").items()}
    trainer.update("A", samples["A"])
    assert any(not torch.equal(p, a_before[n]) for n, p in adapter_parameters(trainer.model, "A").items())
    assert all(torch.equal(p, b_before[n]) for n, p in adapter_parameters(trainer.model, "B").items())
    assert not trainer.optimizers["B"].state  # B's optimizer never stepped


def test_shared_adapter_is_one_update_path(dond_dir):
    model, tok = load_model(str(dond_dir), adapters=["shared"], device="cpu", lora_r=4)
    roles = {r: RoleSpec(adapter="shared", trainable=True) for r in TASK.roles}
    trainer = Trainer(TASK, model, tok, roles, TrainConfig(steps=1, scenarios_per_step=2, group_size=2,
                                                           max_new_tokens=8, isolate=False))
    assert list(trainer.paths) == ["shared"] and trainer.paths["shared"] == ["A", "B"]
    row = trainer.step()
    assert "shared/loss" in row and trainer.step_count == 1


def test_bad_specs_are_named(dond_dir):
    model, tok = load_model(str(dond_dir), adapters=["A"], device="cpu")
    with pytest.raises(ValueError, match="no RoleSpec for role"):
        Trainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True)})
    with pytest.raises(ValueError, match="fixed agent cannot be trainable"):
        Trainer(TASK, model, tok, {"A": RoleSpec(agent=ScriptedAgent("fair"), trainable=True),
                                   "B": RoleSpec(agent=ScriptedAgent("fair"))})
    with pytest.raises(ValueError, match="algorithm='ppo2'"):
        TrainConfig(algorithm="ppo2").check()
