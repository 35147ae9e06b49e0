"""The trainer: token-in/token-out ratios, per-role masks and isolation, and a learning test."""
import json
import math
import warnings

import pytest
import torch

from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.models import adapter_parameters, load_model
from dialogrl.rl.batching import chains, chunk_chains, chunk_tokens, minibatches
from dialogrl.rl.checkpoint import CheckpointError
from dialogrl.rl.config import ALGORITHMS, CHOICES
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.run import MetricsLogger, read_metrics, seed_everything

TASK = DealOrNoDeal()


def make_trainer(path, **cfg):
    model, tok = load_model(str(path), adapters=["A", "B"], device="cpu", lora_r=4)
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(adapter="B", trainable=True, lr=1e-2)}
    config = TrainConfig(**{"steps": 1, "scenarios_per_step": 4, "group_size": 2, "max_new_tokens": 16, **cfg})
    return Trainer(TASK, model, tok, roles, config)


def test_first_update_ratio_is_one_for_every_role_and_adapter(dond_toy_dir):
    trainer = make_trainer(dond_toy_dir)
    seed_everything(0)
    episodes, groups = trainer.rollout(0)
    for adapter, samples in trainer.samples(episodes, groups).items():
        assert samples and {s.role for s in samples} == {adapter}
        from dialogrl.models import use_adapter
        use_adapter(trainer.model, adapter)
        with torch.no_grad():
            res = trainer.token_logprobs(samples)
        logp, old, mask = res["logp"], res["old"], res["mask"]
        ratio = torch.exp((logp - old) * mask)
        assert (ratio - 1).abs().max().item() < 1e-4  # recomputed = sampled, token for token


def test_half_precision_recomputes_the_behaviour_logprobs(dond_toy_dir):
    """In bf16, step-by-step decoding and the update's full-sequence forward round apart, so the sampled log-probs
    would put noise into every ratio; old_logprobs="auto" then takes them from the update's own forward (ratio 1 to
    float error). In float32 the sampled ones are kept (the test above: equal to 1e-4)."""
    from dialogrl.models import use_adapter

    model, tok = load_model(str(dond_toy_dir), adapters=["A", "B"], device="cpu", lora_r=4, bf16=True)
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(adapter="B", trainable=True, lr=1e-2)}
    trainer = Trainer(TASK, model, tok, roles, TrainConfig(steps=1, scenarios_per_step=2, group_size=2,
                                                           max_new_tokens=12))
    seed_everything(3)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]

    def gap(batch):
        use_adapter(model, "A")
        with torch.no_grad():
            res = trainer.token_logprobs(batch)
        return ((res["logp"] - res["old"]).abs() * res["mask"]).max().item()
    recomputed = trainer.recompute_logprobs("A", samples)
    assert trainer._recompute_old() and gap(recomputed) < 1e-6 < gap(samples)
    assert [s.completion_ids for s in recomputed] == [s.completion_ids for s in samples]
    assert not make_trainer(dond_toy_dir)._recompute_old()                       # float32: the sampled ones
    assert make_trainer(dond_toy_dir, old_logprobs="recompute")._recompute_old()
    with pytest.raises(ValueError, match="old_logprobs='fresh'"):
        TrainConfig(old_logprobs="fresh")


def test_the_kl_reference_is_the_base_model_scored_once_a_rollout(dond_toy_dir):
    """The KL's reference log-probs come from one pass of the frozen base model before the update (stored on the
    samples), not from a pass per chunk and epoch beside the chunk's graph; the path's adapter is active after."""
    from dialogrl.models import base_model

    trainer = make_trainer(dond_toy_dir, kl_coef=0.1, epochs_per_step=2)
    seed_everything(9)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]
    for s in samples:
        s.advantage = 1.0
    refs = trainer.recompute_logprobs("A", samples, reference=True)
    assert trainer.model.active_adapter == "A"
    with torch.no_grad(), base_model(trainer.model):
        direct = trainer.token_logprobs(samples)
    for b, s in enumerate(refs):
        n = len(s.completion_ids)
        assert s.ref_logprobs == pytest.approx(direct["logp"][b, direct["logp"].shape[1] - n:].tolist(), abs=1e-6)
    passes, score = [], trainer.token_logprobs
    trainer.token_logprobs = lambda batch, *a, **k: passes.append(len(batch)) or score(batch, *a, **k)
    stats = trainer.update("A", samples)
    chunks = len(chunk_chains(samples, trainer.config.minibatch_turns))
    assert len(passes) == chunks * (1 + 2) and stats["kl"] > 0   # one reference pass, then two epochs


