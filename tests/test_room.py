"""What a design needs before training (dialogrl.room): a counterpart that ignores the conversation fails the
responsiveness check, the scripted counterparts pass it, and the room test finds (or refuses) room to learn."""
from __future__ import annotations

import pytest

from dialogrl import room
from dialogrl.envs import dealnodeal, persuasion, social, telesales
from dialogrl.game import Agent
from dialogrl.room import (
    RESPONSE_GAP,
    ceiling,
    replace_unresponsive,
    require_responsive,
    require_room,
    responsiveness,
    room_test,
)


class Yes(Agent):
    """A counterpart that says yes at its first turn whatever was said: it reads no talk."""
    name = "yes"
    SAYS = {"buyer": "[ACCEPT]", "persuadee": "[DONATE $1]", "B": "[accept]", "partner": "[AGREE]"}

    def act(self, requests):
        return [self.SAYS[r.role] for r in requests]


GAMES = [telesales, persuasion, dealnodeal, social]


@pytest.mark.parametrize("game", GAMES, ids=lambda g: g.TASK.name)
def test_a_counterpart_that_ignores_the_conversation_does_not_respond(game):
    probe = game.probe()
    rec = responsiveness(game.TASK(), Yes(), probe, n=30, seed=0)
    assert rec["good"] == rec["bad"] == 1.0 and rec["diff"] == 0.0 and not rec["responds"]
    with pytest.raises(ValueError, match="does not respond.*yes"):
        require_responsive({"yes": rec})


@pytest.mark.parametrize("game, good, bad", [(telesales, 0.9, 0.3), (persuasion, 0.6, 0.1), (dealnodeal, 0.9, 0.5),
                                             (social, 0.5, 0.1)], ids=lambda g: getattr(g, "__name__", ""))
def test_the_scripted_counterparts_respond(game, good, bad):
    """The rules the warm starts imitate tell a good conversation from a bad one (papers/README.md records the
    numbers); both kinds play the same scenarios and game seeds, so a second call gives the same record."""
    probe = game.probe()
    task = game.TASK()
    rec = responsiveness(task, game.population(probe.role, seed=7), probe, n=60, seed=0)
    assert rec["good"] >= good and rec["bad"] <= bad and rec["diff"] >= RESPONSE_GAP and rec["ci"][0] > 0
    assert rec["responds"] and rec["games"] == 60 and rec["kinds"] == list(probe.kinds)
    assert responsiveness(task, game.population(probe.role, seed=7), probe, n=60, seed=0) == rec
    require_responsive({"scripted": rec})   # raises nothing


def test_probe_offers_differ_only_in_what_they_offer():
    task = telesales.TASK()
    sc = next(s for s in task.sample_scenarios(50, 1) if telesales.personas.bad_offer(s) and s.must_have)
    good, bad = telesales.personas.good_offer(sc), telesales.personas.bad_offer(sc)
    assert telesales.good_sale(sc, *good) and not telesales.good_sale(sc, *bad)


def test_room_test_finds_the_best_reference_and_refuses_a_design_without_room(monkeypatch):
    task = telesales.VehicleTeleSales(seller_goal="success")
    buyers = telesales.population("buyer", seed=3)
    sellers = {n: telesales.ScriptedAgent(n, seed=i) for i, n in enumerate(["fair", "discounter"])}
    rec = room_test(task, "seller", buyers, sellers, telesales.ScriptedAgent("pusher", seed=9), n=60, seed=0)
    best = rec["references"][rec["reference"]]
    assert rec["reference"] in sellers and rec["ceiling"] == best["mean"] == max(r["mean"] for r in
                                                                                 rec["references"].values())
    assert rec["room"] == pytest.approx(rec["ceiling"] - rec["base"]) and rec["threshold"] == pytest.approx(
        0.25 * rec["room"])
    assert rec["passed"] == (rec["room"] > 0 and best["ci"][0] >= rec["threshold"]) and rec["passed"]
    same = room_test(task, "seller", buyers, {"pusher": telesales.ScriptedAgent("pusher", seed=9)},
                     telesales.ScriptedAgent("pusher", seed=9), n=30, seed=0)   # the base itself: no room
    assert same["room"] == 0 and not same["passed"]
    with pytest.raises(ValueError, match="no room to learn"):
        require_room({"pusher": same})
    two = room_test(task, "seller", [buyers, telesales.population("buyer", seed=4)], sellers,   # one per build
                    [telesales.ScriptedAgent("pusher", seed=9)] * 2, n=30, seed=0)
    assert two["games"] == 60 and set(two["references"]) == set(sellers)
    monkeypatch.setattr(room, "LIVE_GAMES", 7)   # a few games at once: the same seeded games, the same record
    assert room_test(task, "seller", buyers, sellers, telesales.ScriptedAgent("pusher", seed=9), n=60, seed=0) == rec


def test_a_manipulation_checks_ceiling_is_its_room_tests_or_the_nominal_one():
    rooms = {"sim": {"ceiling": 7.5, "reference": "fair", "room": 2.0}}
    assert ceiling(rooms, "sim", 10.0) == {"ceiling": 7.5, "reference": "fair"}
    assert ceiling(rooms, "logs", 10.0) == {"ceiling": 10.0, "reference": None}   # not measured: nominal


def test_a_build_whose_counterparts_do_not_respond_is_replaced_within_the_budget():
    """room.replace_unresponsive: seed 0's first build does not respond and is replaced by the next unused build seed
    (recorded); seed 1's never responds and, the budget of replacements spent, is kept as it is for the refusal."""
    responds = {0: False, 1: False, 2: True, 3: False, 4: False}   # by build seed
    build_seeds, rebuilt = [0, 1, 2], []

    def check(k):
        return {f"sim-{k}": {"responds": responds[build_seeds[k]]}}

    records, replaced = replace_unresponsive(check, lambda k, b: rebuilt.append((k, b)), build_seeds, [0, 1], replace=2)
    assert rebuilt == [(0, 3), (0, 4)] and build_seeds == [4, 1, 2]   # 3 and 4 do not respond either: budget spent
    assert [r["build_seed"] for r in replaced] == [0, 3] and records == {"sim-0": {"responds": False},
                                                                         "sim-1": {"responds": False}}
    build_seeds[:] = [0, 1, 2]
    records, replaced = replace_unresponsive(check, lambda k, b: None, build_seeds, [0], replace=0)
    assert replaced == [] and build_seeds == [0, 1, 2]   # no budget: nothing replaced
