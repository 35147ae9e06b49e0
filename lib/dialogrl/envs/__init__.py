"""Dialogue tasks. `make_task(name, **kwargs)` builds one by name."""
from __future__ import annotations

import importlib

from dialogrl.envs.base import GameState, Task, Turn
from dialogrl.envs.dealnodeal import DealOrNoDeal

# A task class, or "module:Class" for one imported on first use: telesales holds its scripted agents and so imports
# dialogrl.agents, which imports this package (an eager import here would be circular when agents is imported first).
TASKS: dict[str, type[Task] | str] = {
    "dealnodeal": DealOrNoDeal,
    "telesales": "dialogrl.envs.telesales:VehicleTeleSales",
}


def task_class(name: str) -> type[Task]:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; tasks: {', '.join(sorted(TASKS))}")
    cls = TASKS[name]
    if isinstance(cls, str):
        module, attr = cls.split(":")
        cls = getattr(importlib.import_module(module), attr)
    return cls


def make_task(name: str, **kwargs) -> Task:
    return task_class(name)(**kwargs)


def __getattr__(name: str):
    if name == "VehicleTeleSales":  # lazily, see TASKS
        return task_class("telesales")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GameState", "Task", "Turn", "DealOrNoDeal", "VehicleTeleSales", "TASKS", "make_task", "task_class"]
