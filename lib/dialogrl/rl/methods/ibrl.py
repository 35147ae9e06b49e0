"""Paper 4, IB-RL: Isolated Bilateral RL (notebook 04). A game of two roles; the methods:
    base               the warm start in both roles.
    unilateral-<role>  that role's adapter trained against the frozen warm start; the other role stays the warm start,
                       in training and at evaluation.
    ibrl               both roles trained in joint rollouts, each through its own update path: its own LoRA adapter
                       and optimizer (`RoleSpec(adapter=role)`; one path per adapter in `rl/trainer.py`), advantages
                       from its own rewards only (`TrainConfig.isolate=True`), and a loss over its own tokens only (the
                       completion tokens of its own turns: the loss mask of each role's update path).
    shared             the ablation: both roles through one adapter and optimizer, advantages pooled over the roles
                       (`TrainConfig.isolate=False`).
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from dialogrl.agents import LMAgent, LMCounterpart
from dialogrl.envs.dealnodeal import ALL_PERSONAS
from dialogrl.envs.telesales import BUYER_PERSONAS, SELLER_GOALS, UNSEEN_BUYERS
from dialogrl.packaged import PACKAGED_MODELS
from dialogrl.params import ListOf, ModelName, OneOf
from dialogrl.rl.config import ALGORITHMS
from dialogrl.rl.methods import COMMON_CHECKS, PACKAGED, MethodSpec, Paper
from dialogrl.rl.trainer import RoleSpec


def methods(sides: Sequence[str]) -> list[str]:
    """The methods of paper 4 in table order: base, one unilateral run per side in `sides`, ibrl, shared."""
    return ["base"] + [f"unilateral-{side}" for side in sides] + ["ibrl", "shared"]


def method_spec(method: str, roles: Sequence[str]) -> MethodSpec:
    """The MethodSpec of `method` (one of `methods(roles)`) for a two-role task with roles `roles`. Adapters are
    named "policy" (unilateral), the role (ibrl) or "shared"; each learns at TrainConfig.lr."""
    roles = tuple(roles)
    if len(roles) != 2:
        raise ValueError(f"IB-RL methods are for two-role games; got roles {roles}")
    other = {roles[0]: roles[1], roles[1]: roles[0]}
    if method == "base":
        return spec(method, {}, {r: None for r in roles}, True, {r: None for r in roles})
    if method.startswith("unilateral-") and method.split("-", 1)[1] in roles:
        side = method.split("-", 1)[1]
        specs = {r: RoleSpec(adapter="policy", trainable=True) if r == side else RoleSpec() for r in roles}
        eval_adapters = {r: "policy" if r == side else None for r in roles}  # the untrained role plays the warm start
        return spec(method, specs, eval_adapters, True, {side: None})
    if method == "ibrl":
        specs = {r: RoleSpec(adapter=r, trainable=True) for r in roles}
        return spec(method, specs, {r: r for r in roles}, True, {r: other[r] for r in roles})
    if method == "shared":
        specs = {r: RoleSpec(adapter="shared", trainable=True) for r in roles}
        return spec(method, specs, {r: "shared" for r in roles}, False, {r: "shared" for r in roles})
    raise ValueError(f"unknown IB-RL method {method!r} for roles {roles}; known: {', '.join(methods(roles))}")


def spec(method: str, roles: dict[str, RoleSpec], eval_adapters: dict[str, str | None], isolate: bool,
         train_counterparts: dict[str, str | None]) -> MethodSpec:
    """A MethodSpec of paper 4: `isolate` is TrainConfig.isolate (advantages per role, or pooled over the roles); the
    adapters are created in sorted order; `train_counterparts` names, per trained role, the adapter it faced in
    training (a role the method leaves untrained has no entry)."""
    adapters = tuple(sorted({r.adapter for r in roles.values() if r.adapter}))
    return MethodSpec(method, roles, {"isolate": isolate}, eval_adapters, adapters=adapters,
                      train_counterparts=train_counterparts)


def held_out(heldout: str, packaged: Sequence[str], p: dict) -> dict:
    """A task's held-out counterparts that are models, loaded here under notebook 04's parameters `p`: the held-out
    model ("heldout-model", the warm start's recipe on another corpus, or a hub model) and the pretrained
    counterparts of another family (`packaged`, at temperature 0.7), loaded where they play: the notebook's process
    for the design checks, each training run's for its evaluation (a run receives none with its closure)."""
    load = partial(LMAgent.load, bf16=p["bf16"], max_new_tokens=p["max_new_tokens"])
    return {"heldout-model": load(heldout, name="heldout-model"),
            **{m: LMCounterpart(load(m, name=m, temperature=0.7), name=m) for m in packaged}}


def workload(p: dict, base: dict) -> list[dict]:
    """Notebook 04's training runs (`Paper.workload`): per task, the unilateral runs and IB-RL (two adapters of one
    model), and the ablation; held-out evaluation against the panel's language models."""
    out = []
    for task in p["tasks"]:
        heldout = p[f"{task}_heldout"]
        lm_panel = 1 + (len(p["telesales_packaged"]) if task == "telesales" else 0)   # + the held-out model
        roles = 1 if task == "telesales" else 2   # the roles whose counterparts are probed, the rooms tested
        # a run's worker loads the held-out model and the pretrained counterparts; the notebook's process lets its
        # own copies go before the runs
        held = ([heldout] if heldout else []) + (list(p["telesales_packaged"]) if task == "telesales" else [])
        out.append({**base, "what": f"{task}: unilateral and IB-RL (two adapters of one model)",
                    "model": p[f"{task}_model"], "others": held, "main": [], "adapters": 2,
                    "runs": p["n_seeds"] * (2 + bool(p["ablation"])), "turns": p["max_turns"],
                    "trained_turns": p["max_turns"] // 2,   # + IB-RL's buyer's own check (one run in two)
                    "eval_plays": (2 + lm_panel) / 2 + (task == "telesales") * p["counterpart_check_scenarios"] / (
                        2 * p["eval_scenarios"]),
                    "check_plays": roles * (p["n_seeds"] + lm_panel) * 0.5 + 2 * p["n_seeds"]})
    return out


CHECKS = {**COMMON_CHECKS,   # notebook 04's parameters: what their literals do not say
    "telesales_model dond_model telesales_heldout dond_heldout": ModelName(),   # the held-out ones: None or a name
    "tasks": ListOf(OneOf("telesales", "dond"), min_len=1),
    "dond_heldout_personas": OneOf(*ALL_PERSONAS),
    "dond_claims_vs": OneOf("heldout-model", "all"),
    "telesales_panel": ListOf(OneOf(*BUYER_PERSONAS, *UNSEEN_BUYERS), min_len=1),
    "dond_panel": ListOf(OneOf(*ALL_PERSONAS), min_len=1),
    "telesales_packaged": OneOf(*PACKAGED_MODELS),
    "algorithm": OneOf(*ALGORITHMS),
    "seller_goal": OneOf(*SELLER_GOALS),
    "buyer_bad_sale": "<= 0",
    "seed warm_start_dialogues kl_coef n_transcripts": ">= 0",
    ("n_seeds heldout_seed packaged_eval_scenarios steps scenarios_per_step epochs_per_step minibatches lora_r "
     "max_new_tokens eval_scenarios counterpart_check_scenarios processes"): ">= 1",
    "group_size max_turns probe_games room_games": ">= 2",
    "lr": "> 0",
}
PAPER = Paper("04_ibrl_bilateral", "IB-RL: Isolated Bilateral RL", method_spec, workload,
              stand_ins={"telesales_model": "telesales", "dond_model": "dond", "telesales_heldout": "telesales",
                         "dond_heldout": "dond"},
              packaged_stand_ins={"telesales_model": PACKAGED, "dond_model": PACKAGED, "telesales_heldout": PACKAGED,
                                  "dond_heldout": PACKAGED},
              checks=CHECKS)
