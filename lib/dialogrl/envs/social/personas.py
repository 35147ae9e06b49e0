"""Scripted agents and partners of the social game: the warm-start corpus's authors and the RL counterparts.

A scripted partner reads the game the way the rules do: its favourability is the rules' `relationship_trace`, and
the acts it has heard come from `acts.hear`. When the agent's turn asks (or at its last turn, if it was ever asked)
it decides with a logistic model of its wish to agree:

    z = base + mood - stake - 0.8 + 0.15 * relationship type + 0.6 * favourability
        + pragmatism * (0.5 * [a reason was given] + 0.7 * [an offer was made]) + 0.5 * [its concern was acknowledged]
        + 1.5 * pushover * min(pressure turns, 2)

with one threshold u per game: [AGREE] if sigmoid(z) > u, [AGREE PARTLY] if sigmoid(z + 1) > u, else [REFUSE] (and
the talk goes on). Pressure is the game's trade-off: for a pushover partner it buys agreement now, and it always
costs favourability (the relationship score). A partner never agrees to what it was not asked.

A partner of another rule family (a `TermsProfile`, task.py) hears no acts at all: it decides by the concrete terms
the agent commits to (`terms_wish`, terms.py), and asks for them.

Partner rule families (what a rule reads; `rule_family`, `trait_vector`, `TRAIT_RANGES`, `traits`:
dialogrl.heldout):
  act-logistic     `PartnerProfile`: the acts it hears (acts.py's cue lexicon, which the rule judge reads too) and
                   the favourability they make
  concrete-terms   `TermsProfile` (held out): the concrete terms of the agent's turns; nothing the judge reads

A scripted agent follows a persona's plan: opening acts, acts before and after it asks, when it asks (from turn
`ask_from`, again with probability `ask_again`), how often it presses, and whether it thanks in its closing turn.
"""
from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from dialogrl.envs.social.acts import hear
from dialogrl.envs.social.task import (
    ALL_PARTNERS,
    PARTNERS,
    PartnerProfile,
    SocialScenes,
    TermsProfile,
    profile_from_traits,
    relationship_trace,
)
from dialogrl.envs.social.terms import concrete_terms, names_request
from dialogrl.game import Agent, GameState, PersonaAgent, Population, Probe, game_key, scripted_population
from dialogrl.heldout import MIN_DISTANCE, Traits, far_from

_FIRST = [(r"\byou are\b", "i am"), (r"\byou're\b", "i'm"), (r"\byour\b", "my"), (r"\byours\b", "mine"),
          (r"\byou\b", "i")]


def first_person(text: str) -> str:
    """A partner's goal in its own words: 'keep your car safe; you need it' -> 'keep my car safe; i need it'."""
    for pat, rep in _FIRST:
        text = re.sub(pat, rep, text)
    return text


def swap_person(text: str) -> str:
    """The agent's request as the partner says it: 'lend me your car' -> 'lend you my car'."""
    table = {"me": "you", "my": "your", "your": "my", "mine": "yours", "yours": "mine", "i": "you"}
    return re.sub(r"\b(me|my|your|mine|yours|i)\b", lambda m: table[m.group(1)], text)


