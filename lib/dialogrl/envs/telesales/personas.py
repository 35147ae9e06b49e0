"""Scripted Vehicle TeleSales sellers and buyers: the held-out counterparts, and the authors of the warm-start corpus.

`ScriptedAgent` plays one persona (SELLER_PERSONAS, BUYER_PERSONAS, or UNSEEN_BUYERS: buyers that neither the
scenario generator nor the corpus uses) by explicit rules over its private information and what it hears in the
counterpart's words (`hear`, `listen`). `population` is a Population of them, one drawn per game.

Rule families (what a rule reads; `rule_family`, `trait_vector`, `TRAIT_RANGES`, `traits`: dialogrl.heldout):
  margin-schedule         `SellerPersona`: its asking margin falls with the clock
  reservation-schedule    `BuyerPersona`: the price it takes rises with the clock, as a share of its budget
  concession-anchored     `AnchoredBuyer` (held out): the price it takes is set by the seller's own first quote and
                          how far the seller has come down from it; the clock does not move it
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from dialogrl.envs.telesales.task import (
    BUYER_PROFILES,
    CATALOG,
    MAX_PRICE,
    TelesalesScenario,
    VehicleTeleSales,
    article,
    buy_marker,
    fits,
    good_sale,
    offer_marker,
    without_markers,
)
from dialogrl.game import (
    MAX_TURN_CHARS,
    Agent,
    GameState,
    PersonaAgent,
    Population,
    Probe,
    game_key,
    scripted_population,
)
from dialogrl.heldout import Traits


@dataclass(frozen=True)
class SellerPersona:
    """A scripted seller. Its asking margin m (price = floor + m * (MSRP - floor)) falls from `start` to `end` over
    its turns as m(p) = start - (start - end) * p ** beta; it never offers below floor + end * (MSRP - floor).
    `listen`: offer vehicles with the features (and type) the buyer asked for; otherwise push its two most profitable
    vehicles in turn, or with `scatter` any lot vehicle but the one it offered last (a seller who does not listen
    and does not care what it sells: its offers teach a buyer to read what an offer lacks, not its price).
    `meet_budget`: drop to a price the buyer named (a budget or an ask) when that stays above its limit; without
    it, concede on its own schedule only (to its limit on its last turn). `upsell`: the priciest fitting vehicle
    first, even above the budget. `ask_first`: open with a question instead of an offer."""
    name: str
    start: float
    end: float
    beta: float = 1.0
    listen: bool = True
    meet_budget: bool = True
    upsell: bool = False
    ask_first: bool = True
    scatter: bool = False
    style: str = "plain"  # phrasing: "plain" or "casual"


@dataclass(frozen=True)
class BuyerPersona:
    """A scripted buyer. It buys the cheapest standing offer that has its must-haves (and its type, if `strict_type`
    and the lot has such a fitting vehicle) at a price <= budget * t(p), t rising from `start` to 1 as
    t(p) = start + (1 - start) * p ** beta, and at any price within budget on its last turn; otherwise it names
    what an offer lacks or counters with budget * t(p). It names `reveal` of its must-haves per turn, its type with
    probability `say_type`, and a budget of `say_budget` times the real one (0: never). It leaves after `patience`
    offers it would not take (0: only at its last turn). `slip`: chance of buying an offer it should not (impulse);
    `wander`: chance of an off-topic line. `about` is the persona line of an LM buyer's prompt."""
    name: str
    about: str
    start: float = 1.0
    beta: float = 1.0
    reveal: int = 1
    say_type: float = 0.5
    say_budget: float = 1.0
    strict_type: bool = False
    patience: int = 0
    slip: float = 0.0
    wander: float = 0.0
    style: str = "plain"


@dataclass(frozen=True)
class AnchoredBuyer:
    """A scripted buyer of another rule family than BuyerPersona's: it anchors on the seller's first price for a
    vehicle and waits for the seller to come down from it, whatever its budget and the clock say.

    It buys the cheapest standing offer that has its must-haves, within budget, once that vehicle's price has come
    down at least `concession` of the seller's first price for it (on its last turn: come down at all); otherwise
    it names what an offer lacks or counters with that first price less `concession` (at most its budget). It leaves
    after `patience` offers it would not take (0: only at its last turn, when nothing has come down). Like
    BuyerPersona it names `reveal` of its must-haves per turn, its type with probability `say_type` and a budget of
    `say_budget` times the real one (0: never). `about` is the persona line of an LM buyer's prompt."""
    name: str
    about: str
    concession: float = 0.1
    reveal: int = 1
    say_type: float = 0.5
    say_budget: float = 0.0
    patience: int = 0
    style: str = "plain"


