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

from dialogrl.envs.dealnodeal import ALL_PERSONAS
from dialogrl.game import Agent
from dialogrl.models import PRECISIONS
from dialogrl.params import Int, ListOf, ModelName, OneOf, Str
from dialogrl.rl.config import LR_SCHEDULES
from dialogrl.rl.methods import COMMON_CHECKS, PACKAGED, MethodSpec, Paper
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
    return [{**base, "what": "interactive and calibrated RL (a simulator in the user's role)", "model": model,
             "others": [model], "runs": seeds * (2 + horizons), "turns": turns, "trained_turns": turns // 2,
             "eval_plays": evals, "sft": sft,
             "check_plays": 2 * seeds * 0.5 + 2 * seeds},   # both simulators' probes and rooms
            {**base, "what": "static context RL (one turn per logged context)", "model": model, "others": [],
             "runs": seeds, "turns": 1, "trained_turns": 1, "lm_agents": 1, "eval_plays": evals}]


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
