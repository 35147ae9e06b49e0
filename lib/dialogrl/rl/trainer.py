"""The multi-turn, multi-role RL trainer: rollout -> reward -> advantage -> update, one update path per role.

    trainer = Trainer(task, model, tok, roles={"A": RoleSpec(adapter="A", trainable=True),
                                               "B": RoleSpec(agent=ScriptedAgent("fair"))},
                      config=TrainConfig(steps=50))
    trainer.train(log=MetricsLogger(run_dir))

Every step plays one joint rollout: `scenarios_per_step` scenarios, each `group_size` times (the scenario group of
the group baselines). Each trainable role then updates through its own path: its own LoRA adapter on the shared
base model, its own optimizer, a loss over its own tokens only (the completion tokens of its turns, scored in the
exact context its view gave it: token in, token out), and advantages from its own rewards (isolated; or pooled
with `isolate=False`). Roles that name the same adapter share one path (the `shared` ablation).
The reference policy of the KL term is the base model (adapters disabled), i.e. the warm start.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np
import torch

from dialogrl.agents import Agent, LMAgent
from dialogrl.envs.base import Task
from dialogrl.models import adapter_parameters, base_model, use_adapter
from dialogrl.rl.advantages import group_advantages
from dialogrl.rl.losses import kl_k3, policy_loss
from dialogrl.rollout import Episode, play


@dataclass
class RoleSpec:
    """How one role is played: a fixed agent (scripted persona, frozen model), or an LM policy through an adapter."""
    agent: Agent | None = None      # a fixed counterpart; None: the LM through `adapter`
    adapter: str | None = None      # LoRA adapter name (None with agent=None: the frozen base model)
    trainable: bool = False
    lr: float = 5e-4                # this role's optimizer (AdamW over its adapter's parameters)


@dataclass
class TrainConfig:
    """Hyperparameters of the trainer (defaults: a few CPU minutes with tiny models)."""
    steps: int = 40                   # rollout + update iterations
    scenarios_per_step: int = 16      # distinct scenarios per rollout
    group_size: int = 4               # dialogues per scenario (the group of the group baseline)
    algorithm: str = "grpo"           # advantage: grpo | rloo
    isolate: bool = True              # baselines per role (IB-RL) or pooled over roles
    clip_eps: float = 0.2             # PPO/GRPO clip range eps
    kl_coef: float = 0.0              # beta of the k3 KL to the reference (the base model)
    epochs_per_step: int = 1          # passes over each rollout (ratios move away from 1 after the first)
    minibatch_turns: int = 64         # turns per forward/backward chunk (gradient accumulation)
    max_new_tokens: int = 48          # per turn
    temperature: float = 1.0          # sampling temperature of the policies
    max_grad_norm: float = 1.0
    seed: int = 0                     # training scenario seeds are derived from it (evaluation uses others)

    def check(self):
        if self.algorithm not in ("grpo", "rloo"):
            raise ValueError(f"algorithm={self.algorithm!r}: choose 'grpo' or 'rloo'")
        for name in ("steps", "scenarios_per_step", "group_size", "epochs_per_step", "minibatch_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1")


@dataclass
class Sample:
    """One turn of one role, ready for the loss: its exact prompt and completion ids and its advantage."""
    role: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    advantage: float


@dataclass
class Trainer:
    task: Task
    model: object
    tokenizer: object
    roles: dict[str, RoleSpec]
    config: TrainConfig = field(default_factory=TrainConfig)
    step_count: int = 0

    def __post_init__(self):
        self.config.check()
        missing = [r for r in self.task.roles if r not in self.roles]
        if missing:
            raise ValueError(f"no RoleSpec for role(s) {missing}; the task's roles are {self.task.roles}")
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
                lm_agents[key] = LMAgent(self.model, self.tokenizer, adapter=spec.adapter, name=spec.adapter or "base",
                                         max_new_tokens=self.config.max_new_tokens,
                                         temperature=self.config.temperature)
            self.agents[role] = lm_agents[key]
        # one optimizer per trainable adapter: its own update path
        self.paths: dict[str, list[str]] = {}
        for role, spec in self.roles.items():
            if spec.trainable:
                self.paths.setdefault(spec.adapter, []).append(role)
        self.optimizers = {}
        for adapter, path_roles in self.paths.items():
            params = list(adapter_parameters(self.model, adapter).values())
            lr = self.roles[path_roles[0]].lr
            self.optimizers[adapter] = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)

    # ------------------------------------------------------------------------------------------- rollout
    def scenarios(self, step: int) -> tuple[list, list[int]]:
        """This step's scenarios, each repeated group_size times, and their group ids."""
        cfg = self.config
        base = self.task.sample_scenarios(cfg.scenarios_per_step, seed=1_000_000 + cfg.seed * 10_007 + step)
        scenarios = [s for s in base for _ in range(cfg.group_size)]
        groups = [g for g in range(len(base)) for _ in range(cfg.group_size)]
        return scenarios, groups

    def rollout(self, step: int) -> tuple[list[Episode], list[int]]:
        scenarios, groups = self.scenarios(step)
        self.model.eval()
        return play(self.task, self.agents, scenarios), groups

    def samples(self, episodes: list[Episode], groups: list[int]) -> dict[str, list[Sample]]:
        """Per update path, the trainable roles' turns with their advantages (the same for all turns of a role
        in one dialogue: the outcome reward, baselined within its scenario group)."""
        cfg = self.config
        trainable = [r for r, s in self.roles.items() if s.trainable]
        keys = [(i, r) for i in range(len(episodes)) for r in trainable]
        rewards = torch.tensor([episodes[i].outcome[r]["reward"] for i, r in keys])
        adv = group_advantages(rewards, [groups[i] for i, _ in keys], cfg.algorithm,
                               roles=[r for _, r in keys], isolate=cfg.isolate)
        out: dict[str, list[Sample]] = {a: [] for a in self.paths}
        for (i, role), a in zip(keys, adv.tolist()):
            for t in episodes[i].state.turns:
                if t.role == role and t.completion_ids:
                    out[self.roles[role].adapter].append(
                        Sample(role, t.prompt_ids, t.completion_ids, t.logprobs, a))
        return out

    # -------------------------------------------------------------------------------------------- update
    def token_logprobs(self, batch: list[Sample]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Right-padded (B, L) log-probs of each sample's completion tokens under the active adapter, the
        rollout's sampling log-probs, and the completion mask. L = the longest prompt + completion."""
        dev = next(self.model.parameters()).device
        seqs = [s.prompt_ids + s.completion_ids for s in batch]
        L = max(len(x) for x in seqs)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(batch), L), pad, dtype=torch.long)
        attn = torch.zeros((len(batch), L), dtype=torch.long)
        cmask = torch.zeros((len(batch), L - 1))
        old = torch.zeros((len(batch), L - 1))
        for b, (s, x) in enumerate(zip(batch, seqs)):
            ids[b, :len(x)] = torch.tensor(x)
            attn[b, :len(x)] = 1
            start = len(s.prompt_ids) - 1              # logits at position t predict token t + 1
            cmask[b, start:start + len(s.completion_ids)] = 1
            old[b, start:start + len(s.completion_ids)] = torch.tensor(s.logprobs)
        ids, attn = ids.to(dev), attn.to(dev)
        logits = self.model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / self.config.temperature
        logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)   # (B, L-1)
        return logp, old.to(dev), cmask.to(dev)

    def update(self, adapter: str, samples: list[Sample]) -> dict:
        """One update of one path: clipped surrogate (+ k3 KL to the base model) over its own tokens only."""
        cfg = self.config
        use_adapter(self.model, adapter)
        self.model.train()
        opt = self.optimizers[adapter]
        n_tokens = sum(len(s.completion_ids) for s in samples)
        stats = {"loss": 0.0, "clip_frac": 0.0, "ratio": 0.0, "kl": 0.0}
        if not samples:
            return stats
        for _ in range(cfg.epochs_per_step):
            opt.zero_grad(set_to_none=True)
            for k in range(0, len(samples), cfg.minibatch_turns):
                chunk = samples[k:k + cfg.minibatch_turns]
                logp, old, mask = self.token_logprobs(chunk)
                adv = torch.zeros_like(logp)
                for b, s in enumerate(chunk):
                    adv[b] = s.advantage
                weight = mask.sum().item() / n_tokens             # token-mean over the whole rollout
                loss, st = policy_loss(logp, old, adv, mask, clip_eps=cfg.clip_eps)
                if cfg.kl_coef:
                    with torch.no_grad(), base_model(self.model):
                        ref, _, _ = self.token_logprobs(chunk)
                    kl = (kl_k3(logp, ref) * mask).sum() / mask.sum()
                    loss = loss + cfg.kl_coef * kl
                    stats["kl"] += kl.item() * weight
                (loss * weight).backward()
                stats["loss"] += loss.item() * weight
                stats["clip_frac"] += st["clip_frac"] * weight
                stats["ratio"] += st["ratio"] * weight
            params = [p for g in opt.param_groups for p in g["params"]]
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
        self.model.eval()
        return {k: v / cfg.epochs_per_step for k, v in stats.items()}

    # ---------------------------------------------------------------------------------------------- loop
    def step(self) -> dict:
        """One rollout and one update per path; returns the step's metrics."""
        k = self.step_count
        episodes, groups = self.rollout(k)
        metrics = {"step": k}
        m = self.task.metrics([e.state for e in episodes])
        metrics.update({f"rollout/{n}": v for n, v in m.items() if isinstance(v, (int, float))})
        for role in self.task.roles:
            metrics[f"reward/{role}"] = float(np.mean([e.outcome[role]["reward"] for e in episodes]))
        lm_turns = [t for e in episodes for t in e.state.turns if t.completion_ids]
        if lm_turns:  # length drift and turns cut off at max_new_tokens are early signs of a collapsing policy
            stops = set(self.tokenizer.all_special_ids)
            metrics["rollout/completion_tokens"] = float(np.mean([len(t.completion_ids) for t in lm_turns]))
            metrics["rollout/truncated"] = float(np.mean([t.completion_ids[-1] not in stops for t in lm_turns]))
        for adapter, samples in self.samples(episodes, groups).items():
            for n, v in self.update(adapter, samples).items():
                metrics[f"{adapter}/{n}"] = v
        self.step_count += 1
        return metrics

    def train(self, log=None, eval_fn: Callable[["Trainer"], dict] | None = None, eval_every: int = 0,
              progress: bool = True) -> list[dict]:
        """Run config.steps steps; every `eval_every` steps (and at the end) call eval_fn(trainer) for held-out
        metrics. Each row goes to `log.log(**row)` (a MetricsLogger) when given. Returns all rows."""
        from tqdm.auto import tqdm

        rows = []
        bar = tqdm(range(self.step_count, self.config.steps), desc="train", disable=not progress)
        for _ in bar:
            row = self.step()
            if eval_fn is not None and eval_every and (self.step_count % eval_every == 0
                                                       or self.step_count == self.config.steps):
                row.update({f"eval/{n}": v for n, v in eval_fn(self).items()})
            rows.append(row)
            if log is not None:
                log.log(**row)
            shown = {n: v for n, v in row.items() if n.startswith("reward/") or n.endswith("/loss")}
            bar.set_postfix({n: f"{v:.3g}" for n, v in shown.items()})
        return rows

    def config_dict(self) -> dict:
        return {"config": asdict(self.config),
                "roles": {r: {"agent": getattr(s.agent, "name", None), "adapter": s.adapter,
                              "trainable": s.trainable, "lr": s.lr} for r, s in self.roles.items()}}

