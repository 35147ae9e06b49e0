"""Each paper's methods in one shape, a MethodSpec: who trains, through which adapter, against whom, with which
config overrides, hooks and per-turn rewards, and what plays each role at evaluation."""
import pytest

from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.rl.methods import MethodSpec, calibrated, ibrl, scope, socialrl
from dialogrl.rl.static import StaticContextTrainer
from dialogrl.rl.trainer import RoleSpec, Trainer

ROLES = ("seller", "buyer")


def test_ibrl_method_names_in_table_order():
    assert ibrl.methods(("A", "B")) == ["base", "unilateral-A", "unilateral-B", "ibrl", "shared"]
    assert ibrl.methods(("seller",)) == ["base", "unilateral-seller", "ibrl", "shared"]


def test_base_trains_nothing_and_plays_the_warm_start():
    m = ibrl.method_spec("base", ROLES)
    assert m == MethodSpec("base", {}, {"isolate": True}, {"seller": None, "buyer": None},
                           train_counterparts={"seller": None, "buyer": None})
    assert m.adapters == () and m.trainer(None, None, None, None) is None


def test_unilateral_trains_one_side_against_the_frozen_warm_start():
    m = ibrl.method_spec("unilateral-buyer", ROLES)
    assert m.roles == {"seller": RoleSpec(), "buyer": RoleSpec(adapter="policy", trainable=True)}
    assert m.eval_adapters == {"seller": None, "buyer": "policy"}  # the untrained role stays the warm start
    assert m.config_overrides == {"isolate": True} and m.adapters == ("policy",)
    assert m.train_counterparts == {"buyer": None}  # the seller was not trained: no training counterpart to play


def test_ibrl_one_isolated_path_per_role():
    m = ibrl.method_spec("ibrl", ROLES)
    assert m.roles == {r: RoleSpec(adapter=r, trainable=True) for r in ROLES}
    assert m.eval_adapters == {"seller": "seller", "buyer": "buyer"}
    assert m.config_overrides == {"isolate": True} and m.adapters == ("buyer", "seller")
    assert m.train_counterparts == {"seller": "buyer", "buyer": "seller"}  # each faced the other role's adapter


def test_shared_one_pooled_path():
    m = ibrl.method_spec("shared", ROLES)
    assert m.roles == {r: RoleSpec(adapter="shared", trainable=True) for r in ROLES}
    assert m.eval_adapters == {r: "shared" for r in ROLES} and m.train_counterparts == {r: "shared" for r in ROLES}
    assert m.config_overrides == {"isolate": False} and m.adapters == ("shared",)


def test_every_ibrl_method_covers_every_role():
    for method in ibrl.methods(ROLES):
        m = ibrl.method_spec(method, ROLES)
        assert set(m.eval_adapters) == set(ROLES) and set(m.train_counterparts) <= set(ROLES)
        assert m.roles == {} or set(m.roles) == set(ROLES)  # the Trainer needs a RoleSpec for every role


def test_unknown_ibrl_methods_are_named():
    with pytest.raises(ValueError, match="unknown IB-RL method 'selfplay'.*base, unilateral-seller, unilateral-buyer"):
        ibrl.method_spec("selfplay", ROLES)
    with pytest.raises(ValueError, match="unknown IB-RL method 'unilateral-C'"):
        ibrl.method_spec("unilateral-C", ROLES)
    with pytest.raises(ValueError, match="two-role"):
        ibrl.method_spec("ibrl", ("A", "B", "C"))


