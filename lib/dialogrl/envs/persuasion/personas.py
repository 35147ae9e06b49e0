"""Scripted Persuasion for Good persuaders and persuadees: the warm-start corpus's authors and held-out counterparts.

A scripted persuadee (`PersuadeePersona`) decides with a logistic model of its wish to give, z (`wish.wish`: the
strategies it heard, fit to the human data, its profile's likes and base, its mood, cold asks, nagging and
pressure). It draws one threshold u per game; it gives when it is asked (or at its last turn) and sigmoid(z) > u,
otherwise it declines and the talk goes on; at its last turn it ends the game with [DONATE $0] if it still will not
give. The amount comes from the human donors' amounts (HUMAN_FIT["amounts"]), tilted to larger ones as z grows, at
most its `cap`. What the data cannot give is designed: the corpus personas' likes and bases are the profiles'
(`wish.LIKES`, `wish.BASES`), and the held-out personas (UNSEEN_PERSUADEES, not centred) respond to strategies the
others do not.

Two persuadee rule families (what a rule reads; `rule_family`, `trait_vector`, `TRAIT_RANGES`, `traits`:
dialogrl.heldout):
  strategy-logistic   `PersuadeePersona`: the model above, over the strategies it hears (the cue lexicon)
  uptake              `AttentivePersuadee` (held out): whether the persuader takes up what it says about itself;
                      it reads nothing of the strategy lexicon but the request itself (when it must decide)
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from dialogrl.envs.persuasion.strategies import STRATEGIES, hear
from dialogrl.envs.persuasion.task import PERSUADEE_PROFILES, PersuasionForGood, donate_marker
from dialogrl.envs.persuasion.wish import BASES, HUMAN_FIT, LIKES, wish
from dialogrl.game import (
    Agent,
    GameState,
    PersonaAgent,
    Population,
    Probe,
    game_key,
    has_cue,
    scripted_population,
)
from dialogrl.heldout import Traits


@dataclass(frozen=True)
class PersuadeePersona:
    """A scripted persuadee: `likes` (strategy -> log-odds beyond the human mean), `base` willingness (log-odds),
    `cap` the most it gives, `asks_about` the question it asks when it has nothing to answer, `about` the profile
    line of an LM persuadee's prompt."""
    name: str
    about: str
    likes: dict[str, float] = field(default_factory=dict)
    base: float = 0.0
    cap: float = 2.0
    asks_about: str = "what does the charity actually do?"


@dataclass(frozen=True)
class AttentivePersuadee:
    """A scripted persuadee of another rule family than PersuadeePersona's: it gives to a persuader who listens.

    Each turn it says one thing about itself (`mentions`: a line and the words that show it was heard, matched at
    word starts), in order. Its log-odds of giving are

        z = base + mood + uptake * (mentions the persuader's next turn took up) - ignored * (those it did not)

    and, with one threshold u per game, it gives when asked (or at its last turn) if sigmoid(z) > u, the amount
    drawn as PersuadeePersona's (at most `cap`). Which strategies the persuader uses does not move it. `about` is
    the profile line of an LM persuadee's prompt."""
    name: str
    about: str
    mentions: tuple[tuple[str, tuple[str, ...]], ...]
    base: float = 0.0
    uptake: float = 1.0
    ignored: float = 0.4
    cap: float = 2.0


@dataclass(frozen=True)
class PersuaderPersona:
    """A scripted persuader: `mix` (strategy -> weight) picks one or two strategies a turn (not the last turn's);
    it asks for a donation from its turn `ask_from` (0-based) on, and on every later turn with probability
    `ask_again`."""
    name: str
    mix: dict[str, float]
    ask_from: int = 2
    ask_again: float = 0.5


