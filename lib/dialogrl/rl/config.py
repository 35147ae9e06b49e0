"""The trainer's configuration, apart from the trainer (as TRL keeps GRPOConfig apart from GRPOTrainer): how each
role is played (`RoleSpec`), the hyperparameters (`TrainConfig`, checked on construction) and the allowed values of
its choice fields (notebooks check their parameters against them: `OneOf(*ALGORITHMS)`, ...).
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields

from dialogrl.game import Agent

# the allowed values of TrainConfig's choice fields
ALGORITHMS = ("grpo", "rloo", "ppo")
RATIO_LEVELS = ("token", "utterance")
LR_SCHEDULES = ("constant", "linear")
MIXED_PRECISIONS = ("no", "bf16", "fp16")
TRACKERS = ("none", "tensorboard", "wandb")
OLD_LOGPROBS = ("auto", "sampling", "recompute")
ENGINES = ("transformers", "vllm")
CHOICES = {"algorithm": ALGORITHMS, "ratio_level": RATIO_LEVELS, "lr_schedule": LR_SCHEDULES,
           "mixed_precision": MIXED_PRECISIONS, "report_to": TRACKERS, "old_logprobs": OLD_LOGPROBS,
           "engine": ENGINES}


@dataclass
class RoleSpec:
    """How one role is played: a fixed agent (scripted persona, frozen model), or an LM policy through an adapter."""
    agent: Agent | None = None      # a fixed counterpart; None: the LM through `adapter`
    adapter: str | None = None      # LoRA adapter name (None with agent=None: the frozen base model)
    trainable: bool = False
    lr: float | None = None         # this role's learning rate (None: TrainConfig.lr), where a paper gives one role
                                    # its own (SCOPE's simulator: sim_lr)
    kl_coef: float | None = None    # this role's weight of the KL to the warm start (None: TrainConfig.kl_coef); a
                                    # co-trained counterpart anchored harder than the policy keeps playing its part


@dataclass
class TrainConfig:
    """Hyperparameters of the trainer (defaults: a few CPU minutes with tiny models); checked on construction.

        TrainConfig(steps=50, algorithm="ppo")
        TrainConfig.from_params(params, steps=2)    # a notebook's parameters: the keys that are fields, overridden
    """
    steps: int = 40                   # rollout + update iterations
    scenarios_per_step: int = 16      # distinct scenarios per rollout
    group_size: int = 4               # dialogues per scenario (the group of the group baseline)
    algorithm: str = "grpo"           # advantage: grpo | rloo | ppo (turn-level GAE with a critic)
    isolate: bool = True              # baselines per role (IB-RL) or pooled over roles
    clip_eps: float = 0.2             # clip range eps of the surrogate
    clip_eps_high: float | None = None  # upper clip range (DAPO's clip-higher); None: clip_eps
    ratio_level: str = "token"        # importance ratio per token, or per utterance (sequence likelihood)
    lr: float = 5e-4                  # AdamW learning rate of each trained adapter (RoleSpec.lr: one role's own)
    kl_coef: float = 0.0              # beta of the k3 KL to the reference (the base model)
    entropy_coef: float = 0.0         # weight of the entropy bonus
    gamma: float = 1.0                # ppo: discount over a role's turns
    lam: float = 0.95                 # ppo: GAE lambda
    vf_coef: float = 0.5              # ppo: weight of the value loss
    critic_trunk: bool = False        # ppo: value-loss gradients also train the role's adapter (shared trunk);
                                      # False: the head reads the policy's features detached
    value_clip: float | None = 0.2    # ppo: clip range of the value loss, reward units (None: unclipped)
    whiten_advantages: bool = True    # ppo: normalise the GAE advantages over the path's batch
    critic_lr: float | None = None    # ppo: learning rate of the value head (None: the role's lr; SocialRL: 2 x lr)
    epochs_per_step: int = 1          # passes over each rollout (ratios move away from 1 after the first)
    minibatches: int = 1              # optimizer steps per epoch: each pass shuffles the rollout's games (a role's
                                      # turns of one game stay together) into this many minibatches. PPO clips only
                                      # when epochs_per_step * minibatches >= 2: with one step every ratio is 1
    minibatch_turns: int = 64         # turns per forward/backward chunk (gradient accumulation inside a minibatch)
    minibatch_tokens: int | None = None  # and at most this many tokens a chunk (None: no limit): padded sequence
                                      # tokens plus the completion positions whose logits it computes, the two
                                      # that set an update's peak memory (a whole chain stays one chunk)
    lr_schedule: str = "constant"     # constant | linear (decays to 0 at `steps`)
    warmup_steps: int = 0             # linear warmup of the learning rate
    max_new_tokens: int = 48          # per turn
    max_batch_tokens: int | None = None  # decoding's token budget: what an LM agent's batch holds at once (each live
                                      # row's prompt and turn length; None: no bound): `agents.lm.LMAgent`
    temperature: float = 1.0          # sampling temperature of the policies
    max_grad_norm: float = 1.0
    mixed_precision: str = "no"       # no | bf16 | fp16 autocast in the update ("no": accelerate launch's setting)
    old_logprobs: str = "auto"        # the ratio's denominator: sampling (the log-probs the rollout sampled with) |
                                      # recompute (the update's own forward, before its first step) | auto: recompute
                                      # where the two differ beyond float error (half-precision weights or autocast:
                                      # step-by-step decoding and a full-sequence pass round apart)
    engine: str = "transformers"      # the rollout's decoding engine for the LM roles: transformers (agents.sampling,
                                      # or the lean engine for fp32 Qwen2/Llama models) | vllm (agents.vllm_engine,
                                      # an optional install: the adapters written to it when they change, the
                                      # behaviour log-probs recomputed by the update with old_logprobs="auto")
    save_every: int = 0               # checkpoint every k steps into train(checkpoint_dir=...) (0: only at the end)
    keep_checkpoints: int = 2         # the newest k checkpoints kept in checkpoint_dir (0: every one)
    report_to: str = "none"           # none | tensorboard | wandb (imported only when chosen)
    log_dir: str | None = None        # where the report_to tracker writes; None: tracking/ in the run folder of the
                                      # MetricsLogger given to train(log=...) (else results/tracking)
    seed: int = 0                     # training scenario seeds are derived from it (evaluation uses others)

    def __post_init__(self):
        self.check()

    @classmethod
    def from_params(cls, params: Mapping, **overrides) -> TrainConfig:
        """A config from the keys of `params` that are TrainConfig fields (others are ignored), `overrides` winning;
        checked. An override that is not a field is a TypeError."""
        names = {f.name for f in fields(cls)}
        return cls(**{**{k: v for k, v in params.items() if k in names}, **overrides})

    def check(self):
        """Raise ValueError naming the first field with a value out of its range (see CHOICES)."""
        for name, allowed in CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}: choose one of {', '.join(allowed)}")
        for name in ("steps", "scenarios_per_step", "group_size", "epochs_per_step", "minibatches", "minibatch_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1")
        for name in ("minibatch_tokens", "max_batch_tokens"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be >= 1 (or None: no limit)")
        for name in ("gamma", "lam"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be in [0, 1]")
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr!r}: must be > 0")
        if self.critic_lr is not None and not self.critic_lr > 0:
            raise ValueError(f"critic_lr={self.critic_lr!r}: must be > 0 (or None: the role's lr)")

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps per rollout and path: epochs_per_step x minibatches. Only the first sees ratios of 1."""
        return self.epochs_per_step * self.minibatches

    def warn_unclipped(self) -> None:
        """Warn when algorithm="ppo" takes one optimizer step per rollout: every ratio is then exactly 1, the clip
        range never acts, and the update is an advantage-weighted policy gradient with a critic, not PPO's."""
        if self.algorithm == "ppo" and self.optimizer_steps == 1:
            warnings.warn("algorithm='ppo' with epochs_per_step=1 and minibatches=1: one optimizer step per rollout, "
                          "so every importance ratio is 1 and clip_eps never acts (clipfrac stays 0). PPO as papers "
                          "run it takes several: set epochs_per_step >= 2 or minibatches >= 2", stacklevel=2)

