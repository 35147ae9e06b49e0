"""The multi-turn, multi-role RL trainer: rollout -> reward -> advantage -> update, one update path per role.

    trainer = Trainer(task, model, tok, roles={"A": RoleSpec(adapter="A", trainable=True),
                                               "B": RoleSpec(agent=ScriptedAgent("fair"))},
                      config=TrainConfig(steps=50, algorithm="ppo"))
    trainer.train(log=MetricsLogger(run_dir), checkpoint_dir=run_dir / "checkpoints")

Every step plays one joint rollout: `scenarios_per_step` scenarios, each `group_size` times (the scenario group of
the group baselines). Each trainable role then updates through its own path: its own LoRA adapter on the shared
base model, its own optimizer (and, with PPO, its own value head), a loss over its own tokens only (the completion
tokens of its turns, scored in the exact context its view gave it: token in, token out), and advantages from its
own rewards (isolated; or pooled with `isolate=False`). Roles that name the same adapter share one path (the
`shared` ablation). The reference policy of the KL term is the base model (adapters disabled), i.e. the warm start.
The update scores a role's turns of one game in one sequence (its last prompt and completion) whenever each prompt
continues the previous prompt and completion token for token, as the chat templates here do: the same log-probs as
one pass per turn, for a fraction of the tokens (`batching.chains`; turns that do not continue are scored alone).

Algorithms (`TrainConfig.algorithm`):
    grpo, rloo   group baselines over each scenario group; one advantage per (dialogue, role), on all its turns.
    ppo          a critic: a value head V(s_t) on the role's model, read at the last prompt token of each of its
                 turns; turn-level GAE over the role's turns propagates the outcome (and any per-turn reward) to
                 every turn; clipped value loss; the value head's own learning rate (`critic_lr`). The clip acts only
                 from a rollout's second optimizer step on: PPO takes epochs_per_step x minibatches >= 2 of them
                 (the Trainer warns otherwise), `<adapter>/clipfrac` says how often it acted.

Scale-out uses accelerate: launched as N processes, each process plays its share of the step's scenario groups and
the trainable parameters' gradients are averaged over processes (all-reduce, as DDP does) before every optimizer
step, so all processes keep identical weights. On GPUs: `accelerate launch --multi_gpu --num_processes N script.py`.
On CPUs the same command (or `torchrun --nproc_per_node N`) runs N gloo processes: accelerate 1.15's `--cpu` flag
starts several processes only through mpirun, and the trainer already keeps a CPU model on the CPU.
Mixed precision is autocast (bf16 / fp16, the latter with loss scaling); bf16 becomes fp16, with a warning, on a GPU
without bfloat16 (`models.resolve_precision`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from dialogrl.agents import LMAgent
from dialogrl.agents.fastdecode import LeanModel, lean_trainable, uses_lean
from dialogrl.game import Agent, Task
from dialogrl.models import HALF_DTYPES, adapter_parameters, base_model, resolve_precision, use_adapter
from dialogrl.rl import checkpoint
from dialogrl.rl.advantages import group_advantages, turn_gae, whiten
from dialogrl.rl.batching import Sample, chunk_chains, minibatches
from dialogrl.rl.config import RoleSpec, TrainConfig
from dialogrl.rl.losses import chunk_loss, explained_variance
from dialogrl.rl.scoring import ValueHead, completion_logprobs, packed_forward
from dialogrl.rollout import Episode, play
from dialogrl.run import progress as run_progress
from dialogrl.seeds import stream_seed


@dataclass
class Trainer:
    task: Task
    model: object
    tokenizer: object
    roles: dict[str, RoleSpec]
    config: TrainConfig = field(default_factory=TrainConfig)
    # optional per-turn rewards (process rewards): (episode, role) -> one reward per talk turn of that role,
    # added to the outcome reward that arrives at the role's last turn
    turn_rewards: Callable[[Episode, str], list[float]] | None = None
    # called with the trainer at the start of every step, before its rollout: schedules over the training steps
    # (e.g. rl.methods.scope.SimulatorPool, which snapshots a co-trained simulator and swaps a population into its role)
    hooks: list[Callable[[Trainer], None]] = field(default_factory=list)
    step_count: int = 0
    # the update's forward: None (the lean packed forward, `fastdecode.hidden`, where it can stand in for the model's:
    # fp32 Qwen2/Llama models on the CPU without LoRA dropout, as the rollouts' lean engine), True (wherever it can),
    # False (always the model's own forward). The same numbers to float error; 1.4-1.55x faster (papers/README.md)
    lean: bool | None = None

    def __post_init__(self):
        from accelerate import Accelerator

        cfg = self.config
        cfg.check()
        missing = [r for r in self.task.roles if r not in self.roles]
        if missing:
            raise ValueError(f"no RoleSpec for role(s) {missing}; the task's roles are {self.task.roles}")
        log_with = None
        if cfg.report_to != "none":  # the tracker's package is imported (by accelerate) only when chosen
            if importlib.util.find_spec(cfg.report_to) is None:
                raise ImportError(f"report_to={cfg.report_to!r} needs the {cfg.report_to!r} package: "
                                  f"pip install {cfg.report_to}")
            log_with = cfg.report_to
        # a model on the CPU trains on the CPU, also in a multi-process run (gloo); else accelerate picks the device
        on_cpu = next(self.model.parameters()).device.type == "cpu"
        self.accelerator = Accelerator(cpu=on_cpu, log_with=log_with, project_dir=cfg.log_dir or "results/tracking")
        self.model.to(self.accelerator.device)
        self.agents: dict[str, Agent] = {}
        lm_agents: dict = {}
        for role, spec in self.roles.items():
            if spec.agent is not None:
                if spec.trainable:
                    raise ValueError(f"role {role!r}: a fixed agent cannot be trainable; give an adapter instead")
                self.agents[role] = spec.agent
                continue
            if spec.trainable and spec.adapter is None:
                raise ValueError(f"role {role!r} is trainable but has no adapter")
            key = spec.adapter  # roles on one adapter share one agent (and one update path)
            if key not in lm_agents:
                lm_agents[key] = self.lm_agent(spec.adapter)
            self.agents[role] = lm_agents[key]
        # the name each trainable role's own agent writes into Episode.agents: a game in which another agent played
        # the role (a population member a hook swapped in) gives that role no samples
        self.own_agent = {role: self.agents[role].name for role, spec in self.roles.items() if spec.trainable}
        self.zero_std: dict[str, float] = {}   # per trainable role: the share of its last groups with equal rewards
        # one update path per trainable adapter: its optimizer, schedule and (ppo) value head; adapter_roles maps each
        # trained adapter to the roles it plays (two with IB-RL's shared ablation)
        self.adapter_roles: dict[str, list[str]] = {}
        for role, spec in self.roles.items():
            if spec.trainable:
                self.adapter_roles.setdefault(spec.adapter, []).append(role)
        hidden = self.model.get_input_embeddings().embedding_dim
        dev = self.accelerator.device
        self.critics = {a: ValueHead(hidden).to(dev) for a in self.adapter_roles} if cfg.algorithm == "ppo" else {}
        self.optimizers, self.schedulers = {}, {}
        for adapter in self.adapter_roles:
            lr, _ = self.lr(adapter), self.kl_coef(adapter)   # the roles on one adapter agree on both, or it raises
            # param group 0: the adapter (the role's lr); group 1, with ppo: the value head (critic_lr)
            groups = [{"params": list(adapter_parameters(self.model, adapter).values()), "lr": lr}]
            if adapter in self.critics:
                groups.append({"params": list(self.critics[adapter].parameters()),
                               "lr": lr if cfg.critic_lr is None else cfg.critic_lr})
            self.optimizers[adapter] = torch.optim.AdamW(groups, lr=lr, weight_decay=0.0)
            self.schedulers[adapter] = torch.optim.lr_scheduler.LambdaLR(self.optimizers[adapter], self._lr_factor)
        self.lean_model = (LeanModel(self.model) if uses_lean(self.model, self.lean) and lean_trainable(self.model)
                           else None)
        # fp16 autocast needs loss scaling (small gradients underflow in float16); a disabled scaler passes through
        self.scaler = torch.amp.GradScaler(dev.type, enabled=self._precision() == "fp16")
        self.skipped_steps: dict[str, int] = {}   # per path: optimizer steps fp16's scaler skipped (an overflow)
        if self.adapter_roles:
            cfg.warn_unclipped()

    def lr(self, adapter: str) -> float:
        """The learning rate of an update path: its roles' `RoleSpec.lr`, or the config's."""
        return self._path_setting(adapter, "lr")

    def kl_coef(self, adapter: str) -> float:
        """The KL weight of an update path: its roles' `RoleSpec.kl_coef`, or the config's."""
        return self._path_setting(adapter, "kl_coef")

    def _path_setting(self, adapter: str, name: str) -> float:
        """A setting of an update path that RoleSpec may give per role (None: TrainConfig's); the roles that share
        the path's adapter must agree, or it is a ValueError naming them."""
        values = {role: getattr(self.config, name) if getattr(self.roles[role], name) is None
                  else float(getattr(self.roles[role], name)) for role in self.adapter_roles[adapter]}
        if len(set(values.values())) > 1:
            raise ValueError(f"roles {sorted(values)} share the adapter {adapter!r} but not its {name}: {values}; "
                             "one adapter is one update path, with one setting")
        return next(iter(values.values()))

    def _lr_factor(self, step: int) -> float:
        cfg = self.config
        warm = min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        decay = max(0.0, 1.0 - step / cfg.steps) if cfg.lr_schedule == "linear" else 1.0
        return warm * decay

    # ------------------------------------------------------------------------------------------- rollout
    def scenarios(self, step: int) -> tuple[list, list[int], list[int]]:
        """This process's share of the step's scenarios, each repeated group_size times, their group ids, and each
        dialogue's game seed (dialogrl.seeds). Scenario ids run on over the steps (step * scenarios_per_step + i),
        unique over the run; every dialogue of a group has its own seed, stream_seed("train-games", seed, step,
        index in the step), the same however many processes share the step."""
        cfg, acc = self.config, self.accelerator
        n, k = cfg.scenarios_per_step, cfg.group_size
        drawn = self.task.sample_scenarios(n, seed=stream_seed("train-scenarios", cfg.seed, step))
        base = [_with_id(sc, step * n + i) for i, sc in enumerate(drawn)]
        mine = list(range(n))[acc.process_index::acc.num_processes]
        scenarios = [base[g] for g in mine for _ in range(k)]
        groups = [g for g in mine for _ in range(k)]
        seeds = [stream_seed("train-games", cfg.seed, step, g * k + j) for g in mine for j in range(k)]
        return scenarios, groups, seeds

    def rollout(self, step: int) -> tuple[list[Episode], list[int]]:
        scenarios, groups, seeds = self.scenarios(step)
        self.model.eval()
        return play(self.task, self.agents, scenarios, seeds=seeds), groups

    def _role_turns(self, episode: Episode, role: str) -> tuple[list, list[float]]:
        """The role's LM turns and their rewards: per-turn rewards (if any) plus the outcome on the last of them."""
        talk = [t for t in episode.state.turns if t.role == role and t.phase == "talk"]
        extra = list(self.turn_rewards(episode, role)) if self.turn_rewards is not None else [0.0] * len(talk)
        if len(extra) != len(talk):
            raise ValueError(f"turn_rewards gave {len(extra)} rewards for {len(talk)} talk turns of role {role!r}")
        by_turn = {id(t): r for t, r in zip(talk, extra)}
        turns = [t for t in episode.state.turns if t.role == role and t.completion_ids]
        rewards = [by_turn.get(id(t), 0.0) for t in turns]
        if rewards:
            rewards[-1] += episode.outcome[role]["reward"]
        return turns, rewards

    def samples(self, episodes: list[Episode], groups: list[int]) -> dict[str, list[Sample]]:
        """Per update path, the trainable roles' turns with their advantages.

        grpo / rloo: the role's total reward in a dialogue, baselined within its scenario group, on all its turns.
        ppo: turn-level GAE over the role's turns with the path's critic (values from a no-grad pass).
        """
        cfg = self.config
        trainable = [r for r, s in self.roles.items() if s.trainable]
        out: dict[str, list[Sample]] = {a: [] for a in self.adapter_roles}
        own = [(i, r) for i in range(len(episodes)) for r in trainable
               if episodes[i].agents.get(r, self.own_agent[r]) == self.own_agent[r]]
        if hasattr(self.turn_rewards, "prepare"):   # a judge with a model: the step's games judged in one batch
            self.turn_rewards.prepare([episodes[i] for i in dict.fromkeys(i for i, _ in own)])
        trajectories = [(i, r, *self._role_turns(episodes[i], r)) for i, r in own]
        totals = torch.tensor([sum(rw) if turns else episodes[i].outcome[r]["reward"]
                               for i, r, turns, rw in trajectories])
        for role in trainable:   # groups whose rewards are all equal give a group baseline no signal
            by_group: dict[int, list[float]] = {}
            for (i, r, *_), total in zip(trajectories, totals.tolist()):
                if r == role:
                    by_group.setdefault(groups[i], []).append(total)
            sized = [v for v in by_group.values() if len(v) > 1]
            self.zero_std[role] = float(np.mean([max(v) == min(v) for v in sized])) if sized else float("nan")
        if cfg.algorithm != "ppo":
            adv = group_advantages(totals, [groups[i] for i, *_ in trajectories], cfg.algorithm,
                                   roles=[r for _, r, *_ in trajectories], isolate=cfg.isolate)
            for (_, role, turns, _), a in zip(trajectories, adv.tolist()):
                out[self.roles[role].adapter] += [Sample(role, t.prompt_ids, t.completion_ids, t.logprobs, a)
                                                  for t in turns]
            return out
        for adapter in self.adapter_roles:
            trajs = [(r, turns, rw) for _, r, turns, rw in trajectories if self.roles[r].adapter == adapter and turns]
            flat = [Sample(r, t.prompt_ids, t.completion_ids, t.logprobs, 0.0) for r, turns, _ in trajs for t in turns]
            if not flat:
                continue
            values = self.values(adapter, flat)
            T = max(len(turns) for _, turns, _ in trajs)
            R, V, M = torch.zeros(len(trajs), T), torch.zeros(len(trajs), T), torch.zeros(len(trajs), T)
            k = 0
            for b, (_, turns, rw) in enumerate(trajs):
                n = len(turns)
                R[b, :n], V[b, :n], M[b, :n] = torch.tensor(rw), values[k:k + n], 1
                k += n
            adv, ret = turn_gae(R, V, M, gamma=cfg.gamma, lam=cfg.lam)
            if cfg.whiten_advantages and M.sum() > 1:
                adv = whiten(adv, M)
            mask = M.bool()
            for s, a, g, v in zip(flat, adv[mask].tolist(), ret[mask].tolist(), V[mask].tolist()):
                s.advantage, s.ret, s.value = a, g, v
            out[adapter] = flat
        return out

    # -------------------------------------------------------------------------------------------- update
    def _precision(self) -> str:
        """The update's autocast precision: no | bf16 | fp16 (bf16 becomes fp16 on a GPU without it)."""
        precision = self.config.mixed_precision
        if precision == "no":  # `accelerate launch --mixed_precision bf16` sets this; an Accelerator that another
            # trainer created earlier in this process (e.g. a warm start's) must not switch it on
            precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        return resolve_precision(precision, self.accelerator.device) if precision in HALF_DTYPES else "no"

    def lm_agent(self, adapter: str | None, name: str | None = None, **kwargs) -> LMAgent:
        """The trainer's LM agent on `adapter` (None: the warm start): the one road by which the config's engine,
        temperature, turn length and decoding token budget reach every agent built on the trained model (the
        rollout's roles, held-out evaluation `evaluate.panel_eval`, the static trainer's policies, SCOPE's simulator
        pool). kwargs: the agent's own further options (e.g. reuse_cache)."""
        cfg = self.config
        return self._agent_class()(self.model, self.tokenizer, adapter=adapter, name=name or adapter or "base",
                                   max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                                   max_batch_tokens=cfg.max_batch_tokens, **kwargs)

    def _agent_class(self) -> type:
        """The agent class of the LM roles: LMAgent, or VLLMAgent with engine="vllm" (vllm imported only then)."""
        if self.config.engine == "vllm":
            from dialogrl.agents.vllm_engine import VLLMAgent  # an optional dependency: vllm, imported only when used

            return VLLMAgent
        return LMAgent

    def _recompute_old(self) -> bool:
        if self.config.old_logprobs != "auto":
            return self.config.old_logprobs == "recompute"
        if self.config.engine == "vllm":   # another engine's kernels: its log-probs are not the update's
            return True
        return self._precision() != "no" or next(self.model.parameters()).dtype in (torch.float16, torch.bfloat16)

    @torch.no_grad()
    def recompute_logprobs(self, adapter: str | None, samples: list[Sample], reference: bool = False
                           ) -> list[Sample]:
        """The samples with their completions' log-probs from the update's own forward: as their behaviour
        log-probs (the path's adapter, before its first step: the first ratio is then 1 to float error whatever
        precision the rollout decoded in), or with `reference` as `ref_logprobs` (the frozen base model: the KL's
        reference, computed once a rollout)."""
        self.model.eval()
        out = list(samples)
        with base_model(self.model) if reference else contextlib.nullcontext():
            if not reference:
                use_adapter(self.model, adapter)
            for chunk in chunk_chains(samples, self.config.minibatch_turns, self.config.minibatch_tokens):
                logp = self.token_logprobs([samples[i] for i in chunk])["logp"].float().cpu()
                for b, i in enumerate(chunk):
                    lp = logp[b, logp.shape[1] - len(samples[i].completion_ids):].tolist()
                    out[i] = dataclasses.replace(samples[i], **{"ref_logprobs" if reference else "logprobs": lp})
        if reference and adapter is not None:
            use_adapter(self.model, adapter)
        return out

    def _autocast(self):
        precision = self._precision()
        if precision == "no":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.accelerator.device.type, dtype=HALF_DTYPES[precision])

    def _forward(self, batch: list[Sample], pack: bool = True, hidden_only: bool = False):
        """`scoring.packed_forward` of `batch` on the trained model (the lean packed forward where it stands in)."""
        lean = self.lean_model if self._precision() == "no" else None
        return packed_forward(self.model, batch, self.tokenizer.pad_token_id, self.accelerator.device, lean,
                              self._autocast, pack, hidden_only)

    def token_logprobs(self, batch: list[Sample], adapter: str | None = None, with_entropy: bool = False,
                       pack: bool = True):
        """Log-probs of each sample's completion tokens under the active adapter (`scoring.completion_logprobs`: a
        dict of "logp", "old", "mask" (S, K), with `with_entropy` "entropy"); with `adapter` and a critic also
        "value", V(s) per sample read at the last prompt token. With `pack` (the default) a role's consecutive turns
        of one game are scored in one sequence (`batching.chains`): the per-turn result, for a fraction of the
        tokens."""
        hidden, ids, row_of, start = self._forward(batch, pack)
        res = completion_logprobs(self.model, hidden, ids, row_of, start, batch, self.config.temperature,
                                  self._autocast, with_entropy)
        critic = self.critics.get(adapter)
        if critic is not None:
            last = hidden[torch.tensor(row_of, device=ids.device), torch.tensor(start, device=ids.device) - 1]
            res["value"] = critic(last if self.config.critic_trunk else last.detach())
        return res

    @torch.no_grad()
    def values(self, adapter: str, samples: list[Sample]) -> torch.Tensor:
        """V_old(s_t) of each sample's state (its prompt) under the path's adapter and critic: (N,)."""
        use_adapter(self.model, adapter)
        self.model.eval()
        critic, out = self.critics[adapter], torch.zeros(len(samples))
        for chunk in chunk_chains(samples, self.config.minibatch_turns, self.config.minibatch_tokens):
            batch = [samples[i] for i in chunk]
            hidden, ids, row_of, start = self._forward(batch, hidden_only=True)
            last = hidden[torch.tensor(row_of, device=ids.device), torch.tensor(start, device=ids.device) - 1]
            out[chunk] = critic(last).cpu()
        return out

    def _sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum the gradients over processes (each process already weighted its loss by its share of tokens)."""
        if self.accelerator.num_processes == 1:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = self.accelerator.reduce(torch.cat([g.flatten() for g in grads]), reduction="sum")
        k = 0
        for p in params:
            p.grad = flat[k:k + p.numel()].view_as(p).clone()
            k += p.numel()

    def update(self, adapter: str, samples: list[Sample]) -> dict:
        """One update of one path: clipped surrogate (+ value loss, + k3 KL to the base model, - entropy bonus)
        over its own tokens only (`losses.chunk_loss`). `epochs_per_step` passes over the rollout, each split into
        `minibatches` shuffled minibatches of whole games (one optimizer step each; `batching.minibatches`); inside a
        minibatch gradients accumulate over chunks of `minibatch_turns` turns. The loss of a minibatch is its token
        mean over every process's share of it. Only the first optimizer step sees ratios of exactly 1.

        Returns the path's stats, token-weighted means over this process's samples, averaged over the epochs: loss,
        clipfrac, approx_kl, ratio (see losses.policy_loss; every minibatch counts, so with one optimizer step per
        rollout clipfrac and approx_kl are 0), kl; with ppo value_loss, value, explained_variance (of V_old for the
        returns G over the path's batch, before the update) and critic_lr; entropy with entropy_coef; lr."""
        cfg = self.config
        use_adapter(self.model, adapter)
        self.model.train()
        kl_coef, n_tokens = self.kl_coef(adapter), sum(len(s.completion_ids) for s in samples)
        # per path and step: token-weighted means over the chunks, averaged over the epochs (PPO's diagnostics
        # approx_kl, clipfrac and the critic's explained_variance as CleanRL logs them; see losses.policy_loss)
        stats = {"loss": 0.0, "clipfrac": 0.0, "approx_kl": 0.0, "ratio": 0.0, "kl": 0.0}
        if cfg.algorithm == "ppo":
            stats.update(value_loss=0.0, value=0.0)
            stats["explained_variance"] = explained_variance(torch.tensor([s.value for s in samples]),
                                                             torch.tensor([s.ret for s in samples]))
        if cfg.entropy_coef:
            stats["entropy"] = 0.0
        if self._global_sum(n_tokens) == 0:
            return stats
        if self._recompute_old():
            samples = self.recompute_logprobs(adapter, samples)
        if kl_coef:   # the reference pass once per rollout, before any chunk holds a graph (not per chunk and epoch)
            samples = self.recompute_logprobs(adapter, samples, reference=True)
        self.model.train()
        for epoch in range(cfg.epochs_per_step):
            # the minibatch split's own stream (dialogrl.seeds), keyed by what it is for: a resumed run replays it
            rng = random.Random(stream_seed("minibatches", cfg.seed, self.step_count, adapter, epoch))
            for mb in minibatches(samples, cfg.minibatches, rng):
                batch = [samples[i] for i in mb]
                mb_tokens = self._global_sum(sum(len(s.completion_ids) for s in batch))
                mb_turns = self._global_sum(len(batch))
                if mb_tokens == 0:
                    continue
                self.optimizers[adapter].zero_grad(set_to_none=True)
                for idx in chunk_chains(batch, cfg.minibatch_turns, cfg.minibatch_tokens):
                    chunk = [batch[i] for i in idx]
                    res = self.token_logprobs(chunk, adapter, with_entropy=bool(cfg.entropy_coef))
                    # each chunk weighed by its share of what the minibatch's means run over: tokens for token
                    # means, turns for the per-turn ones, so the chunking never changes the update
                    weight, per_turn = res["mask"].sum().item() / mb_tokens, len(chunk) / mb_turns
                    total, terms = chunk_loss(res, chunk, cfg, kl_coef, weight, per_turn)
                    self.scaler.scale(total).backward()
                    share = res["mask"].sum().item() / n_tokens   # the stats: token mean over this process's rollout
                    stats["loss"] += total.item() / weight * share
                    for n, v in terms.items():
                        stats[n] += v * share
                self._optimizer_step(adapter)
        self.schedulers[adapter].step()
        self.model.eval()
        out = {k: (v / cfg.epochs_per_step if k != "explained_variance" else v) for k, v in stats.items()}
        out["lr"] = self.schedulers[adapter].get_last_lr()[0]
        if self.scaler.is_enabled():   # fp16: the path's optimizer steps skipped so far (overflows), never hidden
            out["skipped_steps"] = self.skipped_steps.get(adapter, 0)
        if adapter in self.critics:
            out["critic_lr"] = self.schedulers[adapter].get_last_lr()[1]
        return out

    def _global_sum(self, n: int) -> int:
        """n summed over processes (every process calls it equally often: the same optimizer steps everywhere)."""
        acc = self.accelerator
        return int(acc.reduce(torch.tensor(n, device=acc.device), reduction="sum")) if acc.num_processes > 1 else n

    def _optimizer_step(self, adapter: str) -> None:
        """The path's optimizer step on the gradients its chunks accumulated: summed over processes, unscaled (fp16),
        the policy's and the critic's clipped apart (a value loss in reward units squared would otherwise set the
        joint norm and shrink the policy's step)."""
        opt = self.optimizers[adapter]
        params = [p for g in opt.param_groups for p in g["params"]]
        head = set(self.critics[adapter].parameters()) if adapter in self.critics else set()
        self._sync_gradients(params)
        self.scaler.unscale_(opt)   # fp16: true gradients before clipping (else a no-op)
        torch.nn.utils.clip_grad_norm_([p for p in params if p not in head], self.config.max_grad_norm)
        if head:
            torch.nn.utils.clip_grad_norm_(list(head), self.config.max_grad_norm)
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else None
        self.scaler.step(opt)       # fp16: skipped when a gradient overflowed (the same on every process)
        self.scaler.update()
        if scale is not None and self.scaler.get_scale() < scale:   # the scale backs off after an overflow only
            self.skipped_steps[adapter] = self.skipped_steps.get(adapter, 0) + 1

    # ---------------------------------------------------------------------------------------------- loop
    def step(self) -> dict:
        """One rollout and one update per path; returns the step's metrics (averaged over processes), with the
        wall-clock seconds of each part (`time/rollout_s`, `time/update_s`)."""
        k = self.step_count
        for hook in self.hooks:
            hook(self)
        t0 = time.perf_counter()
        episodes, groups = self.rollout(k)
        metrics = {"step": k, "time/rollout_s": time.perf_counter() - t0}
        m = self.task.metrics([e.state for e in episodes])
        metrics.update({f"rollout/{n}": v for n, v in m.items() if isinstance(v, (int, float))})
        for role in self.task.roles:
            metrics[f"reward/{role}"] = float(np.mean([e.outcome[role]["reward"] for e in episodes]))
        lm_turns = [t for e in episodes for t in e.state.turns if t.completion_ids]
        if lm_turns:  # length drift and turns cut off at max_new_tokens are early signs of a collapsing policy
            stops = set(self.tokenizer.all_special_ids)
            metrics["rollout/completion_tokens"] = float(np.mean([len(t.completion_ids) for t in lm_turns]))
            metrics["rollout/truncated"] = float(np.mean([t.completion_ids[-1] not in stops for t in lm_turns]))
        t0 = time.perf_counter()
        for adapter, samples in self.samples(episodes, groups).items():
            for n, v in self.update(adapter, samples).items():
                metrics[f"{adapter}/{n}"] = v
        metrics["time/update_s"] = time.perf_counter() - t0
        metrics.update({f"zero_std_group_pct/{r}": 100 * v for r, v in self.zero_std.items()})
        if hasattr(self.turn_rewards, "step_metrics"):   # a judge's failures this step (rewards.ProcessReward)
            metrics.update(self.turn_rewards.step_metrics())
        self.step_count += 1
        return self._mean_over_processes(metrics)

    def _mean_over_processes(self, row: dict) -> dict:
        acc = self.accelerator
        if acc.num_processes == 1:
            return row
        names = sorted(n for n, v in row.items() if n != "step" and isinstance(v, (int, float)))
        vals = acc.reduce(torch.tensor([float(row[n]) for n in names], device=acc.device), reduction="mean")
        return {**row, **dict(zip(names, vals.tolist()))}

    def train(self, log=None, eval_fn: Callable[[Trainer], dict] | None = None, eval_every: int = 0,
              progress: bool = True, checkpoint_dir: str | Path | None = None, resume: bool = False,
              desc: str = "train", eval_first: bool = False) -> list[dict]:
        """Run up to config.steps steps.

        eval_fn(trainer) -> held-out metrics, every `eval_every` steps and at the end (see `evaluate.panel_eval`);
        with eval_first, also before the first step of a run that starts at step 0 (logged as step -1: where the
        held-out curves start; not among the returned rows).
        Each row goes to `log.log(**row)` (a MetricsLogger; main process only) and to the chosen `report_to`
        tracker. Before the first step, a MetricsLogger (anything with `log_config`) gets the effective
        configuration: `config_dict()` and the step training starts from, one line of <run>/train_configs.jsonl.
        With checkpoint_dir, a checkpoint is written every `save_every` steps and at the end; with resume=True the
        latest checkpoint there is loaded first and training continues exactly where it stopped.
        progress: a bar over the steps (`desc`, then the step's rewards and losses); off on other processes and
        wherever TQDM_DISABLE=1.
        Returns the rows of this call.
        """
        cfg, acc = self.config, self.accelerator
        if resume and checkpoint_dir is not None:
            self.resume(checkpoint_dir)
        if acc.is_main_process and hasattr(log, "log_config"):
            log.log_config(trainer=type(self).__name__, start_step=self.step_count, **self.config_dict())
        tracker = self._start_tracker(log)
        if eval_first and eval_fn is not None and self.step_count == 0:
            first = {f"eval/{n}": v for n, v in eval_fn(self).items()}
            if acc.is_main_process and log is not None:
                log.log(step=-1, **first)
        rows = []
        bar = run_progress(range(self.step_count, cfg.steps), desc, total=cfg.steps, initial=self.step_count,
                           enabled=progress and acc.is_main_process, leave=False)
        for _ in bar:
            row = self.step()
            if eval_fn is not None and eval_every and (self.step_count % eval_every == 0
                                                       or self.step_count == cfg.steps):
                row.update({f"eval/{n}": v for n, v in eval_fn(self).items()})
            rows.append(row)
            if acc.is_main_process:
                if log is not None:
                    log.log(**row)
                if tracker:
                    acc.log({n: v for n, v in row.items() if isinstance(v, (int, float))}, step=row["step"])
            if checkpoint_dir is not None and (self.step_count == cfg.steps
                                               or (cfg.save_every and self.step_count % cfg.save_every == 0)):
                self.save_checkpoint(Path(checkpoint_dir) / f"step-{self.step_count:06d}")
                if cfg.keep_checkpoints and acc.is_main_process:
                    for old in checkpoint.saved(checkpoint_dir)[:-cfg.keep_checkpoints]:
                        shutil.rmtree(old, ignore_errors=True)
            shown = {n: v for n, v in row.items() if n.startswith("reward/") or n.endswith("/loss")}
            bar.set_postfix({n: f"{v:.3g}" for n, v in shown.items()})
        if tracker:
            acc.end_training()
        return rows

    def _start_tracker(self, log=None) -> bool:
        """Start the report_to tracker (main process only): one tracker run per training run, named by the tags of a
        TaggedLogger (e.g. method=socialrl-seed=0; else "train"), under config.log_dir or the logger's run folder."""
        if self.config.report_to == "none":
            return False
        tags = getattr(log, "tags", {})
        base = getattr(log, "logger", log)
        folder = self.config.log_dir or (Path(base.path).parent / "tracking" if hasattr(base, "path")
                                         else Path("results/tracking"))
        self.accelerator.project_configuration.logging_dir = str(folder)
        name = "-".join(f"{k}={v}" for k, v in tags.items()) or "train"
        flat = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in asdict(self.config).items()}
        self.accelerator.init_trackers(name, config=flat)
        return True

    # ------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self, path: str | Path) -> Path:
        """Adapters, value heads, optimizers, schedulers, RNG states and the step, in one file (`checkpoint.save`)."""
        return checkpoint.save(self, path)

    def resume(self, checkpoint_dir: str | Path) -> Path | None:
        """Load the newest checkpoint under checkpoint_dir that loads (`checkpoint.resume`); None when there is none."""
        return checkpoint.resume(self, checkpoint_dir)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore a checkpoint of this training run (`checkpoint.load`): training continues as if it never stopped."""
        checkpoint.load(self, path)

    def config_dict(self) -> dict:
        """The effective configuration: every TrainConfig field, per role its RoleSpec (the fixed agent's name), and
        per update path its roles and the learning rates and KL weight its optimizer and loss use."""
        return {"config": asdict(self.config),
                "roles": {r: {"agent": getattr(s.agent, "name", None), "adapter": s.adapter,
                              "trainable": s.trainable, "lr": s.lr, "kl_coef": s.kl_coef}
                          for r, s in self.roles.items()},
                "paths": {a: {"roles": roles, "lr": self._base_lr(a, 0),
                              "critic_lr": self._base_lr(a, 1) if a in self.critics else None,
                              "kl_coef": self.kl_coef(a)} for a, roles in self.adapter_roles.items()}}

    def _base_lr(self, adapter: str, group: int) -> float:
        """The learning rate a param group of an update path's optimizer was given (before its schedule)."""
        g = self.optimizers[adapter].param_groups[group]
        return g.get("initial_lr", g["lr"])



def _with_id(scenario, scenario_id: int):
    """The scenario with another id (a dataclass with an `id` field; any other scenario as it is)."""
    if dataclasses.is_dataclass(scenario) and any(f.name == "id" for f in fields(scenario)):
        return dataclasses.replace(scenario, id=scenario_id)
    return scenario


__all__ = ["Trainer", "RoleSpec", "TrainConfig"]   # the config beside the trainer, as TRL exports them