def test_the_synthetic_humans_split_their_logs_and_keep_their_proxy_apart():
    from dialogrl.envs.dealnodeal import DealOrNoDeal

    p = {"seed": 3, "human_personas": ["greedy", "fair"], "human_weights": [0.5, 0.5], "human_style": "casual",
         "n_human_logs": 20, "proxy_personas": ["firm", "reciprocal"]}
    humans = calibrated.synthetic_humans(DealOrNoDeal(max_turns=6), p)
    assert len(humans.train_logs) == 16 and len(humans.held_logs) == 4   # 80% for training and calibration
    assert all(s.done for s in humans.train_logs + humans.held_logs)
    again = calibrated.synthetic_humans(DealOrNoDeal(max_turns=6), p)
    assert [s.turns for s in again.train_logs] == [s.turns for s in humans.train_logs]   # the seed decides the logs
    proxy = humans.proxy()
    assert proxy is not humans.proxy() and set(proxy.members) == {"firm", "reciprocal"}   # a fresh proxy each time
    assert set(humans.family) == {"firm", "reciprocal"} and set(humans.family.values()) <= {"same rule family",
                                                                                            "other family"}
    assert [r["counterpart"] for r in humans.table] == ["firm", "reciprocal"] and "20 games" in humans.note


def test_scopes_held_out_panel_and_what_each_method_is_checked_against():
    assert scope.checked_against(["base", "single", "vs", "cotrain", "population"]) == {
        "single": "single", "vs": "vs", "cotrain": "reference", "population": "reference"}
    p = {"policy_model": "tiny-persuasion", "warm_start_dialogues": 30, "heldout_corpus_seeds": [],
         "heldout_models": ["/models/hub-persuadee"], "heldout_personas": ["principled", "attentive"],
         "heldout_packaged": [], "max_new_tokens": 16, "counterpart_temperature": 0.7}
    held = scope.held_out(p, None, bf16=False)
    assert held.members == ["principled", "attentive", "hub-persuadee"] and held.paths == {
        "hub-persuadee": "/models/hub-persuadee"}
    assert held.family["hub-persuadee"] == "other family" and {r["counterpart"] for r in held.table} == {
        "principled", "attentive"}
    settings = scope.collapse_settings({"max_new_tokens": 16, "single_temperature": 0.3, "vs_temperature": 1.0,
                                        "vs_k": 5, "vs_mode": "standard", "vs_max_new_tokens": 64})
    assert (settings["temperature"], settings["hot_temperature"], settings["counterpart"]) == (0.3, 1.0, "Persuader")


def test_calibrated_rl_methods():
    sims = {"uncalibrated": object(), "calibrated": object()}
    policy = RoleSpec(adapter="policy", trainable=True)
    assert calibrated.METHODS == ("base", "static", "interactive", "calibrated")
    assert calibrated.method_spec("base", sims).roles == {}
    static = calibrated.method_spec("static", sims, contexts=["c"], reward_model="rm")
    assert static.roles == {"A": policy}  # logged contexts: no counterpart plays
    assert static.trainer_class is StaticContextTrainer and static.trainer_kwargs == {"contexts": ["c"],
                                                                                      "reward_model": "rm"}
    with pytest.raises(ValueError, match="static trains on logged contexts"):
        calibrated.method_spec("static", sims)
    interactive = calibrated.method_spec("interactive", sims)
    assert interactive.roles == {"A": policy, "B": RoleSpec(agent=sims["uncalibrated"])}
    assert interactive.trainer_class is Trainer and interactive.eval_adapters == {"A": "policy"}
    assert calibrated.method_spec("calibrated", sims).roles == {"A": policy,
                                                                          "B": RoleSpec(agent=sims["calibrated"])}
    roles = calibrated.method_spec("interactive", sims, policy_role="seller", user_role="buyer").roles
    assert list(roles) == ["seller", "buyer"]
    with pytest.raises(ValueError, match="unknown method 'dpo'.*base, static, interactive, calibrated"):
        calibrated.method_spec("dpo", sims)


