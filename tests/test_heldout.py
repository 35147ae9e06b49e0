"""Held out means held out (papers/PROTOCOL.md, "Held-out counterparts"): every held-out scripted counterpart that a
notebook's cpu defaults name lies at least heldout.MIN_DISTANCE from every training and warm-start counterpart of its
game (trait vectors, each trait scaled by its range), and each held-out panel has a counterpart of another rule family.

The notebooks' defaults are read from their parameters cells (papermill's parser), the warm-start counterparts from
the embedded recipes (dialogrl.tiny.TINY_MODELS)."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from dialogrl import heldout
from dialogrl.envs.dealnodeal import personas as dond
from dialogrl.envs.persuasion import personas as persuasion
from dialogrl.envs.social import personas as social
from dialogrl.envs.social.task import PARTNERS
from dialogrl.envs.telesales import personas as telesales
from dialogrl.heldout import MIN_DISTANCE, Traits, check_held_out, distance, far_from, held_out_table, nearest
from dialogrl.reproduce import notebook_parameters
from dialogrl.tiny import TINY_MODELS

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def defaults(stem: str) -> dict:
    """The cpu defaults of notebook `stem` (its parameters cell), as Python values."""
    return {k: ast.literal_eval(v) for k, v in notebook_parameters(NOTEBOOKS / f"{stem}.ipynb").items()}


def corpus_of(recipe: str, key: str, default) -> list[str]:
    """The scripted counterparts whose games make an embedded recipe's corpus (`key` of its corpus arguments)."""
    return list(TINY_MODELS[recipe].corpus_kwargs.get(key) or default)


def assert_held_out(what: str, names, training_names, traits, other_family: bool = True) -> list[dict]:
    """Each of `names` lies at least MIN_DISTANCE from every one of `training_names`; with other_family, at least
    one of them reads another rule family than all of them. Returns the table (printed on failure)."""
    held = {n: traits(n) for n in names}
    train = {n: traits(n) for n in training_names}
    table = held_out_table(held, train)
    shown = "\n".join(f"  {r['counterpart']:12s} {r['family']:22s} nearest {r['nearest']} at {r['distance']:.3f}"
                      for r in table)
    offenders = check_held_out(held, train)
    assert not offenders, (f"{what}: within MIN_DISTANCE={MIN_DISTANCE} of a training or warm-start counterpart: "
                           f"{offenders}\n{shown}")
    if other_family:
        assert any(r["split"] == "other family" for r in table), \
            f"{what}: no counterpart of another rule family\n{shown}"
    return table


# ------------------------------------------------------------------------------------------- the distance itself

def test_distance_by_hand_and_across_families():
    r = {"x": (0.0, 2.0), "y": (0.0, 1.0)}
    a, b = Traits("f", {"x": 0.0, "y": 0.0}, r), Traits("f", {"x": 1.0, "y": 1.0}, r)
    assert distance(a, b) == pytest.approx(math.sqrt((0.5 ** 2 + 1.0 ** 2) / 2))
    assert distance(a, a) == 0.0 and distance(a, b) == distance(b, a)
    assert distance(a, Traits("g", {"z": 0.0}, {"z": (0.0, 1.0)})) == math.inf
    assert nearest(a, {"b": b, "g": Traits("g", {"z": 0.0}, {"z": (0.0, 1.0)})}) == ("b", distance(a, b))
    assert nearest(Traits("g", {"z": 0.0}, {"z": (0.0, 1.0)}), {"b": b}) == (None, math.inf)
    with pytest.raises(ValueError, match="traits"):
        distance(a, Traits("f", {"x": 0.0}, r))


def test_check_held_out_and_far_from():
    r = {"x": (0.0, 1.0)}
    train = {"t": Traits("f", {"x": 0.0}, r)}
    cands = {"near": Traits("f", {"x": 0.2}, r), "far": Traits("f", {"x": 0.8}, r),
             "far-twin": Traits("f", {"x": 0.9}, r), "other": Traits("g", {"y": 0.0}, {"y": (0.0, 1.0)})}
    assert check_held_out(cands, train, 0.3) == {"near": ("t", pytest.approx(0.2))}
    table = {row["counterpart"]: row for row in held_out_table(cands, train, 0.3)}
    assert table["other"]["split"] == "other family" and table["far"]["split"] == "same rule family"
    assert far_from(cands, train, 0.3) == {"far": pytest.approx(0.8), "other": math.inf}  # far-twin: 0.1 from far
    assert heldout.MIN_DISTANCE == 0.3