SELLER_PERSONAS: dict[str, SellerPersona] = {p.name: p for p in [
    SellerPersona("hard-seller", start=1.0, end=0.5, beta=3.0, meet_budget=False),
    SellerPersona("fair", start=0.7, end=0.2),
    SellerPersona("discounter", start=0.4, end=0.0, beta=0.5, ask_first=False, style="casual"),
    SellerPersona("upseller", start=1.0, end=0.3, beta=1.5, upsell=True),
    SellerPersona("pusher", start=0.9, end=0.3, listen=False, ask_first=False, style="casual"),
    SellerPersona("scattershot", start=0.6, end=0.1, listen=False, scatter=True),
]}
BUYER_PERSONAS: dict[str, BuyerPersona] = {p.name: p for p in [
    BuyerPersona("bargain-hunter", BUYER_PROFILES["bargain-hunter"], start=0.75, beta=3.0,
                 reveal=2, say_budget=0.85),
    BuyerPersona("decisive", BUYER_PROFILES["decisive"], reveal=9, say_type=1.0,
                 patience=3),
    BuyerPersona("picky", BUYER_PROFILES["picky"], start=0.95, reveal=9,
                 say_type=1.0, say_budget=0.95, strict_type=True, patience=4),
    BuyerPersona("wanderer", BUYER_PROFILES["wanderer"], start=0.9, reveal=1,
                 say_type=0.3, say_budget=0.0, patience=2, wander=0.4, style="casual"),
    BuyerPersona("impulsive", BUYER_PROFILES["impulsive"], reveal=1,
                 say_budget=1.0, patience=3, slip=0.3, style="casual"),
]}
# Buyers that no part of the pipeline has seen: the scenario generator, and so the warm-start corpus
# (`telesales_corpus`), draw personas from BUYER_PERSONAS only, so these are held out from the warm start as well as
# from RL. Play one by name (`ScriptedAgent("poker-face")`, `population("buyer", ["poker-face"])`).
# Each is held out by dialogrl.heldout's rule (at least MIN_DISTANCE = 0.3 from every buyer above):
# `poker-face` (0.33 from wanderer), `exacting` (0.51 from picky) and `anchored` (another family).
UNSEEN_BUYERS: dict[str, BuyerPersona | AnchoredBuyer] = {p.name: p for p in [
    BuyerPersona("poker-face", "you give little away: one need at a time, never your type or budget, and you haggle "
                 "patiently from far below your budget", start=0.7, beta=2.0, reveal=1, say_type=0.0, say_budget=0.0,
                 patience=5),
    BuyerPersona("exacting", "you list every need at once but keep your type and budget to yourself; only your "
                 "preferred type will do, and you bargain from well below your budget", start=0.8, beta=1.0, reveal=9,
                 say_type=0.0, say_budget=0.0, strict_type=True, patience=0),
    AnchoredBuyer("anchored", "you judge a price by the seller's first one: you buy once the seller has come down "
                  "a tenth from it, and you say one need at a time but never your budget", concession=0.1,
                  reveal=1, say_type=0.5, patience=0),
]}
ALL_BUYERS: dict[str, BuyerPersona | AnchoredBuyer] = {**BUYER_PERSONAS, **UNSEEN_BUYERS}

# What each family's rule reads, and each number's range (dialogrl.heldout scales differences by it): shares of
# a price or a budget, beta on a log2 scale (0.25 .. 8), must-haves named per turn (3 = all), probabilities, and
# patience in refused offers (0, only at its last turn, counts as 5: a buyer's turns in a 10-turn game).
TRAIT_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "margin-schedule": {"start": (0.0, 1.0), "end": (0.0, 1.0), "log2_beta": (-2.0, 3.0), "listen": (0.0, 1.0),
                        "meet_budget": (0.0, 1.0), "upsell": (0.0, 1.0), "ask_first": (0.0, 1.0),
                        "scatter": (0.0, 1.0)},
    "reservation-schedule": {"start": (0.5, 1.0), "log2_beta": (-2.0, 3.0), "reveal": (0.0, 3.0),
                             "say_type": (0.0, 1.0), "say_budget": (0.0, 1.0), "strict_type": (0.0, 1.0),
                             "patience": (1.0, 5.0), "slip": (0.0, 1.0)},
    "concession-anchored": {"concession": (0.0, 0.3), "reveal": (0.0, 3.0), "say_type": (0.0, 1.0),
                            "say_budget": (0.0, 1.0), "patience": (1.0, 5.0)},
}