# What scripted agents say: each phrase carries its act's cue (acts.CUES); {ask} and {ack} come from the scene.
SAY: dict[str, list[str]] = {
    "greet": ["hi!", "hey there.", "hello!"],
    "rapport": ["how are you doing?", "good to see you.", "how was your week?", "hope you're well."],
    "empathy": ["i understand.", "that makes sense.", "i hear you."],
    "concern": ["{ack}.", "{ack}, and that matters to me."],
    "appreciate": ["i really appreciate you.", "you're the best.", "thanks for listening."],
    "reason": ["it would help me a lot.", "i really need it this time.", "it matters because i'm stuck."],
    "offer": ["i'll make it up to you.", "in return i can help you next week.", "i promise to return the favour."],
    "ask": ["could you {ask}?", "would you {ask}?", "can you {ask}, please?"],
    "pressure": ["come on, you have to.", "you owe me this.", "just do it, no excuses."],
    "insult": ["don't be so selfish."],
    "apology": ["sorry to push."],
    "thanks": ["thank you so much, take care!", "thanks, i appreciate it. see you!", "thank you, talk soon."],
    "plain_close": ["ok.", "good.", "fine, finally."],
    "chat": ["so, about today.", "anyway.", "well."],
}
# What scripted partners say.
REPLY: dict[str, list[str]] = {
    "greet": ["hi.", "hey, good to see you.", "hello."],
    "rapport": ["i'm good, thanks. and you?", "doing fine, thanks.", "not bad, busy week."],
    "felt": ["yes, exactly.", "thanks for getting that.", "right, it matters to me."],
    "concern": ["honestly, i need to {concern}.", "the thing is, i want to {concern}."],
    "pushed": ["please don't push me.", "that's not fair.", "hey, easy."],
    "listen": ["okay.", "i see.", "go on."],
    "agree": ["okay, i'll do it. [AGREE]", "sure, for you. [AGREE]", "alright, deal. [AGREE]"],
    "partly": ["i can {partial}, not more. [AGREE PARTLY]", "how about i {partial}? [AGREE PARTLY]"],
    "refuse": ["sorry, i can't. [REFUSE]", "no, i need to {concern}. [REFUSE]", "i'd rather not. [REFUSE]"],
    # a TermsProfile partner: it asks for specifics, and notes the ones it got
    "specifics": ["what exactly do you need, and when?", "for how long, exactly?", "when, and until when?",
                  "what would that look like, concretely?"],
    "noted": ["okay, {term} is clear.", "{term}, noted.", "right, {term}."],
}


@dataclass(frozen=True)
class AgentPersona:
    """A scripted agent: `opening` acts of its first turn, `before` and `after` (act -> weight) the acts of its
    turns before and from its first ask, `ask_from` the turn (0-based) of its first ask, `ask_again` the chance
    it asks again on a later turn, `pressure` the chance it presses when it asks after a refusal (or at any ask
    with `pushy`), `thanks` the chance it thanks in the closing turn."""
    name: str
    opening: tuple[str, ...] = ("greet", "rapport")
    before: dict[str, float] = field(default_factory=lambda: {"empathy": 1, "concern": 1, "rapport": 1})
    after: dict[str, float] = field(default_factory=lambda: {"reason": 1, "offer": 1, "concern": 1})
    ask_from: int = 1
    ask_again: float = 0.6
    pressure: float = 0.0
    pushy: bool = False
    thanks: float = 0.9


AGENT_PERSONAS: dict[str, AgentPersona] = {p.name: p for p in [
    AgentPersona("balanced"),
    AgentPersona("warm", before={"concern": 2, "appreciate": 1, "rapport": 1}, ask_from=2,
                 after={"offer": 1, "concern": 1, "appreciate": 1}),
    AgentPersona("direct", opening=("greet",), before={"reason": 1}, ask_from=0, after={"reason": 2, "offer": 1},
                 pressure=0.3, thanks=0.6),
    AgentPersona("pushy", opening=(), before={"reason": 1}, ask_from=0, after={"reason": 1}, ask_again=0.9,
                 pressure=0.7, pushy=True, thanks=0.2),
    AgentPersona("flatterer", before={"appreciate": 2, "rapport": 2, "empathy": 1}, ask_from=99,
                 after={"appreciate": 1}, thanks=1.0),     # never asks
    AgentPersona("hesitant", opening=("greet",), before={"chat": 2, "rapport": 1}, ask_from=3, ask_again=0.4,
                 after={"chat": 1, "reason": 1}, thanks=0.7),
]}


def _pick(rng: random.Random, weights: dict[str, float], avoid: set[str]) -> str:
    names = [a for a in weights if a not in avoid] or list(weights)
    return rng.choices(names, weights=[weights[a] for a in names])[0]