def test_packed_turns_score_as_each_turn_alone(dond_toy_dir):
    """A role's turns of one game are packed into one sequence (its prompts continue each other token for token)
    and score exactly as each turn's own forward pass, critic values included; a sample that does not continue
    the previous one starts a new row."""
    from dialogrl.models import use_adapter
    trainer = make_trainer(dond_toy_dir, algorithm="ppo")
    seed_everything(5)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]
    runs = chains(samples)
    assert len(runs) < len(samples)                                      # packing happens with the tiny template
    assert sorted(i for c in runs for i in c) == list(range(len(samples)))
    game = {tuple(t.prompt_ids): g for g, ep in enumerate(episodes) for t in ep.state.turns if t.role == "A"}
    assert all(len({game[tuple(samples[i].prompt_ids)] for i in c}) == 1 for c in runs)   # never across games
    use_adapter(trainer.model, "A")
    torch.nn.init.normal_(trainer.critics["A"].linear.weight)           # a critic that reads the features
    with torch.no_grad():
        packed = trainer.token_logprobs(samples, "A", with_entropy=True)
        alone = trainer.token_logprobs(samples, "A", with_entropy=True, pack=False)
        values = trainer.values("A", samples)
    for key in ("logp", "mask", "entropy", "value"):
        assert torch.allclose(packed[key], alone[key], atol=1e-4), key
    assert torch.allclose(values, alone["value"], atol=1e-4)
    chunks = chunk_chains(samples, 8)
    assert sorted(i for c in chunks for i in c) == list(range(len(samples)))
    assert all(len(c) <= 8 or len(chains([samples[i] for i in c])) == 1 for c in chunks)
    assert chains([samples[0], samples[0]]) == [[0], [1]]               # a prompt does not continue itself
    budget = chunk_tokens(samples, list(range(len(samples)))) // 4      # chunks by tokens: about four of them
    chunks = chunk_chains(samples, 64, max_tokens=budget)
    assert len(chunks) >= 4 and sorted(i for c in chunks for i in c) == list(range(len(samples)))
    assert all(chunk_tokens(samples, c) <= budget or len(chains([samples[i] for i in c])) == 1 for c in chunks)


@pytest.mark.parametrize("level", ["token", "utterance"])
def test_chunks_sized_in_tokens_give_the_same_update(dond_toy_dir, level):
    """minibatch_tokens bounds what one forward/backward holds (the update's peak memory) and changes nothing else:
    each term of the loss weighs a chunk by its share of what that term averages over (tokens, or turns for PPO's
    value loss: weighed by tokens before 2026-12-05, it made the update depend on the chunking, 0.4% here)."""
    grads = []
    for tokens in (None, 60):
        trainer = make_trainer(dond_toy_dir, algorithm="ppo", minibatch_tokens=tokens, ratio_level=level)
        seed_everything(8)
        seen = []
        for opt in trainer.optimizers.values():   # the gradient each optimizer step applies (Adam's first step is
            def step(*args, opt=opt, inner=opt.step, seen=seen, **kwargs):   # about lr x its sign: compare grads)
                seen.extend(p.grad.clone() for group in opt.param_groups for p in group["params"])
                return inner(*args, **kwargs)
            opt.step = step
        trainer.step()
        grads.append(seen)
    assert len(grads[0]) == len(grads[1]) > 0
    assert all((g - h).abs().max() <= 1e-4 * g.abs().max() for g, h in zip(*grads))   # float error only
    with pytest.raises(ValueError, match="minibatch_tokens=0"):
        TrainConfig(minibatch_tokens=0)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_the_packed_lean_forward_gives_the_models_update(dond_toy_dir, algorithm):
    """The update through fastdecode.hidden (the default on fp32 Qwen2 models on the CPU) and through the model's own
    forward (lean=False), from the same weights on the same rollout: the same stats and the same adapters after
    four optimizer steps (2 epochs x 2 minibatches, KL, entropy bonus; with ppo the critic too), to float error: the
    adapter's change as one vector (element by element, AdamW's first steps move a weight whose gradient is float
    noise by about lr either way)."""
    results = []
    for lean in (None, False):
        seed_everything(0)
        model, tok = load_model(str(dond_toy_dir), adapters=["A", "B"], device="cpu", lora_r=4)
        roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(agent=ScriptedAgent("fair"))}
        cfg = TrainConfig(steps=1, scenarios_per_step=4, group_size=2, max_new_tokens=16, algorithm=algorithm,
                          kl_coef=0.05, entropy_coef=0.01, epochs_per_step=2, minibatches=2)
        trainer = Trainer(TASK, model, tok, roles, cfg, lean=lean)
        assert (trainer.lean_model is not None) == (lean is None)
        episodes, groups = trainer.rollout(0)
        samples = trainer.samples(episodes, groups)["A"]
        before = torch.cat([p.detach().flatten() for p in adapter_parameters(model, "A").values()])
        stats = trainer.update("A", samples)
        after = torch.cat([p.detach().flatten() for p in adapter_parameters(model, "A").values()])
        results.append((samples, stats, after - before))
    (s_lean, st_lean, w_lean), (s_hf, st_hf, w_hf) = results
    assert [s.completion_ids for s in s_lean] == [s.completion_ids for s in s_hf]   # one rollout, decoded alike
    assert [s.advantage for s in s_lean] == pytest.approx([s.advantage for s in s_hf], abs=1e-5)
    assert st_lean.keys() == st_hf.keys()
    for k in st_lean:
        assert st_lean[k] == pytest.approx(st_hf[k], rel=1e-4, abs=1e-6), k
    assert (w_lean - w_hf).norm() < 1e-2 * w_hf.norm()   # the two updates of the adapter, as vectors (3e-4 seen)


