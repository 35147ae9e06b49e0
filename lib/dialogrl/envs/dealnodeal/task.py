"""Deal or No Deal (Lewis et al., EMNLP 2017): two roles split a pool of books, hats and balls.

Rules (as in the paper and its data):
  - 3 item types; each count 1..4, 5..7 items in all; each role's values are non-negative integers with
    sum(count * value) = 10; every type is worth something to at least one role; some type is worth something to both.
  - The generator follows the human logs: a pool (count vector) is drawn with the frequencies of POOL_FREQUENCIES,
    the number of dialogues of each pool in Lewis et al.'s data.txt (6,318 dialogues; one stored from both
    perspectives counts once), so pools of 5 / 6 / 7 items occur 40.5% / 40.1% / 19.4% of the time; then a value
    pair uniform over the pairs that satisfy the rules (the logs break none of the rules above).
  - Roles alternate, A first. The talk ends when a role ends it, or after `max_turns` turns.
  - Score = sum(own count * own value) on agreement, 0 for both otherwise.

Two text protocols (parameter `protocol`):

  "selection" (the original, and the protocol of the human logs): free-text turns; a turn containing `<selection>`
      ends the talk (so does the turn cap). Then each role privately states the split it believes was agreed, as
      `book=1 hat=0 ball=2` (own counts; a `them: ...` part may follow and is ignored by the rule, as in the paper),
      `item0=1 item1=0 item2=2` (the logs' form) or `no agreement`. Agreement iff, for every item type, the two
      roles' own claims add up exactly to the pool count. A malformed selection counts as invalid and as no agreement.

  "offer" (the default for small models): free-text turns that may carry one marker:
      `[propose book=1 hat=0 ball=2]`  the speaker's own share (the counterpart would get the rest);
      `[accept]`                       accept the counterpart's standing proposal: the game ends with that split;
      `[no deal]`                      end the game with 0 for both.
      A proposal stands until the next proposal. No deal by the turn cap scores 0.
      Invalid markers (an [accept] with no standing proposal from the counterpart, a proposal beyond the pool, a
      malformed, unclosed or repeated marker) are counted, have no effect (the turn is forfeited) and, by default,
      cost the speaker `invalid_penalty` points of reward: RL learns to stall with invalid markers when they are free.
      The `score` metric is always the game's score; `reward` = score - invalid_penalty * (own invalid turns).
      `notes`: the roles whose own view marks each valid proposal of the counterpart with what it would give them,
      "(to you: 7 of your 10 points)" (`note`): the sum of counts times values that a tiny model cannot work out
      from a marker and its prompt (as TeleSales' buyer notes); the warm-start corpus is written without notes.
      Measured for notebook 01's simulated user (`bench/calibration_check.py --notes yes`, papers/01): fine-tuning
      on the human logs with notes did not teach the tiny model to decide by them, so the notebook does not use it.

Markers and selections are ASCII: digits are 0-9 only (a Unicode digit such as '①' or '３' makes a marker
malformed). No input makes a parser raise; a malformed turn is recorded as invalid on the Turn.
"""
from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from dialogrl.game import GameState, Question, Task, Turn, history_messages, one_marker, shorten

ITEMS = ("book", "hat", "ball")
PROTOCOLS = ("offer", "selection")
TOTAL_VALUE = 10


@dataclass(frozen=True)
class DondScenario:
    """A pool and each role's private values (A speaks first). `id` is the generator's index for pairing."""
    counts: tuple[int, int, int]
    values: tuple[tuple[int, int, int], tuple[int, int, int]]  # (values of A, values of B)
    id: int = 0


# ----------------------------------------------------------------------------------------------- the generator