def rule_family(p: SellerPersona | BuyerPersona | AnchoredBuyer) -> str:
    """The family of a persona's decision rule: what it reads (module docstring)."""
    return {SellerPersona: "margin-schedule", BuyerPersona: "reservation-schedule",
            AnchoredBuyer: "concession-anchored"}[type(p)]


def trait_vector(p: SellerPersona | BuyerPersona | AnchoredBuyer) -> dict[str, float]:
    """The numbers a persona's decision rule reads (its phrasing, `style` and `wander`, left out)."""
    if isinstance(p, SellerPersona):
        return {"start": p.start, "end": p.end, "log2_beta": math.log2(p.beta), "listen": float(p.listen),
                "meet_budget": float(p.meet_budget), "upsell": float(p.upsell), "ask_first": float(p.ask_first),
                "scatter": float(p.scatter)}
    shared = {"reveal": float(min(p.reveal, 3)), "say_type": p.say_type, "say_budget": p.say_budget,
              "patience": float(p.patience or 5)}
    if isinstance(p, AnchoredBuyer):
        return {"concession": p.concession, **shared}
    return {"start": p.start, "log2_beta": math.log2(p.beta), **shared, "strict_type": float(p.strict_type),
            "slip": p.slip}


def traits(p: SellerPersona | BuyerPersona | AnchoredBuyer | str) -> Traits:
    """A persona (or its name in SELLER_PERSONAS or ALL_BUYERS) as dialogrl.heldout compares it."""
    p = (SELLER_PERSONAS.get(p) or ALL_BUYERS[p]) if isinstance(p, str) else p
    return Traits(rule_family(p), trait_vector(p), TRAIT_RANGES[rule_family(p)])

SAY_FEATURE = {"awd": "awd", "hybrid": "a hybrid engine", "third_row": "a third row", "sunroof": "a sunroof",
               "towing": "towing", "leather": "leather seats", "heated_seats": "heated seats"}
# What a scripted listener hears in the buyer's words (any of these substrings names the feature or type).
HEAR_FEATURE = {"awd": ("awd", "all-wheel", "all wheel"), "hybrid": ("hybrid",),
                "third_row": ("third row", "third_row", "3rd row", "seven seats", "7 seats"),
                "sunroof": ("sunroof", "moonroof"), "towing": ("towing", "to tow", "tow "), "leather": ("leather",),
                "heated_seats": ("heated",)}
HEAR_TYPE = {"sedan": ("sedan",), "suv": ("suv",), "pickup": ("pickup", "truck"), "van": ("van", "minivan"),
             "hatchback": ("hatchback", "hatch"), "ev": ("ev", "electric")}

