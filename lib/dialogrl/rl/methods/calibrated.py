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
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from dialogrl import calibration
from dialogrl.agents import LMAgent
from dialogrl.data import data_path
from dialogrl.envs import dealnodeal
from dialogrl.envs.dealnodeal import ALL_PERSONAS
from dialogrl.envs.dealnodeal.data import load_dond, replay, selection_conversations
from dialogrl.game import Agent, GameState
from dialogrl.heldout import held_out_table
from dialogrl.models import PRECISIONS, load_model
from dialogrl.params import Int, ListOf, ModelName, OneOf, Str
from dialogrl.rl.config import LR_SCHEDULES
from dialogrl.rl.methods import COMMON_CHECKS, PACKAGED, MethodSpec, Paper
from dialogrl.rl.static import Context, StaticContextTrainer, TurnRewardModel
from dialogrl.rl.trainer import RoleSpec
from dialogrl.rollout import play
from dialogrl.seeds import eval_seeds, stream_seed
from dialogrl.tiny import TINY_MODELS, TinyConfig, build_tiny

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


# the paper's gains on MATH-Chat, relative: interactive 89.3, calibrated 91.5, static 85.0, base 82.3 (PAPERS.md)
PAPER_GAIN = {"interactive_minus_static": 89.3 / 85.0 - 1, "calibrated_minus_interactive": 91.5 / 89.3 - 1,
              "calibrated_minus_static": 91.5 / 85.0 - 1, "static_minus_base": 85.0 / 82.3 - 1}


@dataclasses.dataclass
class Humans:
    """The human side of notebook 01: the logged games for training and calibration, the held-out ones, the logged
    humans' role-A policy (the counterpart of the simulators' behaviour comparison), the human proxy (the deployment
    counterpart in role B: `proxy()` gives it for one evaluation) and each proxy member's split from the personas the
    pipeline saw (`family`: same rule family or other family; empty for a model of real humans)."""
    train_logs: list[GameState]
    held_logs: list[GameState]
    human_a: Agent
    proxy: Callable[[], Agent]
    family: dict[str, str]
    table: list[dict] | None = None   # synthetic: each proxy persona's distance from the personas seen (heldout)
    note: str = ""   # what the logs are, for the notebook to print


def synthetic_humans(task, p: Mapping) -> Humans:
    """The synthetic humans: a population of `human_personas` (mixed by `human_weights`, speaking `human_style`) plays
    `n_human_logs` games, 80% for training and calibration, 20% held out. The proxy is a population of
    `proxy_personas` in the same style, whose draws are keyed by each evaluation game's seed."""
    weights = dict(zip(p["human_personas"], p["human_weights"]))
    humans = {r: dealnodeal.population(r, p["human_personas"], weights, seed=p["seed"], style=p["human_style"])
              for r in task.roles}  # each draw is keyed by its game and role
    scenarios = task.sample_scenarios(p["n_human_logs"], seed=stream_seed("logs", p["seed"]))
    logs = [e.state for e in play(task, humans, scenarios)]
    n_train = int(0.8 * len(logs))
    # each proxy persona's distance from every persona the pipeline saw (the logs, the warm start's corpus; what its
    # rule reads, range-scaled: dialogrl.heldout) and its split: their rule family, or another one
    table = held_out_table({n: dealnodeal.traits(n) for n in p["proxy_personas"]},
                           {n: dealnodeal.traits(n) for n in {*p["human_personas"], *dealnodeal.PERSONAS}})
    return Humans(logs[:n_train], logs[n_train:], humans["A"],
                  functools.partial(dealnodeal.population, "B", p["proxy_personas"], style=p["human_style"]),
                  {r["counterpart"]: r["split"] for r in table}, table,
                  f"{len(logs)} games of synthetic humans ({', '.join(weights)}); "
                  f"the proxy: {', '.join(p['proxy_personas'])}")


def _same(agent: Agent) -> Agent:   # an LM proxy draws from torch's RNG, reseeded before every evaluation cell
    return agent