def test_loss_gradient_reaches_only_the_roles_own_completion_tokens(dond_toy_dir):
    trainer = make_trainer(dond_toy_dir)
    seed_everything(1)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"][:4]
    from dialogrl.rl.losses import policy_loss
    res = trainer.token_logprobs(samples)
    logp, old, mask = res["logp"], res["old"], res["mask"]
    logp.retain_grad()
    adv = torch.ones_like(logp)
    policy_loss(logp, old, adv, mask)[0].backward()
    assert (logp.grad[mask == 0] == 0).all() and (logp.grad[mask == 1] != 0).all()
    # the masked positions are exactly each turn's sampled completion
    for b, s in enumerate(samples):
        assert int(mask[b].sum()) == len(s.completion_ids)


def test_a_step_for_one_role_leaves_the_other_untouched(dond_toy_dir):
    trainer = make_trainer(dond_toy_dir)
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


def test_shared_adapter_is_one_update_path(dond_toy_dir):
    model, tok = load_model(str(dond_toy_dir), adapters=["shared"], device="cpu", lora_r=4)
    roles = {r: RoleSpec(adapter="shared", trainable=True) for r in TASK.roles}
    trainer = Trainer(TASK, model, tok, roles, TrainConfig(steps=1, scenarios_per_step=2, group_size=2,
                                                           max_new_tokens=8, isolate=False))
    assert list(trainer.adapter_roles) == ["shared"] and trainer.adapter_roles["shared"] == ["A", "B"]
    row = trainer.step()
    assert "shared/loss" in row and trainer.step_count == 1


def test_bad_specs_are_named(dond_toy_dir):
    model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu")
    with pytest.raises(ValueError, match="no RoleSpec for role"):
        Trainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True)})
    with pytest.raises(ValueError, match="fixed agent cannot be trainable"):
        Trainer(TASK, model, tok, {"A": RoleSpec(agent=ScriptedAgent("fair"), trainable=True),
                                   "B": RoleSpec(agent=ScriptedAgent("fair"))})
    with pytest.raises(ValueError, match="algorithm='ppo2'"):
        TrainConfig(algorithm="ppo2").check()
    with pytest.raises(ValueError, match="lam=1.5"):
        TrainConfig(lam=1.5).check()
    with pytest.raises(ImportError, match="report_to='wandb' needs the 'wandb' package"):
        Trainer(TASK, model, tok, {"A": RoleSpec(adapter="A", trainable=True),
                                   "B": RoleSpec(agent=ScriptedAgent("fair"))}, TrainConfig(report_to="wandb"))


def own_turns(episodes, role):
    """(episode, turn) for every LM turn of `role`, in the order Trainer.samples lists them."""
    return [(ep, t) for ep in episodes for t in ep.state.turns if t.role == role and t.completion_ids]


