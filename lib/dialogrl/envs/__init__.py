"""Dialogue tasks. `make_task(name, **kwargs)` builds one by name."""
from __future__ import annotations

from dialogrl.envs.base import GameState, Task, Turn
from dialogrl.envs.dealnodeal import DealOrNoDeal

TASKS = {"dealnodeal": DealOrNoDeal}


def make_task(name: str, **kwargs) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name](**kwargs)


__all__ = ["GameState", "Task", "Turn", "DealOrNoDeal", "TASKS", "make_task"]
