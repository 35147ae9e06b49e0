"""Vehicle TeleSales (the second game of notebook 04, IB-RL): a seller and a buyer talk about buying a vehicle.

Scenario (seeded generator, `sample_scenarios(n, seed)`; `id` pairs scenarios across methods):
  - CATALOG: 24 vehicles, each with an id (one lower-case word, e.g. `atlas`), a type (TYPES), features (from
    FEATURES) and a list price (MSRP). Each game shows a lot of `lot_size` of them (6 by default): the lot is
    public, both roles see it with types, features and list prices.
  - The seller privately holds a floor price per lot vehicle, 80-93% of its MSRP (rounded to $100).
  - The buyer privately holds a budget, must-have features (0-3, all features of some lot vehicle), a preferred type
    (soft: not part of the score) and a persona (BUYER_PERSONAS: how an LM buyer is asked to behave).
    In about `p_infeasible` of the scenarios the budget is below the floor of every lot vehicle that has the
    must-haves: then no sale can both please the buyer and pay the seller its floor (`feasible(scenario)` is False).

Protocol. The seller speaks first; the roles alternate. A turn is free text that may carry one marker:
    [OFFER <v> $<price>]    seller only: offers lot vehicle <v> at <price> whole dollars (digits; thousands commas
                            allowed: $31500 or $31,500). Every offer stands for the rest of the game.
    [BUY <v> $<price>]      buyer only: buys <v> at <price>; valid only if the seller offered exactly that vehicle at
                            exactly that price earlier in this game. Ends the game with a sale.
    [ACCEPT]                buyer only: buys the seller's latest offer (invalid when none stands). Ends the game.
    [LEAVE]                 buyer only: ends the game without a sale.
  <v> is the vehicle's number on the lot (1..lot_size, as the prompts list the lot) or its id; the scripted personas
  write numbers. Markers are ASCII (digits 0-9 only) and case-insensitive. Numbers and [ACCEPT] are there for small
  models, which copy a word or a price from far back in the context poorly: the first `tiny-telesales`, whose corpus
  named vehicles by id and bought with [BUY id $price] only, named a vehicle on the lot no more often than chance and
  closed no sale in self-play. The talk also ends without a sale after `max_turns` turns (both roles together).
  Invalid markers (a BUY at a price never offered for that vehicle, a vehicle not on the lot, an offer above the
  vehicle's list price, the seller writing BUY, ACCEPT or LEAVE, the buyer writing OFFER, a negative or absurd price
  (over MAX_PRICE), a character outside ASCII, a malformed, unclosed or repeated marker) never
  raise: they are recorded on the Turn, have no effect (the turn is forfeited), count in `invalid_rate` and, by
  default, cost the speaker `invalid_penalty` of reward (0.1: a tenth of a sale's worth to the seller, as one point
  of ten in dealnodeal). RL learns to stall with invalid markers when they are free.

Scores (per game; `reward` = score - invalid_penalty * own invalid turns):
  seller: (price - floor) / (MSRP - floor) on a sale, clipped to [-1, 1] (1 at list price, 0 at the floor, negative
          below, -1 at or below floor - (MSRP - floor)), 0 without one. Offers above the list price are invalid, so
          the score is at most 1: without that cap one sampled typo ($253000 for a $31000 car) that an untrained buyer
          accepts is worth 50 sales at list price, and the group baselines of RL chase such outliers. The clip at -1
          bounds the other side the same way: an accepted $1 offer would otherwise score about -10 (a typo that
          drops digits), while any offer from $0 to the list price stays a valid marker.
  buyer:  a good sale (the vehicle has every must-have and price <= budget) is worth
          (budget - price) / budget + success_bonus; any other sale is worth `bad_sale` (-1); no sale is worth 0.
Metrics: `success_at_1` is the share of dialogues that end in a good sale (one sampled dialogue per scenario, so it is
Success@1 of the seller); `good_sale_rate` is the share of sales that are good.

Scripted personas for both roles (`TelesalesAgent`, SELLER_PERSONAS, BUYER_PERSONAS, and UNSEEN_BUYERS: buyers that
neither the scenario generator nor the corpus uses) and the warm-start corpus of `tiny-telesales`
(`telesales_corpus`) are at the end of this module.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from dialogrl.agents import ActRequest, Agent, Population
from dialogrl.envs.base import GameState, Task, Turn, history_messages, shorten

TYPES = ("sedan", "suv", "pickup", "van", "hatchback", "ev")
FEATURES = ("awd", "hybrid", "third_row", "sunroof", "towing", "leather", "heated_seats")


@dataclass(frozen=True)
class Vehicle:
    id: str
    type: str
    features: tuple[str, ...]
    msrp: int   # list price, dollars


CATALOG: dict[str, Vehicle] = {v.id: v for v in [
    Vehicle("aria", "sedan", ("hybrid", "sunroof"), 28900),
    Vehicle("corvo", "sedan", ("sunroof", "leather", "heated_seats"), 34500),
    Vehicle("lumen", "sedan", ("awd", "hybrid", "heated_seats"), 31200),
    Vehicle("strada", "sedan", (), 22800),
    Vehicle("atlas", "suv", ("awd", "third_row", "towing"), 38900),
    Vehicle("summit", "suv", ("awd", "sunroof", "leather", "heated_seats"), 44600),
    Vehicle("nomad", "suv", ("awd", "hybrid"), 33400),
    Vehicle("borealis", "suv", ("awd", "third_row", "sunroof", "leather", "heated_seats"), 52300),
    Vehicle("bison", "pickup", ("awd", "towing"), 41700),
    Vehicle("forge", "pickup", ("towing",), 32600),
    Vehicle("hauler", "pickup", ("awd", "towing", "leather", "heated_seats"), 54800),
    Vehicle("mesa", "pickup", ("hybrid", "towing"), 39500),
    Vehicle("convoy", "van", ("third_row",), 34200),
    Vehicle("harbor", "van", ("hybrid", "third_row"), 39800),
    Vehicle("roamer", "van", ("awd", "third_row", "sunroof"), 43500),
    Vehicle("shuttle", "van", ("third_row", "towing"), 36700),
    Vehicle("pixel", "hatchback", (), 19400),
    Vehicle("sprite", "hatchback", ("sunroof", "heated_seats"), 23100),
    Vehicle("zip", "hatchback", ("hybrid",), 24600),
    Vehicle("dash", "hatchback", ("awd", "heated_seats"), 26300),
    Vehicle("ion", "ev", ("heated_seats",), 31900),
    Vehicle("flux", "ev", ("awd", "sunroof"), 46200),
    Vehicle("amp", "ev", (), 27800),
    Vehicle("zephyr", "ev", ("awd", "third_row", "leather"), 58900),
]}
MAX_PRICE = 10_000_000  # a price above this (or with more than 8 digits) is an invalid marker, not a number to score


@dataclass(frozen=True)
class TelesalesScenario:
    """One game's lot and each role's private information. `id` is the generator's index for pairing."""
    lot: tuple[str, ...]          # vehicle ids on the lot (public), in display order
    floors: tuple[int, ...]       # the seller's floor price per lot vehicle (private to the seller)
    budget: int                   # the buyer's budget (private)
    must_have: tuple[str, ...]    # the buyer's must-have features (private)
    preferred_type: str           # the buyer's preferred type (private, soft)
    persona: str                  # the buyer persona an LM buyer is asked to play (a key of BUYER_PERSONAS)
    id: int = 0

    def floor(self, vid: str) -> int:
        return self.floors[self.lot.index(vid)]