def test_ppo_critic_values_and_gae_targets(dond_toy_dir):
    """PPO: each path has its own value head; V_old comes from the critic, advantages from turn-level GAE, and
    the outcome reaches every turn of the role (gamma = lambda = 1 and a zero-initialised critic: every turn's
    advantage and value target is the dialogue's outcome reward)."""
    trainer = make_trainer(dond_toy_dir, algorithm="ppo", gamma=1.0, lam=1.0, whiten_advantages=False)
    assert set(trainer.critics) == {"A", "B"} and trainer.critics["A"] is not trainer.critics["B"]
    seed_everything(3)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)
    turns = own_turns(episodes, "A")
    assert len(turns) == len(samples["A"]) > 0
    for (ep, t), s in zip(turns, samples["A"]):
        assert s.completion_ids == t.completion_ids and s.value == 0.0
        assert s.ret == pytest.approx(ep.outcome["A"]["reward"]) and s.advantage == pytest.approx(s.ret)
    b_head = {n: p.clone() for n, p in trainer.critics["B"].state_dict().items()}
    stats = trainer.update("A", samples["A"])
    assert stats["value_loss"] > 0 and stats["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert trainer.critics["A"].linear.weight.abs().sum() > 0          # the critic learned something
    assert all(torch.equal(p, b_head[n]) for n, p in trainer.critics["B"].state_dict().items())
    assert trainer.values("A", samples["A"][:3]).abs().sum() > 0


def test_per_turn_rewards_reach_the_turns_that_earned_them(dond_toy_dir):
    """A reward of 1 on each of the role's turns and gamma = 0: every turn's advantage is its own reward (plus the
    outcome on the last), with a zero critic."""
    trainer = make_trainer(dond_toy_dir, algorithm="ppo", gamma=0.0, lam=1.0, whiten_advantages=False)
    trainer.turn_rewards = lambda ep, role: [float(k + 1) for k, t in
                                             enumerate(t for t in ep.state.talk_turns() if t.role == role)]
    seed_everything(4)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]
    for ep in episodes:
        mine = [s for (e, _), s in zip(own_turns(episodes, "A"), samples) if e is ep]
        expect = [float(k + 1) for k in range(len(mine))]
        expect[-1] += ep.outcome["A"]["reward"]
        assert [s.advantage for s in mine] == pytest.approx(expect)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_resume_matches_an_uninterrupted_run_exactly(dond_toy_dir, tmp_path, algorithm):
    """Stop after 2 of 3 steps, start a fresh trainer from the checkpoint: the same weights as 3 straight steps.
    The grpo run has a scripted counterpart, whose private RNG is part of the checkpoint; the ppo run two
    minibatches."""
    def new_trainer():
        seed_everything(5)
        model, tok = load_model(str(dond_toy_dir), adapters=["A", "B"], device="cpu", lora_r=4)
        roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2),
                 "B": (RoleSpec(agent=ScriptedAgent("erratic", 7)) if algorithm == "grpo"
                       else RoleSpec(adapter="B", trainable=True, lr=1e-2))}
        return Trainer(TASK, model, tok, roles, TrainConfig(
            steps=3, scenarios_per_step=4, group_size=2, max_new_tokens=16, algorithm=algorithm, save_every=1,
            lr_schedule="linear", minibatches=2 if algorithm == "ppo" else 1))   # ppo: its shuffles replay too

    straight = new_trainer()
    straight.train(progress=False, checkpoint_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000002", "step-000003"]   # the newest two kept
    import shutil
    if algorithm == "grpo":                            # a save cut short (a full disk): the one before is used
        last = tmp_path / "step-000003" / "trainer.pt"
        last.write_bytes(last.read_bytes()[:4000])
    else:
        shutil.rmtree(tmp_path / "step-000003")        # as if the run had stopped after step 2
    resumed = new_trainer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = resumed.train(progress=False, checkpoint_dir=tmp_path, resume=True)
    damaged = [str(w.message) for w in caught if "does not load" in str(w.message)]
    assert len(damaged) == (algorithm == "grpo") and all("step-000003/trainer.pt" in m for m in damaged)
    assert [r["step"] for r in rows] == [2] and resumed.step_count == 3
    for a in straight.adapter_roles:
        for n, p in adapter_parameters(straight.model, a).items():
            assert torch.equal(p, adapter_parameters(resumed.model, a)[n]), n
    for a, head in straight.critics.items():
        for n, p in head.state_dict().items():
            assert torch.equal(p, resumed.critics[a].state_dict()[n])
    if algorithm == "ppo":
        return
    other = new_trainer()                              # another run's configuration is refused, not mixed in
    other.config.group_size, other.config.kl_coef = 4, 0.1
    with pytest.raises(CheckpointError, match=r"another training run.*group_size: 2 there, 4 here; kl_coef: 0.0 "
                                              r"there, 0.1 here"):
        other.load_checkpoint(tmp_path / "step-000002")
    other.config.steps, other.config.group_size, other.config.kl_coef = 5, 2, 0.0   # a longer run resumes
    other.load_checkpoint(tmp_path / "step-000002")
    crafted = tmp_path / "crafted" / "trainer.pt"     # code in a pickle is never run
    crafted.parent.mkdir()
    torch.save({"step": 1, "hook": print}, crafted)
    with pytest.raises(CheckpointError, match="crafted/trainer.pt does not load.*Unsupported global"):
        other.load_checkpoint(crafted.parent)


def test_ppo_diagnostics_are_logged_per_role_and_vanish_while_the_ratio_is_one(dond_toy_dir):
    """One epoch per step: every chunk is scored before the single optimizer step, so r = 1 on every token."""
    trainer = make_trainer(dond_toy_dir, algorithm="ppo", epochs_per_step=1, minibatch_turns=3)
    seed_everything(6)
    row = trainer.step()
    for a in ("A", "B"):
        assert row[f"{a}/clipfrac"] == 0.0 and 0.0 <= row[f"{a}/approx_kl"] < 1e-6
        ev = row[f"{a}/explained_variance"]  # the zero-initialised critic explains nothing yet (or Var(G) = 0)
        assert math.isnan(ev) or ev == pytest.approx(0.0)
    assert row["time/rollout_s"] > 0 and row["time/update_s"] > 0  # where a step's wall-clock time goes


def test_diagnostics_move_after_the_first_epoch(dond_toy_dir):
    trainer = make_trainer(dond_toy_dir, algorithm="grpo", epochs_per_step=3)
    seed_everything(7)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]
    for s in samples:
        s.advantage = 1.0  # a gradient whatever the toy rewards were
    stats = trainer.update("A", samples)
    assert 0.0 <= stats["clipfrac"] <= 1.0 and stats["approx_kl"] > 0  # epochs 2 and 3 see the moved policy
    assert "explained_variance" not in stats                            # no critic


