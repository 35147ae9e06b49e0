"""Seaborn figures drawn from saved data (metrics.jsonl rows, summary tables); each is saved, then returned."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd


def _save(fig, path: str | Path | None):
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def crossplay_heatmap(table: pd.DataFrame, metric: str = "score", path: str | Path | None = None,
                      title: str | None = None, fmt: str = ".2f"):
    """Policies (rows) x counterparts (columns), annotated with the mean of `metric` (from evaluate.summarize)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    grid = table.pivot(index="policy", columns="counterpart", values=metric)
    grid = grid.loc[table["policy"].unique(), table["counterpart"].unique()]  # keep the given order
    fig, ax = plt.subplots(figsize=(1.1 * grid.shape[1] + 2.5, 0.6 * grid.shape[0] + 1.5))
    sns.heatmap(grid, annot=True, fmt=fmt, cmap="viridis", cbar_kws={"label": metric}, ax=ax)
    ax.set_title(title or f"cross-play: {metric}")
    ax.set_xlabel("counterpart")
    ax.set_ylabel("policy")
    return _save(fig, path)


def learning_curves(rows: Sequence[dict] | pd.DataFrame, y: str, x: str = "step", hue: str | None = None,
                    path: str | Path | None = None, title: str | None = None):
    """Line plot of `y` against `x` from metrics.jsonl rows (mean and 95% band over seeds when they repeat)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    sns.lineplot(data=df, x=x, y=y, hue=hue, errorbar=("ci", 95), ax=ax)
    ax.set_title(title or y)
    return _save(fig, path)


def bars_with_ci(table: pd.DataFrame, metric: str, x: str = "policy", hue: str | None = None,
                 path: str | Path | None = None, title: str | None = None):
    """Bars of `metric` with their bootstrap CIs (columns <metric>_lo and <metric>_hi from evaluate.summarize)."""
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(6, 3.5))
    sns.barplot(data=table, x=x, y=metric, hue=hue, ax=ax, errorbar=None)
    if hue is None:
        centers = np.arange(len(table))
        ax.errorbar(centers, table[metric], yerr=[table[metric] - table[f"{metric}_lo"],
                                                  table[f"{metric}_hi"] - table[metric]],
                    fmt="none", ecolor="black", capsize=3)
    ax.set_title(title or metric)
    return _save(fig, path)