def real_humans(task, p: Mapping, run_dir: Path, paths: list[str] | None, bf16: bool
                ) -> tuple[Humans, list[str]]:
    """The real human logs (`human_logs`: a data set name, hub id or folder) of at most `max_turns` turns with both
    selections, shuffled by `seed` (at most `human_logs_limit`): 60% for training, 15% held out, 25% for the human
    proxy, a model of the logs that no other step reads (an embedded model of the warm start's recipe, or the warm
    start fine-tuned on them). With `selection` "classifier", the task's selection step becomes a classifier fitted on
    the training logs. Embedded warm starts (`paths` None) are built here, one per training seed, on the training
    split. Returns the humans and the warm starts; no logged human can be replayed against a simulator, so the
    proxy stands in for role A."""
    records = [r for r in load_dond(data_path(p["human_logs"]))
               if set(r.selections) >= set(task.roles) and sum(1 for _ in r.turns) <= p["max_turns"]]
    order = np.random.default_rng(p["seed"]).permutation(len(records))[:p["human_logs_limit"] or None]
    logs = [replay(task, records[i]) for i in order]
    n_train, n_held = int(0.6 * len(logs)), int(0.15 * len(logs))
    train_logs, held_logs, proxy_logs = logs[:n_train], logs[n_train:n_train + n_held], logs[n_train + n_held:]
    note = ""
    if p["selection"] == "classifier":  # every LM agent's selection step: a classifier fitted on the training logs
        task.selector = dealnodeal.SelectionClassifier().fit(task, train_logs)
        note = f"selection classifier, held-out logs: own selection exact {task.selector.exact(held_logs):.3f}\n"
    epochs = p["human_model_epochs"]
    if paths is None:  # one build per training seed on the training split
        train_convs = selection_conversations(task, train_logs)
        paths = [str(build_tiny(train_convs, TinyConfig(epochs=epochs, seed=p["seed"] + k),
                                name="tiny-dond-human-train")) for k in range(p["n_seeds"])]
    proxy_convs = selection_conversations(task, proxy_logs)
    if p["policy_model"] in TINY_MODELS:  # an embedded model of the same recipe, built on the proxy split alone
        proxy_dir = build_tiny(proxy_convs, TinyConfig(epochs=epochs), name="tiny-dond-human-proxy")
    else:  # a hub or local model: the same base fine-tuned on the proxy split (both roles)
        proxy_dir = calibration.calibrate_sft(paths[0], proxy_convs, run_dir / "human-proxy", epochs=epochs,
                                              lr=p["calibration_lr"], seed=p["seed"], bf16=bf16,
                                              batch_size=p["calibration_batch_size"])
    proxy = LMAgent.load(proxy_dir, bf16=bf16, name="human proxy", max_new_tokens=p["max_new_tokens"])
    note += f"{len(records)} usable human dialogues; {len(proxy_logs)} for the proxy ({Path(proxy_dir).name})"
    return Humans(train_logs, held_logs, proxy, functools.partial(_same, proxy), {}, note=note), paths


def uses_decision_module(task, p: Mapping) -> bool:
    """Whether the calibrated simulator decides with a model fitted on the logged decisions (`decision_module`): only
    in the offer protocol, the selection protocol having no proposals to decide on."""
    return p["decision_module"] and task.protocol == "offer"


def user_conversations(task, games: Sequence[GameState], p: Mapping) -> list[list[dict]]:
    """The calibration corpus: the humans' views of the user's role (B), their own decisions marked when the decision
    module decides (`uses_decision_module`)."""
    convs = dealnodeal.decision_conversations if uses_decision_module(task, p) else calibration.role_conversations
    return convs(task, games, "B")


@dataclasses.dataclass
class Simulators:
    """Each training seed's user simulators as folders and fitted decision models; `load(k)` gives seed k's warm
    start (model, tokenizer) and its two simulators, loaded from their folders: in the notebook, and in each training
    run's worker, which holds its own seed's models (capturing every seed's would copy them all into it)."""
    paths: list[str]               # the warm starts, one per seed
    dirs: dict[int, Path]          # the calibrated simulators' folders
    deciders: dict[int, dealnodeal.AcceptanceModel | None]   # with the decision module, what decides
    uncalibrated: str              # "prompt" (the warm start as the user) or a persona name
    bf16: bool
    max_new_tokens: int

    def load(self, k: int) -> tuple[tuple, dict[str, Agent]]:
        warm = load_model(self.paths[k], device="auto", bf16=self.bf16)
        uncal = (LMAgent(*warm, name="uncalibrated", max_new_tokens=self.max_new_tokens)
                 if self.uncalibrated == "prompt" else dealnodeal.ScriptedAgent(self.uncalibrated))
        cal = LMAgent(*load_model(str(self.dirs[k]), device="auto", bf16=self.bf16), name="calibrated",
                      max_new_tokens=self.max_new_tokens)
        return warm, {"uncalibrated": uncal, "calibrated": dealnodeal.DecidingUser(cal, self.deciders[k],
                                                                                   name="calibrated")
                      if self.deciders[k] is not None else cal}


