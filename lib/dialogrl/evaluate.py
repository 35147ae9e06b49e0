"""Evaluation of frozen policies against counterpart panels: cross-play games, one row each (`game_rows`), the
held-out panel as a trainer's eval_fn (`panel_eval`), and sample transcripts.

    games = cross_play(task, {"base": base_agent, "ibrl": ibrl_agent}, panel, scenarios, roles=("A", "B"))

Every cell plays the same scenarios (paired comparisons), drawn apart from training (`stream_seed("eval-scenarios",
...)`), and every game draws from its own seed, stream_seed("eval-games", seed, scenario id, role, counterpart)
(dialogrl.seeds): the LM's tokens and the counterpart's private draws. A game therefore never depends on batch size,
order or what else is evaluated (the first 50 games of an 80-game evaluation are a 50-game evaluation), evaluating
one policy twice gives identical rows, and policies are compared on common random numbers (the policy's name is
not part of the key).

The statistics of the games (intervals over training seeds, paired differences, power) are in `dialogrl.stats`.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dialogrl.game import Agent, Task
from dialogrl.rollout import Episode, play_cells
from dialogrl.run import append_jsonl
from dialogrl.seeds import eval_seeds

GAME_METRICS = ("score", "counterpart_score", "joint", "agreed", "pareto", "invalid_rate", "reward")


def game_rows(task: Task, episodes: Sequence[Episode], role: str, **labels) -> list[dict]:
    """One row per game, from the point of view of `role`."""
    rows = []
    for ep in episodes:
        me, other = ep.outcome[role], ep.outcome[task.other(role)]
        mine = [t for t in ep.state.turns if t.role == role]
        rows.append({**labels, "role": role, "scenario": getattr(ep.scenario, "id", None),
                     "score": me["score"], "counterpart_score": other["score"], "joint": me["score"] + other["score"],
                     "agreed": float(me.get("agreed", False)), "pareto": float(me.get("pareto", False)),
                     "invalid_rate": sum(t.invalid is not None for t in mine) / max(len(mine), 1),
                     "reward": me["reward"], "turns": len(ep.state.talk_turns())})
        # the task's own flags and numbers (TeleSales: sale, good_sale, feasible, ...), where the row has no such key
        rows[-1].update({k: float(v) for k, v in me.items()
                         if k not in rows[-1] and isinstance(v, (bool, int, float))})
    return rows


def cross_play(task: Task, policies: dict[str, Agent], counterparts: dict[str, Agent],
               scenarios: Sequence | Mapping[str, Sequence],
               roles: Sequence[str] | None = None, seed: int = 0, transcripts: str | Path | None = None,
               n_transcripts: int = 3, return_episodes: bool = False, max_live: int | None = None
               ) -> pd.DataFrame | tuple[pd.DataFrame, dict[tuple[str, str, str], list[Episode]]]:
    """Play every policy against every counterpart, in every role, on the same scenarios.

    Returns one row per game (policy, counterpart, role, scenario, and GAME_METRICS from the policy's role); with
    return_episodes, also the games themselves: {(policy, counterpart, role): [Episode] in scenario order}.
    seed: the evaluation's seed; game i of a cell plays from stream_seed("eval-games", seed, scenario id, role,
    counterpart name), the same for every policy (common random numbers).
    scenarios: the same for every counterpart, or a mapping {counterpart: its own scenarios} (e.g. scenarios that
    name the counterpart's profile, or fewer for a costly one).
    With `transcripts`, the first `n_transcripts` games of every cell are appended to that JSONL file.
    Every cell plays at once (`rollout.play_cells`: an agent's games in all its cells share one batch); max_live: at
    most this many games at once (`rollout.play`: bounds the KV caches; the same games).
    """
    roles = tuple(roles or task.roles)
    keys, cells = [], []   # every cell at once: each agent's games against all the others in one batch
    for pname, policy in policies.items():
        for cname, counterpart in counterparts.items():
            for role in roles:
                mine = scenarios[cname] if isinstance(scenarios, Mapping) else scenarios
                keys.append((pname, cname, role))
                cells.append(({role: policy, task.other(role): counterpart}, mine, eval_seeds(seed, mine, role, cname)))
    played = dict(zip(keys, play_cells(task, cells, max_live=max_live)))
    rows = [row for (pname, cname, role), episodes in played.items()
            for row in game_rows(task, episodes, role, policy=pname, counterpart=cname)]
    if transcripts:
        append_jsonl(transcripts, transcript_records(played, n_transcripts))
    return (pd.DataFrame(rows), played) if return_episodes else pd.DataFrame(rows)


def panel_eval(task: Task, role: str, panel: dict[str, Agent], scenarios: list | Mapping[str, list],
               seed: int = 12345, metrics: Sequence[str] = ("score", "agreed", "reward"),
               measures: Callable[[list[Episode]], dict[str, float]] | None = None) -> Callable[..., dict]:
    """An eval_fn for `rl.trainer.Trainer.train`: the role's current policy against each held-out counterpart, frozen.

    Plays `scenarios` (or, a mapping, each member's own scenarios: e.g. scenarios that name the member's profile)
    against every panel member (the policy in `role`), each game from its own seed, stream_seed("eval-games",
    seed, scenario id, role, member), so every evaluation draws the same random numbers; it touches no global RNG,
    and restores every global RNG state (python, numpy, torch, CUDA) anyway, so evaluation never changes the
    training run, whatever its counterparts do. Returns per
    counterpart the policy's mean of each of `metrics` (columns of `evaluate.game_rows`), and their means over the
    panel (`panel/<metric>`); with `measures`, also `panel/<name>` of measures(all the panel's games) (e.g. the
    diversity of what the policy said).
    """
    def evaluate(trainer) -> dict:   # an rl.trainer.Trainer
        spec = trainer.roles[role]
        policy = trainer.lm_agent(spec.adapter, name="policy")   # the trainer's engine and temperature
        cuda = torch.cuda.is_available()
        saved = (random.getstate(), np.random.get_state(), torch.get_rng_state(),
                 torch.cuda.get_rng_state_all() if cuda else None)
        out: dict[str, float] = {}
        played: list[Episode] = []
        try:
            cells = []   # the whole panel at once: the policy's games against every member in one batch
            for name, agent in panel.items():
                mine = scenarios[name] if isinstance(scenarios, Mapping) else scenarios
                cells.append(({role: policy, task.other(role): agent}, mine, eval_seeds(seed, mine, role, name)))
            for name, episodes in zip(panel, play_cells(task, cells)):
                played += episodes
                rows = game_rows(task, episodes, role)
                for metric in metrics:
                    out[f"{name}/{metric}"] = float(np.mean([r[metric] for r in rows]))
        finally:
            random.setstate(saved[0])
            np.random.set_state(saved[1])
            torch.set_rng_state(saved[2])
            if cuda:
                torch.cuda.set_rng_state_all(saved[3])
        for metric in metrics:
            out[f"panel/{metric}"] = float(np.mean([out[f"{n}/{metric}"] for n in panel]))
        if measures is not None:
            out.update({f"panel/{k}": float(v) for k, v in measures(played).items()})
        return out

    return evaluate


def transcript_records(played: dict[tuple[str, str, str], list[Episode]], n_transcripts: int = 3) -> list[dict]:
    """The first `n_transcripts` games of each (policy, counterpart, role) cell, as transcripts.jsonl records (what
    cross_play's `transcripts` writes; for games played in another process, returned with return_episodes)."""
    return [{"policy": p, "counterpart": c, "role": role, **ep.transcript()}
            for (p, c, role), episodes in played.items() for ep in episodes[:n_transcripts]]
