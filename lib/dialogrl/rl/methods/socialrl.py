"""Paper 2, SocialRL (notebook 02). One policy (the agent) against fixed scripted partners; the methods differ in the
advantage and the reward (`METHODS`, `method_spec`):
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

from dataclasses import dataclass

import numpy as np

from dialogrl.agents import LMAgent, LMCounterpart
from dialogrl.envs import social
from dialogrl.envs.social import ALL_PARTNERS
from dialogrl.envs.social.judge import RuleJudge
from dialogrl.game import Agent, Task
from dialogrl.models import PRECISIONS, precision_settings
from dialogrl.packaged import PACKAGED_MODELS
from dialogrl.params import Float, Int, ListOf, ModelName, OneOf, Optional, Str, check_judge_independent
from dialogrl.rewards import LLMJudge, ProcessReward, varied_within_groups, weights_table
from dialogrl.rl.methods import COMMON_CHECKS, PACKAGED, MethodSpec, Paper
from dialogrl.rl.trainer import RoleSpec


@dataclass(frozen=True)
class Settings:
    """The trainer settings of one SocialRL method: the advantage (`algorithm`, `gamma`, `lam`) and the weight schedule
    of the process reward (None: the outcome reward only)."""
    algorithm: str
    gamma: float
    lam: float
    schedule: str | None


METHODS: dict[str, Settings] = {   # the trained methods; gamma and lam are the paper's 0.95
    "single_turn": Settings("ppo", 0.0, 0.0, "dynamic"),
    "outcome_ppo": Settings("ppo", 0.95, 0.95, None),
    "socialrl": Settings("ppo", 0.95, 0.95, "dynamic"),
    "socialrl_grpo": Settings("grpo", 1.0, 1.0, "dynamic"),
    "uniform": Settings("ppo", 0.95, 0.95, "uniform"),
    "manual": Settings("ppo", 0.95, 0.95, "manual"),
}


def method_spec(method: str, task: Task, partner: Agent, judge, process_coef: float,
                role: str = "agent", partner_role: str = "partner") -> MethodSpec:
    """The MethodSpec of `method` ("base", which trains nothing, or one of METHODS): the policy trains the adapter
    "policy" (at TrainConfig.lr) in `role` against the fixed `partner`; its per-turn rewards are a ProcessReward of
    `judge` with the method's weight schedule and `process_coef` (none for outcome_ppo); the config takes its
    advantage settings."""
    if method == "base":
        return MethodSpec(method, eval_adapters={role: None}, adapters=("policy",))
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} of SocialRL; known: base, {', '.join(METHODS)}")
    s = METHODS[method]
    process = ProcessReward(judge, task, schedule=s.schedule, coef=process_coef) if s.schedule else None
    roles = {role: RoleSpec(adapter="policy", trainable=True), partner_role: RoleSpec(agent=partner)}
    return MethodSpec(method, roles, {"algorithm": s.algorithm, "gamma": s.gamma, "lam": s.lam}, {role: "policy"},
                      turn_rewards=process, adapters=("policy",))


def training_partner(lm: LMAgent | None, seed: int) -> Agent:
    """A training run's partner: the scripted partners (`envs.social.ScriptedAgent`: the scene's profile, draws keyed
    by each game and `seed`) or, given `lm`, that language model playing each scene's partner from its character
    prompt and saying where it stands by calibrated likelihood (`agents.LMCounterpart`)."""
    return social.ScriptedAgent(None, seed=seed) if lm is None else LMCounterpart(lm, name="partner")


def partner_lm(p: dict) -> LMAgent | None:
    """Notebook 02's training partners' model under its parameters `p`: partner_model, a language model playing each
    training scene's partner at counterpart_temperature (the paper's opponents: 0.7), loaded here; None without one
    (the scripted partners). A training run loads its own, so that it receives no copy with the run."""
    if p["partner_model"] is None:
        return None
    return LMAgent.load(p["partner_model"], bf16=precision_settings(p["precision"])["bf16"], name="partner",
                        max_new_tokens=p["max_new_tokens"], temperature=p["counterpart_temperature"])


def make_judge(p: dict):
    """Notebook 02's process-reward judge under its parameters `p`: the rule judge (envs/social/judge.py), or with
    judge "llm" judge_model writing and checking each turn's criteria (rewards.LLMJudge), the rule judge its fallback;
    its model loaded here (a training run loads its own)."""
    if p["judge"] == "rule":
        return RuleJudge()
    return LLMJudge(LMAgent.load(p["judge_model"], bf16=precision_settings(p["precision"])["bf16"], name="judge",
                                 max_new_tokens=p["judge_max_new_tokens"], temperature=p["judge_temperature"],
                                 max_batch_tokens=p["judge_batch_tokens"]),
                    fallback=RuleJudge())


class ProcessLog:
    """A Trainer hook that logs the process reward step by step (`Trainer(hooks=[ProcessLog(...)])`): at the start of
    each step it drains the judged turns `process` (the method's turn_rewards, a rewards.ProcessReward) recorded in
    the last step, keeps them in `records` (what rewards.weights_table reads) and logs each score's and the process
    reward's mean as "process/<column>" at that step to `log` (a run.MetricsLogger or TaggedLogger). Call it once
    more after training for the last step. With process None (a method without a process reward) it does nothing."""

    def __init__(self, process: ProcessReward | None, log):
        self.process, self.log, self.records = process, log, []

    def __call__(self, trainer) -> None:
        if self.process is None or not self.process.records:
            return
        rec = self.process.drain()
        self.records.extend(rec)
        self.log.log(step=trainer.step_count - 1, **{f"process/{c}": float(np.mean([r[c] for r in rec]))
                                                   for c in rec[0] if c.startswith(("score/", "process"))})

    def summary(self) -> dict:
        """What a run reports of its process reward: the weights by stage ("weights", `rewards.weights_table`), the
        share of scenario groups whose dialogues it told apart ("varied", `rewards.varied_within_groups`: the
        intervention check), both None without judged turns, and the judge's counts ("counts": failures and
        fallbacks; None without a process reward)."""
        return {"weights": weights_table(self.records) if self.records else None,
                "varied": varied_within_groups(self.records) if self.records else None,
                "counts": self.process.summary() if self.process is not None else None}


JUDGE_TOKENS = 200   # assumed: the judge's instructions (rewards.JUDGE_PROMPT, 679 characters) in tokens


def workload(p: dict, base: dict) -> list[dict]:
    """Notebook 02's training runs (`Paper.workload`): the agent against its LM partner, scored by the LLM judge each
    step (every turn of the agent's a prompt: the instructions, the scene, the talk so far at its longest, the turn
    and the answer); held-out evaluation against the language-model partners of its panel."""
    seeds, curve = p["n_seeds"], base["curve"]
    trained = [m for m in p["methods"] if m != "base"]
    llm_judge, lm_partner = p["judge"] == "llm", bool(p["partner_model"])
    lm_panel = len(p["heldout_models"]) + len(p["heldout_packaged"])
    # a run's worker loads its partner, the judge and the held-out panel's models; the notebook's process lets its
    # own copies go before the runs
    held = [*p["heldout_models"], *p["heldout_packaged"]]
    frozen = [p["partner_model"] or p["policy_model"]] + ([p["judge_model"]] if llm_judge else [])
    talk = 2 * p["max_exchanges"] * p["max_new_tokens"]   # the talk before a turn, at its longest
    judge = {"model": p["judge_model"], "rows": base["games"] * p["max_exchanges"], "answer": p["judge_max_new_tokens"],
             "tokens": JUDGE_TOKENS + base["prompt_tokens"] + talk + p["max_new_tokens"] + p["judge_max_new_tokens"],
             "budget": p["judge_batch_tokens"]}
    return [{**base, "what": "the agent against its LM partner" + (", the LLM judge" if llm_judge else ""),
             "model": p["policy_model"], "others": frozen + held, "main": [],
             "runs": seeds * len(trained), "turns": 2 * p["max_exchanges"], "trained_turns": p["max_exchanges"],
             "judge": judge if llm_judge else None,
             "eval_plays": (1 + curve) * (1 + lm_panel) / 2,
             "check_plays": (lm_partner * seeds + lm_panel) * 0.5 + seeds * (1 + lm_partner) / 2}]


CHECKS = {**COMMON_CHECKS,   # notebook 02's parameters: what their literals do not say
    "policy_model judge_model partner_model judge_validation_models heldout_models": ModelName(),
    "methods": ListOf(OneOf("base", *METHODS), min_len=1),
    "judge": OneOf("rule", "llm"),
    "ratio_level": OneOf("token", "utterance"),
    "heldout_partners": OneOf(*ALL_PARTNERS),
    "heldout_packaged": OneOf(*PACKAGED_MODELS),
    "precision": OneOf(*PRECISIONS),
    "sotopia_data": Optional(Str()),
    "critic_lr": Float(min=0, strict=True),   # None or a float
    ("seed process_coef relationship_weight kl_coef vf_coef warm_start_dialogues sotopia_characters eval_every "
     "n_transcripts"): ">= 0",
    "judge_batch_tokens": Optional(Int(min=1)),
    ("n_seeds judge_max_new_tokens steps scenarios_per_step epochs_per_step minibatches lora_r max_new_tokens "
     "max_exchanges packaged_eval_scenarios eval_scenarios curve_scenarios processes"): ">= 1",
    "group_size probe_games room_games": ">= 2",
    "judge_validation_episodes": ">= 1, <= 28",
    "lr clip_eps temperature counterpart_temperature judge_temperature": "> 0",
}


def check(p: dict) -> None:
    """Notebook 02's checks across parameters: an LLM judge needs its model; neither the judge nor the training
    partner model plays a held-out partner (`check_judge_independent`)."""
    if p["judge"] == "llm" and p["judge_model"] is None:
        raise ValueError("judge='llm' needs judge_model (a hub id or a local folder)")
    heldout = [*p["heldout_models"], *p["heldout_packaged"]]
    check_judge_independent(p["judge_model"] if p["judge"] == "llm" else None, heldout)
    check_judge_independent(p["partner_model"], heldout, name="partner_model")


# the judge and the training partner are never held-out partners (the notebook refuses one model in two parts): the
# embedded held-out recipe plays that one, and with the packaged model the packaged held-out partner is left out
PAPER = Paper("02_socialrl", "SocialRL", method_spec, workload,
              stand_ins={"policy_model": "social", "judge_model": "social", "partner_model": "social",
                         "heldout_models": ["tiny-social-alt"]},
              packaged_stand_ins={"policy_model": PACKAGED, "judge_model": PACKAGED, "partner_model": PACKAGED,
                                  "heldout_models": ["tiny-social-alt"], "heldout_packaged": []},
              checks=CHECKS, check=check)
