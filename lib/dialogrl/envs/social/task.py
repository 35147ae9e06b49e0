"""Social scenes, the rules (the game of notebook 02, SocialRL): an agent needs its partner's agreement to a request,
the partner has a goal of its own and a relationship with the agent that what the agent says moves.

Scenario (seeded generator, `sample_scenarios(n, seed)`; `id` pairs scenarios across methods):
  - `scene`: a Scene (scenes.py): the setting, the request (`ask`), what a partial agreement grants, the partner's
    own goal (`concern`) and the request's cost to the partner (`stake`);
  - `partner`: a PartnerProfile, the partner's temperament (prompt line and the traits the rules read);
  - `mood`: the partner's private leaning on this day (a log-odds shift of its wish to agree, normal, sd `mood_sd`).

Protocol. The agent speaks first; the roles alternate, at most `max_exchanges` exchanges. A turn is free text; the
partner may carry one marker:
    [AGREE]          grants the request (goal 10)
    [AGREE PARTLY]   grants the partial version (goal 5)
    [REFUSE]         turns the request down; the talk goes on
  After an agreement the agent has one closing turn, then the game ends ("agree"); without one by the last turn it
  ends with the goal not reached ("turn_cap"). Markers are ASCII and case-insensitive. Invalid markers (the agent
  writing any marker, an unknown or malformed marker, a character outside ASCII, an unclosed or repeated marker)
  never raise: they are recorded on the Turn, have no effect, count in `invalid_rate` and cost the speaker
  `invalid_penalty`.

Relationship. The partner's favourability starts at 0 and moves with the acts it hears in each agent turn
(`acts.hear`; `relationship_trace` below, in units of SOTOPIA's relationship scale, clipped to -5..5):
    rapport, empathy, acknowledging its concern, appreciation   + 0.5 / 0.6 / 0.6 / 0.3 x warmth, halved the second
                                                                  time, nothing from the third on (flattery wears off)
    an offer in return +0.3; an apology after a refusal or pressure +0.3; thanks in the closing turn +0.5 x warmth
    pressure -1.0 x pride; an insult -1.5 x pride; an ask before any greeting or rapport -0.3;
    an ask beyond the second -0.4 x pride; asking again after a refusal without a reason, an offer, empathy or
    its concern -0.3 x pride (ignoring its goal)
A partner of another family (`TermsProfile`, held out) hears no acts: its favourability is its own
(`terms_trace`): +0.5 for a turn that adds concrete terms (`terms.concrete_terms`: numbers, times, days, durations),
halved the second time and nothing from the third, -0.5 for each request put with no concrete term said so far.
Scores (per game): agent goal (0 / 5 / 10) and relationship change (the last favourability, `partner_trace`);
  agent score = goal / 10 + relationship_weight * relationship (the outcome reward; reward subtracts penalties);
  partner score = 1 - goal / 10 (its own goal kept).
Metrics: `goal` (0..10 mean), `goal_rate` (share of full agreements), `agree_rate` (full or partial),
`relationship` (mean change), `refuse_rate` (refusals per game), `invalid_rate`, `turns`.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dialogrl.envs.social.acts import hear
from dialogrl.envs.social.scenes import ALL_SCENES, HARD_SCENES, TRAIN_SCENES, Scene
from dialogrl.envs.social.terms import concrete_terms, names_request
from dialogrl.game import GameState, Question, Turn, TurnTakingTask, one_marker, shorten

ROLES = ("agent", "partner")
# SOTOPIA's relationship types (RelationshipType 0..5) and the setting words that name them here
RELATIONSHIPS = ("strangers", "people who know each other by name", "acquaintances", "friends",
                 "partners in a romantic relationship", "family")
_RELATIONSHIP_WORDS = ((5, ("sibling", "parents", "family")), (4, ("partners on",)), (3, ("friend",)),
                       (2, ("neighbour", "coworker", "colleague", "classmate", "flatmate", "team", "cousin",
                            "sharing a room", "dislike")),
                       (0, ("buyer", "seller", "tenant")))
GOALS = {"full": 10.0, "partly": 5.0}


def relationship_of(scene: Scene) -> int:
    """The SOTOPIA relationship type (0..5) that a scene's setting names (its first matching word group)."""
    for level, words in _RELATIONSHIP_WORDS:
        if any(w in scene.setting for w in words):
            return level
    return 1


