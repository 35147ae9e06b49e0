"""Persuasion for Good, the rules (the game of notebook 03, SCOPE): a persuader asks a persuadee to give part of a $2
task payment to Save the Children (Wang et al., ACL 2019; the setting of the simulator-collapse paper).

Scenario (seeded generator, `sample_scenarios(n, seed)`; `id` pairs scenarios across methods):
  - the persuadee's profile (`persona`, a key of PERSUADEE_PROFILES): the attitude line of an LM persuadee's prompt,
    and the persona a scripted persuadee plays unless it is given its own;
  - `mood`: the persuadee's private leaning on this day, a log-odds shift of its wish to give (normal, sd `mood_sd`);
  - `payment`: the task payment it may give from ($2, as in the study).

Protocol. The persuader speaks first; the roles alternate, at most `max_exchanges` exchanges (5: ten turns). A turn
is free text that may carry one marker:
    [DONATE $x]   persuadee only: gives $x of the payment (0 <= x <= payment; dollars with at most two decimals:
                  $1, $0.50, $.5, $2.00) and ends the game. [DONATE $0] is a refusal, and ends it too.
  Markers are ASCII and case-insensitive. Without one by the last turn the game ends with nothing given ("turn_cap").
  Invalid markers (the persuader writing DONATE, an amount above the payment, a negative or malformed amount, any
  other marker, a character outside ASCII, an unclosed or repeated marker) never raise: they are recorded on the
  Turn, have no effect (the turn is forfeited), count in `invalid_rate` and cost the speaker `invalid_penalty`.

  The persuadee's view marks each persuader turn with how it leans after it, "(you lean to giving)", "(you are
  unsure)" or "(you lean to keeping it)" (`note`, `persuadee_notes`): its profile's rule over the strategies heard
  so far and its mood (`wish.leaning`), which a tiny model cannot add up from five turns of talk; the persuader
  never sees the mark.

Scores (per game; `reward` = score - invalid_penalty * own invalid turns):
  persuader: min(donation / payment, 1), the paper's reward min(donation / $2, 1) (persuader_goal="donation"); or
             1 for any donation (persuader_goal="success": what held-out success counts).
  persuadee: 1 - the persuader's score, the paper's adversarial simulator reward (used when a simulator trains).
Metrics: `success` is the share of games with a donation above zero (held-out success), `donation` its mean in
dollars; `donate_rate` and `turn_cap_rate` how games ended.
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dialogrl.envs.persuasion.wish import leaning
from dialogrl.game import GameState, Question, Turn, TurnTakingTask, one_marker, shorten

ROLES = ("persuader", "persuadee")
PERSUADER_GOALS = ("donation", "success")
PAYMENT = 2.0   # dollars: the task payment of the study

# The persuadee an LM persuadee is asked to be: its name and the attitude line of its prompt. The scripted
# persuadees of the same names (personas.PERSUADEE_PERSONAS) behave as these lines say.
PERSUADEE_PROFILES: dict[str, str] = {
    "sympathetic": "you are moved by children's stories and by what others share",
    "analytical": "you want facts: what the money does and how much reaches the children",
    "skeptical": "you distrust charities until you know who runs them and that they are reputable",
    "frugal": "you need the money; small, concrete asks are easier for you",
    "sociable": "you enjoy a chat about yourself and like to hear what the other person does",
}


@dataclass(frozen=True)
class PersuasionScenario:
    """One game: the persuadee's profile and private mood. `id` is the generator's index for pairing."""
    persona: str          # a key of PERSUADEE_PROFILES (the LM persuadee's attitude; a scripted persuadee's default)
    mood: float           # private log-odds shift of the persuadee's wish to give
    payment: float = PAYMENT
    id: int = 0


def sample_scenario(rng: random.Random, id: int = 0, mood_sd: float = 0.75,
                    personas: Sequence[str] | None = None) -> PersuasionScenario:
    """A profile drawn uniformly from `personas` (all PERSUADEE_PROFILES by default) and a normal mood."""
    persona = rng.choice(sorted(personas or PERSUADEE_PROFILES))
    return PersuasionScenario(persona, round(rng.gauss(0.0, mood_sd), 3), PAYMENT, id)


# ------------------------------------------------------------------------------------------------------ parsing

# ASCII digits only ([0-9], re.ASCII): the marker body is untrusted text (see envs/README.md).
_DONATE = re.compile(r"donate\s*\$\s*(-?)([0-9]{1,6}(?:\.[0-9]{1,2})?|\.[0-9]{1,2})", re.A)


def donate_marker(amount: float) -> str:
    """'[DONATE $0.50]': the marker a persuadee ends the game with."""
    return f"[DONATE ${amount:.2f}]"


def parse_marker(text: str, payment: float = PAYMENT) -> tuple[dict, str | None]:
    """Parse one utterance into (action, invalid reason or None); who may donate is the task's rule. Never raises.

    Actions: {"type": "talk"} or {"type": "donate", "amount": float (dollars, rounded to cents)}.
    """
    talk = {"type": "talk"}
    marker, invalid = one_marker(text)
    if marker is None:
        return talk, invalid
    body = " ".join(marker.lower().split())
    m = _DONATE.fullmatch(body)
    if not m:
        return talk, f"malformed marker [{shorten(marker)}]"
    if m.group(1):
        return talk, f"negative amount in [{shorten(marker)}]"
    amount = round(float(m.group(2)), 2)
    if amount > payment:
        return talk, f"${amount:.2f} is more than the ${payment:.2f} payment"
    return {"type": "donate", "amount": amount}, None


# --------------------------------------------------------------------------------------------------- the task

class PersuasionForGood(TurnTakingTask):
    """Persuasion for Good as a two-role Task: 'persuader' (speaks first) and 'persuadee'. See the module docstring.

    max_exchanges: persuader-persuadee exchanges before the game ends with nothing given (5, as in the paper).
    mood_sd: spread of the persuadee's private mood. invalid_penalty: reward a role loses per invalid turn.
    personas: the profiles the scenario generator draws (all PERSUADEE_PROFILES by default).
    persuader_goal: "donation" (the paper's reward, min(donation / payment, 1)) or "success" (1 for any donation,
    what held-out success counts); the persuadee's score is 1 minus the persuader's either way.
    persuadee_notes: the persuadee's view marks each persuader turn with how it leans after it (`note`).
    """
    name = "persuasion"
    roles = ROLES
    opening = "The other worker joins the chat. You speak first."

    def __init__(self, max_exchanges: int = 5, mood_sd: float = 0.75, invalid_penalty: float = 0.1,
                 personas: Sequence[str] | None = None, persuader_goal: str = "donation", persuadee_notes: bool = True):
        if not isinstance(max_exchanges, int) or max_exchanges < 1:
            raise ValueError(f"max_exchanges={max_exchanges!r}: must be an int >= 1")
        if mood_sd < 0:
            raise ValueError(f"mood_sd={mood_sd!r}: must be >= 0")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty={invalid_penalty!r}: must be >= 0")
        unknown = sorted(set(personas or ()) - set(PERSUADEE_PROFILES))
        if unknown:
            raise ValueError(f"personas: unknown profile(s) {unknown}; profiles: {', '.join(PERSUADEE_PROFILES)}")
        self.max_exchanges, self.mood_sd, self.invalid_penalty = max_exchanges, float(mood_sd), float(invalid_penalty)
        self.personas = tuple(personas) if personas else None
        if persuader_goal not in PERSUADER_GOALS:
            raise ValueError(f"persuader_goal={persuader_goal!r}: choose one of {', '.join(PERSUADER_GOALS)}")
        self.persuader_goal, self.persuadee_notes = persuader_goal, bool(persuadee_notes)

    @property
    def max_turns(self) -> int:
        return 2 * self.max_exchanges

    # -- scenarios and views
    def sample_scenarios(self, n: int, seed: int) -> list[PersuasionScenario]:
        rng = random.Random(seed)
        return [sample_scenario(rng, i, self.mood_sd, self.personas) for i in range(n)]

    def system_prompt(self, scenario: PersuasionScenario, role: str) -> str:
        pay = f"${scenario.payment:.2f}"
        if role == "persuader":
            return (f"Persuasion for Good. You are the persuader. Ask the other worker to donate part of their {pay} "
                    "task payment to Save the Children, a charity that helps children in need. They decide; "
                    f"at most {self.max_exchanges} exchanges.")
        return (f"Persuasion for Good. You are a worker who earned {pay}; {PERSUADEE_PROFILES[scenario.persona]}. "
                f"Decide whether to donate part of it: end with [DONATE $x], x from 0 to {scenario.payment:.0f}. "
                f"At most {self.max_exchanges} exchanges.")

    def note(self, state: GameState, upto: int, role: str) -> str:
        """How the persuadee leans after a persuader's turn, in its own view only (`persuadee_notes`): "(you lean to
        giving)", "(you are unsure)" or "(you lean to keeping it)", from its profile's rule over what it has heard
        (`wish.leaning`: the scripted persuadee's wish to give, its mood included). A 1.5M model does not add up
        the weak cues of five turns: without these notes the embedded persuadee gave after a storyteller and after
        the untrained persuader alike (0.87 vs 0.85; papers/03)."""
        if role != "persuadee" or not self.persuadee_notes or state.turns[upto].role != "persuader":
            return ""
        return {"giving": "(you lean to giving)", "unsure": "(you are unsure)",
                "keeping": "(you lean to keeping it)"}[leaning(state, upto)]

    # -- a pretrained language model as the persuadee (dialogrl.agents.counterpart)
    def counterpart_prompt(self, scenario: PersuasionScenario, role: str) -> str:
        if role != "persuadee":
            raise ValueError(f"the language-model counterpart plays the persuadee, not the {role}")
        return (f"You are a worker on a crowdsourcing website and just earned ${scenario.payment:.2f} for a task; "
                f"{PERSUADEE_PROFILES[scenario.persona]}. Another worker is chatting with you. Reply as yourself, "
                "in one or two short sentences.")

    def counterpart_decision(self, state: GameState, role: str):
        """As in the study, the persuadee decides after the conversation: at its last turn it is asked whether it
        donates and, if so, how much (fifty cents, one dollar or the whole payment)."""
        if len(state.talk_turns()) < self.max_turns - 1:
            return ""
        pay = state.scenario.payment
        give = yield Question(f"The chat is over. Will you donate part of your ${pay:.2f} to Save the Children? "
                              "Answer yes or no.", ("yes", "no"))
        if give != "yes":
            return donate_marker(0.0)
        amount = yield Question(f"How much of your ${pay:.2f} do you donate: fifty cents, one dollar, or two "
                                "dollars?", ("fifty cents", "one dollar", "two dollars"))
        return donate_marker({"fifty cents": 0.5, "one dollar": 1.0, "two dollars": 2.0}[amount])

    # -- turns
    def take_turn(self, state: GameState, role: str, text: str) -> Turn:
        action, invalid = parse_marker(text, state.scenario.payment)
        if invalid is None and action["type"] == "donate" and role == "persuader":
            invalid = "the persuader cannot [DONATE]"
        turn = Turn(role, text, action, invalid)
        state.turns.append(turn)
        if invalid is None and action["type"] == "donate":
            state.info["donation"] = action["amount"]
            state.done, state.end_reason = True, "donate"
        elif len(state.talk_turns()) >= self.max_turns:
            state.done, state.end_reason = True, "turn_cap"
        return turn

    # -- outcome
    def outcome(self, state: GameState) -> dict[str, dict]:
        donation = float(state.info.get("donation", 0.0))
        r = float(donation > 0) if self.persuader_goal == "success" else min(donation / state.scenario.payment, 1.0)
        score = {"persuader": r, "persuadee": 1.0 - r}
        out = {}
        for role in self.roles:
            n_invalid = sum(t.invalid is not None for t in state.turns if t.role == role)
            out[role] = {"score": score[role], "reward": score[role] - self.invalid_penalty * n_invalid,
                         "donation": donation, "success": donation > 0, "n_invalid": n_invalid}
        return out

    def max_reward(self, role: str) -> float:
        """The persuader: the whole payment given (r = 1); the persuadee (a co-trained simulator): nothing given."""
        return 1.0

    def metrics(self, states: Sequence[GameState]) -> dict:
        """Rates and means over finished games (success: the share with a donation above zero)."""
        outs = [self.outcome(s)["persuader"] for s in states]
        turns = [t for s in states for t in s.turns]
        ends = [s.end_reason for s in states]

        def mean(values):
            return float(np.mean(values)) if len(values) else float("nan")
        return {
            "n_games": len(states),
            "success": mean([o["success"] for o in outs]),
            "donation": mean([o["donation"] for o in outs]),
            "reward_persuader": mean([o["reward"] for o in outs]),
            "reward_persuadee": mean([self.outcome(s)["persuadee"]["reward"] for s in states]),
            "donate_rate": mean([e == "donate" for e in ends]),
            "turn_cap_rate": mean([e == "turn_cap" for e in ends]),
            "invalid_rate": sum(t.invalid is not None for t in turns) / max(len(turns), 1),
            "turns": mean([len(s.talk_turns()) for s in states]),
        }