def test_ppo_with_minibatches_and_epochs_clips_after_the_first_optimizer_step(dond_toy_dir, monkeypatch):
    """PPO as papers run it: 2 epochs x 2 minibatches = 4 optimizer steps per rollout. Every chunk scored before the
    first step has ratio 1 exactly; later ones see the moved policy, and the clip acts (clipfrac > 0, logged)."""
    import dialogrl.rl.losses as losses_module

    trainer = make_trainer(dond_toy_dir, algorithm="ppo", epochs_per_step=2, minibatches=2, critic_lr=2e-2)
    calls, steps = [], {"n": 0}   # (optimizer steps taken so far, the chunk's ratio stats)
    real_loss = losses_module.policy_loss

    def spy_loss(*args, **kwargs):
        loss, st = real_loss(*args, **kwargs)
        calls.append((steps["n"], st))
        return loss, st

    monkeypatch.setattr(losses_module, "policy_loss", spy_loss)   # what chunk_loss calls
    trainer.optimizers["A"].register_step_post_hook(lambda *_: steps.update(n=steps["n"] + 1))
    seed_everything(8)
    row = trainer.step()
    a_calls = [(n, st) for n, st in calls if n < 4]   # path A updates first; B's chunks come after its 4 steps
    assert steps["n"] == 4 and a_calls[0][0] == 0
    for n, st in a_calls:
        if n == 0:   # the first minibatch of the first epoch: scored by the policy that sampled
            assert st["ratio"] == pytest.approx(1.0, abs=1e-4) and st["clipfrac"] == 0.0
    moved = [st for n, st in a_calls if n >= 1]
    assert moved and all(abs(st["ratio"] - 1) > 1e-4 or st["approx_kl"] > 0 for st in moved)
    assert max(st["clipfrac"] for st in moved) > 0
    for a in ("A", "B"):
        assert row[f"{a}/clipfrac"] > 0 and row[f"{a}/approx_kl"] > 0 and row[f"{a}/ratio"] != 1.0
        assert row[f"{a}/critic_lr"] == pytest.approx(2e-2) and row[f"{a}/lr"] == pytest.approx(1e-2)
    print(f"measured: A clipfrac {row['A/clipfrac']:.3f} ratio {row['A/ratio']:.4f} approx_kl "
          f"{row['A/approx_kl']:.4f}; B clipfrac {row['B/clipfrac']:.3f} ratio {row['B/ratio']:.4f}")


def test_the_critic_has_its_own_learning_rate(dond_toy_dir):
    """critic_lr: the value head is the optimizer's second param group; None gives it the role's lr. PPO with one
    optimizer step per rollout warns that it never clips."""
    trainer = make_trainer(dond_toy_dir, algorithm="ppo", critic_lr=3e-3, minibatches=2)
    for a in ("A", "B"):
        policy, critic = trainer.optimizers[a].param_groups
        assert policy["lr"] == 1e-2 and critic["lr"] == 3e-3
        assert {id(p) for p in critic["params"]} == {id(p) for p in trainer.critics[a].parameters()}
        assert {id(p) for p in policy["params"]} == {id(p) for p in adapter_parameters(trainer.model, a).values()}
    with pytest.warns(UserWarning, match="clip_eps never acts"):
        trainer = make_trainer(dond_toy_dir, algorithm="ppo")
    assert [g["lr"] for g in trainer.optimizers["A"].param_groups] == [1e-2, 1e-2]
    assert len(make_trainer(dond_toy_dir).optimizers["A"].param_groups) == 1             # grpo: no critic
    with pytest.raises(ValueError, match="critic_lr"):
        TrainConfig(critic_lr=0.0)


def test_a_process_rewards_judge_failures_are_logged_every_step(dond_toy_dir):
    """ProcessReward counts its judge's failures and weight fallbacks; the trainer logs them per step (judge/...)."""
    from dialogrl.rewards import Judge, Judgement, ProcessReward

    class HalfBrokenJudge(Judge):   # every other turn "unparseable" (judged by its fallback), no weights proposed
        def judge(self, task, state, role):
            mine = [t for t in state.talk_turns() if t.role == role]
            return [Judgement("mid", {}, None, failed=k % 2 == 0, problem="invalid JSON" if k % 2 == 0 else None)
                    for k in range(len(mine))]

    process = ProcessReward(HalfBrokenJudge(), TASK, role="A")
    model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu", lora_r=4)
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(agent=ScriptedAgent("fair"))}
    trainer = Trainer(TASK, model, tok, roles, TrainConfig(steps=2, scenarios_per_step=2, group_size=2,
                                                           max_new_tokens=8), turn_rewards=process)
    seed_everything(11)
    rows = trainer.train(progress=False)
    for row in rows:
        turns = row["judge/turns"]
        assert turns > 0 and row["judge/weight_fallbacks"] == turns and row["judge/weight_fallback_rate"] == 1.0
        assert 0 < row["judge/failures"] < turns and row["judge/failure_rate"] == row["judge/failures"] / turns
    total = process.summary()
    assert total["turns"] == sum(r["judge/turns"] for r in rows)
    assert total["problems"] == {"invalid JSON": total["failures"]}