PERSUADEE_PERSONAS: dict[str, PersuadeePersona] = {p.name: p for p in [
    PersuadeePersona("sympathetic", PERSUADEE_PROFILES["sympathetic"], LIKES["sympathetic"], base=BASES["sympathetic"],
                     asks_about="who are the children it helps?"),
    PersuadeePersona("analytical", PERSUADEE_PROFILES["analytical"], LIKES["analytical"], base=BASES["analytical"],
                     asks_about="how much of the money reaches the children?"),
    PersuadeePersona("skeptical", PERSUADEE_PROFILES["skeptical"], LIKES["skeptical"], base=BASES["skeptical"],
                     asks_about="who runs this charity?"),
    PersuadeePersona("frugal", PERSUADEE_PROFILES["frugal"], LIKES["frugal"], base=BASES["frugal"], cap=0.5,
                     asks_about="how would the donation work?"),
    PersuadeePersona("sociable", PERSUADEE_PROFILES["sociable"], LIKES["sociable"], base=BASES["sociable"],
                     asks_about="have you donated yourself?"),
]}
# Persuadees no part of the pipeline has seen (the scenario generator and the corpus draw PERSUADEE_PERSONAS only):
# the held-out panel's scripted members. Play one by name (`PersuadeeAgent("reluctant")`). Held out by
# dialogrl.heldout's rule (at least MIN_DISTANCE = 0.3 from every persona above): `principled` (0.34 from
# skeptical) and `attentive` (another family). `reluctant` (0.22 from frugal), `contrarian` (0.13 from analytical)
# and `generous` (0.13 from analytical) are unseen but near a training persona: not held out.
UNSEEN_PERSUADEES: dict[str, PersuadeePersona] = {p.name: p for p in [
    PersuadeePersona("reluctant", "you rarely give; only a personal example might change your mind",
                     {"self-modeling": 1.6, "personal-story": 1.0}, base=-1.0, cap=1.0),
    PersuadeePersona("contrarian", "pressure and sad stories put you off; plain facts and small asks do not",
                     {"emotion-appeal": -1.2, "personal-story": -0.8, "foot-in-the-door": 1.0,
                      "donation-information": 0.8, "logical-appeal": 0.6}),
    PersuadeePersona("generous", "you like giving and need little convincing", {s: 0.2 for s in STRATEGIES},
                     base=0.8),
    PersuadeePersona("principled", "you give a little, readily, to a charity you trust and when others give too; "
                     "being asked for pennies or about your private life puts you off",
                     {"credibility-appeal": 1.8, "self-modeling": 1.6, "foot-in-the-door": -1.6,
                      "personal-related-inquiry": -1.4}, base=1.2, cap=0.5, asks_about="who else is giving?"),
    AttentivePersuadee("attentive", "you talk about your own life and give to people who listen to it", (
        ("i work night shifts as a nurse.", ("nurse", "night shift", "shifts")),
        ("i just moved to a new city.", ("moved", "move", "new city", "city")),
        ("i volunteer at a food bank on weekends.", ("volunteer", "food bank")),
        ("my nephew spent a month in hospital last year.", ("nephew", "hospital")),
        ("i'm saving up for a trip to see my grandmother.", ("grandmother", "grandma", "trip")),
    ), base=-0.3, uptake=1.2, ignored=0.3, cap=1.0),
]}
ALL_PERSUADEES: dict[str, PersuadeePersona | AttentivePersuadee] = {**PERSUADEE_PERSONAS, **UNSEEN_PERSUADEES}

# What each family's rule reads, and each number's range (dialogrl.heldout scales differences by it): log-odds
# (a strategy's susceptibility, the human fit plus the persona's like: -2 .. 2), dollars of the $2 payment.
TRAIT_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "strategy-logistic": {**{s: (-2.0, 2.0) for s in STRATEGIES}, "base": (-1.5, 1.5), "cap": (0.0, 2.0)},
    "uptake": {"base": (-1.5, 1.5), "uptake": (0.0, 2.0), "ignored": (0.0, 1.0), "cap": (0.0, 2.0)},
}


def rule_family(p: PersuadeePersona | AttentivePersuadee) -> str:
    """The family of a persuadee's decision rule: what it reads (module docstring)."""
    return "uptake" if isinstance(p, AttentivePersuadee) else "strategy-logistic"


def trait_vector(p: PersuadeePersona | AttentivePersuadee) -> dict[str, float]:
    """The numbers a persuadee's decision rule reads: each strategy's susceptibility beta_s (the human fit plus its
    like), base and cap; or an attentive one's weights."""
    if isinstance(p, AttentivePersuadee):
        return {"base": p.base, "uptake": p.uptake, "ignored": p.ignored, "cap": p.cap}
    return {**{s: HUMAN_FIT["beta"][s] + p.likes.get(s, 0.0) for s in STRATEGIES}, "base": p.base, "cap": p.cap}


def traits(p: PersuadeePersona | AttentivePersuadee | str) -> Traits:
    """A persuadee (or its name in ALL_PERSUADEES) as dialogrl.heldout compares it."""
    p = ALL_PERSUADEES[p] if isinstance(p, str) else p
    return Traits(rule_family(p), trait_vector(p), TRAIT_RANGES[rule_family(p)])

