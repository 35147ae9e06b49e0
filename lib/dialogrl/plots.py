"""Seaborn figures drawn from saved data (metrics.jsonl rows, summary tables) and from the theory's estimates; each
is saved, then returned."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from dialogrl.theory import CompoundingCheck, ShiftEstimate


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


def ci_errors(value, lo, hi, tol: float = 1e-9):
    """[value - lo, hi - value] for matplotlib's errorbar. A zero-width interval (every seed alike) can put the mean a
    rounding error outside it: clipped to 0. An interval that misses its estimate by more is a bug: ValueError."""
    import numpy as np

    value, lo, hi = (np.asarray(a, dtype=float) for a in (value, lo, hi))
    below, above = value - lo, hi - value
    if np.any(below < -tol) or np.any(above < -tol):
        raise ValueError(f"an interval does not contain its estimate: {value} not in [{lo}, {hi}]")
    return [np.clip(below, 0, None), np.clip(above, 0, None)]


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
        ax.errorbar(centers, table[metric], yerr=ci_errors(table[metric], table[f"{metric}_lo"],
                                                        table[f"{metric}_hi"]),
                    fmt="none", ecolor="black", capsize=3)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    if sum(len(t) for t in labels) > 48:  # labels that would run into each other: slanted
        ax.tick_params(axis="x", labelrotation=30)
        for t in ax.get_xticklabels():
            t.set_horizontalalignment("right")
    ax.set_title(title or metric)
    return _save(fig, path)


def tradeoff_plane(table: pd.DataFrame, x: str, y: str, label: str = "method", path: str | Path | None = None,
                   title: str | None = None):
    """One point per row of `table` (e.g. a method) at (x, y) with both CIs as error bars (columns <x>_lo, <x>_hi,
    <y>_lo, <y>_hi from evaluate.summarize), labelled: two goals against each other (SocialRL's goal and
    relationship)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(5.5, 4))
    colors = sns.color_palette(n_colors=len(table))
    for (_, r), c in zip(table.iterrows(), colors):
        ax.errorbar(r[x], r[y], xerr=ci_errors([r[x]], [r[f"{x}_lo"]], [r[f"{x}_hi"]]),
                    yerr=ci_errors([r[y]], [r[f"{y}_lo"]], [r[f"{y}_hi"]]), fmt="o", color=c, capsize=3,
                    label=r[label])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or f"{y} vs {x}")
    return _save(fig, path)


def weights_heatmap(weights: dict[str, dict[str, float]], path: str | Path | None = None, title: str | None = None):
    """Stages (rows) x dimensions (columns): the mean weight of each (rewards.weights_table)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    grid = pd.DataFrame(weights).T
    fig, ax = plt.subplots(figsize=(1.2 * grid.shape[1] + 2, 0.6 * grid.shape[0] + 1.5))
    sns.heatmap(grid, annot=True, fmt=".2f", cmap="viridis", vmin=0, cbar_kws={"label": "weight"}, ax=ax)
    ax.set_xticklabels([t.get_text().replace("_", "\n") for t in ax.get_xticklabels()], rotation=0, fontsize=8)
    ax.set_title(title or "process-reward weights by stage")
    ax.set_xlabel("dimension")
    ax.set_ylabel("stage")
    return _save(fig, path)


def shift_curves(shifts: dict[str, ShiftEstimate], path: str | Path | None = None, ylabel: str | None = None,
                 title: str | None = None):
    """One line per named shift estimate (`theory.classifier_shift`, `likelihood_shift`): the divergence of the
    history after each turn i, with its 95% band."""
    import matplotlib.pyplot as plt

    labels = {"kl": "KL of the history", "tv_lower_bound": "TV lower bound of the history"}
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for name, s in shifts.items():
        ax.plot(s.turns, s.estimate, marker="o", label=name)
        ax.fill_between(s.turns, s.lo, s.hi, alpha=0.2)
    ax.set_xlabel("turn i")
    ax.set_ylabel(ylabel or labels.get(next(iter(shifts.values())).kind, "shift of the history"))
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def compounding_fits(check: CompoundingCheck, shift: ShiftEstimate | None = None, path: str | Path | None = None,
                     title: str = ""):
    """The compounding check (`theory.compounding_check`). Left, if given: the per-turn shift with its CI. Right: the
    signed gap against H with its CI, both fits and the bound (+-, since it bounds |gap|)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2 if shift is not None else 1, figsize=(11 if shift is not None else 6, 3.8))
    axes = np.atleast_1d(axes)
    if shift is not None:
        ax = axes[0]
        ax.plot(shift.turns, shift.estimate, "o-", label=shift.kind)
        ax.fill_between(shift.turns, shift.lo, shift.hi, alpha=0.25)
        ax.set_xlabel("turn i")
        ax.set_ylabel("shift of the history after turn i")
        ax.legend()
    ax = axes[-1]
    h = check.horizons
    ax.axhline(0.0, color="lightgrey", lw=0.8)
    ax.errorbar(h, check.gap, yerr=[check.gap - check.gap_ci[:, 0], check.gap_ci[:, 1] - check.gap],
                fmt="o", color="black", capsize=3, label="gap J_P - J_Q (95% CI)")
    grid = np.linspace(h.min(), h.max(), 100)
    lo, hi = check.linear_ci
    ax.plot(grid, check.fitted(grid, 1), "--", label=f"linear: b = {check.linear_coef:.3g} [{lo:.3g}, {hi:.3g}]")
    lo, hi = check.quadratic_ci
    ax.plot(grid, check.fitted(grid, 2), "-", label=f"quadratic: c = {check.quadratic_coef:.3g} [{lo:.3g}, {hi:.3g}]")
    form = "sum min(1, D_t-1)" if check.reward == "per_turn" else "min(1, D_H)"
    kind = "" if check.bound_test == "valid" else ", eps lower bounds"
    ax.plot(h, check.bound, "s:", color="grey", label=f"+- bound R_max {form}{kind}")
    ax.plot(h, -check.bound, "s:", color="grey")
    ax.set_xlabel("horizon H (turns)")
    ax.set_ylabel("J_P - J_Q")
    ax.set_title(title or f"verdict: {check.verdict} (detectable c: {check.min_detectable_quadratic:.2g})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
