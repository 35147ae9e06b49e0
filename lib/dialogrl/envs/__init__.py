"""Dialogue games, one package per game (task.py, personas.py, corpus.py; see envs/README.md).

`make_task(name, **kwargs)` builds a game by its name in TASKS.
"""
from __future__ import annotations

from dialogrl.envs.base import GameState, Task, Turn
from dialogrl.envs.dealnodeal import DealOrNoDeal
from dialogrl.envs.persuasion import PersuasionForGood
from dialogrl.envs.social import SocialScenes
from dialogrl.envs.telesales import VehicleTeleSales

TASKS: dict[str, type[Task]] = {
    DealOrNoDeal.name: DealOrNoDeal,
    VehicleTeleSales.name: VehicleTeleSales,
    PersuasionForGood.name: PersuasionForGood,
    SocialScenes.name: SocialScenes,
}


def task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def make_task(name: str, **kwargs) -> Task:
    return task_class(name)(**kwargs)


__all__ = ["GameState", "Task", "Turn", "DealOrNoDeal", "VehicleTeleSales", "PersuasionForGood", "SocialScenes",
           "TASKS", "make_task", "task_class"]
