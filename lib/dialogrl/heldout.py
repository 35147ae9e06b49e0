"""Held out means held out: how far a scripted counterpart's decision rule lies from the training ones'.

Each game's `personas.py` describes a scripted counterpart by what its decision rule reads:

    rule_family(persona) -> str          the rule: e.g. "aspiration-concession" (DoND's time-dependent personas)
    trait_vector(persona) -> {trait: x}  the numbers that rule reads
    TRAIT_RANGES[family] -> {trait: (lo, hi)}
    traits(persona) -> Traits            the three together

Two counterparts of one family are `distance` apart: the root mean square, over the family's traits, of their
differences each divided by the trait's range,

    d(a, b) = sqrt( mean_k ((a_k - b_k) / (hi_k - lo_k))^2 )

0 for the same numbers, 1 for every trait at opposite ends of its range; two counterparts drawn uniformly in the
box lie sqrt(1/6) = 0.41 apart on average, whatever the number of traits. Counterparts of different families read
different features of the dialogue: their distance is infinite (no number of one rule is a number of the other).

MIN_DISTANCE = 0.3: a held-out counterpart must lie at least this far from every training and warm-start
counterpart of its family. Why 0.3:
  - a rule with one knob turned is not held out: SocialRL's `proud` differs from the training partner `guarded` in
    one trait (pride, 60% of its range: d = 0.6 / sqrt(5) = 0.27), and fails. In a game of five traits, one trait
    alone must move two thirds of its range (0.3 * sqrt(5) = 0.67) to pass; spread over all, each a third;
  - it is about three quarters of the distance of two counterparts drawn at random in the trait box (0.41);
  - it is more than the distance from a training counterpart to its nearest training sibling for 16 of the 22
    training counterparts of the four games (DoND 0.11-0.20, persuasion 0.14-0.27, social 0.15-0.31, TeleSales
    0.31-0.39): a held-out counterpart is further from all of them than most of them are from each other.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

MIN_DISTANCE = 0.3


@dataclass(frozen=True)
class Traits:
    """What a scripted counterpart's decision rule reads: its `family`, the `vector` of numbers the rule reads and
    each number's range (lo, hi)."""
    family: str
    vector: dict[str, float]
    ranges: dict[str, tuple[float, float]]


def distance(a: Traits, b: Traits) -> float:
    """Range-scaled root-mean-square distance of two counterparts' traits (module docstring); inf across families."""
    if a.family != b.family:
        return math.inf
    if set(a.vector) != set(b.vector):
        raise ValueError(f"family {a.family!r}: traits {sorted(a.vector)} and {sorted(b.vector)} differ")
    return math.sqrt(sum(((a.vector[k] - b.vector[k]) / (hi - lo)) ** 2 for k, (lo, hi) in a.ranges.items())
                     / len(a.ranges))


def nearest(x: Traits, training: Mapping[str, Traits]) -> tuple[str | None, float]:
    """The training counterpart nearest to `x` and its distance ((None, inf) when none shares x's family)."""
    return min(((name, distance(x, t)) for name, t in training.items() if t.family == x.family),
               key=lambda nd: nd[1], default=(None, math.inf))


def held_out_table(heldout: Mapping[str, Traits], training: Mapping[str, Traits],
                   min_distance: float = MIN_DISTANCE) -> list[dict]:
    """One row per held-out counterpart: its family, whether that is a training counterpart's family ("same rule
    family") or not ("other family"), its nearest training counterpart, the distance, and whether it is held out
    (distance >= min_distance)."""
    families = {t.family for t in training.values()}
    rows = []
    for name, x in heldout.items():
        near, d = nearest(x, training)
        rows.append({"counterpart": name, "family": x.family,
                     "split": "same rule family" if x.family in families else "other family",
                     "nearest": near, "distance": d, "held_out": d >= min_distance})
    return rows


def check_held_out(heldout: Mapping[str, Traits], training: Mapping[str, Traits],
                   min_distance: float = MIN_DISTANCE) -> dict[str, tuple[str, float]]:
    """The held-out counterparts that lie nearer than `min_distance` to a training one: {name: (nearest, distance)}
    (empty when every one is held out)."""
    return {r["counterpart"]: (r["nearest"], r["distance"])
            for r in held_out_table(heldout, training, min_distance) if not r["held_out"]}


def far_from(candidates: Mapping[str, Traits], training: Mapping[str, Traits],
             min_distance: float = MIN_DISTANCE) -> dict[str, float]:
    """The candidates, in their order, that lie at least `min_distance` from every training counterpart and from
    every candidate kept before them (a greedy pass), with each one's distance to its nearest training
    counterpart. Use it to draw held-out counterparts from a pool (e.g. SOTOPIA's characters)."""
    kept: dict[str, Traits] = {}
    out = {}
    for name, x in candidates.items():
        d = nearest(x, training)[1]
        if d >= min_distance and nearest(x, kept)[1] >= min_distance:
            kept[name], out[name] = x, d
    return out
