"""The methods of each paper as RoleSpecs: who trains, through which adapter, against whom, isolated or pooled."""
import pytest

from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.rl.methods import CALIBRATED_RL_METHODS, MethodSpec, calibrated_rl_roles, ibrl_methods, ibrl_roles
from dialogrl.rl.trainer import RoleSpec

ROLES = ("seller", "buyer")


def test_ibrl_method_names_in_table_order():
    assert ibrl_methods(("A", "B")) == ["base", "unilateral-A", "unilateral-B", "ibrl", "shared"]
    assert ibrl_methods(("seller",)) == ["base", "unilateral-seller", "ibrl", "shared"]


def test_base_trains_nothing_and_plays_the_warm_start():
    m = ibrl_roles("base", ROLES, lr=1e-3)
    assert m == MethodSpec("base", {}, {"seller": None, "buyer": None}, True, {"seller": None, "buyer": None})
    assert m.adapters == []


def test_unilateral_trains_one_side_against_the_frozen_warm_start():
    m = ibrl_roles("unilateral-buyer", ROLES, lr=2e-3)
    assert m.roles == {"seller": RoleSpec(), "buyer": RoleSpec(adapter="policy", trainable=True, lr=2e-3)}
    assert m.seats == {"seller": None, "buyer": "policy"}  # the untrained seat stays the warm start
    assert m.isolate and m.adapters == ["policy"]
    assert m.partners == {"buyer": None}  # the seller seat was not trained: no training partner to play


def test_ibrl_one_isolated_path_per_role():
    m = ibrl_roles("ibrl", ROLES, lr=1e-3)
    assert m.roles == {r: RoleSpec(adapter=r, trainable=True, lr=1e-3) for r in ROLES}
    assert m.seats == {"seller": "seller", "buyer": "buyer"}
    assert m.isolate and m.adapters == ["buyer", "seller"]
    assert m.partners == {"seller": "buyer", "buyer": "seller"}  # each faced the other role's adapter


def test_shared_one_pooled_path():
    m = ibrl_roles("shared", ROLES, lr=1e-3)
    assert m.roles == {r: RoleSpec(adapter="shared", trainable=True, lr=1e-3) for r in ROLES}
    assert m.seats == {r: "shared" for r in ROLES} and m.partners == {r: "shared" for r in ROLES}
    assert not m.isolate and m.adapters == ["shared"]


def test_every_ibrl_method_covers_every_role():
    for method in ibrl_methods(ROLES):
        m = ibrl_roles(method, ROLES, lr=1e-3)
        assert set(m.seats) == set(ROLES) and set(m.partners) <= set(ROLES)
        assert m.roles == {} or set(m.roles) == set(ROLES)  # the Trainer needs a RoleSpec for every role


def test_unknown_ibrl_methods_are_named():
    with pytest.raises(ValueError, match="unknown IB-RL method 'selfplay'.*base, unilateral-seller, unilateral-buyer"):
        ibrl_roles("selfplay", ROLES, lr=1e-3)
    with pytest.raises(ValueError, match="unknown IB-RL method 'unilateral-C'"):
        ibrl_roles("unilateral-C", ROLES, lr=1e-3)
    with pytest.raises(ValueError, match="two-role"):
        ibrl_roles("ibrl", ("A", "B", "C"), lr=1e-3)


def test_calibrated_rl_roles():
    sims = {"uncalibrated": object(), "calibrated": object()}
    policy = RoleSpec(adapter="policy", trainable=True, lr=1e-3)
    assert CALIBRATED_RL_METHODS == ("base", "static", "interactive", "calibrated")
    assert calibrated_rl_roles("base", sims, lr=1e-3) == {}
    assert calibrated_rl_roles("static", sims, lr=1e-3) == {"A": policy}  # logged contexts: no partner plays
    assert calibrated_rl_roles("interactive", sims, lr=1e-3) == {"A": policy, "B": RoleSpec(agent=sims["uncalibrated"])}
    assert calibrated_rl_roles("calibrated", sims, lr=1e-3) == {"A": policy, "B": RoleSpec(agent=sims["calibrated"])}
    roles = calibrated_rl_roles("interactive", sims, lr=1e-3, policy_seat="seller", user_seat="buyer")
    assert list(roles) == ["seller", "buyer"]
    with pytest.raises(ValueError, match="unknown method 'dpo'.*base, static, interactive, calibrated"):
        calibrated_rl_roles("dpo", sims, lr=1e-3)


def test_scope_roles():
    from dialogrl.rl.methods import SCOPE_METHODS, scope_roles

    sims = {"single": ScriptedAgent("fair"), "single_hot": ScriptedAgent("boulware"), "vs": ScriptedAgent("greedy"),
            "ensemble": ScriptedAgent("stubborn")}
    assert SCOPE_METHODS == ("single", "single_hot", "vs", "ensemble", "cotrain", "population")
    for method in ("single", "single_hot", "vs", "ensemble"):
        roles = scope_roles(method, sims, lr=1e-3)
        assert roles["persuader"] == RoleSpec(adapter="policy", trainable=True, lr=1e-3)
        assert roles["persuadee"].agent is sims[method] and not roles["persuadee"].trainable
    for method in ("cotrain", "population"):
        roles = scope_roles(method, {}, lr=1e-3, sim_lr=5e-4)
        assert roles["persuadee"] == RoleSpec(adapter="simulator", trainable=True, lr=5e-4)
    with pytest.raises(ValueError, match="unknown method 'duo'"):
        scope_roles("duo", sims, lr=1e-3)
    with pytest.raises(ValueError, match=r"simulators\['vs'\]"):
        scope_roles("vs", {"single": sims["single"]}, lr=1e-3)


def test_simulator_pool_parameters_are_named():
    from dialogrl.rl.methods import SimulatorPool

    with pytest.raises(ValueError, match="size=0"):
        SimulatorPool(size=0)
    with pytest.raises(ValueError, match="every=0"):
        SimulatorPool(every=0)
    assert SimulatorPool(size=3).slots == ["pool-0", "pool-1", "pool-2"]
