"""Each paper's methods as named configurations of the trainer: which roles train, through which adapters, against
whom, and whether their advantages are isolated.

    for method in ibrl_methods(("A", "B")):               # base, unilateral-A, unilateral-B, ibrl, shared
        m = ibrl_roles(method, task.roles, lr=1e-3)
        model, tok = load_model(path, adapters=m.adapters)
        if m.roles:                                        # base trains nothing
            Trainer(task, model, tok, m.roles, TrainConfig(isolate=m.isolate)).train()
        # at evaluation seat r plays adapter m.seats[r]; its training partner was adapter m.partners[r]

Paper 1, From Static Context to Calibrated Interactive RL (notebook 01). The policy holds one seat, the user (a
simulator, the logs, or the human proxy) the other:
    base          the warm start, untrained.
    static        Static Context RL: the policy's adapter on logged contexts, scored by a reward model fitted on the
                  logs (`rl/static.py`, `StaticContextTrainer`); no partner plays.
    interactive   RL on the policy's own games against the uncalibrated simulator (a fixed agent in the user's seat).
    calibrated    the same against the simulator calibrated on the human logs (`calibration.py`).

Paper 4, IB-RL: Isolated Bilateral RL (notebook 04). Two roles, each a seat of the game:
    base               the warm start in both seats.
    unilateral-<role>  that role's adapter trained against the frozen warm start; the other seat stays the warm start,
                       in training and at evaluation.
    ibrl               both roles trained in joint rollouts, each through its own update path: its own LoRA adapter
                       and optimizer (`RoleSpec(adapter=role)`; one path per adapter in `rl/trainer.py`), advantages
                       from its own rewards only (`TrainConfig.isolate=True`), and a loss over its own tokens only (the
                       completion tokens of its own turns: the loss mask of each role's update path).
    shared             the ablation: both roles through one adapter and optimizer, advantages pooled over the roles
                       (`TrainConfig.isolate=False`).

Later papers (not here yet). SocialRL (paper 2) is one policy against a fixed opponent with PPO and process rewards,
a configuration of the same kind. Simulator collapse (paper 3, SCOPE) needs schedules over the training steps rather
than one fixed set of RoleSpecs: co-training (the simulator a trainable role with the complementary loss mask, in its
own GRPO groups), population co-training (the simulator drawn from a FIFO pool of its own checkpoints) and a rotation
over K frozen simulators. They belong in a section of their own at the end of this module.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dialogrl.envs.base import Agent
from dialogrl.rl.trainer import RoleSpec

# ------------------------------------------------------------------ paper 1: Calibrated Interactive RL

CALIBRATED_RL_METHODS = ("base", "static", "interactive", "calibrated")
SIMULATOR_OF = {"interactive": "uncalibrated", "calibrated": "calibrated"}  # the simulator each method trains against


def calibrated_rl_roles(method: str, simulators: Mapping[str, Agent], lr: float, policy_seat: str = "A",
                        user_seat: str = "B") -> dict[str, RoleSpec]:
    """The RoleSpecs that train `method` of paper 1 ({} for base, which trains nothing).

    simulators: {"uncalibrated": agent, "calibrated": agent}, the user simulators of this training seed.
    lr: the policy adapter's learning rate. The policy trains the adapter "policy" in `policy_seat`; static has no
    partner (its contexts are logged), interactive and calibrated face their simulator (SIMULATOR_OF) in `user_seat`.
    """
    if method not in CALIBRATED_RL_METHODS:
        raise ValueError(f"unknown method {method!r} of Calibrated Interactive RL; known: "
                         f"{', '.join(CALIBRATED_RL_METHODS)}")
    if method == "base":
        return {}
    roles = {policy_seat: RoleSpec(adapter="policy", trainable=True, lr=lr)}
    if method in SIMULATOR_OF:
        roles[user_seat] = RoleSpec(agent=simulators[SIMULATOR_OF[method]])
    return roles


# --------------------------------------------------------------------------------- paper 4: IB-RL

@dataclass(frozen=True)
class MethodSpec:
    """One method of a bilateral game: how it trains and which adapter plays each seat afterwards."""
    name: str
    roles: dict[str, RoleSpec]          # the Trainer's RoleSpecs, every role of the task ({}: nothing to train)
    seats: dict[str, str | None]        # role -> the adapter its policy plays at evaluation (None: the warm start)
    isolate: bool                       # TrainConfig.isolate: advantages per role (True) or pooled over roles
    partners: dict[str, str | None]     # role -> the adapter it faced in training (None: the warm start);
                                        # a seat the method leaves untrained has no entry

    @property
    def adapters(self) -> list[str]:
        """The LoRA adapters to create on the warm start, sorted."""
        return sorted({spec.adapter for spec in self.roles.values() if spec.adapter})


def ibrl_methods(sides: Sequence[str]) -> list[str]:
    """The methods of paper 4 in table order: base, one unilateral run per side in `sides`, ibrl, shared."""
    return ["base"] + [f"unilateral-{side}" for side in sides] + ["ibrl", "shared"]


def ibrl_roles(method: str, roles: Sequence[str], lr: float) -> MethodSpec:
    """The MethodSpec of `method` (one of `ibrl_methods(roles)`) for a two-role task with roles `roles`.

    lr: every trained adapter's learning rate. Adapters are named "policy" (unilateral), the role (ibrl) or "shared".
    """
    roles = tuple(roles)
    if len(roles) != 2:
        raise ValueError(f"IB-RL methods are for two-role games; got roles {roles}")
    other = {roles[0]: roles[1], roles[1]: roles[0]}
    if method == "base":
        return MethodSpec(method, {}, {r: None for r in roles}, True, {r: None for r in roles})
    if method.startswith("unilateral-") and method.split("-", 1)[1] in roles:
        side = method.split("-", 1)[1]
        specs = {r: RoleSpec(adapter="policy", trainable=True, lr=lr) if r == side else RoleSpec() for r in roles}
        seats = {r: "policy" if r == side else None for r in roles}  # the untrained seat plays the warm start
        return MethodSpec(method, specs, seats, True, {side: None})
    if method == "ibrl":
        specs = {r: RoleSpec(adapter=r, trainable=True, lr=lr) for r in roles}
        return MethodSpec(method, specs, {r: r for r in roles}, True, {r: other[r] for r in roles})
    if method == "shared":
        specs = {r: RoleSpec(adapter="shared", trainable=True, lr=lr) for r in roles}
        return MethodSpec(method, specs, {r: "shared" for r in roles}, False, {r: "shared" for r in roles})
    raise ValueError(f"unknown IB-RL method {method!r} for roles {roles}; known: {', '.join(ibrl_methods(roles))}")


# ------------------------------------------------------ paper 3: simulator collapse (SCOPE), not implemented yet
# Co-training and population co-training change the simulator's seat between steps (its adapter trains with the
# complementary loss mask, or is drawn from a FIFO pool of its checkpoints), and a rotation swaps frozen simulators:
# each is a schedule of RoleSpecs over the training steps, which the trainer will need a hook for.
