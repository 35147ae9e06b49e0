"""The contracts between games, agents and the rollout engine: the Task protocol and the Agent interface.

A task
  - samples scenarios from a seeded generator (`sample_scenarios(n, seed)`): the private information of every role;
  - starts a game state for a scenario (`reset`) and says whose turn it is (`current_role`);
  - gives each role its private view as chat messages (`view`): a system prompt with its private information, then the
    shared history from its own point of view (its own turns as `assistant`, the other role's as `user`);
  - parses an utterance into game actions and applies the rules (`step`), marking rule breaks on the Turn and
    ending the game when the rules say so (`state.done`);
  - scores the outcome for every role (`outcome`) and aggregates metrics over many games (`metrics`);
  - optionally, describes a state by numeric features for a turn-level reward model (`turn_features`).

A malformed utterance never raises: the task records why it was invalid on the Turn and applies its rules.

An agent writes the next utterance for a batch of games whose turn falls to it:

    agent.act(requests) -> list[str | Utterance]     one per ActRequest (a game, the role to speak, its chat view)

A `StreamingAgent` (a language model) instead takes turns whenever games need one (`submit`), advances all of them
one decoding step at a time (`advance`) and hands back the turns that ended, so the rollout engine can batch turns
continuously. `Population` plays one of several agents per game.

What every game shares: `TurnTakingTask` (two roles in turn: the view, whose turn, the start of `step`, a role's private
`note` on the other role's turns), `one_marker` (the framing rules of markers), `has_cue` (the cue lexicons' word
matcher), `PersonaAgent` (the shape of each game's `ScriptedAgent`), `scripted_population` (the body of each game's
`population`) and `Probe` (what each game's `probe(role)` gives the responsiveness check).
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dialogrl.seeds import stream_seed


@dataclass
class Turn:
    """One utterance: who said it, what, the parsed game action, and why it broke a rule (None if it did not)."""
    role: str
    text: str
    action: dict | None = None   # e.g. {"type": "propose", "split": (1, 0, 2)}
    invalid: str | None = None   # e.g. "accept without a standing offer"
    phase: str = "talk"          # "talk", or a task's later phase such as "select"
    agent: str | None = None     # name of the agent that spoke
    # language-model turns keep exactly what was sampled (token in, token out): the prompt the role saw (its chat
    # view through the chat template), the sampled completion ids (ending in the stop token when it stopped) and
    # each sampled token's log-prob under the sampling distribution
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None


@dataclass
class GameState:
    """A game in progress. `info` is the task's own bookkeeping (standing offer, selections, ...)."""
    scenario: Any
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    end_reason: str | None = None
    info: dict = field(default_factory=dict)
    seed: int | None = None      # the game's own seed (rollout.play(..., seeds=...)): its agents' draws key on it

    def talk_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.phase == "talk"]


def game_key(state: GameState, stream: str, scenario_key=None):
    """What an agent keys its private draws in this game on (dialogrl.seeds): with a game seed, stream_seed(stream,
    seed), so every game draws apart, even several games of one scenario; without one, the scenario (`scenario_key`,
    by default its id), as before games had seeds."""
    if state.seed is not None:
        return stream_seed(stream, state.seed)
    return scenario_key if scenario_key is not None else getattr(state.scenario, "id", 0)