_PHRASES = {
    "plain": {
        "open": ["hi, thanks for calling! what are you looking for?", "hello! what kind of vehicle do you need?",
                 "good morning, how can i help you today?", "hi there. tell me what you need and your budget."],
        "greet": ["hi, thanks for calling!", "hello, great deals today.", "good morning!"],
        "ack": ["got it.", "i hear you.", "understood.", "sure.", "", ""],
        "pitch": ["the {v} is {a_type} with {feats}.", "how about the {v}? it's {a_type} with {feats}.",
                  "i have the {v}, {a_type} with {feats}.", "you'd love the {v}: {a_type} with {feats}."],
        "price": ["i can do {money}.", "it's yours for {money}.", "i can let it go for {money}.",
                  "{money} and it's yours."],
        "final": ["best i can do is {money}.", "my final price is {money}.", "i can go down to {money}."],
        "ask_budget": ["what's your budget?", "how much do you want to spend?"],
        "need": ["i need {feats}.", "it has to have {feats}.", "i'm looking for something with {feats}.",
                 "{feats} is a must for me."],
        "nothing": ["i don't need anything special.", "nothing fancy, just a good deal."],
        "type": ["i'd like {a_type}.", "i'm looking for {a_type}.", "ideally {a_type}."],
        "budget": ["my budget is about {money}.", "i can spend around {money}.", "i don't want to go over {money}."],
        "missing": ["the {v} has no {feat}.", "the {v} doesn't have {feat}, i need that.",
                    "no, the {v} is missing {feat}."],
        "wrong_type": ["the {v} isn't {a_type}.", "i really want {a_type}, not the {v}."],
        "counter": ["can you do {money} on the {v}?", "{money} for the {v} and we have a deal.",
                    "how about {money} for the {v}?", "i'd pay {money} for the {v}."],
        "buy": ["deal!", "great, i'll take it.", "sold.", "ok, let's do it."],
        "leave": ["thanks, but i'll pass.", "i'll look elsewhere, thanks.", "not today, sorry."],
        "filler": ["what else do you have?", "hmm, let me think.", "tell me more."],
        "wander": ["do you have it in red?", "what about financing?", "is the warranty good?",
                   "my neighbor got a new car last week."],
    },
    "casual": {
        "open": ["hey! what can i get you?", "hi, what are you after?", "yo, what kind of ride do you need?"],
        "greet": ["hey there!", "hi! got a deal for you.", "hey, thanks for calling!"],
        "ack": ["ok.", "cool.", "gotcha.", "", ""],
        "pitch": ["check out the {v}, {a_type} with {feats}.", "the {v}! {a_type} with {feats}.",
                  "got the {v} here, {a_type}, {feats}."],
        "price": ["{money} today.", "yours for {money}.", "{money}, great deal."],
        "final": ["ok ok, {money}.", "fine, {money}, last offer.", "{money}, can't go lower."],
        "ask_budget": ["what's ur budget?", "how much can u spend?"],
        "need": ["need {feats}", "gotta have {feats}", "{feats} pls"],
        "nothing": ["nothing special", "whatever's cheap"],
        "type": ["want {a_type}", "{a_type} would be nice"],
        "budget": ["budget's like {money}", "got about {money}"],
        "missing": ["{v} has no {feat} tho", "no {feat} on the {v}?", "{v} without {feat}, nah"],
        "wrong_type": ["{v} isn't {a_type}", "want {a_type}, not the {v}"],
        "counter": ["{money} for the {v}?", "do the {v} for {money}", "{v} at {money} and i'm in"],
        "buy": ["ok deal", "sold!", "sure, i'll take it"],
        "leave": ["nah, i'm out", "forget it", "gonna pass"],
        "filler": ["what else u got?", "hmm", "idk"],
        "wander": ["any red ones?", "is financing a thing?", "lol my cousin drives a van"],
    },
}


def money(x: int, style: str = "plain") -> str:
    """$31500 (plain) or 31.5k (casual, for round amounts)."""
    if style == "casual" and x % 500 == 0:
        return f"{x / 1000:g}k"
    return f"${int(x)}"