def fits(scenario: TelesalesScenario, vid: str) -> bool:
    """The vehicle has every must-have feature of the buyer."""
    return set(scenario.must_have) <= set(CATALOG[vid].features)


def good_sale(scenario: TelesalesScenario, vid: str, price: int) -> bool:
    """A sale the buyer wanted: every must-have, within budget."""
    return fits(scenario, vid) and price <= scenario.budget


def feasible(scenario: TelesalesScenario) -> bool:
    """Some lot vehicle has the must-haves and a floor within budget: a good sale at or above the floor exists."""
    return any(fits(scenario, v) and scenario.floor(v) <= scenario.budget for v in scenario.lot)


# ----------------------------------------------------------------------------------------------- the generator

def sample_scenario(rng: random.Random, id: int = 0, lot_size: int = 6, p_infeasible: float = 0.2,
                    personas: Sequence[str] | None = None) -> TelesalesScenario:
    """A target vehicle gives the must-haves (a random subset of its features, 1-3); the lot is the target and
    lot_size - 1 others, shuffled. The budget is set against the cheapest fitting vehicle at the seller's floor
    (floor_c, MSRP_c): with probability p_infeasible it is 75-97% of floor_c (no good sale at or above a floor),
    otherwise uniform in [floor_c + 0.2 (MSRP_c - floor_c), 1.15 MSRP_c]; budgets are multiples of $500."""
    target = rng.choice(list(CATALOG.values()))
    k = min(len(target.features), rng.choice((1, 1, 2, 2, 3)))
    must = tuple(sorted(rng.sample(target.features, k), key=FEATURES.index))
    preferred = target.type if rng.random() < 0.7 else rng.choice(TYPES)
    lot = [target.id] + rng.sample(sorted(set(CATALOG) - {target.id}), lot_size - 1)
    rng.shuffle(lot)
    floors = [int(round(CATALOG[v].msrp * rng.uniform(0.80, 0.93), -2)) for v in lot]
    fitting = [i for i, v in enumerate(lot) if set(must) <= set(CATALOG[v].features)]
    c = min(fitting, key=lambda i: floors[i])
    floor_c, msrp_c = floors[c], CATALOG[lot[c]].msrp
    if rng.random() < p_infeasible:
        budget = math.floor(floor_c * rng.uniform(0.75, 0.97) / 500) * 500
    else:
        budget = math.ceil(rng.uniform(floor_c + 0.2 * (msrp_c - floor_c), 1.15 * msrp_c) / 500) * 500
    persona = rng.choice(sorted(personas or BUYER_PERSONAS))
    return TelesalesScenario(tuple(lot), tuple(floors), budget, must, preferred, persona, id)