class ScriptedAgent(PersonaAgent):
    """Plays one scripted persona of either role: an AgentPersona, a PartnerProfile, a name from AGENT_PERSONAS or
    ALL_PARTNERS, or None (a partner playing its scenario's profile). Deterministic per game: every utterance draws
    from random.Random(f"{seed}/{game}/{role}/{turn}"), the game being its seed (`game_key`) or its scenario id."""
    personas = {"agents": AGENT_PERSONAS, "partners": ALL_PARTNERS}
    scenario_name = "scenario-partner"

    def utter(self, task: SocialScenes, state: GameState, role: str) -> str:
        p = self.persona if self.persona is not None else state.scenario.partner
        want = AgentPersona if role == "agent" else PartnerProfile
        if not isinstance(p, want):
            raise ValueError(f"persona {p.name!r} cannot play the {role}")
        rng = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/{role}/{len(state.turns)}")
        return self._speak(p, state, rng) if role == "agent" else self._respond(p, task, state, rng)

    # -- the agent
    @staticmethod
    def _speak(p: AgentPersona, state: GameState, rng: random.Random) -> str:
        scene = state.scenario.scene
        fill = {"ask": scene.ask, "ack": scene.ack}
        n = len(state.talk_turns()) // 2
        if "agreement" in state.info:   # the closing turn
            return rng.choice(SAY["thanks" if rng.random() < p.thanks else "plain_close"])
        last = state.talk_turns()[-1] if n else None
        refused = last is not None and last.action.get("type") == "refuse"
        asked_before = n > p.ask_from
        asks = n >= p.ask_from and (n == p.ask_from or rng.random() < p.ask_again)
        parts = [rng.choice(SAY[a]) for a in p.opening] if n == 0 else []
        mix = p.after if asked_before or asks else p.before
        first = _pick(rng, mix, set())
        parts.append(rng.choice(SAY[first]))
        if rng.random() < 0.4:
            second = _pick(rng, mix, {first})
            if second != first:
                parts.append(rng.choice(SAY[second]))
        if asks:
            if (refused or p.pushy) and rng.random() < p.pressure:
                parts.append(rng.choice(SAY["pressure"]))
            parts.append(rng.choice(SAY["ask"]))
        return " ".join(parts).format(**fill)

    # -- the partner
    @staticmethod
    def wish(p: PartnerProfile, state: GameState) -> float:
        """z: its log-odds of agreeing after what it has heard so far (see the module docstring)."""
        scene, heard = state.scenario.scene, set()
        pressure = 0
        for t in state.talk_turns():
            if t.role == "agent":
                acts = set(hear(t.text, scene))
                heard |= acts
                pressure += "pressure" in acts
        trace = relationship_trace(state)
        f = trace[-1] if trace else 0.0
        z = p.base + state.scenario.mood - scene.stake - 0.8 + 0.15 * state.scenario.relationship + 0.6 * f
        z += p.pragmatism * (0.5 * ("reason" in heard) + 0.7 * ("offer" in heard)) + 0.5 * ("concern" in heard)
        return z + 1.5 * p.pushover * min(pressure, 2)

    def _respond(self, p: PartnerProfile, task: SocialScenes, state: GameState, rng: random.Random) -> str:
        if isinstance(p, TermsProfile):
            return self._respond_terms(p, task, state, rng)
        scene = state.scenario.scene
        fill = {"concern": first_person(scene.concern), "partial": swap_person(scene.partial)}
        talk = state.talk_turns()
        agent_turns = [t for t in talk if t.role == "agent"]
        said = set(hear(talk[-1].text, scene)) if talk else set()
        ever_asked = any("ask" in hear(t.text, scene) for t in agent_turns)
        last_turn = len(talk) >= task.max_turns - 1
        if "ask" in said or (last_turn and ever_asked):
            u = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/threshold").random()
            z = self.wish(p, state)
            if 1 / (1 + math.exp(-z)) > u:
                return rng.choice(REPLY["agree"])
            if 1 / (1 + math.exp(-(z + 1.0))) > u:
                return rng.choice(REPLY["partly"]).format(**fill)
            return rng.choice(REPLY["refuse"]).format(**fill)
        parts = [rng.choice(REPLY["greet"])] if len(talk) == 1 and "greet" in said else []
        if said & {"pressure", "insult"}:
            parts.append(rng.choice(REPLY["pushed"]))
        elif said & {"concern", "empathy"}:
            parts.append(rng.choice(REPLY["felt"]))
        elif "rapport" in said:
            parts.append(rng.choice(REPLY["rapport"]))
        if not parts or rng.random() < 0.4:
            parts.append(rng.choice(REPLY["concern" if rng.random() < 0.6 else "listen"]).format(**fill))
        return " ".join(parts)

    def _respond_terms(self, p: TermsProfile, task: SocialScenes, state: GameState, rng: random.Random) -> str:
        """A TermsProfile partner's turn: decide when the request is put (or at its last turn, if it ever was), else
        note the terms just said, or ask for specifics."""
        scene = state.scenario.scene
        fill = {"concern": first_person(scene.concern), "partial": swap_person(scene.partial)}
        talk = state.talk_turns()
        ever_asked = any(names_request(t.text, scene) for t in talk if t.role == "agent")
        if talk and (names_request(talk[-1].text, scene) or (len(talk) >= task.max_turns - 1 and ever_asked)):
            u = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/threshold").random()
            z = terms_wish(p, state)
            if 1 / (1 + math.exp(-z)) > u:
                return rng.choice(REPLY["agree"])
            if 1 / (1 + math.exp(-(z + 1.0))) > u:
                return rng.choice(REPLY["partly"]).format(**fill)
            return f"{rng.choice(REPLY['specifics'])} [REFUSE]"
        new = sorted(concrete_terms(talk[-1].text, scene)) if talk else []
        if new:
            return rng.choice(REPLY["noted"]).format(term=new[0]) + " " + rng.choice(REPLY["specifics"])
        return rng.choice(REPLY["specifics"])


