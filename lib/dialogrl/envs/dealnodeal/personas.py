"""Scripted Deal or No Deal negotiators: the held-out counterparts and the synthetic "human" population.

A `ScriptedAgent` plays one `Persona`: it proposes, concedes and accepts by explicit rules over its own private
values and the public history (offer protocol), and speaks through a small template language with varied phrasing.
`population(role)` is a Population of them, one drawn per game.

Two rule families (what a rule reads; `rule_family`, `trait_vector`, `TRAIT_RANGES`, `traits`: dialogrl.heldout):
  aspiration-concession   `Persona`: the clock (talk progress) sets its demand; every persona of the corpus
  tit-for-tat             `Reciprocal` (held out): the counterpart's concessions set its demand, the clock does not
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dialogrl.envs.dealnodeal.task import ITEMS, DealOrNoDeal, all_splits, complement, describe, marker, split_value
from dialogrl.game import ActRequest, Agent, GameState, Population, Probe, game_key, scripted_population
from dialogrl.heldout import Traits


@dataclass(frozen=True)
class Persona:
    """An aspiration-based negotiator (Faratin-style time-dependent concession).

    Its aspiration (the share of its maximum value, 10, that it demands) falls from `start` to `end` over the talk as
    a(p) = start - (start - end) * p ** beta, p = talk progress in [0, 1]: beta > 1 concedes late (Boulware), beta < 1
    early (conceder). It accepts a standing proposal worth at least 10 * a(p) - `margin`, and on its last turn anything
    worth its reservation 10 * `end`. Its own proposals demand at least 10 * a(p) and, among those, give the counterpart
    what it seems to want most (items it asked for). `noise` is the chance of an erratic move; `talk` the chance of a
    line of cheap talk about its preferences.
    """
    name: str
    start: float
    end: float
    beta: float = 1.0
    margin: float = 0.0
    noise: float = 0.0
    talk: float = 0.3
    style: str = "plain"  # phrasing: "plain" or "casual"


@dataclass(frozen=True)
class Reciprocal:
    """A behaviour-dependent negotiator (Faratin et al. 1998's imitative tactics: relative tit-for-tat), another
    rule family than Persona's: it reads the counterpart's concessions, not the clock.

    Its demand starts at 10 * `opening` and falls by `reciprocity` times what the counterpart has conceded to it so far
    (the value to it of the counterpart's best proposal minus that of its first), never below 10 * `floor`: it never
    concedes to a counterpart that does not. It accepts a standing proposal worth at least its demand, and on its last
    chance anything worth 10 * `floor`; on its last turn it ends a worse one with [no deal]. Its proposals are Persona's
    (the share the counterpart seems to want most among those worth its demand); `talk` and `style` as in Persona."""
    name: str
    opening: float
    floor: float
    reciprocity: float = 1.0
    talk: float = 0.3
    style: str = "plain"


PERSONAS: dict[str, Persona] = {p.name: p for p in [
    Persona("greedy", start=1.0, end=0.6, beta=2.0),
    Persona("fair", start=0.6, end=0.5, beta=1.0, margin=0.5),
    Persona("stubborn", start=0.9, end=0.7, beta=4.0),
    Persona("accommodating", start=0.7, end=0.3, beta=0.5, margin=1.0),
    Persona("erratic", start=0.8, end=0.4, beta=1.0, noise=0.3),
    Persona("boulware", start=1.0, end=0.5, beta=6.0, talk=0.1),
    Persona("conceder", start=0.8, end=0.2, beta=0.3, margin=0.5, talk=0.5),
]}
# Personas that no part of the pipeline has seen: the warm-start corpus (`dond_corpus`) and the default populations
# draw from PERSONAS only, so these are held out from the warm start as well as from RL. Held out by
# dialogrl.heldout's rule (at least MIN_DISTANCE = 0.3 from every persona above): `firm` (0.46 from stubborn:
# takes 8 of 10 at any time, never less), `deadline` (0.34 from boulware: opens modest, holds, then takes almost
# anything at the deadline) and `reciprocal` (another family). `haggler` is unseen but 0.13 from greedy: not held out.
UNSEEN_PERSONAS: dict[str, Persona | Reciprocal] = {p.name: p for p in [
    Persona("haggler", start=0.85, end=0.45, beta=2.5, margin=0.3, noise=0.1, talk=0.4),
    Persona("firm", start=1.0, end=0.8, beta=8.0, margin=2.0, talk=0.2),
    Persona("deadline", start=0.6, end=0.1, beta=8.0, margin=1.0, talk=0.4, style="casual"),
    Reciprocal("reciprocal", opening=0.8, floor=0.4, reciprocity=1.0),
]}
ALL_PERSONAS: dict[str, Persona | Reciprocal] = {**PERSONAS, **UNSEEN_PERSONAS}

# What each family's rule reads, and each number's range (dialogrl.heldout scales differences by it): beta on a
# log2 scale (0.25 concedes at once .. 8 at the very end), margin in points of 10, noise a probability.
TRAIT_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "aspiration-concession": {"start": (0.0, 1.0), "end": (0.0, 1.0), "log2_beta": (-2.0, 3.0),
                              "margin": (0.0, 2.0), "noise": (0.0, 1.0)},
    "tit-for-tat": {"opening": (0.0, 1.0), "floor": (0.0, 1.0), "reciprocity": (0.0, 2.0)},
}


def rule_family(p: Persona | Reciprocal) -> str:
    """The family of a persona's decision rule: what it reads (module docstring)."""
    return "tit-for-tat" if isinstance(p, Reciprocal) else "aspiration-concession"


def trait_vector(p: Persona | Reciprocal) -> dict[str, float]:
    """The numbers a persona's decision rule reads (`talk` and `style` shape only its words)."""
    if isinstance(p, Reciprocal):
        return {"opening": p.opening, "floor": p.floor, "reciprocity": p.reciprocity}
    return {"start": p.start, "end": p.end, "log2_beta": math.log2(p.beta), "margin": p.margin, "noise": p.noise}


def traits(p: Persona | Reciprocal | str) -> Traits:
    """A persona (or its name in ALL_PERSONAS) as dialogrl.heldout compares it."""
    p = ALL_PERSONAS[p] if isinstance(p, str) else p
    return Traits(rule_family(p), trait_vector(p), TRAIT_RANGES[rule_family(p)])

_PHRASES = {
    "plain": {
        "propose": ["i would like {own}.", "how about i take {own} and you take {other}?",
                    "i need {own}.", "let me have {own}, and {other} is yours.", "give me {own}.",
                    "you can have {other} if i get {own}."],
        "counter": ["no, that's not enough for me.", "i can't do that.", "that gives you too much.", ""],
        "accept": ["deal.", "ok, that works for me.", "sounds good.", "fine, agreed."],
        "no_deal": ["i can't make that work.", "we won't agree, sorry."],
        "like": ["i really want the {item}s.", "the {item}s matter most to me.", "i'd love the {item}s."],
        "dislike": ["i don't care much for the {item}s.", "you can have the {item}s."],
    },
    "casual": {
        "propose": ["can i get {own}?", "ok so {own} for me, {other} for u",
                    "what if i get {own}", "i'll take {own}, rest is yours"],
        "counter": ["nah", "hmm no", "no way", "that doesn't work for me", ""],
        "accept": ["ok deal", "deal!", "sure", "alright fine"],
        "no_deal": ["forget it", "no deal then"],
        "like": ["i need the {item}s", "{item}s pls"],
        "dislike": ["don't need the {item}s", "{item}s are yours"],
    },
}


def aspiration(p: Persona, progress: float) -> float:
    """a(p) = start - (start - end) * progress ** beta, in [0, 1]."""
    return p.start - (p.start - p.end) * min(max(progress, 0.0), 1.0) ** p.beta


class ScriptedAgent(Agent):
    """A scripted Deal or No Deal negotiator playing one Persona (offer protocol; a name from PERSONAS or
    UNSEEN_PERSONAS). Each utterance draws from its own RNG, seeded by (seed, game, role, turn), the game being its
    seed (`game_key`) or, without one, its scenario: a game plays the same whatever else is in the batch and however
    many games the agent played before (no state between evaluation cells)."""

    def __init__(self, persona: Persona | Reciprocal | str, seed: int = 0):
        if isinstance(persona, str) and persona not in ALL_PERSONAS:
            raise ValueError(f"unknown persona {persona!r}; personas: {', '.join(ALL_PERSONAS)}")
        self.persona = ALL_PERSONAS[persona] if isinstance(persona, str) else persona
        self.name = self.persona.name
        self.seed = seed

    def act(self, requests: Sequence[ActRequest]) -> list[str]:
        return [self.utter(r.task, r.state, r.role) for r in requests]

    def utter(self, task: DealOrNoDeal, state: GameState, role: str) -> str:
        if state.info.get("phase") == "select":
            raise ValueError("scripted personas play the offer protocol only")
        p = self.persona
        # the game's seed; without one, the scenario's content (not only its id: scenarios drawn apart share ids)
        key = game_key(state, "counterpart", repr(state.scenario))
        rng = random.Random(f"{self.seed}/{key}/{role}/{len(state.turns)}")
        counts, values = state.scenario.counts, state.scenario.values[task.roles.index(role)]
        n = len(state.talk_turns())
        last_chance = n >= task.max_turns - 2   # the counterpart may not get to answer a proposal after this one
        if isinstance(p, Reciprocal):
            return self._reciprocate(p, task, state, role, rng, last_chance)
        a = aspiration(p, n / max(task.max_turns - 1, 1))
        standing = state.info.get("offer")
        offered = None
        if standing is not None and standing[0] != role:
            offered = split_value(values, complement(counts, standing[1]))
        phrases = _PHRASES[p.style]

        if p.noise and rng.random() < p.noise:  # erratic: a random proposal, or a snap acceptance
            if offered is not None and rng.random() < 0.3:
                return f"{rng.choice(phrases['accept'])} [accept]"
            share = rng.choice(all_splits(counts))
            return self._propose(rng, share, counts, phrases)
        if offered is not None and (offered >= 10 * a - p.margin or (last_chance and offered >= 10 * p.end)):
            return f"{rng.choice(phrases['accept'])} [accept]"
        if n >= task.max_turns - 1 and offered is not None and offered < 10 * p.end:
            return f"{rng.choice(phrases['no_deal'])} [no deal]"
        share = self._choose_share(rng, counts, values, a, state, role)
        talk = ""
        if p.talk and rng.random() < p.talk:  # cheap talk about its own preferences
            order = sorted(range(3), key=lambda i: values[i])
            kind, i = ("like", order[-1]) if rng.random() < 0.6 else ("dislike", order[0])
            talk = rng.choice(phrases[kind]).format(item=ITEMS[i])
        return self._propose(rng, share, counts, phrases, reject=offered is not None, talk=talk)

    def _reciprocate(self, p: Reciprocal, task: DealOrNoDeal, state: GameState, role: str, rng: random.Random,
                     last_chance: bool) -> str:
        """A Reciprocal's turn: accept, end, or propose at its demand (see Reciprocal)."""
        counts, values = state.scenario.counts, state.scenario.values[task.roles.index(role)]
        demand = reciprocal_demand(p, state, role, values, counts)
        standing = state.info.get("offer")
        offered = None
        if standing is not None and standing[0] != role:
            offered = split_value(values, complement(counts, standing[1]))
        phrases = _PHRASES[p.style]
        if offered is not None and (offered >= demand - 1e-9 or (last_chance and offered >= 10 * p.floor)):
            return f"{rng.choice(phrases['accept'])} [accept]"
        if len(state.talk_turns()) >= task.max_turns - 1 and offered is not None and offered < 10 * p.floor:
            return f"{rng.choice(phrases['no_deal'])} [no deal]"
        share = self._choose_share(rng, counts, values, demand / 10, state, role)
        talk = ""
        if p.talk and rng.random() < p.talk:
            order = sorted(range(3), key=lambda i: values[i])
            talk = rng.choice(phrases["like"]).format(item=ITEMS[order[-1]])
        return self._propose(rng, share, counts, phrases, reject=offered is not None, talk=talk)

    @staticmethod
    def _propose(rng: random.Random, share, counts, phrases, reject: bool = False, talk: str = "") -> str:
        body = rng.choice(phrases["propose"]).format(own=describe(share), other=describe(complement(counts, share)))
        parts = [rng.choice(phrases["counter"]) if reject else "", body, talk]
        return " ".join(x for x in parts if x) + " " + marker(share)

    @staticmethod
    def _choose_share(rng: random.Random, counts, values, a: float, state: GameState, role: str) -> tuple:
        """Among shares worth >= 10*a to me, the one the counterpart seems to value most (its asks weigh items)."""
        want = [1.0, 1.0, 1.0]
        for t in state.talk_turns():  # the counterpart's proposals show what it wants
            if t.role != role and t.action and t.action.get("type") == "propose" and t.invalid is None:
                want = [w + s / c for w, s, c in zip(want, t.action["share"], counts)]
        splits = all_splits(counts)
        ok = [s for s in splits if split_value(values, s) >= 10 * a - 1e-9]
        if not ok:
            ok = [max(splits, key=lambda s: split_value(values, s))]

        def key(s):
            theirs = sum(w * x for w, x in zip(want, complement(counts, s)))
            return (theirs, -split_value(values, s), rng.random())
        return max(ok, key=key)



def reciprocal_demand(p: Reciprocal, state: GameState, role: str, values, counts) -> float:
    """A Reciprocal's demand (points of 10): 10 * opening - reciprocity * the counterpart's concession so far (the
    value to `role` of the counterpart's best valid proposal minus that of its first), at least 10 * floor."""
    offers = [split_value(values, complement(counts, t.action["share"])) for t in state.talk_turns()
              if t.role != role and t.invalid is None and t.action and t.action.get("type") == "propose"]
    conceded = max(offers) - offers[0] if offers else 0.0
    return max(10 * p.floor, 10 * p.opening - p.reciprocity * conceded)


class ProbeProposer(Agent):
    """A negotiator of the responsiveness check (`probe`): an oracle that reads the counterpart's values and proposes
    one split on each of its turns, in the same words whatever it proposes. kind="good": the counterpart gets the
    share worth least to it among those worth at least 7 of its 10 points (`probe_shares`); kind="bad": the share
    worth most to it among those worth at most 3."""

    def __init__(self, kind: str, counterpart: str):
        if kind not in ("good", "bad"):
            raise ValueError(f"kind={kind!r}: choose good or bad")
        self.kind, self.counterpart, self.name = kind, counterpart, f"{kind}-split"

    def act(self, requests: Sequence[ActRequest]) -> list[str]:
        out = []
        for r in requests:
            theirs = probe_shares(r.state.scenario, self.counterpart)[self.kind]
            out.append(f"how about this? you get {describe(theirs)}. "
                       f"{marker(complement(r.state.scenario.counts, theirs))}")
        return out


def probe_shares(scenario, counterpart: str) -> dict[str, tuple[int, int, int] | None]:
    """The counterpart's share the probe proposes: "good" the cheapest worth >= 7 of its points to it, "bad" the
    dearest worth <= 3 (None where the pool has none)."""
    values = scenario.values[0 if counterpart == "A" else 1]
    worth = {share: split_value(values, share) for share in all_splits(scenario.counts)}
    good = sorted((w, sh) for sh, w in worth.items() if w >= 7)
    bad = sorted((w, sh) for sh, w in worth.items() if w <= 3)
    return {"good": good[0][1] if good else None, "bad": bad[-1][1] if bad else None}


def probe(role: str = "B") -> Probe:
    """The responsiveness check's probe of a negotiator in `role`: does it agree to a split worth at least 7 of its
    10 points more often than to one worth at most 3?"""
    if role not in ("A", "B"):
        raise ValueError(f"role={role!r}: choose A or B")
    return Probe(role, ProbeProposer("good", role), ProbeProposer("bad", role), decision="agreed",
                 kinds=("worth >= 7 of 10 to it", "worth <= 3 of 10 to it"),
                 applies=lambda sc: None not in probe_shares(sc, role).values())


def population(role: str, names: Sequence[str] | None = None, weights: dict[str, float] | None = None,
               seed: int = 0, style: str | None = None) -> Population:
    """A Population of scripted negotiators for `role` ('A' or 'B': both play the same personas): all of PERSONAS by
    default, UNSEEN_PERSONAS by name, optionally all speaking in `style`."""
    def make(p: Persona | Reciprocal, member_seed: int) -> ScriptedAgent:
        return ScriptedAgent(p if style is None else replace(p, style=style), seed=member_seed)

    return scripted_population(role, {"A": ALL_PERSONAS, "B": ALL_PERSONAS}, {"A": list(PERSONAS), "B": list(PERSONAS)},
                              make, names, weights, seed)
