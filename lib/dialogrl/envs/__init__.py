"""Dialogue games, one package per game (see envs/README.md).

A game is a package under `envs/` that exports, under these names:
    TASK            its Task class (registered by `TASK.name`: `make_task(name, **kwargs)` builds it)
    ScriptedAgent   its rule-based counterpart: ScriptedAgent(persona, seed=0)
    population      population(role, names=None, weights=None, seed=0): a Population of its scripted personas
    TINY_MODELS     its embedded models' recipes (dialogrl.tiny collects them), plain data
`discover()` imports every such package and registers it in GAMES (the package) and TASKS (the class); it runs
when this module is imported, so adding a game is adding its folder. Each game's Task class is importable from
here by its class name too (`from dialogrl.envs import DealOrNoDeal`).
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from dialogrl.game import GameState, Task, Turn

GAME_EXPORTS = ("TASK", "ScriptedAgent", "population", "TINY_MODELS")
GAMES: dict[str, ModuleType] = {}
TASKS: dict[str, type[Task]] = {}


def discover() -> dict[str, ModuleType]:
    """Import every package under `envs/` (each folder of `__path__`, in name order) and register those that export
    TASK; a package that exports TASK without the other names of GAME_EXPORTS raises, naming what it lacks."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if not hasattr(module, "TASK"):
            continue
        missing = [n for n in GAME_EXPORTS if not hasattr(module, n)]
        if missing:
            raise TypeError(f"game package {module.__name__} does not export {', '.join(missing)} "
                            "(a game exports TASK, ScriptedAgent, population and TINY_MODELS: envs/README.md)")
        name = module.TASK.name
        if name in GAMES and GAMES[name] is not module:
            raise ValueError(f"two game packages register the task name {name!r}: {GAMES[name].__name__} and "
                             f"{module.__name__}")
        GAMES[name], TASKS[name] = module, module.TASK
        globals()[module.TASK.__name__] = module.TASK
    return GAMES


def task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def make_task(name: str, **kwargs) -> Task:
    return task_class(name)(**kwargs)


def game_of(task: Task | str) -> ModuleType:
    """The package of a game, by its Task (an instance or class) or its registered name."""
    name = task if isinstance(task, str) else task.name
    task_class(name)  # an unknown name raises, naming the tasks
    return GAMES[name]


discover()
__all__ = ["GameState", "Task", "Turn", "GAMES", "TASKS", "discover", "game_of", "make_task", "task_class",
           *(t.__name__ for t in TASKS.values())]