def test_fp16_autocast_scales_the_loss_and_still_learns(dond_toy_dir, monkeypatch):
    """mixed_precision="fp16" (what bf16 becomes on a T4) runs the update under a GradScaler; bf16 and no precision
    pass through a disabled one. A bf16 request on a GPU without bf16 resolves to fp16 (models.resolve_precision)."""
    import dialogrl.rl.trainer as trainer_module

    assert not make_trainer(dond_toy_dir).scaler.is_enabled()
    assert not make_trainer(dond_toy_dir, mixed_precision="bf16").scaler.is_enabled()
    monkeypatch.setattr(trainer_module, "resolve_precision", lambda p, device: "fp16" if p == "bf16" else p)
    trainer = make_trainer(dond_toy_dir, mixed_precision="bf16")
    assert trainer._precision() == "fp16" and trainer.scaler.is_enabled()
    before = {n: p.detach().clone() for n, p in adapter_parameters(trainer.model, "A").items()}
    seed_everything(10)
    row = trainer.step()
    assert math.isfinite(row["A/loss"]) and trainer.scaler.get_scale() > 0
    after = adapter_parameters(trainer.model, "A")
    assert any(not torch.equal(p, after[n]) for n, p in before.items())   # a step was taken (no overflow skip)


def test_fp16_steps_skipped_on_overflow_are_counted_and_kept_by_a_checkpoint(dond_toy_dir, monkeypatch, tmp_path):
    """An overflow under fp16 makes the scaler skip the optimizer step: the weights stay, the step is counted
    (`<adapter>/skipped_steps` in the step's metrics: never hidden) and a checkpoint keeps the count and the scale."""
    import dialogrl.rl.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "resolve_precision", lambda p, device: "fp16" if p == "bf16" else p)
    real = trainer_module.chunk_loss
    monkeypatch.setattr(trainer_module, "chunk_loss", lambda *a, **k: (lambda t, terms: (t * float("inf"), terms))(
        *real(*a, **k)))   # every gradient overflows
    trainer = make_trainer(dond_toy_dir, mixed_precision="bf16")
    before = {n: p.detach().clone() for n, p in adapter_parameters(trainer.model, "A").items()}
    scale = trainer.scaler.get_scale()
    seed_everything(10)
    row = trainer.step()
    assert row["A/skipped_steps"] == 1 and row["B/skipped_steps"] == 1 and trainer.scaler.get_scale() < scale
    assert all(torch.equal(p, adapter_parameters(trainer.model, "A")[n]) for n, p in before.items())
    trainer.save_checkpoint(tmp_path / "step-000001")
    again = make_trainer(dond_toy_dir, mixed_precision="bf16")
    again.load_checkpoint(tmp_path / "step-000001")
    assert again.skipped_steps == {"A": 1, "B": 1} and again.scaler.get_scale() == trainer.scaler.get_scale()


def test_minibatches_split_whole_games_and_replay_with_their_key(dond_toy_dir):
    import random


    trainer = make_trainer(dond_toy_dir)
    seed_everything(9)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]
    runs = chains(samples)
    assert minibatches(samples, 1, random.Random(0)) == [list(range(len(samples)))]   # unshuffled
    mbs = minibatches(samples, 3, random.Random("k"))
    assert len(mbs) == 3 and sorted(i for m in mbs for i in m) == list(range(len(samples)))
    assert all(m == sorted(m) for m in mbs)
    assert all(any(set(c) <= set(m) for m in mbs) for c in runs)                    # a game is never split
    assert max(map(len, mbs)) - min(map(len, mbs)) <= max(map(len, runs))           # about equal parts
    assert minibatches(samples, 3, random.Random("k")) == mbs                      # the same key, the same split
    many = minibatches(samples, len(samples) + 2, random.Random(0))                 # more minibatches than games:
    assert len(many) == len(samples) + 2 and sum(m == [] for m in many) >= 2       # empty ones, every step taken


def test_config_from_params_takes_its_fields_and_overrides_win():
    params = {"steps": 7, "algorithm": "rloo", "kl_coef": 0.05, "profile": "smoke", "tasks": ["dond"]}
    cfg = TrainConfig.from_params(params, steps=3, seed=11)
    assert (cfg.steps, cfg.algorithm, cfg.kl_coef, cfg.seed) == (3, "rloo", 0.05, 11)
    assert TrainConfig.from_params({}) == TrainConfig()
    with pytest.raises(ValueError, match="algorithm='a2c': choose one of grpo, rloo, ppo"):
        TrainConfig.from_params({"algorithm": "a2c"})
    with pytest.raises(ValueError, match="ratio_level='turn'"):
        TrainConfig.from_params(params, ratio_level="turn")
    with pytest.raises(TypeError):
        TrainConfig.from_params(params, not_a_field=1)
    assert CHOICES["algorithm"] == ALGORITHMS == ("grpo", "rloo", "ppo")