PERSUADER_PERSONAS: dict[str, PersuaderPersona] = {p.name: p for p in [
    PersuaderPersona("storyteller", {"emotion-appeal": 3, "personal-story": 2, "self-modeling": 1}),
    PersuaderPersona("factual", {"credibility-appeal": 2, "logical-appeal": 2, "donation-information": 2}),
    PersuaderPersona("friendly", {"personal-related-inquiry": 2, "task-related-inquiry": 2,
                                  "source-related-inquiry": 1, "foot-in-the-door": 1}, ask_from=3),
    PersuaderPersona("pushy", {"foot-in-the-door": 2, "donation-information": 1}, ask_from=0, ask_again=0.9),
    PersuaderPersona("balanced", {s: 1 for s in STRATEGIES}),
]}

# What scripted persuaders say: each phrase carries its strategy's cue (strategies.CUES).
SAY: dict[str, list[str]] = {
    "credibility-appeal": ["save the children is a reputable charity, founded over 100 years ago.",
                           "it's a trusted organization with a long track record.",
                           "charity navigator rates them highly, they are very transparent."],
    "logical-appeal": ["every dollar goes a long way there.", "a small gift pays for a meal, so it really adds up.",
                       "think about it: two dollars provides clean water for a child for weeks."],
    "emotion-appeal": ["imagine a child going to bed hungry tonight.",
                       "it's heartbreaking how many kids are suffering right now.",
                       "so many innocent children are starving in war zones."],
    "personal-story": ["i remember seeing kids in need when i was traveling.",
                       "my friend volunteers with them and told me what she saw.",
                       "when i was young my family got help from a charity like this."],
    "donation-information": ["the donation comes from your task payment, sent to the charity directly.",
                             "you can give any part of your $2; it is deducted at the end of the task.",
                             "the researchers send it directly to save the children."],
    "foot-in-the-door": ["even a little helps, just 10 cents would be great.",
                         "any amount is welcome, even a few cents.", "just a bit of your payment would help."],
    "self-modeling": ["i'm donating part of mine too.", "i will donate half of my payment.",
                      "i'll donate as well, it feels right."],
    "source-related-inquiry": ["have you heard of save the children?", "are you familiar with save the children?",
                               "do you know about the work of save the children?"],
    "task-related-inquiry": ["have you ever donated to a charity?", "do you donate to charities usually?",
                             "which charities do you give to?"],
    "personal-related-inquiry": ["do you have kids of your own?", "where are you from?",
                                 "tell me about yourself, do you have a family?"],
    "ask": ["would you donate some of your payment?", "would you like to donate to save the children?",
            "how much would you like to donate?", "would you consider giving part of your $2?"],
    "open": ["hi, how are you today?", "hello there!", "hi! thanks for chatting with me."],
}
# What scripted persuadees say: a reaction to a strategy it likes (pos) or not (neg), answers, asks and decisions.
REPLY: dict[str, list[str]] = {
    "greet": ["hi, i'm good.", "hello! doing fine.", "hey, nice to meet you."],
    "pos": ["that's good to hear.", "oh, that's touching.", "that makes sense.", "okay, that helps.",
            "i like that."],
    "neg": ["hmm, i'm not sure about that.", "that doesn't really move me.", "okay.", "i've heard that before."],
    "answer_yes": ["yes, i have.", "yes, sometimes.", "i do, yes."],
    "answer_no": ["not really.", "no, not much.", "no, i haven't."],
    "decline": ["i don't think i can right now.", "not today, sorry.", "i need this money, sorry.",
                "let me think about it."],
    "give": ["okay, i'll give some.", "sure, count me in.", "alright, i'll donate.", "fine, here you go."],
    "refuse": ["sorry, i'll keep my payment.", "no, i won't donate this time.", "i'll pass, thanks."],
}


def _pick(rng: random.Random, weights: dict[str, float], avoid: set[str]) -> str:
    names = [s for s in weights if s not in avoid and weights[s] > 0] or list(weights)
    return rng.choices(names, weights=[weights[s] for s in names])[0]