def terms_said(state: GameState) -> tuple[set[str], int]:
    """(the concrete terms the agent has said, beyond the scene's own; the requests it put with none said so far)."""
    scene, said, vague = state.scenario.scene, set(), 0
    for t in state.talk_turns():
        if t.role == "agent":
            said |= concrete_terms(t.text, scene)
            vague += names_request(t.text, scene) and not said
    return said, vague


def terms_wish(p: TermsProfile, state: GameState) -> float:
    """z of a TermsProfile partner (task.TermsProfile): its log-odds of agreeing after the terms said so far."""
    said, vague = terms_said(state)
    sc = state.scenario
    return p.base + sc.mood - sc.scene.stake - 0.8 + 0.15 * sc.relationship + p.terms * min(len(said), 3) \
        - p.vague * vague


# What each partner family's rule reads, and each number's range (dialogrl.heldout scales differences by it):
# the spans profile_from_traits gives from a Big Five line (warmth 1 +- 0.45, pride 1 +- 0.5, pushover 0 .. 1,
# pragmatism 0.8 or 1.3, base +- 0.4); a TermsProfile's log-odds.
TRAIT_RANGES: dict[str, dict[str, tuple[float, float]]] = {
    "act-logistic": {"warmth": (0.55, 1.45), "pride": (0.5, 1.5), "pushover": (0.0, 1.0), "pragmatism": (0.8, 1.3),
                     "base": (-0.4, 0.4)},
    "concrete-terms": {"base": (-1.0, 1.0), "terms": (0.0, 1.5), "vague": (0.0, 1.0)},
}


def rule_family(p: PartnerProfile) -> str:
    """The family of a partner's decision rule: what it reads (module docstring)."""
    return "concrete-terms" if isinstance(p, TermsProfile) else "act-logistic"


def trait_vector(p: PartnerProfile) -> dict[str, float]:
    """The numbers a partner's decision rule (and its favourability) reads; the `about` line is not one of them."""
    if isinstance(p, TermsProfile):
        return {"base": p.base, "terms": p.terms, "vague": p.vague}
    return {k: getattr(p, k) for k in TRAIT_RANGES["act-logistic"]}


