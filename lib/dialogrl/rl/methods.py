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

Paper 3, simulator collapse (SCOPE; notebook 03). The policy persuades; the simulator's seat changes by method:
    single, vs, ensemble   one frozen simulator, the same behind Verbalized Sampling, or a Population of K frozen ones.
    cotrain                the simulator an adapter trained at the same time on its own reward (IB-RL's machinery).
    population             co-training with the simulator drawn per group from a FIFO pool of its own checkpoints: a
                           schedule over the steps, run as a Trainer hook (`SimulatorPool`).

Paper 2, SocialRL (notebook 02). One policy (the agent) against fixed scripted partners; the methods differ in the
advantage and the reward (`socialrl_method`):
    single_turn     per-utterance rewards with no propagation across turns: PPO with gamma = 0 (each turn's advantage
                    is its own process reward, plus the outcome on the last turn, minus the critic's value)
    outcome_ppo     multi-turn PPO, turn-level GAE, the outcome reward only
    socialrl        multi-turn PPO, turn-level GAE over 0.3 x the stage-weighted process reward per turn plus the
                    outcome (dynamic weights: the judge's proposal, sanitised)
    socialrl_grpo   the same rewards, a group baseline over the dialogue's total reward instead of the critic
    uniform, manual the socialrl ablations of the weight schedule (1/6 each; the paper's fixed schedule by stage)
PPO here clips only when it takes several optimizer steps per rollout: TrainConfig.epochs_per_step x minibatches >= 2
(the notebook's parameters of those names reach TrainConfig.from_params; the Trainer warns for PPO with one step, and
`<adapter>/clipfrac` shows the clip acting). The value head's learning rate is TrainConfig.critic_lr (the paper:
1e-5 policy, 2e-5 value). socialrl_grpo takes the same optimizer steps, so socialrl - socialrl_grpo compares the
advantage (critic + GAE against the group baseline) and nothing else.
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


# ---------------------------------------------------------------------------------------- paper 2: SocialRL

@dataclass(frozen=True)
class SocialRLMethod:
    """The trainer settings of one SocialRL method: the advantage (`algorithm`, `gamma`, `lam`) and the weight schedule
    of the process reward (None: the outcome reward only)."""
    algorithm: str
    gamma: float
    lam: float
    schedule: str | None


SOCIALRL_METHODS: dict[str, SocialRLMethod] = {
    "single_turn": SocialRLMethod("ppo", 0.0, 0.0, "dynamic"),
    "outcome_ppo": SocialRLMethod("ppo", 0.95, 0.95, None),
    "socialrl": SocialRLMethod("ppo", 0.95, 0.95, "dynamic"),
    "socialrl_grpo": SocialRLMethod("grpo", 1.0, 1.0, "dynamic"),
    "uniform": SocialRLMethod("ppo", 0.95, 0.95, "uniform"),
    "manual": SocialRLMethod("ppo", 0.95, 0.95, "manual"),
}


def socialrl_method(method: str) -> SocialRLMethod:
    """The settings of a SocialRL method by name (see the module docstring); gamma and lam are the paper's 0.95."""
    if method not in SOCIALRL_METHODS:
        raise ValueError(f"unknown method {method!r} of SocialRL; known: {', '.join(SOCIALRL_METHODS)}")
    return SOCIALRL_METHODS[method]


# ------------------------------------------------------------------------ paper 3: simulator collapse (SCOPE)

SCOPE_METHODS = ("single", "single_hot", "vs", "ensemble", "cotrain", "population")


def scope_roles(method: str, simulators: Mapping[str, Agent], lr: float, sim_lr: float | None = None,
                policy_role: str = "persuader", sim_role: str = "persuadee") -> dict[str, RoleSpec]:
    """The RoleSpecs of `method` of paper 3: the policy trains the adapter "policy" in `policy_role`; the simulator's
    seat holds

        single       simulators["single"]: one frozen simulator (a mode-collapsed one, e.g. sampled at low temperature)
        single_hot   simulators["single_hot"]: the same simulator sampled at the VS simulator's temperature, so that
                     vs - single_hot is Verbalized Sampling's effect alone (vs - single also changes the temperature)
        vs           simulators["vs"]: the same simulator behind Verbalized Sampling (agents.VerbalizedSampling)
        ensemble     simulators["ensemble"]: a Population of K frozen simulators, one drawn per dialogue
        cotrain      the adapter "simulator", trained at the same time on its own reward (the task's 1 - r), with its
                     own advantages, loss mask and optimizer (TrainConfig.isolate=True, as IB-RL)
        population   the same, with a SimulatorPool hook: each group of dialogues faces the live simulator or one of
                     its FIFO checkpoints, and only the live simulator's games train it

    sim_lr: the simulator adapter's learning rate (None: lr).
    """
    if method not in SCOPE_METHODS:
        raise ValueError(f"unknown method {method!r} of simulator collapse (SCOPE); known: {', '.join(SCOPE_METHODS)}")
    roles = {policy_role: RoleSpec(adapter="policy", trainable=True, lr=lr)}
    if method in ("cotrain", "population"):
        roles[sim_role] = RoleSpec(adapter="simulator", trainable=True, lr=lr if sim_lr is None else sim_lr)
    else:
        if method not in simulators:
            raise ValueError(f"method {method!r} trains against simulators[{method!r}]; given: {sorted(simulators)}")
        roles[sim_role] = RoleSpec(agent=simulators[method])
    return roles


class SimulatorPool:
    """Population co-training's FIFO pool of simulator checkpoints, as a Trainer hook (`Trainer(hooks=[pool])`).

    At the start of step t it first snapshots the live simulator's adapter when t is a multiple of `every` (so the
    pool starts with the initial simulator), copying its LoRA weights into the next slot adapter (`slots`, created
    on the model beforehand, e.g. load_model(adapters=["policy", "simulator", *pool.slots])); when the pool holds
    `size` checkpoints the oldest is overwritten. Then it puts a Population in the simulator's seat: the live
    simulator and every checkpoint, drawn uniformly, one per scenario group (the Population's seed is the step), so
    that a group's dialogues face one simulator. The trainer trains the live simulator on its own games only.
    `checkpoints` lists (slot, step) oldest first; `history` every snapshot taken.
    """

    def __init__(self, size: int = 10, every: int = 16, role: str = "persuadee", live: str = "simulator",
                 prefix: str = "pool"):
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"pool size={size!r}: must be an int >= 1")
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"pool every={every!r}: must be an int >= 1 (steps between snapshots)")
        self.size, self.every, self.role, self.live = size, every, role, live
        self.slots = [f"{prefix}-{i}" for i in range(size)]
        self.checkpoints: list[tuple[str, int]] = []
        self.history: list[tuple[str, int]] = []

    def snapshot(self, model, step: int) -> str:
        """Copy the live adapter's weights into the next slot (FIFO); returns the slot."""
        import torch

        from dialogrl.models import adapter_parameters

        if len(self.checkpoints) < self.size:
            slot = self.slots[len(self.checkpoints)]
        else:
            slot = self.checkpoints.pop(0)[0]
        src = adapter_parameters(model, self.live)
        dst = adapter_parameters(model, slot)
        with torch.no_grad():
            for name, p in src.items():
                dst[name.replace(f".{self.live}.", f".{slot}.")].copy_(p)
        self.checkpoints.append((slot, step))
        self.history.append((slot, step))
        return slot

    def __call__(self, trainer) -> None:
        from dialogrl.agents import LMAgent
        from dialogrl.envs.base import Population

        step = trainer.step_count
        if step % self.every == 0:
            self.snapshot(trainer.model, step)
        live = trainer.agents[self.role] if not isinstance(trainer.agents[self.role], Population) \
            else trainer.agents[self.role].members[trainer.own_agent[self.role]]
        cfg = trainer.config
        members = {live.name: live}
        for slot, at in self.checkpoints:
            members[f"{slot}@{at}"] = LMAgent(trainer.model, trainer.tokenizer, adapter=slot, name=f"{slot}@{at}",
                                              max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature)
        trainer.agents[self.role] = Population(members, seed=step, name="simulator-pool")


def reseed_population(role: str):
    """A Trainer hook for a Population in `role`'s seat (the `ensemble` method): its seed becomes the step. Since
    every training game has its own seed (`Trainer.scenarios`), a Population draws anew per game without it; the
    hook only adds the step to the key."""
    def hook(trainer) -> None:
        agent = trainer.agents[role]
        if not hasattr(agent, "members"):
            raise TypeError(f"reseed_population: the {role!r} seat holds a {type(agent).__name__}, not a Population")
        agent.seed = trainer.step_count
    return hook