@dataclass(frozen=True)
class PartnerProfile:
    """A partner's temperament: `about` (the line of an LM partner's prompt) and the traits the rules and the
    scripted partner read: `warmth` (how much rapport and empathy move it), `pride` (how much pressure hurts the
    relationship), `pushover` (how much pressure makes it comply), `pragmatism` (how much reasons and offers
    persuade it), `base` (its general willingness, log-odds)."""
    name: str
    about: str
    warmth: float = 1.0
    pride: float = 1.0
    pushover: float = 0.3
    pragmatism: float = 1.0
    base: float = 0.0


@dataclass(frozen=True)
class TermsProfile(PartnerProfile):
    """A partner of another rule family (`concrete-terms`): it reads the concrete terms of the agent's turns
    (terms.concrete_terms) and no social act. When a turn puts the request (terms.names_request), or at its last
    turn if it ever was put, it decides with

        z = base + mood - stake - 0.8 + 0.15 * relationship type + `terms` * min(new terms said, 3)
            - `vague` * (requests put with no concrete term said so far)

    its favourability is `terms_trace`, not the act rules'. The traits it inherits besides `base` (warmth, pride,
    pushover, pragmatism) are unused, left at their defaults: the rule judge's relationship estimate, which reads
    warmth and pride, sees a neutral partner, not this one."""
    terms: float = 0.8
    vague: float = 0.5


_ANALYTIC = ("analytic", "logical", "rational", "systematic", "practical", "strategic", "deliberate", "detail")


def profile_from_traits(name: str, about: str, big_five: str, style: str = "") -> PartnerProfile:
    """A PartnerProfile from a SOTOPIA character's Big Five line ('Openness to Experience - High; ...;
    Neuroticism - Low') and decision-making style, by fixed rules (each trait high +1, low -1):
        warmth = 1 + 0.3 A + 0.15 E        pride = 1 + 0.3 N - 0.2 A        pushover = max(0, 0.4 + 0.3 A - 0.3 C)
        pragmatism = 1.3 for an analytical style (analytical, logical, rational, ...) else 0.8
        base = 0.3 A + 0.1 O
    """
    level = {}
    for part in big_five.split(";"):
        trait, _, value = part.partition("-")
        key = trait.strip().split()[0][:1].upper() if trait.strip() else ""
        level[key] = 1.0 if "high" in value.lower() else -1.0 if "low" in value.lower() else 0.0
    if set(level) != {"O", "C", "E", "A", "N"}:
        raise ValueError(f"big_five={big_five!r}: expected the five traits, each High or Low")
    agree, consc, extra, neuro, openness = (level[k] for k in "ACENO")
    analytic = any(w in style.lower() for w in _ANALYTIC)
    return PartnerProfile(name, about, warmth=round(1 + 0.3 * agree + 0.15 * extra, 3),
                          pride=round(1 + 0.3 * neuro - 0.2 * agree, 3),
                          pushover=round(max(0.0, 0.4 + 0.3 * agree - 0.3 * consc), 3),
                          pragmatism=1.3 if analytic else 0.8, base=round(0.3 * agree + 0.1 * openness, 3))


def _trait_line(o, c, e, a, n) -> str:
    word = {1: "High", -1: "Low"}
    return "; ".join(f"{t} - {word[v]}" for t, v in zip(("Openness to Experience", "Conscientiousness",
                                                           "Extraversion", "Agreeableness", "Neuroticism"),
                                                          (o, c, e, a, n)))


# The partners of the corpus and of RL training: Big Five types of the kind SOTOPIA's characters have.
PARTNERS: dict[str, PartnerProfile] = {p.name: p for p in [
    profile_from_traits("warm", "you are friendly and enjoy a good chat", _trait_line(1, 1, 1, 1, -1), "Intuitive"),
    profile_from_traits("guarded", "you are reserved and want good reasons", _trait_line(-1, 1, -1, -1, -1),
                        "Analytical"),
    profile_from_traits("anxious", "you worry a lot and dislike being rushed", _trait_line(1, -1, -1, 1, 1),
                        "Cautious"),
    profile_from_traits("pragmatic", "you care about what is in it for you", _trait_line(-1, 1, 1, -1, -1),
                        "Rational"),
    profile_from_traits("pliant", "you find it hard to say no", _trait_line(1, -1, 1, 1, -1), "Spontaneous"),
]}
# Partners no part of the pipeline has seen (neither the corpus nor training draws them): held-out evaluation.
# Held out by dialogrl.heldout's rule (at least MIN_DISTANCE = 0.3 from every partner above): `prickly` (0.55
# from anxious), `earnest` (0.52 from warm) and `literal` (another family: concrete terms, no acts). `proud` (0.27
# from guarded: pride alone differs) and `easygoing` (pliant's traits exactly) are unseen but not held out.
UNSEEN_PARTNERS: dict[str, PartnerProfile] = {p.name: p for p in [
    profile_from_traits("proud", "you hate being pushed and remember slights", _trait_line(-1, 1, -1, -1, 1),
                        "Strategic"),
    profile_from_traits("easygoing", "you are relaxed and open to most things", _trait_line(1, -1, 1, 1, -1),
                        "Flexible"),
    profile_from_traits("prickly", "you are touchy and easily feel pushed, and you go by your gut",
                        _trait_line(1, -1, -1, -1, 1), "Intuitive"),
    profile_from_traits("earnest", "you are warm but a worrier, and you want sound reasons",
                        _trait_line(1, 1, 1, 1, 1), "Analytical"),
    TermsProfile("literal", "you want specifics: what exactly, when and for how long; kind words do not move you",
                 base=0.2, terms=0.8, vague=0.5),
]}
ALL_PARTNERS: dict[str, PartnerProfile] = {**PARTNERS, **UNSEEN_PARTNERS}