# Dialogues per pool (book, hat, ball counts) in the human logs: end-to-end-negotiator (facebookresearch, commit
# bbb93bb) src/data/negotiate/data.txt, 12,234 lines. The file stores most dialogues twice, once from each agent's
# perspective, on consecutive lines (same pool, swapped contexts, same talk); such a pair counts once. 5,916 dialogues
# are stored twice and 402 once: 6,318 dialogues. Every count is 1..4 and every count vector of 5..7 items with
# counts 1..4 occurs. Pool sizes 5 / 6 / 7: 2558 / 2534 / 1226 dialogues (40.5% / 40.1% / 19.4%). Within a pool size
# the vectors are not uniform (chi-square against uniform: p = 0.06 for 5 items, 0.001 for 6, 0.53 for 7), so the
# generator draws the vector itself with these frequencies.
POOL_FREQUENCIES: dict[tuple[int, int, int], int] = {
    (1, 1, 3): 415, (1, 2, 2): 454, (1, 3, 1): 425, (2, 1, 2): 404, (2, 2, 1): 391, (3, 1, 1): 469,
    (1, 1, 4): 218, (1, 2, 3): 224, (1, 3, 2): 278, (1, 4, 1): 251, (2, 1, 3): 245, (2, 2, 2): 267, (2, 3, 1): 285,
    (3, 1, 2): 288, (3, 2, 1): 214, (4, 1, 1): 264,
    (1, 2, 4): 120, (1, 3, 3): 102, (1, 4, 2): 93, (2, 1, 4): 91, (2, 2, 3): 110, (2, 3, 2): 99, (2, 4, 1): 105,
    (3, 1, 3): 112, (3, 2, 2): 108, (3, 3, 1): 104, (4, 1, 2): 95, (4, 2, 1): 87,
}


@cache
def count_vectors() -> list[tuple[int, int, int]]:
    """Every pool allowed by the rules: each count 1..4, 5..7 items in all."""
    return [c for c in itertools.product(range(1, 5), repeat=3) if 5 <= sum(c) <= 7]


