"""Paper 3, simulator collapse (SCOPE; notebook 03). The policy persuades; the simulator differs by method:
    single, vs, ensemble   one frozen simulator, the same behind Verbalized Sampling, or a Population of K frozen ones.
    cotrain                the simulator an adapter trained at the same time on its own reward (IB-RL's machinery).
    population             co-training with the simulator drawn per group from a FIFO pool of its own checkpoints: a
                           schedule over the steps, run as a Trainer hook (`SimulatorPool`).
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from dialogrl.agents import LMAgent, LMCounterpart, VerbalizedSampling
from dialogrl.envs import persuasion
from dialogrl.envs.persuasion import ALL_PERSUADEES
from dialogrl.envs.persuasion.task import PERSUADER_GOALS
from dialogrl.game import Agent, Population
from dialogrl.heldout import held_out_table
from dialogrl.models import PRECISIONS, adapter_parameters, load_model
from dialogrl.packaged import PACKAGED_MODELS
from dialogrl.params import ListOf, ModelName, OneOf, Optional, Str
from dialogrl.rl.methods import COMMON_CHECKS, PACKAGED, MethodSpec, Paper
from dialogrl.rl.trainer import RoleSpec, Trainer
from dialogrl.tiny import TINY_MODELS, warm_start

METHODS = ("single", "single_hot", "vs", "ensemble", "cotrain", "population")


def method_spec(method: str, simulators: Mapping[str, Agent], sim_lr: float | None = None,
                policy_role: str = "persuader", sim_role: str = "persuadee", pool_size: int = 10,
                pool_every: int = 16, sim_kl_coef: float | None = None) -> MethodSpec:
    """The MethodSpec of `method` of paper 3 ("base", which trains nothing, or one of METHODS): the policy trains the
    adapter "policy" in `policy_role`; the simulator's role is played by

        single       simulators["single"]: one frozen simulator (a mode-collapsed one, e.g. sampled at low temperature)
        single_hot   simulators["single_hot"]: the same simulator sampled at the VS simulator's temperature, so that
                     vs - single_hot is Verbalized Sampling's effect alone (vs - single also changes the temperature)
        vs           simulators["vs"]: the same simulator behind Verbalized Sampling (agents.VerbalizedSampling)
        ensemble     simulators["ensemble"]: a Population of K frozen simulators, one drawn per dialogue (its seed
                     the step: `reseed_population`)
        cotrain      the adapter "simulator", trained at the same time on its own reward (the task's 1 - r), with its
                     own advantages, loss mask and optimizer (TrainConfig.isolate=True, as IB-RL)
        population   the same, with a SimulatorPool hook (`pool_size` checkpoints, one every `pool_every` steps, in
                     adapters of their own): each group of dialogues faces the live simulator or one of its FIFO
                     checkpoints, and only the live simulator's games train it

    The policy learns at TrainConfig.lr; sim_lr: the simulator adapter's rate (None: the same). sim_kl_coef: its
    weight of the KL to the warm start (None: the config's, as the policy's): its reward 1 - r makes refusing its best
    move, one marker away, and an anchor keeps it a simulator of the persuadee it started as rather than a wall (the
    co-trained counterpart's anchor).
    """
    if method == "base":
        return MethodSpec(method, eval_adapters={policy_role: None}, adapters=("policy",))
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} of simulator collapse (SCOPE); known: base, {', '.join(METHODS)}")
    roles = {policy_role: RoleSpec(adapter="policy", trainable=True)}
    adapters, hooks = ("policy",), ()
    if method in ("cotrain", "population"):
        roles[sim_role] = RoleSpec(adapter="simulator", trainable=True, lr=sim_lr,
                                   kl_coef=sim_kl_coef)
        adapters += ("simulator",)
        if method == "population":
            pool = SimulatorPool(pool_size, pool_every, role=sim_role)
            adapters, hooks = adapters + tuple(pool.slots), (pool,)
    else:
        if method not in simulators:
            raise ValueError(f"method {method!r} trains against simulators[{method!r}]; given: {sorted(simulators)}")
        roles[sim_role] = RoleSpec(agent=simulators[method])
        hooks = (reseed_population(sim_role),) if method == "ensemble" else ()
    return MethodSpec(method, roles, eval_adapters={policy_role: "policy"}, hooks=hooks, adapters=adapters)


def simulators(model, tok, members: Sequence[tuple] | None = None, *, max_new_tokens: int, temperature: float,
               vs_temperature: float, vs_max_new_tokens: int, vs_k: int, vs_mode: str, vs_retries: int, seed: int,
               counterpart: str = "Persuader") -> dict[str, Agent]:
    """The frozen simulators of the methods above, all on one warm start (model, tok):

        single       sampled at `temperature`
        single_hot   sampled at `vs_temperature`, without VS: the control for VS's temperature
        vs           VerbalizedSampling (vs_k answers, vs_mode, vs_retries; `seed` keys its draws) over the model
                     at vs_temperature, writing up to vs_max_new_tokens
        reference    sampled at temperature 1: what the collapse statistics measure the others against
        ensemble     given `members` (more warm starts, as (model, tok) pairs; an empty list is allowed): a Population
                     of this warm start and the members, named sim-0, sim-1, ..., each at `temperature`, drawn with
                     `seed`
    """
    def lm(name, m=model, t=tok, temp=temperature, tokens=max_new_tokens):
        return LMAgent(m, t, name=name, max_new_tokens=tokens, temperature=temp)

    out = {"single": lm("single"), "single_hot": lm("single_hot", temp=vs_temperature),
           "vs": VerbalizedSampling(lm("vs-lm", temp=vs_temperature, tokens=vs_max_new_tokens), k=vs_k, mode=vs_mode,
                                    retries=vs_retries, seed=seed, name="vs", counterpart=counterpart),
           "reference": LMAgent(model, tok, name="reference", max_new_tokens=max_new_tokens)}
    if members is not None:
        pairs = [(model, tok), *members]
        out["ensemble"] = Population({f"sim-{j}": lm(f"sim-{j}", m, t) for j, (m, t) in enumerate(pairs)}, seed=seed,
                                     name="ensemble")
    return out


def seed_simulators(p: Mapping, paths: Sequence[str], k: int, bf16: bool) -> dict[str, Agent]:
    """Training seed k's frozen simulators (`simulators`) on its warm start `paths[k]`, at the notebook's parameters
    `p`; with "ensemble" among the methods, the ensemble's members are the next builds, `paths[k + 1]` onwards."""
    model, tok = load_model(paths[k], device="auto", bf16=bf16)
    members = ([load_model(paths[k + j], device="auto", bf16=bf16) for j in range(1, p["ensemble_size"])]
               if "ensemble" in p["methods"] else None)
    return simulators(model, tok, members, max_new_tokens=p["max_new_tokens"], temperature=p["single_temperature"],
                      vs_temperature=p["vs_temperature"], vs_max_new_tokens=p["vs_max_new_tokens"], vs_k=p["vs_k"],
                      vs_mode=p["vs_mode"], vs_retries=p["vs_retries"], seed=p["seed"] + k)


def collapse_settings(p: Mapping) -> dict:
    """The simulators a pretrained model's collapse compares (`collapse.pretrained_collapse`'s keyword arguments) at
    notebook 03's parameters `p`: single at `single_temperature`, single_hot and VS at `vs_temperature`, as in
    training; VS naming the other role "Persuader"."""
    return {"max_new_tokens": p["max_new_tokens"], "temperature": p["single_temperature"],
            "hot_temperature": p["vs_temperature"], "vs_k": p["vs_k"], "vs_mode": p["vs_mode"],
            "vs_max_new_tokens": p["vs_max_new_tokens"], "counterpart": "Persuader"}


@dataclasses.dataclass
class HeldOut:
    """Notebook 03's held-out persuadees: the scripted personas, the models by name and path (the warm-start recipe on
    other corpora, the human-fit model, hub or local models) and the pretrained instruct persuadees, which talk from
    the game's character prompt and decide by calibrated likelihood (`LMCounterpart`). `load()` gives the panel and
    the pretrained ones as agents: models load where they play, in the notebook for the design checks and in each
    training run's own process for its evaluation (a run receives none with its closure). `family`: each member's
    split from the corpus persuadees, "same rule family" or "other family"; `table`: the scripted members' distances
    (`heldout.held_out_table`)."""
    personas: list[str]
    paths: dict[str, str]
    packaged: list[str]
    family: dict[str, str]
    table: list[dict]
    bf16: bool
    max_new_tokens: int
    temperature: float   # the pretrained persuadees' sampling temperature

    @property
    def members(self) -> list[str]:
        return [*self.personas, *self.paths, *self.packaged]

    def load(self) -> tuple[dict[str, Agent], dict[str, Agent]]:
        """The panel (scripted members draw by each game's seed; the models) and the pretrained persuadees."""
        def agent(path, name, **kw):
            return LMAgent.load(path, bf16=self.bf16, max_new_tokens=self.max_new_tokens, name=name, **kw)

        panel = {n: persuasion.ScriptedAgent(n) for n in self.personas}
        panel |= {name: agent(path, name) for name, path in self.paths.items()}
        return panel, {n: LMCounterpart(agent(n, n, temperature=self.temperature), name=n) for n in self.packaged}


def held_out(p: Mapping, human_data: str | None, bf16: bool) -> HeldOut:
    """The held-out persuadees of notebook 03's parameters `p`: `heldout_personas`, the warm-start recipe on corpora
    of `heldout_corpus_seeds`, `heldout_models`, the human-fit model of the warm starts' size (with `human_data` and
    an embedded warm start) and `heldout_packaged` at `counterpart_temperature`. The scripted members' split is by
    rule (what it reads, range-scaled: `heldout`); the other-corpus models imitate the corpus personas (the same rule
    family), the human-fit, hub and pretrained models do not (another family)."""
    paths = {f"corpus-{c}": warm_start(p["policy_model"], p["warm_start_dialogues"], corpus_seed=c)
             for c in p["heldout_corpus_seeds"]} | {Path(m).name: m for m in p["heldout_models"]}
    if human_data is not None and p["policy_model"] in TINY_MODELS:
        paths["human-fit"] = warm_start("tiny-persuasion-human", p["warm_start_dialogues"], source=human_data)
    table = held_out_table({n: persuasion.traits(n) for n in p["heldout_personas"]},
                           {n: persuasion.traits(n) for n in persuasion.PERSUADEE_PERSONAS})
    family = {r["counterpart"]: r["split"] for r in table} | {m: "other family" for m in
                                                              [*paths, *p["heldout_packaged"]]}
    family |= {n: "same rule family" for n in paths if n.startswith("corpus-")}
    return HeldOut(list(p["heldout_personas"]), paths, list(p["heldout_packaged"]), family, table, bf16,
                   p["max_new_tokens"], p["counterpart_temperature"])


def trained_simulator(method: str, trainer: Trainer, sim_role: str, seed: int) -> tuple[Agent, dict | None]:
    """After training: the simulator a run's policy is checked against (its `train` games), and its Verbalized
    Sampling counts in training (None without VS), copied before evaluation adds to them. The trainer's own agent in
    `sim_role`; the ensemble's Population reseeded with `seed`, so that its members are drawn as the base's games
    against the training ensemble draw them (the training hook reseeded it every step): paired games."""
    sim = trainer.agents[sim_role]
    if method == "ensemble":
        sim = dataclasses.replace(sim, seed=seed)
    return sim, copy.deepcopy(sim.stats) if isinstance(sim, VerbalizedSampling) else None


FROZEN = ("single", "single_hot", "vs", "ensemble")   # the methods that train against a frozen simulator
COTRAINED = ("cotrain", "population")                 # the methods that train their simulator too


def checked_against(methods: Sequence[str]) -> dict[str, str]:
    """The frozen simulator (a name of `simulators`) each trained method of `methods` is checked against: its own, or
    for a co-trained method where its simulator starts ("reference", the warm start)."""
    return {m: m for m in FROZEN if m in methods} | {m: "reference" for m in COTRAINED if m in methods}


def reference_simulators(method: str, sims: Mapping[str, Agent], methods: Sequence[str]) -> dict[str, Agent]:
    """The frozen simulators a run of `method` plays besides its own, each under the label its games get: the base
    plays the training simulator of every frozen method of `methods` ("train-<method>": the mismatch's and the
    manipulation checks' reference) and, with a co-trained method among them, the warm start where its simulator
    starts ("train-initial"); a co-trained method's policy plays that starting point too (its check: against its
    final simulator, the simulator's own learning would count as the policy's). `sims`: the run's `simulators`."""
    if method == "base":
        out = {f"train-{m}": sims[m] for m in FROZEN if m in methods}
        return out | ({"train-initial": sims["reference"]} if any(m in COTRAINED for m in methods) else {})
    return {"train-initial": sims["reference"]} if method in COTRAINED else {}


class SimulatorPool:
    """Population co-training's FIFO pool of simulator checkpoints, as a Trainer hook (`Trainer(hooks=[pool])`).

    At the start of step t it first snapshots the live simulator's adapter when t is a multiple of `every` (so the
    pool starts with the initial simulator), copying its LoRA weights into the next slot adapter (`slots`, created
    on the model beforehand, e.g. load_model(adapters=["policy", "simulator", *pool.slots])); when the pool holds
    `size` checkpoints the oldest is overwritten. Then it puts a Population in the simulator's role: the live
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
        step = trainer.step_count
        if step % self.every == 0:
            self.snapshot(trainer.model, step)
        live = trainer.agents[self.role] if not isinstance(trainer.agents[self.role], Population) \
            else trainer.agents[self.role].members[trainer.own_agent[self.role]]
        members = {live.name: live}
        for slot, at in self.checkpoints:
            members[f"{slot}@{at}"] = trainer.lm_agent(slot, name=f"{slot}@{at}")
        trainer.agents[self.role] = Population(members, seed=step, name="simulator-pool")


def reseed_population(role: str):
    """A Trainer hook for a Population playing `role` (the `ensemble` method): its seed becomes the step. Since
    every training game has its own seed (`Trainer.scenarios`), a Population draws anew per game without it; the
    hook only adds the step to the key."""
    def hook(trainer) -> None:
        agent = trainer.agents[role]
        if not hasattr(agent, "members"):
            raise TypeError(f"reseed_population: {role!r} is played by a {type(agent).__name__}, not a Population")
        agent.seed = trainer.step_count
    return hook


def workload(p: dict, base: dict) -> list[dict]:
    """Notebook 03's training runs (`Paper.workload`): the persuader against a frozen simulator (single, vs,
    ensemble), or co-trained with its simulator (two adapters of one model); held-out evaluation against the
    language-model persuadees of its panel and the human-fit persuadee."""
    seeds, curve = p["n_seeds"], base["curve"]
    trained = [m for m in p["methods"] if m != "base"]
    cotrained = sum(m in ("cotrain", "population") for m in trained)
    lm_panel = len(p["heldout_corpus_seeds"]) + len(p["heldout_models"]) + len(p["heldout_packaged"]) + 1
    # a run's worker loads its seed's frozen simulators (one model; the ensemble's members too) and the held-out
    # panel's models; the notebook's process lets its own copies go before the runs
    held = [*p["heldout_models"], *p["heldout_packaged"]]
    members = [p["policy_model"]] * (p["ensemble_size"] - 1) if "ensemble" in trained else []
    run = {**base, "model": p["policy_model"], "others": [p["policy_model"], *members, *held], "main": [],
           "turns": 2 * p["max_exchanges"],
           "trained_turns": p["max_exchanges"],   # + the human-fit persuadee, + the training simulator's check
           "eval_plays": (1 + lm_panel) / 2 + 1 + curve * (1 + lm_panel) / 2}
    sims = len(trained) - cotrained + bool(cotrained)   # the simulators checked (a co-trained one: its start)
    frozen = {**run, "what": "the persuader against a frozen simulator", "runs": seeds * (len(trained) - cotrained),
              "check_plays": (seeds * sims + lm_panel) * 0.5 + sims * seeds}
    if "vs" in trained:   # the longest game: the simulator's turns are Verbalized Sampling answers
        frozen["tokens"] = (p["max_new_tokens"] + p["vs_max_new_tokens"]) / 2
    cotrain = {**run, "what": "persuader and simulator co-trained (two adapters of one model)", "others": held,
               "adapters": 2, "runs": seeds * cotrained, "check_plays": 0 if frozen["runs"] else
               frozen["check_plays"]}
    return [r for r in (frozen, cotrain) if r["runs"]]


CHECKS = {**COMMON_CHECKS,   # notebook 03's parameters: what their literals do not say
    "policy_model heldout_models": ModelName(),
    "methods": ListOf(OneOf("base", *METHODS), min_len=1),
    "vs_mode": OneOf("random", "prob"),
    "persuader_goal": OneOf(*PERSUADER_GOALS),
    "heldout_personas": OneOf(*ALL_PERSUADEES),
    "heldout_packaged collapse_packaged": OneOf(*PACKAGED_MODELS),
    "precision": OneOf(*PRECISIONS),
    "human_data": Optional(Str()),
    "seed vs_retries kl_coef sim_kl_coef warm_start_dialogues eval_every n_transcripts replace_builds": ">= 0",
    ("n_seeds vs_k vs_max_new_tokens pool_size pool_every steps scenarios_per_step epochs_per_step minibatches lora_r "
     "max_new_tokens max_exchanges heldout_corpus_seeds packaged_eval_scenarios eval_scenarios check_scenarios "
     "curve_scenarios processes"): ">= 1",
    "ensemble_size group_size collapse_samples coverage_clusters probe_games room_games": ">= 2",
    "collapse_states packaged_collapse_states": ">= 3",
    "single_temperature vs_temperature counterpart_temperature sim_lr lr temperature": "> 0",
}


PAPER = Paper("03_scope_simulator_collapse", "SCOPE: simulator collapse", method_spec, workload,
              stand_ins={"policy_model": "persuasion", "heldout_models": ["persuasion"]},
              packaged_stand_ins={"policy_model": PACKAGED, "heldout_models": [PACKAGED]},
              checks=CHECKS)