@dataclass(frozen=True)
class SocialScenario:
    """One game: the scene, the partner's temperament and private mood. `id` is the generator's index."""
    scene: Scene
    partner: PartnerProfile
    mood: float
    id: int = 0

    @property
    def relationship(self) -> int:
        return relationship_of(self.scene)


def _pick_scenes(scenes: str | Sequence[str]) -> list[Scene]:
    if isinstance(scenes, str):
        if scenes not in ("train", "hard"):
            raise ValueError(f"scenes={scenes!r}: choose 'train', 'hard' or a list of scene names")
        return list((TRAIN_SCENES if scenes == "train" else HARD_SCENES).values())
    unknown = [s for s in scenes if s not in ALL_SCENES]
    if unknown or not scenes:
        raise ValueError(f"scenes: unknown scene(s) {unknown or '(none given)'}; see envs/social/scenes.py")
    return [ALL_SCENES[s] for s in scenes]


def _pick_partners(partners: Sequence[str | PartnerProfile] | None) -> list[PartnerProfile]:
    if not partners:
        return list(PARTNERS.values())
    out = []
    for p in partners:
        if isinstance(p, PartnerProfile):
            out.append(p)
        elif p in ALL_PARTNERS:
            out.append(ALL_PARTNERS[p])
        else:
            raise ValueError(f"partners: unknown partner {p!r}; partners: {', '.join(ALL_PARTNERS)}")
    return out


# ------------------------------------------------------------------------------------------------------ parsing

_MARKERS = {"agree": "full", "agree partly": "partly", "refuse": "refuse"}


def parse_marker(text: str) -> tuple[dict, str | None]:
    """Parse one utterance into (action, invalid reason or None); who may use a marker is the task's rule.
    Actions: {"type": "talk"}, {"type": "agree", "level": "full" | "partly"} or {"type": "refuse"}. Never raises."""
    marker, invalid = one_marker(text)
    if marker is None:
        return {"type": "talk"}, invalid
    kind = _MARKERS.get(" ".join(marker.lower().split()))
    if kind is None:
        return {"type": "talk"}, f"malformed marker [{shorten(marker)}]"
    return ({"type": "refuse"} if kind == "refuse" else {"type": "agree", "level": kind}), None


# ------------------------------------------------------------------------------------------------- relationship

WARM_ACTS = {"rapport": 0.5, "empathy": 0.6, "concern": 0.6, "appreciate": 0.3}
_GOAL_MINDED = {"reason", "offer", "empathy", "concern", "apology"}


def warm_gain(acts: set[str], seen: Counter, warmth: float = 1.0) -> float:
    """The favourability the warm acts of one turn add (WARM_ACTS x warmth; half the second time an act is heard,
    nothing from the third), counting them in `seen`."""
    d = 0.0
    for a, w in WARM_ACTS.items():
        if a in acts:
            d += w * warmth * (1.0, 0.5, 0.0)[min(seen[a], 2)]
            seen[a] += 1
    return d


def partner_trace(state: GameState) -> list[float]:
    """The partner's favourability after each agent turn, by its own family's rules: `terms_trace` for a
    TermsProfile, `relationship_trace` otherwise. The relationship score is its last value."""
    return terms_trace(state) if isinstance(state.scenario.partner, TermsProfile) else relationship_trace(state)