def test_train_writes_the_effective_config_to_the_run_folder(dond_toy_dir, tmp_path):
    model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu", lora_r=4)
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(agent=ScriptedAgent("fair"))}
    config = TrainConfig(steps=1, scenarios_per_step=2, group_size=2, max_new_tokens=8)
    trainer = Trainer(TASK, model, tok, roles, config)
    log = MetricsLogger(tmp_path)
    trainer.train(log=log.tagged(task="dond", method="unilateral", seed=0), progress=False)
    lines = (tmp_path / "train_configs.jsonl").read_text().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert (rec["task"], rec["method"], rec["seed"]) == ("dond", "unilateral", 0)
    assert rec["trainer"] == "Trainer" and rec["start_step"] == 0
    assert rec["config"] == json.loads(json.dumps(trainer.config_dict()["config"])) and rec["config"]["steps"] == 1
    assert rec["roles"] == {"A": {"agent": None, "adapter": "A", "trainable": True, "lr": 1e-2, "kl_coef": None},
                            "B": {"agent": "fair", "adapter": None, "trainable": False, "lr": None, "kl_coef": None}}
    assert rec["paths"] == {"A": {"roles": ["A"], "lr": 1e-2, "critic_lr": None, "kl_coef": 0.0}}   # as it trains
    assert trainer.kl_coef("A") == config.kl_coef == 0.0   # a role without its own KL weight takes the config's
    anchored = Trainer(TASK, model, tok, {**roles, "A": RoleSpec(adapter="A", trainable=True, kl_coef=0.5)}, config)
    assert anchored.kl_coef("A") == 0.5
    rows = read_metrics(tmp_path)
    assert len(rows) == 1 and rows[0]["method"] == "unilateral" and "A/approx_kl" in rows[0]


def test_population_cotraining_pool_holds_distinct_checkpoints_and_trains_only_the_live_simulator(dond_toy_dir):
    """SimulatorPool (size 2, a snapshot every step) over 4 steps: FIFO slots, each a copy of the live simulator at
    its step, distinct from each other; a population plays the simulator's role; the live simulator learns only
    from the games it played, and every trainable role logs its share of all-equal reward groups."""
    from dialogrl.game import Population
    from dialogrl.rl.methods import scope

    spec = scope.method_spec("population", {}, policy_role="A", sim_role="B", pool_size=2, pool_every=1)
    pool, roles = spec.hooks[0], spec.roles
    model, tok = load_model(str(dond_toy_dir), adapters=spec.adapters, device="cpu", lora_r=4)
    snapshots = {}

    def record(trainer):   # the live simulator's weights at the start of each step, before the pool's snapshot
        snapshots[trainer.step_count] = {n: p.detach().clone() for n, p in adapter_parameters(model, "simulator")
                                         .items()}

    trainer = Trainer(TASK, model, tok, roles, TrainConfig(steps=4, scenarios_per_step=6, group_size=2, lr=5e-2,
                                                           max_new_tokens=12), hooks=[record, pool])
    seed_everything(0)
    rows = trainer.train(progress=False)
    assert pool.history == [("pool-0", 0), ("pool-1", 1), ("pool-0", 2), ("pool-1", 3)]
    assert pool.checkpoints == [("pool-0", 2), ("pool-1", 3)]
    for slot, step in pool.checkpoints:
        copy = adapter_parameters(model, slot)
        assert all(torch.equal(copy[n.replace(".simulator.", f".{slot}.")], w) for n, w in snapshots[step].items())
    w0, w1 = (adapter_parameters(model, s) for s in ("pool-0", "pool-1"))
    assert any(not torch.equal(p, w1[n.replace("pool-0", "pool-1")]) for n, p in w0.items())   # distinct
    assert isinstance(trainer.agents["B"], Population) and set(trainer.agents["B"].members) == \
        {"simulator", "pool-0@2", "pool-1@3"}
    assert all("simulator/loss" in r and "zero_std_group_pct/A" in r and "zero_std_group_pct/B" in r for r in rows)
    # the live simulator's samples come from its own games only
    seed_everything(1)
    episodes, groups = trainer.rollout(4)
    assert {e.agents["B"] for e in episodes} > {"simulator"}            # pool members played too
    own = sum(1 for e in episodes if e.agents["B"] == "simulator" for t in e.state.turns
              if t.role == "B" and t.completion_ids)
    assert len(trainer.samples(episodes, groups)["simulator"]) == own


def test_panel_eval_reports_each_counterpart_and_leaves_training_untouched(dond_toy_dir):
    from dialogrl.evaluate import panel_eval

    trainer = make_trainer(dond_toy_dir)
    panel = {"fair": ScriptedAgent("fair"), "greedy": ScriptedAgent("greedy")}
    scenarios = TASK.sample_scenarios(6, seed=3)
    evaluate = panel_eval(TASK, "A", panel, scenarios, metrics=("score", "reward"),
                          measures=lambda eps: {"games": len(eps)})
    seed_everything(0)
    before = torch.get_rng_state()
    out = evaluate(trainer)
    assert torch.equal(torch.get_rng_state(), before)   # the training run's random stream is untouched
    assert set(out) == {"fair/score", "fair/reward", "greedy/score", "greedy/reward", "panel/score", "panel/reward",
                        "panel/games"}
    assert out["panel/score"] == pytest.approx((out["fair/score"] + out["greedy/score"]) / 2)
    assert out["panel/games"] == 12 and evaluate(trainer) == out   # frozen and seeded: the same numbers again