def join(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


# ASCII digits only, as in the markers: scripted listeners read LM output. A 'k' amount starts where a run of digits
# starts: tried inside a long run, it would rescan the rest of the run from every digit (quadratic time).
_SENTENCE = re.compile(r"[?!;\n]|[.,](?![0-9])")
_MONEY = re.compile(r"\$\s?([0-9][0-9,]*)|(?<![0-9])([0-9]+(?:\.[0-9]+)?)\s?k\b|\b([0-9]{4,6})\b", re.A)


_CONTENT = re.compile(r"[a-z0-9]")
_WORD = re.compile(r"[a-z_]+")
_FEATURE_OF = {k: f for f, keys in HEAR_FEATURE.items() for k in keys}   # each cue -> its feature (cues are unique)
_FEATURE_KEY = re.compile("|".join(map(re.escape, sorted(_FEATURE_OF, key=len, reverse=True))))
_TYPE_OF = {k: t for t, keys in HEAR_TYPE.items() for k in keys}


def hear(text: str, lot: Sequence[str]) -> list[dict]:
    """What a scripted listener takes from one utterance (markers excluded), clause by clause: the features,
    types and lot vehicles it names and the dollar amounts in it ($31500, 31,500, 31.5k, 31500; $1000 to
    MAX_PRICE; other numbers are not amounts). Reads the first MAX_TURN_CHARS characters, as much as a game's turn
    holds (`rollout.play` cuts longer ones), and skips clauses with no letter or digit. Never raises."""
    out = []
    for s in _SENTENCE.split(without_markers(text[:MAX_TURN_CHARS]).lower()):
        if not _CONTENT.search(s):   # a clause of spaces and punctuation says nothing (and "?" x 10^6 is 10^6 clauses)
            continue
        amounts = []
        for m in _MONEY.finditer(s):
            x = m.group(1) or m.group(3)
            # float() takes any [0-9] string (a huge one is inf); int() only runs on an amount in range
            x = float(x.replace(",", "")) if x else float(m.group(2)) * 1000
            if 1000 <= x <= MAX_PRICE:
                amounts.append(int(x))
        words = set(_WORD.findall(s))
        out.append({"features": {_FEATURE_OF[k] for k in _FEATURE_KEY.findall(s)},
                    "types": {_TYPE_OF[w] for w in words & _TYPE_OF.keys()},
                    "vehicles": [v for v in lot if v in words], "amounts": amounts})
    return out


def listen(state: GameState, speaker: str) -> dict:
    """What `speaker` has said so far: features, types, a budget (an amount with no vehicle), asks (vehicle ->
    the last amount named with it) and rejected vehicles (named with no amount: 'the atlas has no towing')."""
    heard = {"features": set(), "types": set(), "budget": None, "asks": {}, "rejected": set()}
    for t in state.talk_turns():
        if t.role != speaker:
            continue
        for s in hear(t.text, state.scenario.lot):
            heard["features"] |= s["features"]
            heard["types"] |= s["types"]
            if s["amounts"] and s["vehicles"]:
                heard["asks"][s["vehicles"][0]] = s["amounts"][-1]
            elif s["amounts"]:
                heard["budget"] = s["amounts"][-1]
            elif s["vehicles"]:
                heard["rejected"] |= set(s["vehicles"])
    return heard


def schedule(start: float, end: float, beta: float, progress: float) -> float:
    """start + (end - start) * progress ** beta, progress clipped to [0, 1]."""
    return start + (end - start) * min(max(progress, 0.0), 1.0) ** beta


class ScriptedAgent(PersonaAgent):
    """A scripted TeleSales seller or buyer playing one persona (a SellerPersona, a BuyerPersona or its name in
    SELLER_PERSONAS, BUYER_PERSONAS or UNSEEN_BUYERS).

    persona=None plays, as the buyer, the persona each scenario names (`scenario.persona`), so a buyer's prompt and
    its behaviour agree (the corpus uses this). Each utterance draws from its own RNG, seeded by (seed, game, role,
    turn), the game being its seed (`game_key`) or its scenario id: a game plays the same whatever else is in the
    batch. `style` overrides the persona's phrasing.
    """

    personas = {"sellers": SELLER_PERSONAS, "buyers": BUYER_PERSONAS, "unseen buyers": UNSEEN_BUYERS}
    scenario_name = "scenario-buyer"

    def __init__(self, persona: SellerPersona | BuyerPersona | AnchoredBuyer | str | None = None, seed: int = 0,
                 style: str | None = None):
        super().__init__(persona, seed)
        self.style = style

    def utter(self, task: VehicleTeleSales, state: GameState, role: str) -> str:
        p = self.persona if self.persona is not None else BUYER_PERSONAS[state.scenario.persona]
        if self.style is not None:
            p = replace(p, style=self.style)
        want = SellerPersona if role == "seller" else (BuyerPersona, AnchoredBuyer)
        if not isinstance(p, want):
            raise ValueError(f"persona {p.name!r} cannot play the {role}")
        rng = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/{role}/{len(state.turns)}")
        return self._sell(p, task, state, rng) if role == "seller" else self._buy(p, task, state, rng)

    # -- the seller
    def _sell(self, p: SellerPersona, task: VehicleTeleSales, state: GameState, rng: random.Random) -> str:
        sc, ph = state.scenario, _PHRASES[p.style]
        n = len(state.talk_turns())
        if n == 0 and p.ask_first:
            return rng.choice(ph["open"])
        m = schedule(p.start, p.end, p.beta, n / max(task.max_turns - 2, 1))  # m = end on its last turn
        heard = listen(state, "buyer")
        offers = state.info.get("offers", [])

        def limit(v):  # the lowest price it ever offers for v
            return math.ceil((sc.floor(v) + p.end * (CATALOG[v].msrp - sc.floor(v))) / 100) * 100

        if p.listen:
            pool = [v for v in sc.lot if v not in heard["rejected"]] or list(sc.lot)
            need = heard["features"]
            best = max(len(need & set(CATALOG[v].features)) for v in pool)
            cands = [v for v in pool if len(need & set(CATALOG[v].features)) == best]
            named = ([heard["budget"]] if heard["budget"] is not None else []) + list(heard["asks"].values())
            budget = max(named, default=None)  # the most the buyer has named: its budget, or an ask above it
            if budget is not None and not (p.upsell and not offers):
                cands = [v for v in cands if limit(v) <= budget] or cands
            cands = [v for v in cands if CATALOG[v].type in heard["types"]] or cands
            v = (max if p.upsell else min)(cands, key=lambda v: CATALOG[v].msrp)
            asked = [a for a, x in heard["asks"].items() if a in cands and limit(a) <= x]
            v = asked[-1] if asked else v  # a vehicle the buyer named a price it can take for
            hint = heard["asks"].get(v, budget)  # the buyer's number for v
        elif p.scatter:  # any vehicle but the one it offered last, deaf to the buyer
            v, hint = rng.choice([v for v in sc.lot if not offers or v != offers[-1][0]]), None
        else:  # pushes its two most profitable vehicles in turn, deaf to the buyer
            top = sorted(sc.lot, key=lambda v: CATALOG[v].msrp - sc.floor(v), reverse=True)[:2]
            v, hint = top[len(offers) % len(top)], None
        floor, msrp = sc.floor(v), CATALOG[v].msrp
        price = math.ceil((floor + m * (msrp - floor)) / 100) * 100
        if hint is not None and p.meet_budget and limit(v) <= hint < price:
            price = hint  # meet the buyer's number
        price = min([price] + [q for u, q in offers if u == v])  # never ask more than it already offered

        parts = [rng.choice(ph["greet"] if n == 0 else ph["ack"])]
        feats = join([SAY_FEATURE[f] for f in CATALOG[v].features]) if CATALOG[v].features else "no extras"
        parts.append(rng.choice(ph["pitch"]).format(v=v, a_type=article(CATALOG[v].type), feats=feats))
        conceding = any(u == v for u, _ in offers)
        parts.append(rng.choice(ph["final" if conceding else "price"]).format(money=money(price)))
        if p.listen and heard["budget"] is None and not heard["asks"] and rng.random() < 0.3:
            parts.append(rng.choice(ph["ask_budget"]))
        return " ".join(x for x in parts if x) + " " + offer_marker(sc.lot.index(v) + 1, price)

    # -- the buyer
    @staticmethod
    def _buy_marker(sc: TelesalesScenario, offers: list, v: str, price: int) -> str:
        """[ACCEPT] for the latest offer, [BUY n $price] for an earlier one."""
        return "[ACCEPT]" if offers and offers[-1] == (v, price) else buy_marker(sc.lot.index(v) + 1, price)

    def _buy(self, p: BuyerPersona | AnchoredBuyer, task: VehicleTeleSales, state: GameState,
             rng: random.Random) -> str:
        if isinstance(p, AnchoredBuyer):
            return self._buy_anchored(p, task, state, rng)
        sc, ph = state.scenario, _PHRASES[p.style]
        talk = state.talk_turns()
        n = len(talk)
        last = n >= task.max_turns - 2  # nobody can answer after this turn, or only the seller
        target = sc.budget * schedule(p.start, 1.0, p.beta, n / max(task.max_turns - 1, 1))
        typed = p.strict_type and any(fits(sc, v) and CATALOG[v].type == sc.preferred_type for v in sc.lot)

        def takes(v, price):
            return good_sale(sc, v, price) and (not typed or CATALOG[v].type == sc.preferred_type)

        offers = state.info.get("offers", [])
        ok = sorted((q, v) for v, q in offers if takes(v, q))
        if ok and (ok[0][0] <= target or last):
            return f"{rng.choice(ph['buy'])} {self._buy_marker(sc, offers, ok[0][1], ok[0][0])}"
        new = talk[-1].action if talk and talk[-1].invalid is None and talk[-1].action["type"] == "offer" else None
        if new is not None and p.slip and not takes(new["vehicle"], new["price"]) and rng.random() < p.slip:
            return f"{rng.choice(ph['buy'])} [ACCEPT]"  # an impulse buy of the latest offer
        refused = sum(not takes(v, q) for v, q in offers)
        if last or (p.patience and refused >= p.patience):
            return f"{rng.choice(ph['leave'])} [LEAVE]"

        said = listen(state, "buyer")
        parts = []
        if new is not None:  # answer the latest offer
            v, missing = new["vehicle"], [f for f in sc.must_have if f not in CATALOG[new["vehicle"]].features]
            if missing:
                parts.append(rng.choice(ph["missing"]).format(v=v, feat=SAY_FEATURE[missing[0]]))
            elif typed and CATALOG[v].type != sc.preferred_type:
                parts.append(rng.choice(ph["wrong_type"]).format(v=v, a_type=article(sc.preferred_type)))
            elif new["price"] > target:
                ask = int(min(target, sc.budget) // 100 * 100)
                parts.append(rng.choice(ph["counter"]).format(v=v, money=money(ask, p.style)))
        parts += self._disclose(p, sc, said, typed, n, rng)
        if p.wander and rng.random() < p.wander:
            parts.insert(0, rng.choice(ph["wander"]))
        return self._clauses(parts, ph, rng)

    @staticmethod
    def _disclose(p: BuyerPersona | AnchoredBuyer, sc: TelesalesScenario, said: dict, typed: bool, n: int,
                  rng: random.Random) -> list[str]:
        """What a buyer tells of itself this turn: `reveal` unsaid must-haves, its type, its (shown) budget."""
        ph, parts = _PHRASES[p.style], []
        unsaid = [f for f in sc.must_have if f not in said["features"]]
        if unsaid and p.reveal:
            parts.append(rng.choice(ph["need"]).format(feats=join([SAY_FEATURE[f] for f in unsaid[:p.reveal]])))
        elif not sc.must_have and n <= 1:
            parts.append(rng.choice(ph["nothing"]))
        if sc.preferred_type not in said["types"] and (typed or rng.random() < p.say_type):
            parts.append(rng.choice(ph["type"]).format(a_type=article(sc.preferred_type)))
        if p.say_budget and said["budget"] is None:
            shown = int(sc.budget * p.say_budget // 500 * 500)
            parts.append(rng.choice(ph["budget"]).format(money=money(shown, p.style)))
        return parts

    @staticmethod
    def _clauses(parts: list[str], ph: dict, rng: random.Random) -> str:
        # clauses end in a mark (casual ones in a comma), so a listener can tell an ask from a budget
        text = " ".join(x if x[-1] in ".?!" else x + "," for x in parts).rstrip(",")
        return text or rng.choice(ph["filler"])

    def _buy_anchored(self, p: AnchoredBuyer, task: VehicleTeleSales, state: GameState, rng: random.Random) -> str:
        """An AnchoredBuyer's turn (see its docstring)."""
        sc, ph = state.scenario, _PHRASES[p.style]
        talk = state.talk_turns()
        n = len(talk)
        last = n >= task.max_turns - 2  # nobody can answer after this turn, or only the seller
        offers = state.info.get("offers", [])
        first: dict[str, int] = {}
        for v, q in offers:
            first.setdefault(v, q)

        def anchor(v):   # the price it waits for: the seller's first price for v, less `concession`
            return first[v] * (1 - p.concession)

        ok = sorted((q, v) for v, q in offers if good_sale(sc, v, q) and (q <= anchor(v) + 1e-9
                                                                       or (last and q < first[v])))
        if ok:
            return f"{rng.choice(ph['buy'])} {self._buy_marker(sc, offers, ok[0][1], ok[0][0])}"
        if last or (p.patience and len(offers) >= p.patience):
            return f"{rng.choice(ph['leave'])} [LEAVE]"
        new = talk[-1].action if talk and talk[-1].invalid is None and talk[-1].action["type"] == "offer" else None
        parts = []
        if new is not None:  # answer the latest offer
            v, missing = new["vehicle"], [f for f in sc.must_have if f not in CATALOG[new["vehicle"]].features]
            if missing:
                parts.append(rng.choice(ph["missing"]).format(v=v, feat=SAY_FEATURE[missing[0]]))
            else:
                ask = int(min(anchor(v), sc.budget) // 100 * 100)
                parts.append(rng.choice(ph["counter"]).format(v=v, money=money(ask, p.style)))
        parts += self._disclose(p, sc, listen(state, "buyer"), False, n, rng)
        return self._clauses(parts, ph, rng)


class ProbeSeller(Agent):
    """A seller of the responsiveness check (`probe`): an oracle that reads the buyer's private needs. It opens with
    a question, then offers one vehicle on each of its turns, in the same words whatever it offers, coming down
    CONCESSION of its first price with each offer (a buyer that waits for a seller to come down, such as the held-out
    `anchored`, then has a good offer it can take). kind="good": the lot vehicle with every must-have that lists
    cheapest, first at the lower of its list price and 90% of the budget (in $100); kind="bad": the cheapest that
    lacks a must-have, at the same rule, or, for a buyer with no must-haves, the cheapest listed above the budget,
    first at its list price and never within the budget (`bad_offer`)."""

    def __init__(self, kind: str):
        if kind not in ("good", "bad"):
            raise ValueError(f"kind={kind!r}: choose good or bad")
        self.kind, self.name = kind, f"{kind}-offer"

    def act(self, requests) -> list[str]:
        return [self.utter(r.state) for r in requests]

    def utter(self, state: GameState) -> str:
        if not state.talk_turns():
            return "hi, thanks for calling! what are you looking for?"
        sc = state.scenario
        vid, first = good_offer(sc) if self.kind == "good" else bad_offer(sc)
        price = math.ceil(first * (1 - CONCESSION * len(state.info.get("offers", []))) / 100) * 100
        if first > sc.budget:   # an offer over the budget stays over it
            price = max(price, sc.budget + 100)
        v = CATALOG[vid]
        feats = join([SAY_FEATURE[f] for f in v.features]) if v.features else "no extras"
        return (f"how about the {vid}? it's {article(v.type)} with {feats}. i can do {money(price)}. "
                f"{offer_marker(sc.lot.index(vid) + 1, price)}")


CONCESSION = 0.06   # the probe's sellers come down this share of their first price with each offer


def good_offer(sc: TelesalesScenario) -> tuple[str, int]:
    """The probe's good offer: the fitting vehicle that lists cheapest, at min(list, 90% of the budget)."""
    vid = min((v for v in sc.lot if fits(sc, v)), key=lambda v: CATALOG[v].msrp)
    return vid, min(CATALOG[vid].msrp, int(0.9 * sc.budget) // 100 * 100)


def bad_offer(sc: TelesalesScenario) -> tuple[str, int] | None:
    """The probe's bad offer (see ProbeSeller), or None where the lot has none."""
    lacking = [v for v in sc.lot if not fits(sc, v)]
    if lacking:
        vid = min(lacking, key=lambda v: CATALOG[v].msrp)
        return vid, min(CATALOG[vid].msrp, int(0.9 * sc.budget) // 100 * 100)
    over = [v for v in sc.lot if CATALOG[v].msrp > sc.budget]
    if over:
        vid = min(over, key=lambda v: CATALOG[v].msrp)
        return vid, CATALOG[vid].msrp
    return None


def probe(role: str = "buyer") -> Probe:
    """The responsiveness check's probe of a TeleSales buyer: does it buy a good offer more often than a bad one?"""
    if role != "buyer":
        raise ValueError(f"TeleSales probes the buyer (its purchase), not the {role}")
    return Probe("buyer", ProbeSeller("good"), ProbeSeller("bad"), decision="sale",
                 kinds=("meets its needs within budget", "lacks a must-have or over budget"),
                 applies=lambda sc: bad_offer(sc) is not None)


def population(role: str, names: Sequence[str] | None = None, weights: dict[str, float] | None = None,
               seed: int = 0, style: str | None = None) -> Population:
    """A Population of scripted TeleSales personas for `role` ('seller' or 'buyer'): all of SELLER_PERSONAS or
    BUYER_PERSONAS by default; buyers of UNSEEN_BUYERS by name."""
    return scripted_population(role, {"seller": SELLER_PERSONAS, "buyer": ALL_BUYERS},
                              {"seller": list(SELLER_PERSONAS), "buyer": list(BUYER_PERSONAS)},
                              lambda p, s: ScriptedAgent(p, seed=s, style=style), names, weights, seed)