def terms_trace(state: GameState) -> list[float]:
    """A TermsProfile partner's favourability after each agent turn (module docstring), -5..5: it rises with turns
    that add concrete terms (wearing off) and falls with each request put while nothing concrete was said."""
    scene = state.scenario.scene
    f, trace, said, adding = 0.0, [], set(), 0
    agreed = False
    for t in state.talk_turns():
        if t.role == "partner":
            agreed = agreed or (t.invalid is None and t.action.get("type") == "agree")
            continue
        if not agreed:   # the closing turn changes nothing
            new = concrete_terms(t.text, scene) - said
            said |= new
            if new:
                f += 0.5 * (1.0, 0.5, 0.0)[min(adding, 2)]
                adding += 1
            if names_request(t.text, scene) and not said:
                f -= 0.5
        f = float(np.clip(f, -5.0, 5.0))
        trace.append(round(f, 4))
    return trace


def relationship_trace(state: GameState) -> list[float]:
    """The partner's favourability after each agent turn (the rules in the module docstring), -5..5."""
    scene, p = state.scenario.scene, state.scenario.partner
    f, trace, seen = 0.0, [], Counter()
    agreed = refused = pressured = False
    first = True
    for t in state.talk_turns():
        if t.role == "partner":
            if t.invalid is None and t.action.get("type") == "agree":
                agreed = True
            refused = refused or (t.invalid is None and t.action.get("type") == "refuse")
            continue
        acts = set(hear(t.text, scene))
        was_refused, refused = refused, False
        d = 0.0
        if agreed:     # the closing turn
            d += 0.5 * p.warmth if "appreciate" in acts else 0.0
        else:
            d += warm_gain(acts, seen, p.warmth)
            if "ask" in acts:
                seen["ask"] += 1
                if first and not acts & {"greet", "rapport"}:
                    d -= 0.3
                if seen["ask"] > 2:
                    d -= 0.4 * p.pride
                if was_refused and not acts & _GOAL_MINDED:
                    d -= 0.3 * p.pride
            if "offer" in acts:
                d += 0.3
            if "apology" in acts and (was_refused or pressured):
                d += 0.3
        if "pressure" in acts:
            d -= 1.0 * p.pride
            pressured = True
        if "insult" in acts:
            d -= 1.5 * p.pride
        f = float(np.clip(f + d, -5.0, 5.0))
        trace.append(round(f, 4))
        first = False
    return trace


# --------------------------------------------------------------------------------------------------- the task