# ------------------------------------------------------------------------------------------------------ parsing

# Markers are ASCII: [0-9] and re.ASCII, never \d or str.isdigit, since int() rejects some characters that those
# accept (e.g. '①') and LM output is untrusted text. A marker body with any other character is malformed.
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_DEAL = re.compile(r"(offer|buy)\s+(\S+)\s+\$\s*(-?[0-9,]+)", re.A)
_PRICE = re.compile(r"-?([0-9]+|[0-9]{1,3}(,[0-9]{3})+)", re.A)
_LOT_NUMBER = re.compile(r"[1-9][0-9]*", re.A)


def offer_marker(v: str | int, price: int) -> str:
    """v: the vehicle's lot number (as the scripted personas write it) or its id."""
    return f"[OFFER {v} ${price}]"


def buy_marker(v: str | int, price: int) -> str:
    return f"[BUY {v} ${price}]"


def parse_marker(text: str, lot: Sequence[str]) -> tuple[dict, str | None]:
    """Parse one utterance into (action, invalid reason or None); who may use which marker is the task's rule.
    Never raises: malformed input (non-ASCII digits, absurd numbers, ...) is an invalid reason.

    Actions: {"type": "talk"}, {"type": "offer" | "buy", "vehicle": id, "price": int}, {"type": "accept"},
    {"type": "leave"}. A vehicle is named by its lot number (1-based) or its id; the action holds the id.
    """
    talk = {"type": "talk"}
    found = _BRACKET.findall(text)
    rest = _BRACKET.sub("", text)
    if "[" in rest or "]" in rest:  # a marker begun and never closed (or closed and never begun)
        return talk, "malformed marker (unbalanced brackets)"
    if not found:
        return talk, None
    if len(found) > 1:
        return talk, f"{len(found)} markers in one turn"
    shown = shorten(found[0])
    if not found[0].isascii():
        return talk, f"malformed marker [{shown}] (not ASCII)"
    body = " ".join(found[0].lower().split())
    if body in ("leave", "accept"):
        return {"type": body}, None
    m = _DEAL.fullmatch(body)
    if not m or not _PRICE.fullmatch(m.group(3)):
        return talk, f"malformed marker [{shown}]"
    kind, vid, digits = m.group(1), m.group(2), m.group(3).replace(",", "")
    if digits.startswith("-"):
        return talk, f"negative price in [{shown}]"
    if len(digits) > 8 or int(digits) > MAX_PRICE:  # the length test first: int() refuses over 4300 digits
        return talk, f"price out of range in [{shown}]"
    if _LOT_NUMBER.fullmatch(vid):
        if len(vid) > 3 or int(vid) > len(lot):
            return talk, f"no vehicle number {shorten(vid)} (the lot has {len(lot)})"
        vid = lot[int(vid) - 1]
    if vid not in lot:
        return talk, f"unknown vehicle {shorten(vid)!r} (the lot: {', '.join(lot)})"
    return {"type": kind, "vehicle": vid, "price": int(digits)}, None