def calibrate_simulators(task, p: Mapping, paths: list[str], train_logs: Sequence[GameState], run_dir: Path,
                         bf16: bool, progress: Callable = lambda xs, desc: xs) -> Simulators:
    """Each training seed's calibrated simulator: warm start k fine-tuned (SFT, `calibration_*`) on the training logs'
    user views (`user_conversations`), then with `dpo` preferring the human turn over the uncalibrated simulator's;
    with the decision module, an AcceptanceModel fitted on the logged decisions decides and the fine-tuned model
    talks. One fine-tune at a time, with no other copy of the model beside it (a T4's memory)."""
    dirs, deciders = {}, {}
    convs = user_conversations(task, train_logs, p)
    for k in progress(range(p["n_seeds"]), "simulators"):
        s = p["seed"] + k
        dirs[k] = calibration.calibrate_sft(paths[k], convs, run_dir / f"simulator-{k}", epochs=p["calibration_epochs"],
                                            lr=p["calibration_lr"], seed=s, bf16=bf16,
                                            batch_size=p["calibration_batch_size"])
        if p["dpo"]:   # preferring the human turn over the uncalibrated simulator's
            pairs = calibration.preference_pairs(user_conversations(task, train_logs[:500], p),
                                                 LMAgent.load(paths[k], bf16=bf16, max_new_tokens=p["max_new_tokens"]))
            dirs[k] = calibration.calibrate_dpo(dirs[k], pairs, run_dir / f"simulator-dpo-{k}", seed=s)
        deciders[k] = (dealnodeal.AcceptanceModel(seed=s).fit(task, train_logs, "B")
                       if uses_decision_module(task, p) else None)
    return Simulators(list(paths), dirs, deciders, p["uncalibrated"], bf16, p["max_new_tokens"])


def simulator_fit(task, p: Mapping, models: Mapping[int, tuple], humans: Humans, scenarios: Mapping[int, list]
                  ) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """Each seed's simulators (`models[k]`: `Simulators.load(k)`) against the held-out humans: the likelihood of the
    humans' turns (NLL per token; the calibrated simulator's with the decisions marked), and in seed k's games
    (`scenarios[k]`) against the humans' role A, the behaviour and acceptance-curve distances to the held-out
    humans' (the proxy's too, once). Returns the rows per seed (`calibration.calibration_record` reads them), each
    simulator's behaviour in seed 0's games (and the held-out humans') and the acceptance curves per simulator and
    seed."""
    held = humans.held_logs
    human_stats = dealnodeal.behaviour_stats(task, held, "B")
    human_curve = calibration.acceptance_curve(dealnodeal.decisions(task, held, "B"), dealnodeal.DECISION_BINS)
    held_convs, held_convs_cal = calibration.role_conversations(task, held, "B"), user_conversations(task, held, p)
    rows, stats = [], {"human (held-out logs)": human_stats}
    curves = [{"simulator": "human (held-out logs)", **row} for row in human_curve]
    for k, (warm, sims) in models.items():
        deciding = isinstance(sims["calibrated"], dealnodeal.DecidingUser)
        cal = sims["calibrated"].lm if deciding else sims["calibrated"]
        row = {"seed": k, "nll_calibrated": calibration.turn_nll(cal.model, cal.tok, held_convs_cal)}
        if p["uncalibrated"] == "prompt":
            row["nll_uncalibrated"] = calibration.turn_nll(*warm, held_convs)
        for name, sim in (*sims.items(), *((("human proxy", humans.proxy()),) if k == 0 else ())):
            states = [e.state for e in play(task, {"A": humans.human_a, "B": sim}, scenarios[k],
                                            seeds=eval_seeds(p["seed"] + k, scenarios[k], "B", name))]
            curve = calibration.acceptance_curve(dealnodeal.decisions(task, states, "B"), dealnodeal.DECISION_BINS)
            st = dealnodeal.behaviour_stats(task, states, "B")
            stats |= {name: st} if k == 0 else {}
            key = name.replace(" ", "_")
            row[f"behaviour_distance_{key}"] = calibration.behaviour_distance(st, human_stats,
                                                                              dealnodeal.BEHAVIOUR_SCALES)["total"]
            row[f"decision_distance_{key}"] = calibration.decision_distance(curve, human_curve)
            if name == "calibrated" and deciding:   # its model's acceptances the module struck out, per turn
                row["overruled"] = sim.stats["overruled"] / max(sim.stats["turns"], 1)
            curves += [{"simulator": name, "seed": k, **r} for r in curve]
        rows.append(row)
    return pd.DataFrame(rows), stats, pd.DataFrame(curves)


HUMAN_LOGS = 6318   # Deal or No Deal's human dialogues in the release's data.txt (12,234 lines, most stored once per
#                     side: envs/dealnodeal/task.py), what the gpu and colab profiles read (`dealnodeal`)


