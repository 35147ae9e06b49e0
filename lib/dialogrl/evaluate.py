"""Evaluation of frozen policies against counterpart panels: cross-play matrices with bootstrap 95% CIs.

    games = cross_play(task, {"base": base_agent, "ibrl": ibrl_agent}, panel, scenarios, seats=("A", "B"))
    table = summarize(games)            # one row per (policy, counterpart): mean and 95% CI of every metric
    diff = paired_difference(games, "ibrl", "base", "score")   # paired by scenario, seat and counterpart

Every cell plays the same scenarios (paired comparisons), from a seed range that training never uses.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from dialogrl.agents import Agent
from dialogrl.envs.base import Task
from dialogrl.rollout import Episode, play
from dialogrl.run import seed_everything

GAME_METRICS = ("score", "partner_score", "joint", "agreed", "pareto", "invalid_rate", "reward")


def bootstrap_ci(x: Sequence[float], level: float = 0.95, n_resamples: int = 2000, seed: int = 0
                 ) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (scipy.stats.bootstrap); a constant sample gives (x0, x0)."""
    from scipy.stats import bootstrap

    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    if np.all(x == x[0]):
        return (float(x[0]), float(x[0]))
    res = bootstrap((x,), np.mean, confidence_level=level, n_resamples=n_resamples, method="percentile",
                    random_state=np.random.default_rng(seed))
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def clustered_ci(df: pd.DataFrame, metric: str, cluster: str = "seed", level: float = 0.95,
                 n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Two-level percentile bootstrap CI of the mean of `metric`: resample clusters (training seeds), then rows
    (games) within each drawn cluster. With one cluster (or no `cluster` column) it is the plain bootstrap over rows.
    This is the CI of a method's mean over training seeds and evaluation scenarios: seed-to-seed variation of the
    training runs counts, not only the evaluation noise."""
    if cluster not in df.columns or df[cluster].nunique() <= 1:
        return bootstrap_ci(df[metric].to_numpy(), level=level, n_resamples=n_resamples, seed=seed)
    groups = [g[metric].to_numpy(dtype=float) for _, g in df.groupby(cluster, sort=True)]
    rng = np.random.default_rng(seed)
    means = np.empty(n_resamples)
    for i in range(n_resamples):
        picked = rng.integers(len(groups), size=len(groups))
        means[i] = np.mean(np.concatenate([rng.choice(groups[j], size=len(groups[j])) for j in picked]))
    alpha = (1 - level) / 2
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha)))


def paired_clustered(a: pd.DataFrame, b: pd.DataFrame, metric: str, keys: Sequence[str] = ("counterpart", "scenario"),
                     cluster: str | None = "seed") -> dict:
    """Mean of metric(a) - metric(b) over games paired by `keys`, with the two-level (seed, then game) bootstrap CI.

    a, b: game rows (`game_rows`) of two methods. Games pair on `keys` and, when both sides have several training
    seeds, on the seed too (seed i of one method beside seed i of the other); a single-seed b (e.g. the warm start)
    pairs with every seed of a. cluster=None: pairs on `keys` only, with the plain bootstrap over games.
    Returns {"diff", "ci", "holds" (CI above 0), "games"}.
    """
    keys = list(keys) + ([cluster] if cluster is not None and cluster in b and b[cluster].nunique() > 1 else [])
    missing = [k for k in keys if k not in a or k not in b]
    if missing:
        raise ValueError(f"cannot pair the games: column(s) {missing} missing")
    ref = b.set_index(keys)[metric]
    if not ref.index.is_unique:
        raise ValueError(f"cannot pair the games: {keys} do not identify b's games uniquely")
    d = a.assign(diff=a[metric].to_numpy(dtype=float) - ref.reindex(pd.MultiIndex.from_frame(a[keys])).to_numpy())
    d = d.dropna(subset=["diff"])
    if d.empty:
        raise ValueError(f"no game of a pairs with a game of b on {keys}")
    lo, hi = clustered_ci(d, "diff", cluster=cluster)
    return {"diff": float(d["diff"].mean()), "ci": [lo, hi], "holds": bool(lo > 0), "games": int(len(d))}


def game_rows(task: Task, episodes: Sequence[Episode], seat: str, **labels) -> list[dict]:
    """One row per game, from the point of view of the role in `seat`."""
    rows = []
    for ep in episodes:
        me, other = ep.outcome[seat], ep.outcome[task.other(seat)]
        mine = [t for t in ep.state.turns if t.role == seat]
        rows.append({**labels, "seat": seat, "scenario": getattr(ep.scenario, "id", None),
                     "score": me["score"], "partner_score": other["score"], "joint": me["score"] + other["score"],
                     "agreed": float(me.get("agreed", False)), "pareto": float(me.get("pareto", False)),
                     "invalid_rate": sum(t.invalid is not None for t in mine) / max(len(mine), 1),
                     "reward": me["reward"], "turns": len(ep.state.talk_turns())})
        # the task's own flags and numbers (TeleSales: sale, good_sale, feasible, ...), where the row has no such key
        rows[-1].update({k: float(v) for k, v in me.items()
                         if k not in rows[-1] and isinstance(v, (bool, int, float))})
    return rows


def cross_play(task: Task, policies: dict[str, Agent], counterparts: dict[str, Agent], scenarios: Sequence,
               seats: Sequence[str] | None = None, seed: int = 0, transcripts: str | Path | None = None,
               n_transcripts: int = 3) -> pd.DataFrame:
    """Play every policy against every counterpart, in every seat, on the same scenarios.

    Returns one row per game (policy, counterpart, seat, scenario, and GAME_METRICS from the policy's seat).
    With `transcripts`, the first `n_transcripts` games of every cell are appended to that JSONL file.
    """
    seats = tuple(seats or task.roles)
    rows = []
    for pname, policy in policies.items():
        for cname, counterpart in counterparts.items():
            for seat in seats:
                seed_everything(seed)  # every cell sees the same sampling noise stream
                agents = {seat: policy, task.other(seat): counterpart}
                episodes = play(task, agents, scenarios)
                rows += game_rows(task, episodes, seat, policy=pname, counterpart=cname)
                if transcripts:
                    with open(transcripts, "a") as f:
                        for ep in episodes[:n_transcripts]:
                            rec = {"policy": pname, "counterpart": cname, "seat": seat, **ep.transcript()}
                            f.write(json.dumps(rec, default=str) + "\n")
    return pd.DataFrame(rows)


def summarize(games: pd.DataFrame, by: Sequence[str] = ("policy", "counterpart"),
              metrics: Sequence[str] = ("score", "agreed", "pareto", "joint", "invalid_rate")) -> pd.DataFrame:
    """Mean and bootstrap 95% CI of each metric per group: columns <metric>, <metric>_lo, <metric>_hi, n."""
    out = []
    for key, g in games.groupby(list(by), sort=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        row["n"] = len(g)
        for m in metrics:
            lo, hi = bootstrap_ci(g[m].to_numpy())
            row.update({m: float(g[m].mean()), f"{m}_lo": lo, f"{m}_hi": hi})
        out.append(row)
    return pd.DataFrame(out)


def paired_difference(games: pd.DataFrame, a: str, b: str, metric: str, by: str = "policy") -> dict:
    """Mean of metric(a) - metric(b) over games paired by scenario, seat and counterpart, with its 95% CI
    (`paired_clustered` on one table of games, without the seed level)."""
    out = paired_clustered(games[games[by] == a], games[games[by] == b], metric,
                           keys=("counterpart", "seat", "scenario"), cluster=None)
    return {"diff": out["diff"], "lo": out["ci"][0], "hi": out["ci"][1], "n": out["games"]}