class ScriptedAgent(PersonaAgent):
    """Plays one scripted persona of either role: a PersuaderPersona, a PersuadeePersona, a name from
    PERSUADER_PERSONAS or ALL_PERSUADEES, or None (a persuadee playing its scenario's persona). Deterministic per
    game: every utterance draws from random.Random(f"{seed}/{game}/{role}/{turn}"), the game being its seed
    (`game_key`) or its scenario id."""
    personas = {"persuaders": PERSUADER_PERSONAS, "persuadees": ALL_PERSUADEES}
    scenario_name = "scenario-persuadee"

    def utter(self, task: PersuasionForGood, state: GameState, role: str) -> str:
        p = self.persona if self.persona is not None else PERSUADEE_PERSONAS[state.scenario.persona]
        want = PersuaderPersona if role == "persuader" else (PersuadeePersona, AttentivePersuadee)
        if not isinstance(p, want):
            raise ValueError(f"persona {p.name!r} cannot play the {role}")
        rng = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/{role}/{len(state.turns)}")
        return self._persuade(p, state, rng) if role == "persuader" else self._respond(p, task, state, rng)

    # -- the persuader
    @staticmethod
    def _persuade(p: PersuaderPersona, state: GameState, rng: random.Random) -> str:
        n = len(state.talk_turns()) // 2                      # its turn number, from 0
        last = state.talk_turns()[-2].text if n else ""
        parts = [rng.choice(SAY["open"])] if n == 0 else []
        used = set(hear(last))
        first = _pick(rng, p.mix, used)
        parts.append(rng.choice(SAY[first]))
        second = _pick(rng, p.mix, used | {first})
        if second != first and rng.random() < 0.4:
            parts.append(rng.choice(SAY[second]))
        if n >= p.ask_from and (n == p.ask_from or rng.random() < p.ask_again):
            parts.append(rng.choice(SAY["ask"]))
        return " ".join(parts)

    # -- the persuadee
    @staticmethod
    def wish(p: PersuadeePersona, state: GameState) -> float:
        """z: its log-odds of giving after what it has heard so far (`wish.wish`)."""
        return wish(p.likes, p.base, state.scenario.mood, state.talk_turns())

    def _amount(self, p: PersuadeePersona, z: float, rng: random.Random) -> float:
        amounts = HUMAN_FIT["amounts"]
        xs = [a for a in amounts if a <= p.cap] or [min(amounts)]
        return rng.choices(xs, weights=[amounts[a] * math.exp(0.5 * z * a) for a in xs])[0]

    def _respond(self, p: PersuadeePersona | AttentivePersuadee, task: PersuasionForGood, state: GameState,
                 rng: random.Random) -> str:
        if isinstance(p, AttentivePersuadee):
            return self._respond_attentive(p, task, state, rng)
        talk = state.talk_turns()
        last_turn = len(talk) >= task.max_turns - 1
        said = hear(talk[-1].text) if talk else []
        u = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/threshold").random()   # one per game
        z = self.wish(p, state)
        gives = 1 / (1 + math.exp(-z)) > u
        if "ask" in said or last_turn:
            if gives:
                return f"{rng.choice(REPLY['give'])} {donate_marker(self._amount(p, z, rng))}"
            if last_turn:
                return f"{rng.choice(REPLY['refuse'])} {donate_marker(0.0)}"
        parts = [rng.choice(REPLY["greet"])] if len(talk) == 1 else []
        strategies = [s for s in said if s != "ask"]
        if strategies:
            s = strategies[0]
            if s.endswith("inquiry"):
                parts.append(rng.choice(REPLY["answer_yes" if HUMAN_FIT["beta"][s] + p.likes.get(s, 0.0) > 0
                                              or rng.random() < 0.5 else "answer_no"]))
            else:
                parts.append(rng.choice(REPLY["pos" if HUMAN_FIT["beta"][s] + p.likes.get(s, 0.0) > 0 else "neg"]))
        if "ask" in said:
            parts.append(rng.choice(REPLY["decline"]))
        elif not strategies or rng.random() < 0.3:
            parts.append(p.asks_about)
        return " ".join(parts)

    @staticmethod
    def attentive_wish(p: AttentivePersuadee, state: GameState) -> float:
        """z of an AttentivePersuadee: base + mood + uptake * mentions taken up - ignored * mentions missed."""
        heard, missed = taken_up(p, state)
        return p.base + state.scenario.mood + p.uptake * heard - p.ignored * missed

    def _respond_attentive(self, p: AttentivePersuadee, task: PersuasionForGood, state: GameState,
                           rng: random.Random) -> str:
        talk = state.talk_turns()
        last_turn = len(talk) >= task.max_turns - 1
        asked = bool(talk) and "ask" in hear(talk[-1].text)   # when it must decide: the request, nothing else
        u = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/threshold").random()   # one per game
        z = self.attentive_wish(p, state)
        if asked or last_turn:
            if 1 / (1 + math.exp(-z)) > u:
                return f"{rng.choice(REPLY['give'])} {donate_marker(self._amount(p, z, rng))}"
            if last_turn:
                return f"{rng.choice(REPLY['refuse'])} {donate_marker(0.0)}"
        parts = [rng.choice(REPLY["greet"])] if len(talk) == 1 else []
        if asked:
            parts.append(rng.choice(REPLY["decline"]))
        k = sum(t.role == "persuadee" for t in talk)   # its turn number: the next mention in order
        parts.append(p.mentions[k % len(p.mentions)][0])
        return " ".join(parts)