def traits(p: PartnerProfile | str) -> Traits:
    """A partner profile (or its name in ALL_PARTNERS) as dialogrl.heldout compares it."""
    p = ALL_PARTNERS[p] if isinstance(p, str) else p
    return Traits(rule_family(p), trait_vector(p), TRAIT_RANGES[rule_family(p)])


def sotopia_partners(characters: Sequence[dict], n: int, seed: int = 0,
                     training: Sequence[PartnerProfile] | None = None,
                     min_distance: float = MIN_DISTANCE) -> dict[str, tuple[PartnerProfile, float]]:
    """Up to n held-out partners from SOTOPIA's character profiles (`social.data.load_sotopia_profiles`), each with
    its distance to the nearest training partner.

    The characters, in an order drawn by `seed`, become profiles (`profile_from_traits` of their Big Five line and
    decision-making style, named `sotopia-<first name>`); a profile is kept when it lies at least `min_distance`
    from every training partner (PARTNERS by default) and from every profile kept before it (heldout.far_from):
    many characters map onto one profile, or onto a training partner's. Fewer than n when fewer are that far."""
    order = list(characters)
    random.Random(seed).shuffle(order)
    pool: dict[str, PartnerProfile] = {}
    for c in order:
        name = f"sotopia-{c['first_name'].lower()}"
        if name not in pool:
            pool[name] = profile_from_traits(name, c["personality_and_values"], c["big_five"],
                                             c["decision_making_style"])
    train = {p.name: traits(p) for p in (training if training is not None else PARTNERS.values())}
    kept = far_from({name: traits(p) for name, p in pool.items()}, train, min_distance)
    return {name: (pool[name], d) for name, d in list(kept.items())[:n]}


class ProbeAgent(Agent):
    """An agent of the responsiveness check (`probe`), the same three turns in every scene, then its request again.
    kind="polite": a greeting, the partner's concern acknowledged, the request with thanks and an offer in return;
    kind="rude": the request as a demand, pressure, an insult."""

    def __init__(self, kind: str):
        if kind not in ("polite", "rude"):
            raise ValueError(f"kind={kind!r}: choose polite or rude")
        self.kind, self.name = kind, f"{kind}-agent"

    def act(self, requests) -> list[str]:
        out = []
        for r in requests:
            sc = r.state.scenario.scene
            lines = (["hi! how are you doing? i really appreciate you.", f"i understand that {sc.concern} matters "
                      f"to you.", f"could you {sc.ask}? i'd be grateful, and i can help you in return."]
                     if self.kind == "polite" else
                     [f"listen, you {sc.ask} now.", "stop making excuses, you're being useless.",
                      f"just {sc.ask}, idiot."])
            out.append(lines[min(len(r.state.talk_turns()) // 2, len(lines) - 1)])
        return out


def probe(role: str = "partner") -> Probe:
    """The responsiveness check's probe of a partner: does it grant a polite agent's request (in full) more often
    than a rude one's?"""
    if role != "partner":
        raise ValueError(f"the social scenes probe the partner (its agreement), not the {role}")
    return Probe("partner", ProbeAgent("polite"), ProbeAgent("rude"), decision="success",
                 kinds=("polite", "rude"))


def population(role: str, names: Sequence[str] | None = None, weights: dict[str, float] | None = None,
               seed: int = 0) -> Population:
    """A Population of scripted personas for `role` ('agent' or 'partner'): all of AGENT_PERSONAS, or partners by
    name (any of ALL_PARTNERS; by default None: each game's partner plays its scenario's profile)."""
    if role == "partner" and not names:
        return Population({"scenario-partner": ScriptedAgent(None, seed=seed)}, {}, seed=seed)
    return scripted_population(role, {"agent": AGENT_PERSONAS, "partner": ALL_PARTNERS},
                              {"agent": list(AGENT_PERSONAS), "partner": []},
                              lambda p, s: ScriptedAgent(p, seed=s), names, weights, seed)