def describe_vehicle(vid: str) -> str:
    """'atlas: suv, awd third_row towing, list $38900' (the lot line of a prompt)."""
    v = CATALOG[vid]
    return f"{v.id}: {v.type}, {' '.join(v.features) or 'no extras'}, list ${v.msrp}"


def article(word: str) -> str:
    return ("an " if word in ("suv", "ev") or word[:1] in "aeio" else "a ") + word


# --------------------------------------------------------------------------------------------------- the task

class VehicleTeleSales(Task):
    """Vehicle TeleSales as a two-role Task: 'seller' (speaks first) and 'buyer'. See the module docstring.

    max_turns: talk turns (both roles together) before the game ends without a sale.
    lot_size: vehicles shown per game. p_infeasible: share of scenarios with no good sale at or above a floor.
    success_bonus: added to the buyer's (budget - price) / budget on a good sale. bad_sale: the buyer's score for
    any other sale. invalid_penalty: reward a role loses per invalid turn (0 makes invalid markers free).
    """
    name = "telesales"
    roles = ("seller", "buyer")

    def __init__(self, max_turns: int = 10, lot_size: int = 6, p_infeasible: float = 0.2,
                 success_bonus: float = 1.0, bad_sale: float = -1.0, invalid_penalty: float = 0.1):
        if not isinstance(max_turns, int) or max_turns < 2:
            raise ValueError(f"max_turns={max_turns!r}: must be an int >= 2 (the buyer needs a turn)")
        if not isinstance(lot_size, int) or not 1 <= lot_size <= len(CATALOG):
            raise ValueError(f"lot_size={lot_size!r}: must be an int in 1..{len(CATALOG)}")
        if not 0 <= p_infeasible <= 1:
            raise ValueError(f"p_infeasible={p_infeasible!r}: must be in [0, 1]")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty={invalid_penalty!r}: must be >= 0")
        self.max_turns, self.lot_size, self.p_infeasible = max_turns, lot_size, float(p_infeasible)
        self.success_bonus, self.bad_sale = float(success_bonus), float(bad_sale)
        self.invalid_penalty = float(invalid_penalty)

    # -- scenarios and views
    def sample_scenarios(self, n: int, seed: int) -> list[TelesalesScenario]:
        rng = random.Random(seed)
        return [sample_scenario(rng, i, self.lot_size, self.p_infeasible) for i in range(n)]

    def system_prompt(self, scenario: TelesalesScenario, role: str) -> str:
        rules = (f"Offers: [OFFER n $price], n the vehicle's number on the lot. The buyer takes the latest offer with "
                 f"[ACCEPT], an earlier one with [BUY n $price], or ends with [LEAVE]. At most {self.max_turns} turns.")
        if role == "seller":
            lot = "\n".join(f"{i}. {describe_vehicle(v)}, floor ${f}"
                             for i, (v, f) in enumerate(zip(scenario.lot, scenario.floors), 1))
            return (f"Vehicle TeleSales. You are the seller. The lot, with your private floor prices:\n{lot}\n"
                    "Find what the buyer needs and sell. " + rules)
        p = BUYER_PERSONAS[scenario.persona]
        lot = "\n".join(f"{i}. {describe_vehicle(v)}" for i, v in enumerate(scenario.lot, 1))
        needs = ", ".join(scenario.must_have) or "nothing in particular"
        return (f"Vehicle TeleSales. You are the buyer, {p.name}: {p.about}. Your budget: ${scenario.budget}. "
                f"Must have: {needs}. You prefer {article(scenario.preferred_type)}. The lot:\n{lot}\n" + rules)

    def view(self, state: GameState, role: str) -> list[dict]:
        msgs = [{"role": "system", "content": self.system_prompt(state.scenario, role)}]
        return msgs + history_messages(state, role, opening="A buyer calls. You speak first.")

    # -- turns
    def current_role(self, state: GameState) -> str:
        return self.roles[len(state.talk_turns()) % 2]

    def step(self, state: GameState, text: str) -> Turn:
        if state.done:
            raise RuntimeError("the game is over")
        role = self.current_role(state)
        action, invalid = parse_marker(text, state.scenario.lot)
        offers = state.info.setdefault("offers", [])  # [(vehicle, price)]: the seller's valid offers, in order
        kind = action["type"]
        if invalid is None:
            if role == "seller" and kind in ("buy", "accept", "leave"):
                invalid = f"the seller cannot [{kind.upper()}]"
            elif role == "buyer" and kind == "offer":
                invalid = "the buyer cannot [OFFER]"
            elif kind == "offer" and action["price"] > CATALOG[action["vehicle"]].msrp:
                invalid = f"an offer above the list price of {action['vehicle']} (${CATALOG[action['vehicle']].msrp})"
            elif kind == "buy" and (action["vehicle"], action["price"]) not in offers:
                invalid = f"no offer of {action['vehicle']} at ${action['price']}"
            elif kind == "accept" and not offers:
                invalid = "[ACCEPT] with no offer standing"
        turn = Turn(role, text, action, invalid)
        state.turns.append(turn)
        if invalid is None:  # an invalid turn is forfeited: no effect on the game
            if kind == "offer":
                offers.append((action["vehicle"], action["price"]))
            elif kind in ("buy", "accept"):
                state.info["sale"] = (action["vehicle"], action["price"]) if kind == "buy" else offers[-1]
                state.done, state.end_reason = True, "buy"
            elif kind == "leave":
                state.done, state.end_reason = True, "leave"
        if not state.done and len(state.talk_turns()) >= self.max_turns:
            state.done, state.end_reason = True, "turn_cap"
        return turn

    # -- outcome
    def outcome(self, state: GameState) -> dict[str, dict]:
        sc = state.scenario
        vid, price = state.info.get("sale") or (None, None)
        good = vid is not None and good_sale(sc, vid, price)
        score = {"seller": 0.0, "buyer": 0.0}
        if vid is not None:
            floor, msrp = sc.floor(vid), CATALOG[vid].msrp
            score["seller"] = min(max((price - floor) / (msrp - floor), -1.0), 1.0)  # bounded: see the module docstring
            score["buyer"] = (sc.budget - price) / sc.budget + self.success_bonus if good else self.bad_sale
        out = {}
        for role in self.roles:
            n_invalid = sum(t.invalid is not None for t in state.turns if t.role == role)
            out[role] = {"score": float(score[role]), "reward": float(score[role]) - self.invalid_penalty * n_invalid,
                         "sale": vid is not None, "good_sale": good, "vehicle": vid, "price": price,
                         "feasible": feasible(sc), "n_invalid": n_invalid}
        return out

    def metrics(self, states: Sequence[GameState]) -> dict:
        """Rates and means over finished games (success_at_1: the share of games that end in a good sale)."""
        outs = [self.outcome(s) for s in states]
        sale = np.array([o["seller"]["sale"] for o in outs], dtype=float)
        good = np.array([o["seller"]["good_sale"] for o in outs], dtype=float)
        turns = [t for s in states for t in s.turns]

        def mean(role, key):
            return float(np.mean([o[role][key] for o in outs]))
        return {
            "n_games": len(states),
            "sale_rate": float(sale.mean()),
            "success_at_1": float(good.mean()),
            "good_sale_rate": float(good.sum() / max(sale.sum(), 1)),  # among sales
            "reward_seller": mean("seller", "reward"),
            "reward_buyer": mean("buyer", "reward"),
            "score_seller": mean("seller", "score"),
            "score_buyer": mean("buyer", "score"),
            "invalid_rate": sum(t.invalid is not None for t in turns) / max(len(turns), 1),
            "turns": float(np.mean([len(s.talk_turns()) for s in states])),
            "feasible": mean("seller", "feasible"),  # the ceiling a seller that never sells below a floor faces
        }