def workload(p: dict, base: dict) -> list[dict]:
    """Notebook 01's training runs (`Paper.workload`): interactive and calibrated RL against a simulator, each seed's
    simulator calibrated by a full fine-tune first; static context RL on single logged turns."""
    seeds = p["n_seeds"]
    horizons = len(p["horizons"]) if p["train_each_horizon"] else 0
    model, turns = p["policy_model"], p["max_turns"]
    logs = (p["human_logs_limit"] or HUMAN_LOGS) if p["human_logs"] else p["n_human_logs"]
    log_tokens = base["prompt_tokens"] + turns * p["max_new_tokens"]   # an upper bound: logged turns are shorter
    sft = [0.6 * logs * log_tokens * p["calibration_epochs"]] * seeds   # a calibrated simulator per seed
    if p["human_logs"]:   # the human proxy, on its own quarter of the logs
        sft.append(0.25 * logs * log_tokens * p["human_model_epochs"])
    evals = (1 + bool(p["human_logs"])) / 2   # the policy against the proxy (a model of the logs, or scripted)
    # a run's worker holds its seed's warm start (the uncalibrated simulator, the base) and calibrated simulator
    # (`seed_models`) and the human proxy's model where it is one; the notebook's process holds the proxy, beside
    # each fine-tune (one at a time, before any seed's models are loaded) and while the runs go
    proxy = [model] if p["human_logs"] else []
    others, main = [model, model, *proxy], proxy
    return [{**base, "what": "interactive and calibrated RL (a simulator in the user's role)", "model": model,
             "others": others, "main": main,
             "runs": seeds * (2 + horizons), "turns": turns,
             "trained_turns": turns // 2, "eval_plays": evals, "sft": sft,
             "check_plays": 2 * seeds * 0.5 + 2 * seeds},   # both simulators' probes and rooms
            {**base, "what": "static context RL (one turn per logged context)", "model": model, "others": others,
             "main": main, "runs": seeds, "turns": 1, "trained_turns": 1, "lm_agents": 1, "eval_plays": evals}]


CHECKS = {**COMMON_CHECKS,   # notebook 01's parameters: what their literals do not say
    "policy_model": ModelName(),
    "human_logs": Str(),   # None or a string
    "selection": OneOf("classifier", "likelihood"),
    "human_personas proxy_personas": ListOf(OneOf(*ALL_PERSONAS), min_len=1),
    "human_style": OneOf("plain", "casual"),
    "uncalibrated": OneOf("prompt", *ALL_PERSONAS),
    "lr_schedule": OneOf(*LR_SCHEDULES),
    "precision": OneOf(*PRECISIONS),
    "horizons": ListOf(Int(min=1), min_len=4),
    "seed human_logs_limit warm_start_dialogues human_weights kl_coef n_transcripts": ">= 0",
    "n_seeds steps scenarios_per_step epochs_per_step minibatches max_new_tokens eval_scenarios processes "
    "calibration_batch_size": ">= 1",
    "group_size max_turns probe_games room_games": ">= 2",
    "n_human_logs": ">= 20",
    "shift_dialogues": ">= 10",
    "human_model_epochs calibration_epochs calibration_lr lr temperature": "> 0",
}


def check(p: dict) -> None:
    """Notebook 01's checks across parameters: a weight per human persona; horizons within max_turns; the scripted
    uncalibrated personas only with the synthetic logs (offer protocol). A human proxy that shares personas with the
    logged humans is noted."""
    if len(p["human_weights"]) != len(p["human_personas"]):
        raise ValueError(f"human_weights has {len(p['human_weights'])} weights for {len(p['human_personas'])} "
                         "human_personas")
    if max(p["horizons"]) > p["max_turns"]:
        raise ValueError(f"horizons={p['horizons']}: every horizon must be <= max_turns={p['max_turns']}")
    if p["human_logs"] is not None and p["uncalibrated"] != "prompt":
        raise ValueError(f"uncalibrated={p['uncalibrated']!r}: the scripted personas play the offer protocol only; "
                         "with human_logs (selection protocol) the uncalibrated simulator is the prompted warm start "
                         "('prompt')")
    shared = sorted(set(p["proxy_personas"]) & set(p["human_personas"]))
    if p["human_logs"] is None and shared:
        print("note: the human proxy shares personas with the logged humans", shared)


# human_logs None: the synthetic humans stand in (the real logs come from the hub)
PAPER = Paper("01_calibrated_interactive_rl", "From Static Context to Calibrated Interactive RL", method_spec,
              workload, stand_ins={"policy_model": "dond", "human_logs": None},
              packaged_stand_ins={"policy_model": PACKAGED, "human_logs": None}, checks=CHECKS, check=check)