class Task:
    """Base class of the dialogue tasks. Subclasses set `name` and `roles` and implement the methods below."""
    name: str = "task"
    roles: tuple[str, ...] = ()

    def sample_scenarios(self, n: int, seed: int) -> list:
        """n scenarios from a generator seeded by `seed` (the same seed gives the same scenarios)."""
        raise NotImplementedError

    def reset(self, scenario) -> GameState:
        return GameState(scenario=scenario)

    def current_role(self, state: GameState) -> str:
        raise NotImplementedError

    def view(self, state: GameState, role: str) -> list[dict]:
        raise NotImplementedError

    def counterpart_view(self, state: GameState, role: str) -> list[dict]:
        """The view a pretrained language model plays `role` from (agents.counterpart): `view` without the aids a
        game gives its embedded models (TurnTakingTask: the private notes), so its decisions come from the talk."""
        return self.view(state, role)

    def step(self, state: GameState, text: str) -> Turn:
        """The current role says `text`: parse, apply the rules, append the Turn, maybe end the game."""
        raise NotImplementedError

    def outcome(self, state: GameState) -> dict[str, dict]:
        """Per role: {'reward': float, 'score': float, ...} for a finished game."""
        raise NotImplementedError

    def metrics(self, states: Sequence[GameState]) -> dict:
        """Aggregate metrics over finished games (rates, means)."""
        raise NotImplementedError

    def max_reward(self, role: str) -> float:
        """The largest outcome `reward` a game can give `role`: the ceiling of a method's manipulation check (the
        room the base leaves is this minus the base's mean reward; `dialogrl.claims`)."""
        raise NotImplementedError(f"task {self.name!r} ({type(self).__name__}) has no max_reward(role)")

    def turn_features(self, state: GameState, role: str) -> dict[str, float]:
        """Numeric features of `state`, read just after a turn, for predicting `role`'s final outcome reward.

        The input of the turn-level reward model of Static Context RL (dialogrl.rl.static). Every call must return
        the same keys. It is the environment's reward model, so it may read privileged information (the other
        role's private values). Optional: only tasks trained with Static Context RL implement it.
        """
        raise NotImplementedError(f"task {self.name!r} ({type(self).__name__}) has no turn_features(state, role); "
                                  "implement it to fit a turn-level reward model (see dialogrl.rl.static)")

    def selection_candidates(self, state: GameState) -> list[str]:
        """Every valid text of a selection phase (state.info["phase"] == "select"), for agents that choose among
        them by likelihood. Optional: only tasks with such a phase implement it."""
        raise NotImplementedError(f"task {self.name!r} ({type(self).__name__}) has no selection phase")

    def counterpart_prompt(self, scenario, role: str) -> str:
        """The system prompt of a pretrained language model playing `role` as a counterpart (agents.counterpart):
        its character and situation in plain words, no marker instructions (the game's decisions are asked apart,
        `counterpart_decision`). Optional: tasks with a language-model counterpart implement it."""
        raise NotImplementedError(f"task {self.name!r} ({type(self).__name__}) has no language-model counterpart")

    def counterpart_decision(self, state: GameState, role: str):
        """The decision the rules allow `role` now, as a generator: it yields `Question`s, receives each chosen
        answer, and returns the marker to append to the turn ('' for none). A language-model counterpart answers
        by calibrated likelihood (dialogrl.agents.counterpart). Optional, with `counterpart_prompt`."""
        raise NotImplementedError(f"task {self.name!r} ({type(self).__name__}) has no language-model counterpart")

    def other(self, role: str) -> str:
        """The other role of a two-role task: the one `role` plays against."""
        a, b = self.roles
        return b if role == a else a


class TurnTakingTask(Task):
    """A game of two roles that speak in turn, `roles[0]` first. A role's view is its system prompt (its private
    information: `system_prompt(scenario, role)`) and the talk so far, which `opening` begins for the first speaker;
    the other role's turn carries what the role privately makes of it (`note`), where the game gives it one.
    `step` ends a finished game with an error and hands the turn to `take_turn(state, role, text)`, the game's rules."""
    opening: str = "You speak first."

    def system_prompt(self, scenario, role: str) -> str:
        raise NotImplementedError

    def note(self, state: GameState, upto: int, role: str) -> str:
        """What `role` privately makes of the other role's turn `state.turns[upto]`, from its own private information
        and the talk up to that turn: a short line appended to that turn in `role`'s view ('' for none, the
        default). A game uses it to make a decision legible that a small model cannot work out (the TeleSales
        buyer: whether an offer meets its needs and budget); the other role never sees it."""
        return ""

    def take_turn(self, state: GameState, role: str, text: str) -> Turn:
        """`role` says `text`: parse it, apply the rules, append the Turn, maybe end the game; return the Turn."""
        raise NotImplementedError

    def current_role(self, state: GameState) -> str:
        return self.roles[len(state.talk_turns()) % 2]

    def view(self, state: GameState, role: str) -> list[dict]:
        msgs = [{"role": "system", "content": self.system_prompt(state.scenario, role)}]
        return msgs + history_messages(state, role, opening=self.opening,
                                       note=lambda i: self.note(state, i, role))

    def counterpart_view(self, state: GameState, role: str) -> list[dict]:
        msgs = [{"role": "system", "content": self.system_prompt(state.scenario, role)}]
        return msgs + history_messages(state, role, opening=self.opening)

    def step(self, state: GameState, text: str) -> Turn:
        if state.done:
            raise RuntimeError("the game is over")
        return self.take_turn(state, self.current_role(state), text)