def test_scope_methods():
    sims = {"single": ScriptedAgent("fair"), "single_hot": ScriptedAgent("boulware"), "vs": ScriptedAgent("greedy"),
            "ensemble": ScriptedAgent("stubborn")}
    assert scope.METHODS == ("single", "single_hot", "vs", "ensemble", "cotrain", "population")
    for method in ("single", "single_hot", "vs", "ensemble"):
        m = scope.method_spec(method, sims)
        assert m.roles["persuader"] == RoleSpec(adapter="policy", trainable=True)
        assert m.roles["persuadee"].agent is sims[method] and not m.roles["persuadee"].trainable
        assert m.adapters == ("policy",) and len(m.hooks) == (method == "ensemble")   # ensemble: reseeded per step
    for method in ("cotrain", "population"):
        m = scope.method_spec(method, {}, sim_lr=5e-4, pool_size=3)
        assert m.roles["persuadee"] == RoleSpec(adapter="simulator", trainable=True, lr=5e-4)
    pool = scope.method_spec("population", {}, pool_size=3, pool_every=2).hooks[0]
    assert isinstance(pool, scope.SimulatorPool) and (pool.size, pool.every, pool.role) == (3, 2, "persuadee")
    assert scope.method_spec("population", {}, pool_size=2).adapters == ("policy", "simulator", "pool-0",
                                                                                   "pool-1")
    assert scope.method_spec("base", sims).roles == {}
    with pytest.raises(ValueError, match="unknown method 'duo'"):
        scope.method_spec("duo", sims)
    with pytest.raises(ValueError, match=r"simulators\['vs'\]"):
        scope.method_spec("vs", {"single": sims["single"]})


def test_socialrl_methods():
    from dialogrl.envs.social import ScriptedAgent as Partner
    from dialogrl.envs.social import SocialScenes
    from dialogrl.envs.social.judge import RuleJudge
    from dialogrl.rewards import ProcessReward

    task, partner = SocialScenes(), Partner(None)
    m = socialrl.method_spec("socialrl", task, partner, RuleJudge(), process_coef=0.3)
    assert m.roles == {"agent": RoleSpec(adapter="policy", trainable=True), "partner": RoleSpec(agent=partner)}
    assert m.config_overrides == {"algorithm": "ppo", "gamma": 0.95, "lam": 0.95}
    assert m.eval_adapters == {"agent": "policy"}
    assert isinstance(m.turn_rewards, ProcessReward) and m.turn_rewards.schedule == "dynamic"
    assert socialrl.method_spec("outcome_ppo", task, partner, RuleJudge(), 0.3).turn_rewards is None
    grpo = socialrl.method_spec("socialrl_grpo", task, partner, RuleJudge(), 0.3).config_overrides
    assert grpo == {"algorithm": "grpo", "gamma": 1.0, "lam": 1.0}
    assert socialrl.method_spec("base", task, partner, RuleJudge(), 0.3).roles == {}
    with pytest.raises(ValueError, match="unknown method 'sft' of SocialRL"):
        socialrl.method_spec("sft", task, partner, RuleJudge(), 0.3)


def test_the_learning_rate_has_one_road_to_the_optimizer(dond_toy_dir):
    """TrainConfig.lr (a notebook's `lr`, by TrainConfig.from_params) is every trained adapter's rate in its
    optimizer's param groups; RoleSpec.lr is one role's own (SCOPE's sim_lr); two roles on one adapter with different
    rates or KL weights are refused, naming them."""
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.models import load_model
    from dialogrl.rl.trainer import TrainConfig

    spec = scope.method_spec("cotrain", {}, sim_lr=2e-4, policy_role="A", sim_role="B")
    model, tok = load_model(str(dond_toy_dir), adapters=("policy", "simulator", "shared"), device="cpu", lora_r=4)
    cfg = TrainConfig.from_params({"lr": 7e-3, "steps": 1, "algorithm": "ppo", "critic_lr": 1e-2, "minibatches": 2,
                                   "n_seeds": 3})
    trainer = spec.trainer(DealOrNoDeal(), model, tok, cfg)
    assert [g["lr"] for g in trainer.optimizers["policy"].param_groups] == [7e-3, 1e-2]
    assert [g["lr"] for g in trainer.optimizers["simulator"].param_groups] == [2e-4, 1e-2]
    assert trainer.config_dict()["paths"]["policy"] == {"roles": ["A"], "lr": 7e-3, "critic_lr": 1e-2, "kl_coef": 0.0}
    for field, value in (("lr", 1e-4), ("kl_coef", 0.3)):
        roles = {"A": RoleSpec(adapter="shared", trainable=True),
                 "B": RoleSpec(adapter="shared", trainable=True, **{field: value})}
        with pytest.raises(ValueError, match=rf"roles \['A', 'B'\] share the adapter 'shared' but not its {field}"):
            Trainer(DealOrNoDeal(), model, tok, roles, TrainConfig(steps=1))