@pytest.mark.parametrize("game, everyone", [
    (dond, dond.ALL_PERSONAS), (telesales, {**telesales.SELLER_PERSONAS, **telesales.ALL_BUYERS}),
    (persuasion, persuasion.ALL_PERSUADEES), (social, social.ALL_PARTNERS)], ids=lambda x: getattr(x, "__name__", ""))
def test_every_persona_has_a_family_and_traits_in_their_ranges(game, everyone):
    for name, p in everyone.items():
        t = game.traits(p)
        assert t.family == game.rule_family(p) and set(t.vector) == set(game.TRAIT_RANGES[t.family]), name
        assert all(lo <= t.vector[k] <= hi for k, (lo, hi) in t.ranges.items()), (name, t.vector)
    # the issue's example: a rule with one knob turned is not held out
    assert social.traits("easygoing").vector == social.traits("pliant").vector
    assert MIN_DISTANCE > distance(social.traits("proud"), social.traits("guarded")) > 0


# ---------------------------------------------------------------------------------------- one test per game

def test_dealnodeal_held_out_personas_are_held_out():
    """Notebook 01's human proxy and notebook 04's panel and held-out model's corpus, against the synthetic humans
    (RL and calibration) and the warm start's corpus (tiny-dond: every persona of PERSONAS)."""
    corpus = corpus_of("tiny-dond", "personas", dond.PERSONAS)
    nb01 = defaults("01_calibrated_interactive_rl")
    seen = set(corpus) | set(nb01["human_personas"]) | ({nb01["uncalibrated"]} - {"prompt"})
    assert_held_out("notebook 01 proxy_personas", nb01["proxy_personas"], seen, dond.traits)
    nb04 = defaults("04_ibrl_bilateral")
    assert_held_out("notebook 04 dond_panel", nb04["dond_panel"], corpus, dond.traits)
    assert_held_out("notebook 04 dond_heldout_personas (the held-out model's corpus)",
                    nb04["dond_heldout_personas"] or list(dond.PERSONAS), corpus, dond.traits, other_family=False)


def test_telesales_held_out_buyers_are_held_out():
    """Notebook 04's buyer panel against the warm start's corpus buyers (each scenario's persona: BUYER_PERSONAS)."""
    nb04 = defaults("04_ibrl_bilateral")
    assert_held_out("notebook 04 telesales_panel", nb04["telesales_panel"], telesales.BUYER_PERSONAS,
                    telesales.traits)


def test_persuasion_held_out_persuadees_are_held_out():
    """Notebook 03's scripted panel against the warm start's corpus persuadees (PERSUADEE_PERSONAS), which the
    trained simulators imitate."""
    nb03 = defaults("03_scope_simulator_collapse")
    assert_held_out("notebook 03 heldout_personas", nb03["heldout_personas"], persuasion.PERSUADEE_PERSONAS,
                    persuasion.traits)


def test_social_held_out_partners_are_held_out():
    """Notebook 02's scripted partners and its held-out model's corpus partners against the training partners (the
    corpus and RL: PARTNERS); its SOTOPIA-derived partners go through the filter that keeps them far."""
    train = corpus_of("tiny-social", "partners", PARTNERS)
    nb02 = defaults("02_socialrl")
    assert_held_out("notebook 02 heldout_partners", nb02["heldout_partners"], train, social.traits)
    assert_held_out("tiny-social-alt's corpus partners (notebook 02's held-out model)",
                    corpus_of("tiny-social-alt", "partners", PARTNERS), train, social.traits, other_family=False)
    source = (NOTEBOOKS / "02_socialrl.ipynb").read_text()
    assert "sotopia_partners(" in source, "notebook 02 draws SOTOPIA characters without the held-out filter"


def test_sotopia_partners_are_far_from_training_and_from_each_other(shared_data):
    from dialogrl.envs.social.data import load_sotopia_profiles

    chars = load_sotopia_profiles(shared_data / "sotopia")
    train = {n: social.traits(p) for n, p in PARTNERS.items()}
    for seed in range(3):
        kept = social.sotopia_partners(chars, 3, seed=seed)
        assert len(kept) == 3 and all(name.startswith("sotopia-") for name in kept)
        for p, d in kept.values():
            assert d == pytest.approx(nearest(social.traits(p), train)[1]) and d >= MIN_DISTANCE
        profiles = [social.traits(p) for p, _ in kept.values()]
        assert all(distance(a, b) >= MIN_DISTANCE for i, a in enumerate(profiles) for b in profiles[i + 1:])
    # most characters are not held out: many map onto a training partner's profile or near it
    every = social.sotopia_partners(chars, len(chars), seed=0)
    assert len(every) < len(chars) // 4