def history_messages(state: GameState, role: str, opening: str | None,
                     note: Callable[[int], str] | None = None) -> list[dict]:
    """The talk so far from `role`'s point of view: its own turns as assistant, the other role's as user, each of
    those followed on a new line by `note(i)` where that is not empty (i: the turn's index in `state.turns`).

    If `role` speaks first, `opening` (a short user message) stands before its first turn, so every chat template
    sees a user message before the first assistant one.
    """
    msgs = []
    turns = state.talk_turns()
    if opening is not None and (not turns or turns[0].role == role):
        msgs.append({"role": "user", "content": opening})
    for i, t in enumerate(state.turns):
        if t.phase != "talk":
            continue
        mine = t.role == role
        extra = "" if mine or note is None else note(i)
        msgs.append({"role": "assistant" if mine else "user", "content": t.text + (f"\n{extra}" if extra else "")})
    return msgs


MARKER = re.compile(r"\[([^\[\]]*)\]")  # a bracketed marker: [accept], [OFFER 2 $31500], ...


def one_marker(text: str) -> tuple[str | None, str | None]:
    """The rules every game's markers share: (the body of the turn's one marker, or None without one; why the turn
    breaks them, or None). A turn carries at most one marker, with balanced brackets, in ASCII. Never raises."""
    found = MARKER.findall(text)
    rest = MARKER.sub("", text)
    if "[" in rest or "]" in rest:  # a marker begun and never closed (or closed and never begun)
        return None, "malformed marker (unbalanced brackets)"
    if not found:
        return None, None
    if len(found) > 1:
        return None, f"{len(found)} markers in one turn"
    if not found[0].isascii():
        return None, f"malformed marker [{shorten(found[0])}] (not ASCII)"
    return found[0], None


def has_cue(low: str, cue: str, before: str = "", whole: bool = True) -> bool:
    """Whether lower-case text `low` says `cue` as words: no letter a-z (nor a character of `before`) right before
    it and, if `whole`, none right after it. The games' cue lexicons read every turn with it: str.find runs about 50
    times faster than a regex alternation with lookbehinds, which tries every cue at every position of a long turn."""
    i = low.find(cue)
    while i >= 0:
        j = i + len(cue)
        if (i == 0 or not ("a" <= low[i - 1] <= "z" or low[i - 1] in before)) and \
                (not whole or j == len(low) or not "a" <= low[j] <= "z"):
            return True
        i = low.find(cue, i + 1)
    return False


def check_views(views: str) -> None:
    if views not in ("both", "one"):
        raise ValueError(f"views={views!r}: choose 'both' or 'one'")


def conversations(task: Task, states: Sequence[GameState], views: str = "one") -> list[list[dict]]:
    """Finished games as chat conversations for a warm-start corpus: views="both" gives each game from each role's
    view (its own turns as assistant); "one" one role's view per game, the roles in turn."""
    check_views(views)
    out = []
    for k, state in enumerate(states):
        roles = task.roles if views == "both" else (task.roles[k % len(task.roles)],)
        out += [task.view(state, r) for r in roles]
    return out