# ------------------------------------------------------------------------------------------ scripted personas

@dataclass(frozen=True)
class SellerPersona:
    """A scripted seller. Its asking margin m (price = floor + m * (MSRP - floor)) falls from `start` to `end` over
    its turns as m(p) = start - (start - end) * p ** beta; it never offers below floor + end * (MSRP - floor).
    `listen`: offer vehicles with the features (and type) the buyer asked for; otherwise push its two most profitable
    vehicles in turn. `meet_budget`: drop to a price the buyer named (a budget or an ask) when that stays above its
    limit; without it, concede on its own schedule only (to its limit on its last turn). `upsell`: the priciest
    fitting vehicle first, even above the budget. `ask_first`: open with a question instead of an offer."""
    name: str
    start: float
    end: float
    beta: float = 1.0
    listen: bool = True
    meet_budget: bool = True
    upsell: bool = False
    ask_first: bool = True
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


SELLER_PERSONAS: dict[str, SellerPersona] = {p.name: p for p in [
    SellerPersona("hard-seller", start=1.0, end=0.5, beta=3.0, meet_budget=False),
    SellerPersona("fair", start=0.7, end=0.2),
    SellerPersona("discounter", start=0.4, end=0.0, beta=0.5, ask_first=False, style="casual"),
    SellerPersona("upseller", start=1.0, end=0.3, beta=1.5, upsell=True),
    SellerPersona("pusher", start=0.9, end=0.3, listen=False, ask_first=False, style="casual"),
]}
BUYER_PERSONAS: dict[str, BuyerPersona] = {p.name: p for p in [
    BuyerPersona("bargain-hunter", "you haggle hard and name less than your real budget", start=0.75, beta=3.0,
                 reveal=2, say_budget=0.85),
    BuyerPersona("decisive", "you say all you need at once and buy the first good offer", reveal=9, say_type=1.0,
                 patience=3),
    BuyerPersona("picky", "you insist on your preferred type and every must-have", start=0.95, reveal=9,
                 say_type=1.0, say_budget=0.95, strict_type=True, patience=4),
    BuyerPersona("wanderer", "you drift off topic, never say your budget and leave easily", start=0.9, reveal=1,
                 say_type=0.3, say_budget=0.0, patience=2, wander=0.4, style="casual"),
    BuyerPersona("impulsive", "you decide on a whim and sometimes buy what you did not need", reveal=1,
                 say_budget=1.0, patience=3, slip=0.3, style="casual"),
]}
# Buyers that no part of the pipeline has seen: the scenario generator, and so the warm-start corpus
# (`telesales_corpus`), draw personas from BUYER_PERSONAS only, so these are held out from the warm start as well as
# from RL. Play one by name (`TelesalesAgent("poker-face")`, `telesales_population("buyer", ["poker-face"])`).
# Its start, beta, say_type and patience are unlike those of every persona above.
UNSEEN_BUYERS: dict[str, BuyerPersona] = {p.name: p for p in [
    BuyerPersona("poker-face", "you give little away: one need at a time, never your type or budget, and you haggle "
                 "patiently from far below your budget", start=0.7, beta=2.0, reveal=1, say_type=0.0, say_budget=0.0,
                 patience=5),
]}
ALL_BUYERS: dict[str, BuyerPersona] = {**BUYER_PERSONAS, **UNSEEN_BUYERS}

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