def test_a_spec_builds_its_trainer_with_its_overrides_and_hooks(dond_toy_dir):
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.models import load_model
    from dialogrl.rl.trainer import TrainConfig

    spec = ibrl.method_spec("shared", ("A", "B"))
    model, tok = load_model(str(dond_toy_dir), adapters=spec.adapters, device="cpu", lora_r=4)
    mine = object()
    trainer = spec.trainer(DealOrNoDeal(), model, tok, TrainConfig(steps=1, isolate=True, kl_coef=0.2), hooks=(mine,))
    assert trainer.config.isolate is False and trainer.config.kl_coef == 0.2   # the method's override wins
    assert trainer.hooks == [mine] and trainer.roles == spec.roles


def test_simulator_pool_parameters_are_named():
    with pytest.raises(ValueError, match="size=0"):
        scope.SimulatorPool(size=0)
    with pytest.raises(ValueError, match="every=0"):
        scope.SimulatorPool(every=0)
    assert scope.SimulatorPool(size=3).slots == ["pool-0", "pool-1", "pool-2"]


def test_scope_simulators_on_one_warm_start(toy_model_dir):
    from dialogrl.agents import LMAgent, VerbalizedSampling
    from dialogrl.models import load_model

    model, tok = load_model(str(toy_model_dir), device="cpu")
    settings = dict(max_new_tokens=12, temperature=0.3, vs_temperature=1.2, vs_max_new_tokens=40, vs_k=4,
                    vs_mode="prob", vs_retries=1, seed=5)
    sims = scope.simulators(model, tok, **settings)
    assert list(sims) == ["single", "single_hot", "vs", "reference"]
    assert [sims[n].temperature for n in ("single", "single_hot", "reference")] == [0.3, 1.2, 1.0]
    vs = sims["vs"]
    assert isinstance(vs, VerbalizedSampling) and (vs.k, vs.mode, vs.retries, vs.seed) == (4, "prob", 1, 5)
    assert (vs.lm.temperature, vs.lm.max_new_tokens, vs.counterpart) == (1.2, 40, "Persuader")
    ensemble = scope.simulators(model, tok, [(model, tok)], **settings)["ensemble"]
    assert list(ensemble.members) == ["sim-0", "sim-1"] and ensemble.seed == 5
    assert all(isinstance(m, LMAgent) and m.temperature == 0.3 for m in ensemble.members.values())
    assert list(scope.simulators(model, tok, [], **settings)["ensemble"].members) == ["sim-0"]


def test_scope_reference_simulators_are_what_each_run_also_plays():
    sims = {n: f"sim:{n}" for n in ("single", "single_hot", "vs", "ensemble", "reference")}
    methods = ["base", "single", "vs", "cotrain"]
    assert scope.reference_simulators("base", sims, methods) == {"train-single": "sim:single", "train-vs": "sim:vs",
                                                                 "train-initial": "sim:reference"}
    assert scope.reference_simulators("cotrain", sims, methods) == {"train-initial": "sim:reference"}
    assert scope.reference_simulators("single", sims, methods) == {}
    assert "train-initial" not in scope.reference_simulators("base", sims, ["base", "single"])


def test_socialrl_training_partner_and_the_process_logs_summary():
    from dialogrl.envs import social

    assert isinstance(socialrl.training_partner(None, 3), social.ScriptedAgent)
    assert socialrl.training_partner(None, 3).seed == 3
    log = socialrl.ProcessLog(None, None)   # a method without a process reward
    assert log.summary() == {"weights": None, "varied": None, "counts": None}


