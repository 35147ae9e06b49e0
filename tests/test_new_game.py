"""Adding a game is adding its folder: a toy game written into a temporary folder on `dialogrl.envs`' package path,
and nothing else changed, is registered (TASKS, make_task), found by the registry of embedded models, fuzzed in
every role by the parser fuzz test's own function, and its embedded model builds and plays it."""
from __future__ import annotations

import contextlib
import sys

import pytest

from dialogrl import envs, tiny

TOY = {
    "__init__.py": '''
"""Guess: the asker guesses the teller's secret number (1, 2 or 3) with [GUESS n]."""
from dialogrl.envs.toyguess.personas import ScriptedAgent, population
from dialogrl.envs.toyguess.task import Guess

TASK = Guess
TINY_MODELS = {
    "tiny-toyguess": dict(
        corpus="dialogrl.envs.toyguess.corpus:guess_corpus",
        corpus_kwargs={"n_dialogues": 60, "seed": 0},
        config={"vocab_size": 300, "hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                "intermediate_size": 64, "max_length": 128, "epochs": 1.0},
        description="the toy game of tests/test_new_game.py"),
}
''',
    "task.py": '''
import random
import re
from dataclasses import dataclass

from dialogrl.game import GameState, Turn, TurnTakingTask, one_marker, shorten


@dataclass(frozen=True)
class GuessScenario:
    secret: int
    id: int = 0


class Guess(TurnTakingTask):
    name = "toyguess"
    roles = ("asker", "teller")
    opening = "The teller is here. You speak first."

    def __init__(self, max_turns: int = 4):
        self.max_turns = max_turns

    def sample_scenarios(self, n, seed):
        rng = random.Random(seed)
        return [GuessScenario(rng.randint(1, 3), id=i) for i in range(n)]

    def system_prompt(self, scenario, role):
        if role == "teller":
            return f"You know the secret: {scenario.secret}."
        return "Find the secret number (1, 2 or 3); say [GUESS n] once you know it."

    def take_turn(self, state: GameState, role: str, text: str) -> Turn:
        body, invalid = one_marker(text)
        action = {"type": "talk"}
        if body is not None and invalid is None:
            m = re.fullmatch(r"GUESS ([1-3])", body, re.ASCII)
            if m is None or role != "asker":
                invalid = f"not a guess of the asker: [{shorten(body)}]"
            else:
                action = {"type": "guess", "n": int(m[1])}
        turn = Turn(role, text, action, invalid)
        state.turns.append(turn)
        if action["type"] == "guess":
            state.done, state.end_reason = True, "guess"
        elif len(state.talk_turns()) >= self.max_turns:
            state.done, state.end_reason = True, "turn_cap"
        return turn

    def outcome(self, state):
        right = float(state.end_reason == "guess" and state.turns[-1].action["n"] == state.scenario.secret)
        return {r: {"reward": right, "score": right} for r in self.roles}

    def metrics(self, states):
        return {"success": sum(self.outcome(s)["asker"]["score"] for s in states) / max(len(states), 1),
                "invalid_rate": sum(t.invalid is not None for s in states for t in s.turns)
                / max(sum(len(s.turns) for s in states), 1)}
''',
    "personas.py": '''
import random

from dialogrl.game import Agent, game_key, scripted_population

PERSONAS = {"asker": {"direct": "direct"}, "teller": {"honest": "honest", "coy": "coy"}}  # coy: by name only


class ScriptedAgent(Agent):
    def __init__(self, persona: str = "honest", seed: int = 0):
        self.name, self.seed = persona, seed

    def act(self, requests):
        out = []
        for r in requests:
            rng = random.Random(f"{self.seed}/{game_key(r.state, 'counterpart')}/{r.role}/{len(r.state.turns)}")
            if r.role == "teller":
                out.append(f"it is {r.state.scenario.secret}." if self.name == "honest" else "guess!")
            else:
                told = [t.text for t in r.state.turns if t.role == "teller" and t.text.startswith("it is")]
                n = told[-1][6] if told else rng.choice("123")
                out.append(f"[GUESS {n}]" if told else "what is it?")
        return out


def population(role, names=None, weights=None, seed=0):
    return scripted_population(role, PERSONAS, {"asker": ["direct"], "teller": ["honest"]},
                               lambda p, s: ScriptedAgent(p, seed=s), names, weights, seed)
''',
    "corpus.py": '''
from dialogrl.game import conversations
from dialogrl.envs.toyguess.personas import population
from dialogrl.envs.toyguess.task import Guess
from dialogrl.rollout import play


def guess_corpus(n_dialogues=60, seed=0, views="one"):
    task = Guess()
    agents = {r: population(r, seed=seed) for r in task.roles}
    return conversations(task, [e.state for e in play(task, agents, task.sample_scenarios(n_dialogues, seed))],
                         views)
''',
}


