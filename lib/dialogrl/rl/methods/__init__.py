"""Each paper's methods in one shape: a `MethodSpec` says how a method trains (the trainer's roles, config overrides,
hooks and per-turn rewards) and which adapter plays each role afterwards. One module per paper builds them by name:

    calibrated   paper 1, From Static Context to Calibrated Interactive RL (notebook 01)
    socialrl     paper 2, SocialRL (notebook 02)
    scope        paper 3, simulator collapse: SCOPE (notebook 03)
    ibrl         paper 4, IB-RL: Isolated Bilateral RL (notebook 04)

and every notebook trains a method with the same three lines:

    spec = ibrl.method_spec("ibrl", task.roles)                     # each module's method_spec(name, ...)
    model, tok = load_model(path, adapters=spec.adapters)
    trainer = spec.trainer(task, model, tok, TrainConfig.from_params(params, seed=s))   # None: trains nothing
    trainer.train(...)

A fifth paper adds a module here with its METHODS and a `method_spec(name, ...) -> MethodSpec`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer


@dataclass(frozen=True)
class MethodSpec:
    """One method of one paper: how it trains, and what plays each role at evaluation."""
    name: str
    roles: dict[str, RoleSpec] = field(default_factory=dict)                 # Trainer RoleSpecs ({}: trains nothing)
    config_overrides: dict[str, Any] = field(default_factory=dict)           # TrainConfig fields the method sets
    eval_adapters: dict[str, str | None] = field(default_factory=dict)       # role -> adapter it plays at evaluation
                                                                             # (None: the warm start); roles it leaves
                                                                             # unnamed too
    hooks: tuple[Callable[[Trainer], None], ...] = ()                        # Trainer hooks, at the start of each step
    turn_rewards: Callable | None = None                                     # per-turn rewards (rewards.ProcessReward)
    adapters: tuple[str, ...] = ()                                           # LoRA adapters to create, in this order
                                                                             # (it sets their initialisation)
    train_counterparts: dict[str, str | None] = field(default_factory=dict)  # role -> the adapter it faced in training
    trainer_class: type[Trainer] = Trainer                                   # e.g. rl.static.StaticContextTrainer
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)             # the trainer class's own fields

    def trainer(self, task, model, tokenizer, config: TrainConfig,
                hooks: tuple[Callable[[Trainer], None], ...] = ()) -> Trainer | None:
        """The method's trainer on `model` (created with `adapters`), its config `config` with the method's
        overrides, its hooks followed by `hooks` (a notebook's own logging); None for a method that trains
        nothing."""
        if not self.roles:
            return None
        return self.trainer_class(task, model, tokenizer, self.roles,
                                  config=dataclasses.replace(config, **self.config_overrides),
                                  turn_rewards=self.turn_rewards, hooks=[*self.hooks, *hooks], **self.trainer_kwargs)