def taken_up(p: AttentivePersuadee, state: GameState) -> tuple[int, int]:
    """(mentions the persuader took up, mentions it did not): for each of the persuadee's turns that made a mention,
    whether the persuader's next turn used one of that mention's words (at word starts)."""
    talk, heard, missed = state.talk_turns(), 0, 0
    for i, t in enumerate(talk[:-1]):
        if t.role != "persuadee" or talk[i + 1].role != "persuader":
            continue
        words = [w for line, w in p.mentions if line in t.text.lower()]
        if words:
            low = talk[i + 1].text.lower()
            hit = any(has_cue(low, w, whole=False) for w in words[0])
            heard, missed = heard + hit, missed + (not hit)
    return heard, missed


# The responsiveness check's persuaders (`probe`): one tells stories and gives facts, with the strategies the human
# persuadees answered best (HUMAN_FIT), and asks from its third turn; the other demands and insults.
PROBE_GOOD = PersuaderPersona("probe-good", {"emotion-appeal": 1, "personal-story": 1, "donation-information": 1,
                                             "source-related-inquiry": 1}, ask_from=2, ask_again=0.5)
RUDE = ["give me your money for the charity, now.", "stop wasting my time and donate your $2.",
        "you are selfish if you keep it.", "honestly, just hand it over already, it's only $2.",
        "what's wrong with you? donate now."]


class RudePersuader(Agent):
    """The responsiveness check's bad persuader: a demand or an insult every turn (RUDE, in order)."""
    name = "rude"

    def act(self, requests) -> list[str]:
        return [RUDE[len(r.state.talk_turns()) // 2 % len(RUDE)] for r in requests]


def reference_persuaders() -> dict[str, ScriptedAgent]:
    """The scripted persuaders a room test plays (`room.room_test`'s references): every persona of
    PERSUADER_PERSONAS, and for each strategy one that uses it alone and asks for the donation from its second turn
    (`<strategy>/ask-from-2`)."""
    out = {name: ScriptedAgent(p, seed=i) for i, (name, p) in enumerate(PERSUADER_PERSONAS.items())}
    return out | {f"{s}/ask-from-2": ScriptedAgent(PersuaderPersona(f"{s}-2", {s: 1.0}, ask_from=2, ask_again=0.5),
                                                   seed=1) for s in STRATEGIES}


def probe(role: str = "persuadee") -> Probe:
    """The responsiveness check's probe of a persuadee: does it give to a persuader who tells stories and gives facts
    more often than to a rude one?"""
    if role != "persuadee":
        raise ValueError(f"Persuasion for Good probes the persuadee (its donation), not the {role}")
    return Probe("persuadee", ScriptedAgent(PROBE_GOOD, seed=1), RudePersuader(), decision="success",
                 kinds=("stories and facts", "demands and insults"))


def population(role: str, names: Sequence[str] | None = None, weights: dict[str, float] | None = None,
               seed: int = 0) -> Population:
    """A Population of scripted personas for `role` ('persuader' or 'persuadee'): all of PERSUADER_PERSONAS or
    PERSUADEE_PERSONAS by default; persuadees of UNSEEN_PERSUADEES by name."""
    return scripted_population(role, {"persuader": PERSUADER_PERSONAS, "persuadee": ALL_PERSUADEES},
                              {"persuader": list(PERSUADER_PERSONAS), "persuadee": list(PERSUADEE_PERSONAS)},
                              lambda p, s: ScriptedAgent(p, seed=s), names, weights, seed)