@pytest.mark.parametrize("stem, change, needle", [
    ("02_socialrl", {"methods": ["socialrl", "socialrl"]}, "each method once"),
    ("02_socialrl", {"judge": "llm"}, "needs judge_model"),
    ("01_calibrated_interactive_rl", {"horizons": [2, 4, 6, 12]}, "max_turns"),
    ("01_calibrated_interactive_rl", {"human_weights": [1.0]}, "human_weights"),
    ("03_scope_simulator_collapse", {"lr": 0.0}, "lr"),
    ("04_ibrl_bilateral", {"tasks": ["chess"]}, "tasks"),
])
def test_a_papers_parameters_are_checked_by_its_module(stem, change, needle):
    """PAPER.parameters(globals()): the cell's values pass, and a bad value (or pair of values) is refused naming the
    parameter, before any work starts."""
    from dialogrl.params import cell_literals
    from dialogrl.rl.methods import paper

    ok = paper(stem).parameters(dict(cell_literals(stem)))
    assert set(ok) == set(cell_literals(stem))
    with pytest.raises(ValueError, match=needle):
        paper(stem).parameters({**cell_literals(stem), **change})


def test_scope_trained_simulator_reseeds_the_ensemble_and_copies_the_vs_counts():
    from types import SimpleNamespace

    from dialogrl.agents import VerbalizedSampling
    from dialogrl.game import Population

    members = {"sim-0": ScriptedAgent("fair"), "sim-1": ScriptedAgent("greedy")}
    trainer = SimpleNamespace(agents={"B": Population(members, seed=99, name="ensemble")})
    sim, stats = scope.trained_simulator("ensemble", trainer, "B", seed=7)
    assert sim.seed == 7 and trainer.agents["B"].seed == 99 and stats is None   # a copy, reseeded
    vs = VerbalizedSampling(ScriptedAgent("fair"), k=2, seed=0)
    vs.stats["turns"] = 3
    sim, stats = scope.trained_simulator("vs", SimpleNamespace(agents={"B": vs}), "B", seed=7)
    vs.stats["turns"] = 4   # evaluation adds to the live counts, not to training's
    assert sim is vs and stats["turns"] == 3


def test_socialrl_loads_its_partner_model_and_its_judge_from_the_notebooks_parameters():
    """Notebook 02's training partners' model and process-reward judge, from its parameters (each training run loads
    its own): the rule judge, or with judge "llm" an LLMJudge over judge_model (the knob notebook 02 once lost to a
    shadowing import) at its temperature, length and decoding budget in tokens."""
    from dialogrl.envs.social.judge import RuleJudge
    from dialogrl.rewards import LLMJudge

    p = {"partner_model": None, "judge": "rule", "judge_model": None, "precision": "fp32", "max_new_tokens": 16,
         "counterpart_temperature": 0.7, "judge_max_new_tokens": 64, "judge_temperature": 0.2,
         "judge_batch_tokens": 4096}
    assert socialrl.partner_lm(p) is None and isinstance(socialrl.make_judge(p), RuleJudge)
    p |= {"partner_model": "smollm2-135m-instruct", "judge": "llm", "judge_model": "smollm2-135m-instruct"}
    partner, judge = socialrl.partner_lm(p), socialrl.make_judge(p)
    assert partner.name == "partner" and partner.temperature == 0.7 and partner.max_new_tokens == 16
    assert isinstance(judge, LLMJudge) and isinstance(judge.fallback, RuleJudge)
    assert judge.lm.temperature == 0.2 and judge.lm.max_new_tokens == 64 and judge.lm.max_batch_tokens == 4096


def test_ibrl_held_out_counterparts_are_loaded_from_the_notebooks_parameters():
    from dialogrl.agents import LMAgent, LMCounterpart

    held = ibrl.held_out("smollm2-135m-instruct", ["smollm2-135m-instruct"], {"bf16": False, "max_new_tokens": 12})
    assert list(held) == ["heldout-model", "smollm2-135m-instruct"]
    assert isinstance(held["heldout-model"], LMAgent) and held["heldout-model"].max_new_tokens == 12
    assert isinstance(held["smollm2-135m-instruct"], LMCounterpart)
    assert held["smollm2-135m-instruct"].lm.temperature == 0.7