@cache
def value_vectors(counts: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """Every non-negative integer value vector v with sum(counts * v) == 10."""
    return [v for v in itertools.product(*(range(TOTAL_VALUE // c + 1) for c in counts))
            if sum(c * x for c, x in zip(counts, v)) == TOTAL_VALUE]


def valid_values(va: Sequence[int], vb: Sequence[int]) -> bool:
    """Every type is worth something to someone, and some type is worth something to both."""
    return all(a > 0 or b > 0 for a, b in zip(va, vb)) and any(a > 0 and b > 0 for a, b in zip(va, vb))


@cache
def value_pairs(counts: tuple[int, int, int]) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Every (values of A, values of B) for the pool `counts` that satisfies the rules."""
    vs = value_vectors(counts)
    return [(a, b) for a in vs for b in vs if valid_values(a, b)]


def sample_scenario(rng: random.Random, id: int = 0) -> DondScenario:
    """A pool drawn with the human logs' frequencies (POOL_FREQUENCIES); then a value pair uniform over the pairs
    that satisfy the rules (every pool of count_vectors() has some)."""
    pools = count_vectors()
    counts = rng.choices(pools, weights=[POOL_FREQUENCIES[c] for c in pools])[0]
    va, vb = rng.choice(value_pairs(counts))
    return DondScenario(counts, (va, vb), id)


# --------------------------------------------------------------------------------------- splits and their values

def all_splits(counts: Sequence[int]) -> list[tuple[int, int, int]]:
    """Every own-share vector (0..count per type): the candidate deals for one role."""
    return list(itertools.product(*(range(c + 1) for c in counts)))


def split_value(values: Sequence[int], share: Sequence[int]) -> int:
    return int(sum(v * s for v, s in zip(values, share)))


def complement(counts: Sequence[int], share: Sequence[int]) -> tuple[int, int, int]:
    return tuple(c - s for c, s in zip(counts, share))


def is_pareto_optimal(scenario: DondScenario, share_a: Sequence[int]) -> bool:
    """True if no other split of the pool is at least as good for both roles and better for one."""
    va, vb = scenario.values
    a, b = split_value(va, share_a), split_value(vb, complement(scenario.counts, share_a))
    for s in all_splits(scenario.counts):
        a2, b2 = split_value(va, s), split_value(vb, complement(scenario.counts, s))
        if a2 >= a and b2 >= b and (a2 > a or b2 > b):
            return False
    return True


def describe(share: Sequence[int]) -> str:
    """(1, 0, 2) -> '1 book and 2 balls'; (0, 0, 0) -> 'nothing'."""
    parts = [f"{n} {item}{'s' if n != 1 else ''}" for n, item in zip(share, ITEMS) if n]
    if not parts:
        return "nothing"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def marker(share: Sequence[int]) -> str:
    return "[propose " + " ".join(f"{item}={n}" for item, n in zip(ITEMS, share)) + "]"


# ------------------------------------------------------------------------------------------------------ parsing

# Markers and selections are ASCII: [0-9] and re.ASCII, never \d, str.isdigit or Unicode case folding, since int()
# rejects some characters that those accept (e.g. '①') and LM output is untrusted text.
_PROPOSE = re.compile(r"\s*propose\s+book\s*=\s*([0-9]+)\s+hat\s*=\s*([0-9]+)\s+ball\s*=\s*([0-9]+)\s*", re.I | re.A)
_SELECT_ITEMS = re.compile(r"item0\s*=\s*([0-9]+)\s+item1\s*=\s*([0-9]+)\s+item2\s*=\s*([0-9]+)", re.I | re.A)
_SELECT_NAMES = re.compile(r"book\s*=\s*([0-9]+)\s+hat\s*=\s*([0-9]+)\s+ball\s*=\s*([0-9]+)", re.I | re.A)
_NO_AGREEMENT = re.compile(r"no agreement|disconnect|<no_agreement>", re.I | re.A)
SELECTION_TOKEN = "<selection>"
NUMBER_WORDS = ("none", "one", "two", "three", "four")   # a count as a language-model counterpart answers it


def _counts(digits: Sequence[str]) -> tuple[int, ...] | None:
    """ASCII digit strings as ints, or None if one has more than 3 significant digits: no pool count is that big,
    and int() refuses strings of more than 4300 digits."""
    if any(len(d.lstrip("0")) > 3 for d in digits):
        return None
    return tuple(int(d) for d in digits)


def parse_offer(text: str, counts: Sequence[int]) -> tuple[dict, str | None]:
    """Parse one offer-protocol utterance into (action, invalid reason or None). Never raises.

    Actions: {"type": "talk"}, {"type": "propose", "share": (b, h, l)}, {"type": "accept"}, {"type": "no_deal"}.
    """
    talk = {"type": "talk"}
    marker, invalid = one_marker(text)
    if marker is None:
        return talk, invalid
    body = marker.strip().lower()
    if body == "accept":
        return {"type": "accept"}, None
    if body in ("no deal", "nodeal", "no_deal"):
        return {"type": "no_deal"}, None
    m = _PROPOSE.fullmatch(body)
    if not m:
        return talk, f"malformed marker [{shorten(marker)}]"
    share = _counts(m.groups())
    if share is None or any(s > c for s, c in zip(share, counts)):
        return talk, f"proposal {shorten(str(share or m.groups()))} beyond the pool {tuple(counts)}"
    return {"type": "propose", "share": share}, None


def parse_selection(text: str, counts: Sequence[int]) -> tuple[dict, str | None]:
    """Parse a selection: own counts, or no agreement. Returns (action, invalid reason or None). Never raises."""
    none = {"type": "select", "share": None}
    if _NO_AGREEMENT.search(text):
        return none, None
    m = _SELECT_ITEMS.search(text) or _SELECT_NAMES.search(text)  # the first match is the role's own share
    if not m:
        return none, "malformed selection"
    share = _counts(m.groups())
    if share is None or any(s > c for s, c in zip(share, counts)):
        return none, f"selection {shorten(str(share or m.groups()))} beyond the pool {tuple(counts)}"
    return {"type": "select", "share": share}, None


# --------------------------------------------------------------------------------------------------- the task

class DealOrNoDeal(Task):
    """Deal or No Deal as a two-role Task. Roles 'A' (speaks first) and 'B'.

    protocol: "offer" (default) or "selection" (the original); see the module docstring.
    max_turns: talk turns (both roles together) before the talk ends without a deal.
    invalid_penalty: reward points a role loses per invalid turn (offer markers and selections); 0 makes them free.
    selector: selection protocol only: a learned selection step, `selector(state, role) -> selection text`, that LM
        agents use in the selection phase instead of scoring every split by their own likelihood
        (`dealnodeal.SelectionClassifier`; Lewis et al. trained their selection module beside the language model).
    notes: offer protocol only: the roles whose view marks each valid proposal of the counterpart with its worth to
        them (`note`); () by default: every view is the bare talk.
    """
    name = "dealnodeal"
    roles = ("A", "B")

    def __init__(self, protocol: str = "offer", max_turns: int = 10, invalid_penalty: float = 1.0, selector=None,
                 notes: Sequence[str] = ()):
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol={protocol!r}: choose one of {', '.join(PROTOCOLS)}")
        if selector is not None and protocol != "selection":
            raise ValueError("a selector is for the selection protocol; the offer protocol has no selection step")
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns={max_turns!r}: must be an int >= 1")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty={invalid_penalty!r}: must be >= 0")
        self.protocol, self.max_turns, self.invalid_penalty = protocol, max_turns, float(invalid_penalty)
        self.selector = selector
        if isinstance(notes, str) or not set(notes) <= set(self.roles):
            raise ValueError(f"notes={notes!r}: a list of roles among {', '.join(self.roles)}")
        if notes and protocol != "offer":
            raise ValueError("notes mark proposals, which only the offer protocol has")
        self.notes = tuple(notes)

    def capped(self, max_turns: int) -> DealOrNoDeal:
        """The same game (protocol, penalty, selector, notes) with talk capped at `max_turns` turns."""
        return DealOrNoDeal(self.protocol, max_turns, self.invalid_penalty, self.selector, self.notes)

    # -- scenarios and views

    def sample_scenarios(self, n: int, seed: int) -> list[DondScenario]:
        rng = random.Random(seed)
        return [sample_scenario(rng, id=i) for i in range(n)]

    def system_prompt(self, scenario: DondScenario, role: str) -> str:
        counts, values = scenario.counts, scenario.values[self.roles.index(role)]
        pool = " ".join(f"{item}={c}" for item, c in zip(ITEMS, counts))
        vals = " ".join(f"{item}={v}" for item, v in zip(ITEMS, values))
        head = f"Deal or No Deal. Pool: {pool}. Your values: {vals}. "
        if self.protocol == "offer":
            return head + ("Propose your share with [propose book=N hat=N ball=N], answer with [accept] or a "
                           f"counter-offer, or end with [no deal]. At most {self.max_turns} turns.")
        return head + (f"Agree on a split, then write {SELECTION_TOKEN} to end the talk. "
                       f"At most {self.max_turns} turns.")

    def view(self, state: GameState, role: str, note: Callable[[int], str] | None = None) -> list[dict]:
        """`role`'s chat view. note: a further mark after a counterpart turn (its index in state.turns -> text, ""
        for none), after the game's own (`note`): an agent's private aid, e.g. a decision module's
        (`dealnodeal.DecidingUser`)."""
        def marks(i: int) -> str:
            return "\n".join(m for m in (self.note(state, i, role), note(i) if note else "") if m)

        msgs = [{"role": "system", "content": self.system_prompt(state.scenario, role)}]
        msgs += history_messages(state, role, opening="You speak first.", note=marks)
        if state.info.get("phase") == "select":
            msgs.append({"role": "user", "content": "Selection: write the agreed split as "
                         "'book=N hat=N ball=N' (your share), or 'no agreement'."})
        return msgs

    def note(self, state: GameState, upto: int, role: str) -> str:
        """What the counterpart's valid proposal at turn `upto` would give `role`, in `role`'s own view only (where
        `notes` names it): "(to you: 7 of your 10 points)"; "" for any other turn or role."""
        turn = state.turns[upto]
        if role not in self.notes or turn.role == role or turn.invalid is not None or not turn.action \
                or turn.action.get("type") != "propose":
            return ""
        mine = complement(state.scenario.counts, turn.action["share"])
        worth = split_value(state.scenario.values[self.roles.index(role)], mine)
        return f"(to you: {worth} of your {TOTAL_VALUE} points)"

    # -- a pretrained language model as a counterpart (dialogrl.agents.counterpart)
    def counterpart_prompt(self, scenario: DondScenario, role: str) -> str:
        counts, values = scenario.counts, scenario.values[self.roles.index(role)]
        worth = ", ".join(f"each {item} is worth {v} point{'s' if v != 1 else ''} to you" for item, v in
                          zip(ITEMS, values))
        return (f"You are negotiating with another person how to split {describe(counts)} between you two; {worth} "
                f"(all of them together: {TOTAL_VALUE} points). You want as many points as you can get, and no deal "
                "gives you nothing. Reply in one or two short sentences.")

    def counterpart_decision(self, state: GameState, role: str):
        """Offer protocol: accept the counterpart's standing proposal, else propose a share of its own, each item's
        count asked apart. Selection protocol: write <selection> when it says the two have agreed; in the selection
        phase, the agreed share, each item's count asked apart."""
        scenario, values = state.scenario, state.scenario.values[self.roles.index(role)]
        if self.protocol == "selection" and state.info.get("phase") != "select":
            agreed = yield Question("Have you and the other person agreed on how to split the items? Answer yes or "
                                    "no.", ("yes", "no"))
            return SELECTION_TOKEN if agreed == "yes" else ""
        standing = state.info.get("offer")
        if self.protocol == "offer" and standing is not None and standing[0] != role:
            mine = complement(scenario.counts, standing[1])
            accept = yield Question(
                f"They propose that you get {describe(mine)}, worth {split_value(values, mine)} of your "
                f"{TOTAL_VALUE} points, and they get the rest. Do you accept? Answer yes or no.", ("yes", "no"),
                neutral="They propose a split of the items. Do you accept? Answer yes or no.", within=True)
            if accept == "yes":
                return "[accept]"
        verb = "agreed to get" if self.protocol == "selection" else "ask for"
        share = []
        for item, c in zip(ITEMS, scenario.counts):
            words = NUMBER_WORDS[:c + 1]
            n = yield Question(f"How many {item}s do you {verb}: {', '.join(words[:-1])} or {words[-1]}?", words)
            share.append(words.index(n))
        if self.protocol == "offer":
            return marker(share)
        return " ".join(f"{item}={n}" for item, n in zip(ITEMS, share))

    # -- turns
    def current_role(self, state: GameState) -> str:
        if state.info.get("phase") == "select":
            chosen = state.info.get("selections", {})
            return next(r for r in self.roles if r not in chosen)
        return self.roles[len(state.talk_turns()) % 2]

    def step(self, state: GameState, text: str) -> Turn:
        if state.done:
            raise RuntimeError("the game is over")
        role, counts = self.current_role(state), state.scenario.counts
        if state.info.get("phase") == "select":
            action, invalid = parse_selection(text, counts)
            turn = Turn(role, text, action, invalid, phase="select")
            state.turns.append(turn)
            state.info.setdefault("selections", {})[role] = action["share"]
            if len(state.info["selections"]) == len(self.roles):
                state.done = True
            return turn
        if self.protocol == "offer":
            turn = self._step_offer(state, role, text)
        else:
            turn = Turn(role, text, {"type": "select_now" if SELECTION_TOKEN in text else "talk"})
            state.turns.append(turn)
            if SELECTION_TOKEN in text:
                state.end_reason = "selection"
        if not state.done and state.end_reason is None and len(state.talk_turns()) >= self.max_turns:
            state.end_reason = "turn_cap"
            state.done = self.protocol == "offer"
        if self.protocol == "selection" and state.end_reason is not None:
            state.info["phase"] = "select"  # the talk is over; both roles now state their selections
        return turn

    def _step_offer(self, state: GameState, role: str, text: str) -> Turn:
        action, invalid = parse_offer(text, state.scenario.counts)
        standing = state.info.get("offer")  # (proposer, proposer's share)
        if invalid is None and action["type"] == "accept" and (standing is None or standing[0] == role):
            invalid = "accept without a standing proposal from the partner"
        turn = Turn(role, text, action, invalid)
        state.turns.append(turn)
        if invalid is not None:
            return turn  # forfeited: no effect on the game
        if action["type"] == "propose":
            state.info["offer"] = (role, action["share"])
        elif action["type"] == "accept":
            proposer, share = standing
            other = complement(state.scenario.counts, share)
            state.info["deal"] = {proposer: share, role: other}
            state.done, state.end_reason = True, "accept"
        elif action["type"] == "no_deal":
            state.done, state.end_reason = True, "no_deal"
        return turn

    # -- outcome
    def selection_candidates(self, state: GameState) -> list[str]:
        """Every valid selection text of the selection phase: each split of the pool (own counts), 'no agreement'."""
        return [" ".join(f"{item}={n}" for item, n in zip(ITEMS, s)) for s in all_splits(state.scenario.counts)] + [
            "no agreement"]

    def deal(self, state: GameState) -> dict[str, tuple] | None:
        """Each role's own share if the game ended in agreement, else None."""
        if self.protocol == "offer":
            return state.info.get("deal")
        sel = state.info.get("selections", {})
        shares = [sel.get(r) for r in self.roles]
        if any(s is None for s in shares):
            return None
        if all(a + b == c for a, b, c in zip(*shares, state.scenario.counts)):
            return dict(zip(self.roles, shares))
        return None

    def outcome(self, state: GameState) -> dict[str, dict]:
        deal = self.deal(state)
        pareto = deal is not None and is_pareto_optimal(state.scenario, deal[self.roles[0]])
        out = {}
        for i, role in enumerate(self.roles):
            score = split_value(state.scenario.values[i], deal[role]) if deal else 0
            n_invalid = sum(t.invalid is not None for t in state.turns if t.role == role)
            out[role] = {"score": float(score), "reward": float(score) - self.invalid_penalty * n_invalid,
                         "agreed": deal is not None, "pareto": pareto, "n_invalid": n_invalid,
                         "share": deal[role] if deal else None}
        return out

    def max_reward(self, role: str) -> float:
        """Every item of the pool: each role's values add up to 10."""
        return 10.0

    def metrics(self, states: Sequence[GameState]) -> dict:
        """Rates and means over finished games; `score` is the mean over both roles."""
        outs = [self.outcome(s) for s in states]
        a, b = self.roles
        agreed = np.array([o[a]["agreed"] for o in outs], dtype=float)
        pareto = np.array([o[a]["pareto"] for o in outs], dtype=float)
        score_a = np.array([o[a]["score"] for o in outs])
        score_b = np.array([o[b]["score"] for o in outs])
        turns = [t for s in states for t in s.turns]
        return {
            "n_games": len(states),
            "agreement": float(agreed.mean()),
            f"score_{a}": float(score_a.mean()),
            f"score_{b}": float(score_b.mean()),
            "score": float((score_a.mean() + score_b.mean()) / 2),
            "joint": float((score_a + score_b).mean()),
            "pareto": float(pareto.sum() / max(agreed.sum(), 1)),  # among agreed deals
            "invalid_rate": sum(t.invalid is not None for t in turns) / max(len(turns), 1),
            "turns": float(np.mean([len(s.talk_turns()) for s in states])),
        }

    # -- features for a turn-level reward model
    def turn_features(self, state: GameState, role: str) -> dict[str, float]:
        """Numeric features of `state` (read just after a turn) for predicting `role`'s final outcome reward.

        The input of the turn-level reward model of Static Context RL (dialogrl.rl.static). It is the environment's
        reward model, so it reads privileged information: the counterpart's private values. Values are in points
        (0..10); a missing offer or deal gives 0 with its indicator. Informative mostly for the offer protocol; under
        the selection protocol only the turn counts and the end reason vary. The feature names are those of fitted
        reward models (the vectorizer orders its columns by name), so "partner" stays in two of them.
        """
        counts = state.scenario.counts
        i = self.roles.index(role)
        mine, theirs = state.scenario.values[i], state.scenario.values[1 - i]
        talk = state.talk_turns()
        last = talk[-1] if talk else None

        def values(proposer: str, share) -> tuple[int, int]:
            """(role's value, counterpart's value) if the proposal `share` of `proposer` were accepted."""
            own = share if proposer == role else complement(counts, share)
            return split_value(mine, own), split_value(theirs, complement(counts, own))

        offer = state.info.get("offer")  # (proposer, proposer's share), offer protocol only
        offer_own, offer_theirs = values(*offer) if offer else (0, 0)
        asks = [(t.role, t.action["share"]) for t in talk
                if t.invalid is None and t.action and t.action.get("type") == "propose"]
        best_offered = max((values(r, s)[0] for r, s in asks if r != role), default=0)   # best the counterpart offered
        own_last = next((values(r, s)[0] for r, s in reversed(asks) if r == role), 0)    # what role last asked for
        deal = self.deal(state) if state.done else None
        return {
            "first": float(role == self.roles[0]),
            "turns": float(len(talk)),
            "turns_left": float(self.max_turns - len(talk)),
            "spoke_last": float(last is not None and last.role == role),
            "invalid": float(last is not None and last.invalid is not None),
            "own_invalid": float(sum(t.invalid is not None for t in state.turns if t.role == role)),
            "done": float(state.done),
            **{f"end_{r}": float(state.end_reason == r) for r in ("accept", "no_deal", "turn_cap", "selection")},
            "offer_none": float(offer is None),
            "offer_by_self": float(offer is not None and offer[0] == role),
            "offer_value": float(offer_own),            # role's value of the standing offer, were it accepted
            "offer_partner_value": float(offer_theirs),  # the counterpart's value of it (privileged)
            "partner_best": float(best_offered),
            "own_last": float(own_last),
            "deal_value": float(split_value(mine, deal[role])) if deal else 0.0,
        }