def hear(text: str, lot: Sequence[str]) -> list[dict]:
    """What a scripted listener takes from one utterance (markers excluded), clause by clause: the features,
    types and lot vehicles it names and the dollar amounts in it ($31500, 31,500, 31.5k, 31500; $1000 to
    MAX_PRICE; other numbers are not amounts). Never raises."""
    out = []
    for s in _SENTENCE.split(_BRACKET.sub(" ", text).lower()):
        amounts = []
        for m in _MONEY.finditer(s):
            x = m.group(1) or m.group(3)
            # float() takes any [0-9] string (a huge one is inf); int() only runs on an amount in range
            x = float(x.replace(",", "")) if x else float(m.group(2)) * 1000
            if 1000 <= x <= MAX_PRICE:
                amounts.append(int(x))
        words = set(re.findall(r"[a-z_]+", s))
        out.append({"features": {f for f, keys in HEAR_FEATURE.items() if any(k in s for k in keys)},
                    "types": {t for t, keys in HEAR_TYPE.items() if words & set(keys)},
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


class TelesalesAgent(Agent):
    """A scripted TeleSales seller or buyer playing one persona (a SellerPersona, a BuyerPersona or its name in
    SELLER_PERSONAS, BUYER_PERSONAS or UNSEEN_BUYERS).

    persona=None plays, as the buyer, the persona each scenario names (`scenario.persona`), so a buyer's prompt and
    its behaviour agree (the corpus uses this). Each utterance draws from its own RNG, seeded by (seed, scenario id,
    role, turn): a game plays the same whatever else is in the batch. `style` overrides the persona's phrasing.
    """

    def __init__(self, persona: SellerPersona | BuyerPersona | str | None = None, seed: int = 0,
                 style: str | None = None):
        if isinstance(persona, str):
            if persona not in SELLER_PERSONAS and persona not in ALL_BUYERS:
                raise ValueError(f"unknown persona {persona!r}; sellers: {', '.join(SELLER_PERSONAS)}; "
                                 f"buyers: {', '.join(BUYER_PERSONAS)}; unseen buyers: {', '.join(UNSEEN_BUYERS)}")
            persona = SELLER_PERSONAS.get(persona) or ALL_BUYERS[persona]
        self.persona, self.seed, self.style = persona, seed, style
        self.name = persona.name if persona is not None else "scenario-buyer"

    def act(self, requests: Sequence[ActRequest]) -> list[str]:
        return [self.utter(r.task, r.state, r.role) for r in requests]

    def utter(self, task: VehicleTeleSales, state: GameState, role: str) -> str:
        p = self.persona if self.persona is not None else BUYER_PERSONAS[state.scenario.persona]
        if self.style is not None:
            p = replace(p, style=self.style)
        want = SellerPersona if role == "seller" else BuyerPersona
        if not isinstance(p, want):
            raise ValueError(f"persona {p.name!r} cannot play the {role}")
        rng = random.Random(f"{self.seed}/{state.scenario.id}/{role}/{len(state.turns)}")
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

    def _buy(self, p: BuyerPersona, task: VehicleTeleSales, state: GameState, rng: random.Random) -> str:
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
        if p.wander and rng.random() < p.wander:
            parts.insert(0, rng.choice(ph["wander"]))
        # clauses end in a mark (casual ones in a comma), so a listener can tell an ask from a budget
        text = " ".join(x if x[-1] in ".?!" else x + "," for x in parts).rstrip(",")
        return text or rng.choice(ph["filler"])


def telesales_population(role: str, names: Sequence[str] | None = None, weights: dict[str, float] | None = None,
                         seed: int = 0, style: str | None = None) -> Population:
    """A Population of scripted TeleSales personas for `role` ('seller' or 'buyer'): all of SELLER_PERSONAS or
    BUYER_PERSONAS by default; buyers of UNSEEN_BUYERS by name."""
    default = {"seller": SELLER_PERSONAS, "buyer": BUYER_PERSONAS}.get(role)
    if default is None:
        raise ValueError(f"role={role!r}: choose 'seller' or 'buyer'")
    personas = ALL_BUYERS if role == "buyer" else SELLER_PERSONAS
    names = list(names or default)
    unknown = [n for n in names if n not in personas]
    if unknown:
        raise ValueError(f"unknown {role} persona(s) {unknown}; {role}s: {', '.join(personas)}")
    members = {n: TelesalesAgent(personas[n], seed=seed * 1000 + i, style=style) for i, n in enumerate(names)}
    return Population(members, dict(weights or {}), seed=seed)


# ------------------------------------------------------------------------------------------------ the corpus

def telesales_corpus(n_dialogues: int = 7000, seed: int = 0, sellers: Sequence[str] | None = None,
                     max_turns: int = 10, views: str = "one", style: str | None = None) -> list[list[dict]]:
    """Scripted persona dialogues as chat conversations, the warm-start corpus of `tiny-telesales`.

    Each game draws a seller persona from `sellers` (all by default); its buyer plays the persona its scenario
    names, so a buyer's prompt matches its behaviour. views="both" gives each game twice, once from each role's
    view (its own turns as assistant); "one" gives one role's view per game, alternating (seller first).
    Scenario seeds here are `seed` itself; evaluation draws from other seeds.
    """
    from dialogrl.rollout import play

    if views not in ("both", "one"):
        raise ValueError(f"views={views!r}: choose 'both' or 'one'")
    task = VehicleTeleSales(max_turns=max_turns)
    scenarios = task.sample_scenarios(n_dialogues, seed=seed)
    seller = telesales_population("seller", sellers, seed=seed * 2 + 1, style=style)
    buyer = TelesalesAgent(None, seed=seed * 2 + 2, style=style)
    corpus = []
    for k, ep in enumerate(play(task, {"seller": seller, "buyer": buyer}, scenarios)):
        roles = task.roles if views == "both" else (task.roles[k % 2],)
        corpus += [task.view(ep.state, r) for r in roles]
    return corpus
