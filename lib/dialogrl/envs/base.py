"""The Task protocol: what every dialogue game gives the rollout engine, the agents and the trainers.

A task
  - samples scenarios from a seeded generator (`sample_scenarios(n, seed)`): the private information of every role;
  - starts a game state for a scenario (`reset`) and says whose turn it is (`current_role`);
  - gives each role its private view as chat messages (`view`): a system prompt with its private information, then the
    shared history from its own point of view (its own turns as `assistant`, the partner's as `user`);
  - parses an utterance into game actions and applies the rules (`step`), marking rule breaks on the Turn and
    ending the game when the rules say so (`state.done`);
  - scores the outcome for every role (`outcome`) and aggregates metrics over many games (`metrics`);
  - optionally, describes a state by numeric features for a turn-level reward model (`turn_features`).

A malformed utterance never raises: the task records why it was invalid on the Turn and applies its rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence


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

    def talk_turns(self) -> list[Turn]:
        return [t for t in self.turns if t.phase == "talk"]


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

    def step(self, state: GameState, text: str) -> Turn:
        """The current role says `text`: parse, apply the rules, append the Turn, maybe end the game."""
        raise NotImplementedError

    def outcome(self, state: GameState) -> dict[str, dict]:
        """Per role: {'reward': float, 'score': float, ...} for a finished game."""
        raise NotImplementedError

    def metrics(self, states: Sequence[GameState]) -> dict:
        """Aggregate metrics over finished games (rates, means)."""
        raise NotImplementedError

    def turn_features(self, state: GameState, role: str) -> dict[str, float]:
        """Numeric features of `state`, read just after a turn, for predicting `role`'s final outcome reward.

        The input of the turn-level reward model of Static Context RL (dialogrl.rl.static). Every call must return
        the same keys. It is the environment's reward model, so it may read privileged information (the partner's
        private values). Optional: only tasks trained with Static Context RL implement it.
        """
        raise NotImplementedError(f"task {self.name!r} ({type(self).__name__}) has no turn_features(state, role); "
                                  "implement it to fit a turn-level reward model (see dialogrl.rl.static)")

    def other(self, role: str) -> str:
        """The partner of `role` in a two-role task."""
        a, b = self.roles
        return b if role == a else a


def history_messages(state: GameState, role: str, opening: str | None) -> list[dict]:
    """The talk so far from `role`'s point of view: its own turns as assistant, the partner's as user.

    If `role` speaks first, `opening` (a short user message) stands before its first turn, so every chat template
    sees a user message before the first assistant one.
    """
    msgs = []
    turns = state.talk_turns()
    if opening is not None and (not turns or turns[0].role == role):
        msgs.append({"role": "user", "content": opening})
    for t in turns:
        msgs.append({"role": "assistant" if t.role == role else "user", "content": t.text})
    return msgs


def shorten(text: str, limit: int = 60) -> str:
    """`text`, cut to `limit` characters: invalid reasons quote the input, which may be 10^5 characters long."""
    return text if len(text) <= limit else text[:limit - 3] + "..."
