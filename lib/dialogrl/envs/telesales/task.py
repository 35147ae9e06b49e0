"""Vehicle TeleSales, the rules (the second game of notebook 04, IB-RL): a seller and a buyer talk about a vehicle.

Scenario (seeded generator, `sample_scenarios(n, seed)`; `id` pairs scenarios across methods):
  - CATALOG: 24 vehicles, each with an id (one lower-case word, e.g. `atlas`), a type (TYPES), features (from
    FEATURES) and a list price (MSRP). Each game shows a lot of `lot_size` of them (6 by default): the lot is
    public, both roles see it with types, features and list prices.
  - The seller privately holds a floor price per lot vehicle, 80-93% of its MSRP (rounded to $100).
  - The buyer privately holds a budget, must-have features (0-3, all features of some lot vehicle), a preferred type
    (soft: not part of the score) and a profile (BUYER_PROFILES: how an LM buyer is asked to behave).
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
  write numbers. Markers are ASCII (digits 0-9 only) and case-insensitive. Lot numbers and [ACCEPT] spare a small
  model copying a word or a price from far back in its context. The talk also ends without a sale after
  `max_turns` turns (both roles together).
  The buyer's view marks each valid offer with what it means to the buyer, "(to you: the aria has all you need;
  within your budget)" or "(to you: the aria lacks awd; over your budget)" (`note`, `buyer_notes`): the two facts
  of a good sale, which a tiny model cannot look up and compare; the seller never sees the mark.
  Invalid markers (a BUY at a price never offered for that vehicle, a vehicle not on the lot, an offer above the
  vehicle's list price, the seller writing BUY, ACCEPT or LEAVE, the buyer writing OFFER, a negative or absurd price
  (over MAX_PRICE), a character outside ASCII, a malformed, unclosed or repeated marker) never
  raise: they are recorded on the Turn, have no effect (the turn is forfeited), count in `invalid_rate` and, by
  default, cost the speaker `invalid_penalty` of reward (0.1: a tenth of a sale's worth to the seller, as one point
  of ten in dealnodeal). RL learns to stall with invalid markers when they are free.

Scores (per game; `reward` = score - invalid_penalty * own invalid turns):
  margin: the seller's (price - floor) / (MSRP - floor) on a sale, clipped to [-1, 1] (1 at list price, 0 at the
          floor, negative below, -1 at or below floor - (MSRP - floor)), 0 without one. Offers above the list price
          are invalid, so the margin is at most 1: without that cap one sampled typo ($253000 for a $31000 car) that an
          untrained buyer accepts is worth 50 sales at list price, and the group baselines of RL chase such outliers.
          The clip at -1 bounds the other side the same way (an accepted $1 offer), while any offer from $0 to the
          list price stays a valid marker.
  seller: with seller_goal="good_sale" (the default) the seller's task is the metric, a good sale: 1 for a good sale,
          `bad_sale` (-1) for any other sale, 0 for none, plus margin_weight (0.5) * margin on a sale; so a good sale
          scores 0.5 to 1.5, and a sale that misses the buyer's must-haves or budget costs the seller too. With
          seller_goal="success" the seller scores Success@1 itself: 1 + margin_weight * margin for a good sale and 0
          for any other outcome, so a bad sale costs no more than no sale (under "good_sale" a seller that cannot yet
          tell good sales from bad ones learns to stop selling: notebook 04's pilot). With seller_goal="margin" the
          score is the margin alone.
  buyer:  a good sale (the vehicle has every must-have and price <= budget) is worth
          (budget - price) / budget + success_bonus; any other sale is worth `bad_sale` (-1); no sale is worth 0.
Metrics: `success_at_1` is the share of dialogues that end in a good sale (one sampled dialogue per scenario, so it is
Success@1 of the seller); `good_sale_rate` is the share of sales that are good.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dialogrl.game import MARKER, GameState, Question, Turn, TurnTakingTask, one_marker, shorten

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
SELLER_GOALS = ("good_sale", "success", "margin")
MAX_PRICE = 10_000_000  # a price above this (or with more than 8 digits) is an invalid marker, not a number to score


@dataclass(frozen=True)
class TelesalesScenario:
    """One game's lot and each role's private information. `id` is the generator's index for pairing."""
    lot: tuple[str, ...]          # vehicle ids on the lot (public), in display order
    floors: tuple[int, ...]       # the seller's floor price per lot vehicle (private to the seller)
    budget: int                   # the buyer's budget (private)
    must_have: tuple[str, ...]    # the buyer's must-have features (private)
    preferred_type: str           # the buyer's preferred type (private, soft)
    persona: str                  # the buyer an LM buyer is asked to be (a key of BUYER_PROFILES)
    id: int = 0

    def floor(self, vid: str) -> int:
        return self.floors[self.lot.index(vid)]