def test_report_to_tensorboard_streams_each_step_into_the_run_folder(dond_toy_dir, tmp_path):
    """A live view: with report_to="tensorboard" every step's metrics go to event files under the run folder's
    tracking/<tags>/ (one tracker run per training run), and read back as they were logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = make_trainer(dond_toy_dir, steps=2, report_to="tensorboard")
    log = MetricsLogger(tmp_path)
    rows = trainer.train(log=log.tagged(method="demo", seed=3), progress=False)
    (run,) = (tmp_path / "tracking").iterdir()
    assert run.name == "method=demo-seed=3"
    events = EventAccumulator(str(run))
    events.Reload()
    assert "A/loss" in events.Tags()["scalars"]
    logged = [(e.step, e.value) for e in events.Scalars("A/loss")]
    assert logged == [(r["step"], pytest.approx(r["A/loss"], rel=1e-6)) for r in rows]


def test_eval_first_logs_the_held_out_check_before_any_step(dond_toy_dir, tmp_path):
    calls = []

    def check(trainer):
        calls.append(trainer.step_count)
        return {"panel/score": float(len(calls))}

    trainer = make_trainer(dond_toy_dir, steps=2, scenarios_per_step=2)
    log = MetricsLogger(tmp_path)
    rows = trainer.train(log=log.tagged(seed=0), eval_fn=check, eval_every=2, eval_first=True, progress=False)
    logged = read_metrics(tmp_path)
    assert calls == [0, 2] and [r["step"] for r in rows] == [0, 1]   # the first check is logged, not returned
    assert [(r["step"], r.get("eval/panel/score")) for r in logged] == [(-1, 1.0), (0, None), (1, 2.0)]
    assert logged[0]["seed"] == 0
    trainer.train(log=log, eval_fn=check, eval_every=2, eval_first=True, progress=False)
    assert calls == [0, 2]   # a run past step 0 has no first check (nothing left to train here either)


def test_an_lm_agent_loads_its_own_model(dond_toy_dir):
    from dialogrl.agents import LMAgent

    agent = LMAgent.load(dond_toy_dir, device="cpu", name="toy", max_new_tokens=5, temperature=0.5)
    assert (agent.name, agent.max_new_tokens, agent.temperature, agent.adapter) == ("toy", 5, 0.5, None)
    assert agent.tok is not None and next(agent.model.parameters()).device.type == "cpu"


@pytest.mark.parametrize("stem", ["01_calibrated_interactive_rl", "02_socialrl", "03_scope_simulator_collapse"])
def test_a_notebooks_temperature_knob_is_the_trainers(stem):
    """The policy's sampling temperature is a notebook parameter (`temperature`) that reaches TrainConfig through
    `TrainConfig.from_params` and nowhere else; the test below follows it from the config to every agent. (Notebook
    04's waits for its confirmatory run: a new parameter changes its registered design's hash.)"""
    from dialogrl.params import cell_literals

    params = cell_literals(stem)
    assert params["temperature"] == 1.0 == TrainConfig().temperature
    assert TrainConfig.from_params({**params, "temperature": 0.55}).temperature == 0.55


def test_the_trainers_engine_and_temperature_reach_every_agent_built_on_its_model(dond_toy_dir, monkeypatch):
    """One road: the rollout's roles, held-out evaluation (`evaluate.panel_eval`) and SCOPE's simulator pool all build
    their LM agents through `Trainer.lm_agent`, so the engine's agent class (VLLMAgent with engine="vllm") and the
    config's temperature, turn length and token budget reach each of them (a stand-in class marks what was built)."""
    from dialogrl.agents import LMAgent
    from dialogrl.evaluate import panel_eval
    from dialogrl.rl.methods import scope

    class Marked(LMAgent):   # stands in for the engine's agent class
        built: list = []

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            Marked.built.append((self.adapter, self.name, self.temperature, self.max_new_tokens,
                                 self.max_batch_tokens))

    monkeypatch.setattr(Trainer, "_agent_class", lambda self: Marked)
    trainer = make_trainer(dond_toy_dir, temperature=0.55, max_new_tokens=9, max_batch_tokens=4096)
    assert all(isinstance(trainer.agents[r], Marked) for r in ("A", "B"))
    panel_eval(TASK, "A", {"fair": ScriptedAgent("fair")}, TASK.sample_scenarios(1, seed=3))(trainer)
    assert ("A", "policy", 0.55, 9, 4096) in Marked.built

    spec = scope.method_spec("population", {}, policy_role="A", sim_role="B", pool_size=2, pool_every=1)
    model, tok = load_model(str(dond_toy_dir), adapters=spec.adapters, device="cpu", lora_r=4)
    pooled = Trainer(TASK, model, tok, spec.roles, TrainConfig(steps=1, scenarios_per_step=2, group_size=2,
                                                               max_new_tokens=9, temperature=0.55,
                                                               max_batch_tokens=4096))
    spec.hooks[0](pooled)   # the pool's first snapshot: a member built on the checkpoint's slot
    assert ("pool-0", "pool-0@0", 0.55, 9, 4096) in Marked.built
    assert all(isinstance(m, Marked) for m in pooled.agents["B"].members.values())