class SocialScenes(TurnTakingTask):
    """Social scenes as a two-role Task: 'agent' (speaks first, wants agreement) and 'partner'. See the module
    docstring.

    max_exchanges: agent-partner exchanges before the game ends without agreement. mood_sd: spread of the partner's
    private mood. invalid_penalty: reward a role loses per invalid turn. relationship_weight: the agent's outcome
    reward per point of relationship change. scenes: 'train' (TRAIN_SCENES), 'hard' (the 14 SOTOPIA-hard scenes)
    or a list of scene names. partners: PartnerProfiles or names (PARTNERS by default).
    """
    name = "social"
    roles = ROLES
    opening = "Your partner is here. You speak first."

    def __init__(self, max_exchanges: int = 5, mood_sd: float = 0.75, invalid_penalty: float = 0.1,
                 relationship_weight: float = 0.1, scenes: str | Sequence[str] = "train",
                 partners: Sequence[str | PartnerProfile] | None = None):
        if not isinstance(max_exchanges, int) or max_exchanges < 1:
            raise ValueError(f"max_exchanges={max_exchanges!r}: must be an int >= 1")
        for name, value in (("mood_sd", mood_sd), ("invalid_penalty", invalid_penalty),
                            ("relationship_weight", relationship_weight)):
            if value < 0:
                raise ValueError(f"{name}={value!r}: must be >= 0")
        self.max_exchanges, self.mood_sd = max_exchanges, float(mood_sd)
        self.invalid_penalty, self.relationship_weight = float(invalid_penalty), float(relationship_weight)
        self.scenes, self.partners = _pick_scenes(scenes), _pick_partners(partners)

    @property
    def max_turns(self) -> int:
        return 2 * self.max_exchanges

    # -- scenarios and views
    def sample_scenarios(self, n: int, seed: int) -> list[SocialScenario]:
        rng = random.Random(seed)
        return [SocialScenario(rng.choice(self.scenes), rng.choice(self.partners), round(rng.gauss(0, self.mood_sd), 3),
                               i) for i in range(n)]

    def system_prompt(self, scenario: SocialScenario, role: str) -> str:
        s = scenario.scene
        head = f"Social scene: {s.setting}; you are {RELATIONSHIPS[scenario.relationship]}."
        if role == "agent":
            return (f"{head} Your goal: get your partner to {s.ask}. Keep a good relationship with them. "
                    f"At most {self.max_exchanges} exchanges.")
        return (f"{head} You are the partner; {scenario.partner.about}. Your own goal: {s.concern}. "
                f"If asked, grant the request with [AGREE], grant part of it ({s.partial}) with [AGREE PARTLY], "
                f"or turn it down with [REFUSE]. At most {self.max_exchanges} exchanges.")

    # -- a pretrained language model as the partner (dialogrl.agents.counterpart)
    def counterpart_prompt(self, scenario: SocialScenario, role: str) -> str:
        if role != "partner":
            raise ValueError(f"the language-model counterpart plays the partner, not the {role}")
        s = scenario.scene
        return (f"Scene: {s.setting}; you two are {RELATIONSHIPS[scenario.relationship]}. You are the one being "
                f"asked; {scenario.partner.about}. Your own goal: {s.concern}. Reply in one or two short sentences.")

    def counterpart_decision(self, state: GameState, role: str):
        """Each turn the partner is asked whether it grants the request now: fully, partly, or not (the talk goes
        on; it never refuses with a marker, which only counts refusals)."""
        s = state.scenario.scene
        grant = yield Question(f"They would like you to {s.ask} (or at least to {s.partial}). Do you agree? Answer "
                               "yes, partly, or no.", ("yes", "partly", "no"),
                               neutral="They ask you for something. Do you agree? Answer yes, partly, or no.")
        return {"yes": "[AGREE]", "partly": "[AGREE PARTLY]"}.get(grant, "")

    # -- turns
    def take_turn(self, state: GameState, role: str, text: str) -> Turn:
        action, invalid = parse_marker(text)
        if invalid is None and action["type"] != "talk" and role == "agent":
            invalid = f"the agent cannot [{action['type'].upper()}]"
        turn = Turn(role, text, action, invalid)
        state.turns.append(turn)
        closing = "agreement" in state.info
        if invalid is None and action["type"] == "agree" and not closing:
            state.info["agreement"] = action["level"]
        elif invalid is None and action["type"] == "refuse":
            state.info["refusals"] = state.info.get("refusals", 0) + 1
        if closing and role == "agent":
            state.done, state.end_reason = True, "agree"
        elif len(state.talk_turns()) >= self.max_turns:
            state.done, state.end_reason = True, "agree" if "agreement" in state.info else "turn_cap"
        return turn

    # -- outcome
    def outcome(self, state: GameState) -> dict[str, dict]:
        goal = GOALS.get(state.info.get("agreement"), 0.0)
        trace = partner_trace(state)
        rel = trace[-1] if trace else 0.0
        score = {"agent": goal / 10 + self.relationship_weight * rel, "partner": 1.0 - goal / 10}
        out = {}
        for role in self.roles:
            n_invalid = sum(t.invalid is not None for t in state.turns if t.role == role)
            out[role] = {"score": score[role], "reward": score[role] - self.invalid_penalty * n_invalid,
                         "goal": goal, "success": goal == 10.0, "relationship": rel, "n_invalid": n_invalid}
        return out

    def max_reward(self, role: str) -> float:
        """The agent: its full goal and the best relationship (1 + relationship_weight x 5); the partner: 1."""
        return 1.0 + self.relationship_weight * 5.0 if role == "agent" else 1.0

    def metrics(self, states: Sequence[GameState]) -> dict:
        """Means and rates over finished games (goal_rate: the share of full agreements)."""
        outs = [self.outcome(s) for s in states]
        turns = [t for s in states for t in s.turns]

        def mean(values):
            return float(np.mean(values)) if len(values) else float("nan")
        return {
            "n_games": len(states),
            "goal": mean([o["agent"]["goal"] for o in outs]),
            "goal_rate": mean([o["agent"]["success"] for o in outs]),
            "agree_rate": mean([o["agent"]["goal"] > 0 for o in outs]),
            "relationship": mean([o["agent"]["relationship"] for o in outs]),
            "reward_agent": mean([o["agent"]["reward"] for o in outs]),
            "refuse_rate": mean([s.info.get("refusals", 0) for s in states]),
            "turn_cap_rate": mean([s.end_reason == "turn_cap" for s in states]),
            "invalid_rate": sum(t.invalid is not None for t in turns) / max(len(turns), 1),
            "turns": mean([len(s.talk_turns()) for s in states]),
        }
