"""Paper 1, From Static Context to Calibrated Interactive RL (notebook 01). The policy plays one role, the user (a
simulator, the logs, or the human proxy) the other:
    base          the warm start, untrained.
    static        Static Context RL: the policy's adapter on logged contexts, scored by a reward model fitted on the
                  logs (`rl/static.py`, `StaticContextTrainer`); no counterpart plays.
    interactive   RL on the policy's own games against the uncalibrated simulator (a fixed agent in the user's role).
    calibrated    the same against the simulator calibrated on the human logs (`calibration.py`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from dialogrl.game import Agent
from dialogrl.rl.methods import MethodSpec
from dialogrl.rl.static import Context, StaticContextTrainer, TurnRewardModel
from dialogrl.rl.trainer import RoleSpec

METHODS = ("base", "static", "interactive", "calibrated")
SIMULATOR_OF = {"interactive": "uncalibrated", "calibrated": "calibrated"}  # the simulator each method trains against


def method_spec(method: str, simulators: Mapping[str, Agent], policy_role: str = "A",
                user_role: str = "B", contexts: list[Context] | None = None,
                reward_model: TurnRewardModel | None = None) -> MethodSpec:
    """The MethodSpec of `method` of paper 1 (base trains nothing).

    simulators: {"uncalibrated": agent, "calibrated": agent}, the user simulators of this training seed.
    The policy trains the adapter "policy" (at TrainConfig.lr) in `policy_role`; static has no
    counterpart (its contexts are logged: `contexts` and the fitted `reward_model`, a StaticContextTrainer's),
    interactive and calibrated face their simulator (SIMULATOR_OF) in `user_role`.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} of Calibrated Interactive RL; known: {', '.join(METHODS)}")
    if method == "base":
        return MethodSpec(method, eval_adapters={policy_role: None}, adapters=("policy",))
    roles = {policy_role: RoleSpec(adapter="policy", trainable=True)}
    if method in SIMULATOR_OF:
        roles[user_role] = RoleSpec(agent=simulators[SIMULATOR_OF[method]])
    spec = MethodSpec(method, roles, eval_adapters={policy_role: "policy"}, adapters=("policy",))
    if method != "static":
        return spec
    if contexts is None or reward_model is None:
        raise ValueError("static trains on logged contexts: give contexts= (rl.static.cut_contexts) and a fitted "
                         "reward_model= (rl.static.TurnRewardModel)")
    return dataclasses.replace(spec, trainer_class=StaticContextTrainer,
                               trainer_kwargs={"contexts": contexts, "reward_model": reward_model})