# The buyer a scenario asks an LM buyer to be: its name and the persona line of the buyer's prompt. The scripted
# buyers of the same names (personas.BUYER_PERSONAS) behave as these lines say.
BUYER_PROFILES: dict[str, str] = {
    "bargain-hunter": "you haggle hard and name less than your real budget",
    "decisive": "you say all you need at once and buy the first good offer",
    "picky": "you insist on your preferred type and every must-have",
    "wanderer": "you drift off topic, never say your budget and leave easily",
    "impulsive": "you decide on a whim and sometimes buy what you did not need",
}


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
    persona = rng.choice(sorted(personas or BUYER_PROFILES))
    return TelesalesScenario(tuple(lot), tuple(floors), budget, must, preferred, persona, id)


# ------------------------------------------------------------------------------------------------------ parsing

# Markers are ASCII: [0-9] and re.ASCII, never \d or str.isdigit, since int() rejects some characters that those
# accept (e.g. '①') and LM output is untrusted text. A marker body with any other character is malformed.
_DEAL = re.compile(r"(offer|buy)\s+(\S+)\s+\$\s*(-?[0-9,]+)", re.A)
_PRICE = re.compile(r"-?([0-9]+|[0-9]{1,3}(,[0-9]{3})+)", re.A)
_LOT_NUMBER = re.compile(r"[1-9][0-9]*", re.A)


def without_markers(text: str) -> str:
    """`text` with every bracketed marker replaced by a space (what is said around the markers)."""
    return MARKER.sub(" ", text)


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
    marker, invalid = one_marker(text)
    if marker is None:
        return talk, invalid
    shown = shorten(marker)
    body = " ".join(marker.lower().split())
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