# A turn's text is cut to this many characters before the game's rules parse it (`rollout.play`; state.info["cut_turns"]
# counts the cuts): far above any model turn here (600 tokens, a few thousand characters), and it bounds what a
# scripted or remote agent's runaway text costs the parsers (a million characters took a game's parser 3.9 s); a
# game's public listener reads no more of a text than this either.
MAX_TURN_CHARS = 20_000


def shorten(text: str, limit: int = 60) -> str:
    """`text`, cut to `limit` characters: invalid reasons quote the input, which may be 10^5 characters long."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass(frozen=True)
class Question:
    """A decision put to a language-model counterpart after the conversation (`Task.counterpart_decision`).

    text: the question, with the game's specifics ("They propose you get 1 book and 2 balls. Do you accept?").
    answers: the allowed answers, each starting with a different word ("yes", "no"); the first word is scored.
    neutral: the question without the specifics, asked after a content-free conversation to calibrate the model's
        prior over the answers (None: `text` itself).
    within: calibrate within the conversation instead: against the neutral question asked after the same talk, so
        that only the question's specifics (an offer's terms) move the answer, not the talk.
    """
    text: str
    answers: tuple[str, ...]
    neutral: str | None = None
    within: bool = False


# ----------------------------------------------------------------------------------------------------- agents

@dataclass
class ActRequest:
    """A game waiting for `role` to speak. `messages` is the role's chat view (what an LM sees)."""
    task: Task
    state: GameState
    role: str
    messages: list[dict]


@dataclass
class Utterance:
    """What a language-model agent said, with the exact tokens (see Turn for the fields' meaning)."""
    text: str
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None


class Agent:
    """Writes the next utterance for each game whose turn falls to it."""
    name: str = "agent"

    def act(self, requests: Sequence[ActRequest]) -> list[str | Utterance]:
        """One utterance per request, in order (a plain string, or an Utterance with its tokens)."""
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Forget per-game state kept between turns (the rollout engine calls it when its games have ended)."""


class StreamingAgent(Agent):
    """An agent whose turns run as a continuous batch (the rollout engine drives it through these three methods)."""

    def submit(self, requests: Sequence[ActRequest]) -> None:
        """Queue one turn per request; it joins the running batch."""
        raise NotImplementedError

    def busy(self) -> bool:
        """Whether any submitted turn has not been handed back yet."""
        raise NotImplementedError

    def advance(self) -> list[tuple[ActRequest, Utterance]]:
        """One step of the running batch; the (request, utterance) pairs whose turn ended."""
        raise NotImplementedError

    def act(self, requests: Sequence[ActRequest]) -> list:
        """One batch outside the rollout engine: submit, advance until every turn ended; the texts in order."""
        self.submit(requests)
        said = {}
        while self.busy():
            for r, u in self.advance():
                said[id(r)] = getattr(u, "text", u)
        return [said[id(r)] for r in requests]


@dataclass
class Population(StreamingAgent):
    """A weighted set of agents; each game draws one member (by the seed and the game: `game_key`) for all its turns.
    It streams: a turn of a language-model member joins that member's running batch, a scripted member answers at
    once, so no game waits for another member's turn (the rollout engine drives it as it drives an LMAgent)."""
    members: dict[str, Agent]
    weights: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    name: str = "population"
    _ready: list = field(default_factory=list, init=False, repr=False, compare=False)

    def pick(self, state: GameState, role: str) -> str:
        """The member that plays `role` in this game: drawn once per game, reproducibly from (seed, game, role)."""
        picks = state.info.setdefault("population", {})
        if role not in picks:
            names = sorted(self.members)
            rng = random.Random(f"{self.seed}/{game_key(state, 'counterpart')}/{role}")
            picks[role] = rng.choices(names, weights=[self.weights.get(n, 1.0) for n in names])[0]
        return picks[role]

    def clear_cache(self) -> None:
        for member in self.members.values():
            member.clear_cache()

    def _streaming(self) -> list[StreamingAgent]:
        return list({id(m): m for m in self.members.values() if isinstance(m, StreamingAgent)}.values())

    def submit(self, requests: Sequence[ActRequest]) -> None:
        """Each request to its game's member: into a streaming member's batch, or answered now by a plain one."""
        groups: dict[str, list[ActRequest]] = {}
        for r in requests:
            groups.setdefault(self.pick(r.state, r.role), []).append(r)
        for name, group in groups.items():
            member = self.members[name]
            if isinstance(member, StreamingAgent):
                member.submit(group)
            else:
                self._ready += list(zip(group, member.act(group)))

    def busy(self) -> bool:
        return bool(self._ready) or any(m.busy() for m in self._streaming())

    def advance(self) -> list[tuple[ActRequest, Any]]:
        """One step of every busy member's batch; the turns that ended, the plain members' answers first."""
        done, self._ready = self._ready, []
        for member in self._streaming():
            if member.busy():
                done += member.advance()
        return done

    def act(self, requests: Sequence[ActRequest]) -> list:
        out: list = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(self.pick(r.state, r.role), []).append(i)
        for name, idx in groups.items():
            for i, text in zip(idx, self.members[name].act([requests[i] for i in idx])):
                out[i] = text
        return out