@pytest.fixture
def toy_game(tmp_path, monkeypatch):
    folder = tmp_path / "more_games" / "toyguess"
    folder.mkdir(parents=True)
    for name, text in TOY.items():
        (folder / name).write_text(text.lstrip())
    monkeypatch.setattr(envs, "__path__", [*envs.__path__, str(folder.parent)])
    monkeypatch.setattr(envs, "Guess", None, raising=False)   # discover() sets it: undone after the test
    with registries_restored():
        yield envs.discover()
    for name in [m for m in sys.modules if m.startswith("dialogrl.envs.toyguess")]:
        del sys.modules[name]


@contextlib.contextmanager
def registries_restored():
    """The game registries as they were, afterwards (emptied and refilled in place: other modules hold them)."""
    saved = dict(envs.GAMES), dict(envs.TASKS)
    try:
        yield
    finally:
        for registry, entries in zip((envs.GAMES, envs.TASKS), saved):
            registry.clear()
            registry.update(entries)


def test_a_new_folder_is_a_registered_fuzzed_buildable_game(toy_game, tmp_path, monkeypatch):
    from dialogrl.models import load_model
    from dialogrl.rollout import play
    from test_parser_fuzz import fuzz_in_every_role

    assert "toyguess" in envs.TASKS and envs.make_task("toyguess").roles == ("asker", "teller")
    game = envs.game_of("toyguess")
    assert game is toy_game["toyguess"] and envs.Guess is game.TASK
    scripted = play(game.TASK(), {r: game.population(r) for r in game.TASK.roles}, game.TASK().sample_scenarios(20, 0))
    assert game.TASK().metrics([e.state for e in scripted])["success"] == 1.0  # the honest teller, the direct asker

    assert fuzz_in_every_role(game.TASK(), game, n_games=30) <= {"guess", "turn_cap"}

    recipes = tiny.collect_recipes()
    assert recipes["tiny-toyguess"].config.hidden_size == 32 and "tiny-dond" in recipes
    monkeypatch.setattr(tiny, "TINY_MODELS", recipes)
    path = tiny.build_tiny_model("tiny-toyguess", out_dir=tmp_path / "model")
    model, tok = load_model(str(path), device="cpu")
    from dialogrl.agents import LMAgent

    played = play(game.TASK(), {"asker": LMAgent(model, tok, max_new_tokens=8), "teller": game.ScriptedAgent()},
                  game.TASK().sample_scenarios(4, seed=1))
    assert all(e.state.done for e in played)


def test_a_game_package_without_the_shared_names_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "broken_games" / "toybroken"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("from dialogrl.game import Task\n\n\nclass Broken(Task):\n"
                                        "    name = 'toybroken'\n\n\nTASK = Broken\n")
    monkeypatch.setattr(envs, "__path__", [*envs.__path__, str(folder.parent)])
    try:
        with registries_restored(), pytest.raises(TypeError, match="toybroken does not export ScriptedAgent, "
                                                                  "population, TINY_MODELS"):
            envs.discover()
    finally:
        sys.modules.pop("dialogrl.envs.toybroken", None)
    assert "toybroken" not in envs.TASKS