class VehicleTeleSales(TurnTakingTask):
    """Vehicle TeleSales as a two-role Task: 'seller' (speaks first) and 'buyer'. See the module docstring.

    max_turns: talk turns (both roles together) before the game ends without a sale.
    lot_size: vehicles shown per game. p_infeasible: share of scenarios with no good sale at or above a floor.
    success_bonus: added to the buyer's (budget - price) / budget on a good sale. bad_sale: the buyer's score for
    any other sale (and, with seller_goal="good_sale", the seller's). seller_goal: "good_sale" (the seller scores the
    good sale, plus margin_weight times its margin, and bad_sale for any other sale), "success" (the same on a good
    sale, 0 for a bad one: Success@1) or "margin" (its margin alone).
    invalid_penalty: reward a role loses per invalid turn (0 makes invalid markers free).
    buyer_notes: the buyer's view marks each valid offer with whether it has every must-have and is within budget
    (`note`); False gives the buyer the bare talk.
    """
    name = "telesales"
    roles = ("seller", "buyer")
    opening = "A buyer calls. You speak first."

    def __init__(self, max_turns: int = 10, lot_size: int = 6, p_infeasible: float = 0.2,
                 success_bonus: float = 1.0, bad_sale: float = -1.0, invalid_penalty: float = 0.1,
                 seller_goal: str = "good_sale", margin_weight: float = 0.5, buyer_notes: bool = True):
        if not isinstance(max_turns, int) or max_turns < 2:
            raise ValueError(f"max_turns={max_turns!r}: must be an int >= 2 (the buyer needs a turn)")
        if not isinstance(lot_size, int) or not 1 <= lot_size <= len(CATALOG):
            raise ValueError(f"lot_size={lot_size!r}: must be an int in 1..{len(CATALOG)}")
        if not 0 <= p_infeasible <= 1:
            raise ValueError(f"p_infeasible={p_infeasible!r}: must be in [0, 1]")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty={invalid_penalty!r}: must be >= 0")
        if seller_goal not in SELLER_GOALS:
            raise ValueError(f"seller_goal={seller_goal!r}: choose one of {', '.join(SELLER_GOALS)}")
        if margin_weight < 0:
            raise ValueError(f"margin_weight={margin_weight!r}: must be >= 0")
        self.seller_goal, self.margin_weight = seller_goal, float(margin_weight)
        self.max_turns, self.lot_size, self.p_infeasible = max_turns, lot_size, float(p_infeasible)
        self.success_bonus, self.bad_sale = float(success_bonus), float(bad_sale)
        self.invalid_penalty = float(invalid_penalty)
        self.buyer_notes = bool(buyer_notes)

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
        lot = "\n".join(f"{i}. {describe_vehicle(v)}" for i, v in enumerate(scenario.lot, 1))
        needs = ", ".join(scenario.must_have) or "nothing in particular"
        about = BUYER_PROFILES[scenario.persona]
        return (f"Vehicle TeleSales. You are the buyer, {scenario.persona}: {about}. Your budget: ${scenario.budget}. "
                f"Must have: {needs}. You prefer {article(scenario.preferred_type)}. The lot:\n{lot}\n" + rules)

    def note(self, state: GameState, upto: int, role: str) -> str:
        """The buyer's reading of a seller's valid offer, in its own view only (`buyer_notes`): whether the vehicle
        has every must-have and whether the price is within its budget, the two facts a good sale needs. A 1.5M
        model cannot look an offer's lot number up in its prompt and compare prices with its budget: without these
        notes the embedded buyer bought good and bad offers alike (0.80 vs 0.75; papers/04)."""
        turn = state.turns[upto]
        if role != "buyer" or not self.buyer_notes or turn.invalid is not None or turn.action is None \
                or turn.action.get("type") != "offer":
            return ""
        s, vid, price = state.scenario, turn.action["vehicle"], turn.action["price"]
        missing = [f for f in s.must_have if f not in CATALOG[vid].features]
        needs = f"lacks {' and '.join(missing)}" if missing else "has all you need"
        budget = "within your budget" if price <= s.budget else "over your budget"
        return f"(to you: the {vid} {needs}; {budget})"

    # -- a pretrained language model as the buyer (dialogrl.agents.counterpart)
    def counterpart_prompt(self, scenario: TelesalesScenario, role: str) -> str:
        if role != "buyer":
            raise ValueError(f"the language-model counterpart plays the buyer, not the {role}")
        lot = "; ".join(f"{i}. {describe_vehicle(v)}" for i, v in enumerate(scenario.lot, 1))
        needs = ", ".join(f.replace("_", " ") for f in scenario.must_have) or "nothing in particular"
        return (f"You are calling a car dealer to buy a vehicle; {BUYER_PROFILES[scenario.persona]}. Your budget is "
                f"${scenario.budget}; you must have: {needs}; you prefer {article(scenario.preferred_type)}. The "
                f"dealer's lot: {lot}. Reply in one or two short sentences.")

    def counterpart_decision(self, state: GameState, role: str):
        """The buyer takes the seller's latest offer or not (the talk goes on; no sale at the turn cap). The question
        states in words what a 135M model cannot work out from the numbers: whether the price is within its budget
        and whether the vehicle has what it must have (asked with the bare numbers, SmolLM2-135M's answer does not
        move with the price: papers/README.md, "Language-model counterparts")."""
        offers = state.info.get("offers", [])
        if not offers:
            return ""
        vehicle, price = offers[-1]
        s, v = state.scenario, CATALOG[vehicle]
        budget = "within your budget" if price <= s.budget else "over your budget"
        missing = [f.replace("_", " ") for f in s.must_have if f not in v.features]
        needs = f"lacks {' and '.join(missing)}, which you must have" if missing else "has everything you must have"
        buy = yield Question(f"The dealer offers you the {v.id} ({v.type}) for ${price}: {budget}, and it {needs}. "
                             "Do you buy it? Answer yes or no.", ("yes", "no"),
                             neutral="The dealer offers you a vehicle. Do you buy it? Answer yes or no.", within=True)
        return "[ACCEPT]" if buy == "yes" else ""

    # -- turns
    def take_turn(self, state: GameState, role: str, text: str) -> Turn:
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
        score, margin = {"seller": 0.0, "buyer": 0.0}, 0.0
        if vid is not None:
            floor, msrp = sc.floor(vid), CATALOG[vid].msrp
            margin = min(max((price - floor) / (msrp - floor), -1.0), 1.0)  # bounded: see the module docstring
            if self.seller_goal == "margin":
                score["seller"] = margin
            elif self.seller_goal == "success":
                score["seller"] = 1.0 + self.margin_weight * margin if good else 0.0
            else:
                score["seller"] = (1.0 if good else self.bad_sale) + self.margin_weight * margin
            score["buyer"] = (sc.budget - price) / sc.budget + self.success_bonus if good else self.bad_sale
        out = {}
        for role in self.roles:
            n_invalid = sum(t.invalid is not None for t in state.turns if t.role == role)
            out[role] = {"score": float(score[role]), "reward": float(score[role]) - self.invalid_penalty * n_invalid,
                         "sale": vid is not None, "good_sale": good, "margin": margin, "vehicle": vid, "price": price,
                         "feasible": feasible(sc), "n_invalid": n_invalid}
        return out

    def max_reward(self, role: str) -> float:
        """The seller: a good sale at list price (1 + margin_weight; the margin alone: 1). The buyer: a good sale at
        $0 ((budget - 0) / budget + success_bonus)."""
        if role == "seller":
            return 1.0 if self.seller_goal == "margin" else 1.0 + self.margin_weight
        return 1.0 + self.success_bonus

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
            "margin_seller": mean("seller", "margin"),
            "invalid_rate": sum(t.invalid is not None for t in turns) / max(len(turns), 1),
            "turns": float(np.mean([len(s.talk_turns()) for s in states])),
            "feasible": mean("seller", "feasible"),  # the ceiling a seller that never sells below a floor faces
        }