class PersonaAgent(Agent):
    """The shape of the games' ScriptedAgent: it plays one persona in every game it is given, `persona` a persona
    object, its name in one of the class's `personas` dicts, or None (each game's scenario names the persona: the
    agent is then called `scenario_name`). `utter(task, state, role)` writes one turn; `act` asks it for each
    request."""
    personas: dict[str, dict] = {}     # what the names mean: {"sellers": {name: persona}, "buyers": {...}}
    scenario_name = "scenario-persona"

    def __init__(self, persona: Any = None, seed: int = 0):
        if isinstance(persona, str):
            found = [group[persona] for group in self.personas.values() if persona in group]
            if not found:
                known = "; ".join(f"{kind}: {', '.join(group)}" for kind, group in self.personas.items())
                raise ValueError(f"unknown persona {persona!r}; {known}")
            persona = found[0]
        self.persona, self.seed = persona, seed
        self.name = persona.name if persona is not None else self.scenario_name

    def act(self, requests: Sequence[ActRequest]) -> list[str]:
        return [self.utter(r.task, r.state, r.role) for r in requests]

    def utter(self, task: Task, state: GameState, role: str) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Probe:
    """Two scripted ways of playing against a counterpart in `role` that it should decide apart, for the
    responsiveness check (`dialogrl.room.responsiveness`): `good` and `bad` play the other role (a TeleSales seller
    offering a vehicle that meets the buyer's needs within its budget, or one that does not; a persuader who tells
    stories and gives facts, or a rude one). `decision` is the key of the counterpart's outcome that holds the
    decision it is scored on (a bool: "sale", "success", "agreed"); `kinds` names the two ways for tables;
    `applies(scenario)` says whether both can be played in a scenario (the check draws scenarios where they can).
    Each game that has one exports `probe(role)`."""
    role: str
    good: Agent
    bad: Agent
    decision: str
    kinds: tuple[str, str] = ("good", "bad")
    applies: Callable[[Any], bool] = field(default=lambda scenario: True)


def scripted_population(role: str, personas: dict[str, dict], defaults: dict[str, Sequence[str]],
                        make: Callable[[Any, int], Agent], names: Sequence[str] | None = None,
                        weights: dict[str, float] | None = None, seed: int = 0) -> Population:
    """The body of every game's `population(role, names=None, weights=None, seed=0)`: a Population of scripted
    agents for `role`, one `make(persona, seed * 1000 + i)` for the i-th of `names` (by default `defaults[role]`),
    each name looked up in `personas[role]` (the personas that role may play, held-out ones included)."""
    if role not in personas:
        raise ValueError(f"role={role!r}: choose {' or '.join(repr(r) for r in personas)}")
    known = personas[role]
    names = list(names or defaults[role])
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {role} persona(s) {unknown}; {role}s: {', '.join(known)}")
    return Population({n: make(known[n], seed * 1000 + i) for i, n in enumerate(names)}, dict(weights or {}),
                      seed=seed)
