"""Seaborn figures drawn from saved data (metrics.jsonl rows, summary tables) and from the theory's estimates; each
is saved, then returned."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dialogrl.stats import ci_dict, ci_long, summarize, t_interval

if TYPE_CHECKING:
    from dialogrl.theory import CompoundingCheck, ShiftEstimate


def _save(fig, path: str | Path | None):
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")   # drawn aside, then renamed: never half a figure
        try:
            fig.savefig(tmp, dpi=120, bbox_inches="tight", format=path.suffix.lstrip(".") or "png")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return fig


def crossplay_heatmap(table: pd.DataFrame, metric: str = "score", path: str | Path | None = None,
                      title: str | None = None, fmt: str = ".2f", policy: str = "policy"):
    """Policies (rows: the `policy` column) x counterparts (columns), annotated with the mean of `metric` per pairing:
    over its games (rows of evaluate.game_rows), or its one row (stats.summarize's)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    grid = table.groupby([policy, "counterpart"], sort=False)[metric].mean().unstack()
    grid = grid.loc[table[policy].unique(), table["counterpart"].unique()]  # keep the given order
    grid = grid.dropna(axis=0, how="all").dropna(axis=1, how="all")  # a pairing nobody played: no empty lane
    fig, ax = plt.subplots(figsize=(1.1 * grid.shape[1] + 2.5, 0.6 * grid.shape[0] + 1.5))
    sns.heatmap(grid, annot=True, fmt=fmt, cmap="viridis", cbar_kws={"label": metric}, ax=ax)
    if max((len(str(c)) for c in grid.columns), default=0) > 8:  # long names would run into each other: slanted
        ax.set_xticklabels(ax.get_xticklabels(), rotation=35, ha="right")
    ax.set_title(title or f"cross-play: {metric}")
    ax.set_xlabel("counterpart")
    ax.set_ylabel("policy")
    return _save(fig, path)


def pretty_label(key: str) -> str:
    """An axis label for a metrics key: 'rollout/success_at_1' -> 'success at 1 (training rollouts)',
    'eval/panel/reward' -> 'reward (held-out panel)', 'reward/A' -> 'reward of A'."""
    parts = key.split("/")
    where = {"rollout": "training rollouts", "eval": "evaluation"}
    if parts[0] in where and len(parts) > 1:
        place = "held-out panel" if parts[1] == "panel" else where[parts[0]]
        return f"{parts[-1].replace('_', ' ')} ({place})"
    if len(parts) == 2:
        return f"{parts[0].replace('_', ' ')} of {parts[1]}"
    return key.replace("_", " ")


def outside_legend(ax, title: str | None = None):
    """The legend to the right of the axes, where it cannot cover data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title=title, fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0.0, frameon=False)


def curve_bands(df: pd.DataFrame, y: str, x: str = "step", hue: str | None = None,
                units: str = "seed") -> pd.DataFrame:
    """Per (hue, x): the mean of `y` over `units` (training seeds) and its 95% t-interval (lo = hi = mean with one
    seed), the bands that `learning_curves` draws. Rows without y are dropped; each unit's rows at one x are averaged
    first, so a unit counts once."""
    keys = [k for k in (hue, x) if k is not None]
    df = df.dropna(subset=[y])
    per_unit = df.groupby([*keys, units], sort=False)[y].mean().reset_index() if units in df else df
    out = []
    for key, g in per_unit.groupby(keys, sort=False):
        vals = g[y].to_numpy(dtype=float)
        lo, hi = t_interval(vals) if len(vals) > 1 and np.ptp(vals) > 0 else (vals.mean(), vals.mean())
        out.append({**dict(zip(keys, key if isinstance(key, tuple) else (key,))), "mean": float(vals.mean()),
                    "lo": float(lo), "hi": float(hi), "n": len(vals)})
    return pd.DataFrame(out)


def stack_columns(rows: pd.DataFrame, columns: dict[str, str], var: str, value: str,
                  keep: Sequence[str] = ("method", "seed", "step")) -> pd.DataFrame:
    """Several logged columns as one, to draw as curves of one figure (`learning_curves(..., hue=var)`): a row per
    (row, column) where the column has a value, with the `keep` columns, `value` and `var` (the label of its column:
    columns maps label -> column), column by column."""
    return pd.concat([rows.dropna(subset=[col])[list(keep) + [col]].rename(columns={col: value}).assign(**{var: label})
                      for label, col in columns.items()], ignore_index=True)


def learning_curves(rows: Sequence[dict] | pd.DataFrame, y: str, x: str = "step", hue: str | None = None,
                    path: str | Path | None = None, title: str | None = None, ylabel: str | None = None,
                    units: str = "seed"):
    """Line plot of `y` against `x` from metrics.jsonl rows: the mean over `units` (training seeds) with its 95%
    t-interval as the band, as the headline figures show intervals (`curve_bands`)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    bands = curve_bands(pd.DataFrame(rows), y, x, hue, units)
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    groups = list(bands.groupby(hue, sort=False)) if hue else [(None, bands)]
    for (name, g), color in zip(groups, sns.color_palette(n_colors=len(groups))):
        g = g.sort_values(x)
        ax.plot(g[x], g["mean"], color=color, label=name)
        if (g["hi"] > g["lo"]).any():
            ax.fill_between(g[x], g["lo"], g["hi"], color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel or pretty_label(y))
    ax.set_title(title or pretty_label(y))
    if hue:
        n = int(bands["n"].max()) if len(bands) else 0
        outside_legend(ax, title=f"{hue} (band: 95% t over {n} seeds)" if n > 1 else hue)
    return _save(fig, path)


def acceptance_curves(curves: pd.DataFrame, path: str | Path | None = None, title: str | None = None,
                      units: str = "build"):
    """Acceptance by what a proposal gives the deciding role, one line per `simulator` (rows of
    calibration.acceptance_curve with a "simulator" column and, where there are several, a `units` column: warm-start
    builds or training seeds): the mean over the units with its 95% t-interval as the band; a curve without units
    (the humans' logs) is one line. Bins nobody decided in are left out."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    df = curves[curves["n"] > 0].assign(worth=lambda d: (d["lo"] + d["hi"]) / 2)
    df[units] = df[units].fillna(-1) if units in df else -1
    bands = curve_bands(df, "accepted", x="worth", hue="simulator", units=units)
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    groups = list(bands.groupby("simulator", sort=False))
    for (name, g), color in zip(groups, sns.color_palette(n_colors=len(groups))):
        g = g.sort_values("worth")
        n = int(g["n"].max())
        ax.plot(g["worth"], g["mean"], marker="o", color=color, label=f"{name} ({n} {units}s)" if n > 1 else name)
        if (g["hi"] > g["lo"]).any():
            ax.fill_between(g["worth"], g["lo"], g["hi"], color=color, alpha=0.2, linewidth=0)
    bins = df.drop_duplicates("bin").sort_values("worth")
    ax.set_xticks(bins["worth"], bins["bin"])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("points of 10 the proposal gives it")
    ax.set_ylabel("share accepted")
    ax.set_title(title or "acceptance by what a proposal gives the user")
    outside_legend(ax, title=f"band: 95% t over {units}s")
    return _save(fig, path)


def ci_errors(value, lo, hi, tol: float = 1e-9):
    """[value - lo, hi - value] for matplotlib's errorbar. A zero-width interval (every seed alike) can put the mean a
    rounding error outside it: clipped to 0. An interval that misses its estimate by more is a bug: ValueError."""
    value, lo, hi = (np.asarray(a, dtype=float) for a in (value, lo, hi))
    below, above = value - lo, hi - value
    if np.any(below < -tol) or np.any(above < -tol):
        raise ValueError(f"an interval does not contain its estimate: {value} not in [{lo}, {hi}]")
    return [np.clip(below, 0, None), np.clip(above, 0, None)]


def bars_with_ci(table: pd.DataFrame, metric: str, x: str = "policy", hue: str | None = None,
                 path: str | Path | None = None, title: str | None = None):
    """Bars of `metric` with their bootstrap CIs (columns <metric>_lo and <metric>_hi from stats.summarize)."""
    import matplotlib.pyplot as plt
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


def headline(games: pd.DataFrame, methods: Sequence[str], metrics: dict[str, str], path: str | Path, title: str,
             **labels) -> tuple[dict[str, dict], pd.DataFrame]:
    """A notebook's headline numbers: each of `metrics` ({summary key: column of `games`}) per method, in the order
    of `methods`, with its interval (`stats.summarize`: t over training seeds; one seed, a bootstrap over games), drawn
    as bars (`bars_with_ci`; `path` and `title` formatted with {key}) and shown. Returns ({key: its summary entry,
    `ci_dict`}, every key's rows as one long table, `ci_long` with `labels` as its first columns)."""
    import matplotlib.pyplot as plt

    entries, rows = {}, []
    for key, metric in metrics.items():
        t = summarize(games, by=("method",), metrics=(metric,)).set_index("method").loc[list(methods)].reset_index()
        entries[key] = ci_dict(t, metric)
        rows.append(ci_long(t, metric, **labels, metric=key))
        bars_with_ci(t, metric, x="method", path=str(path).format(key=key), title=title.format(key=key))
        plt.show()
    return entries, pd.concat(rows, ignore_index=True)


def tradeoff_plane(table: pd.DataFrame, x: str, y: str, label: str = "method", path: str | Path | None = None,
                   title: str | None = None):
    """One point per row of `table` (e.g. a method) at (x, y) with both CIs as error bars (columns <x>_lo, <x>_hi,
    <y>_lo, <y>_hi from stats.summarize), labelled: two goals against each other (SocialRL's goal and
    relationship)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(5.5, 4))
    colors = sns.color_palette(n_colors=len(table))
    for (_, r), c in zip(table.iterrows(), colors):
        ax.errorbar(r[x], r[y], xerr=ci_errors([r[x]], [r[f"{x}_lo"]], [r[f"{x}_hi"]]),
                    yerr=ci_errors([r[y]], [r[f"{y}_lo"]], [r[f"{y}_hi"]]), fmt="o", color=c, capsize=3,
                    label=r[label])
    ax.set_xlabel(pretty_label(x))
    ax.set_ylabel(pretty_label(y))
    outside_legend(ax)
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
    outside_legend(ax)
    return _save(fig, path)


def compounding_fits(check: CompoundingCheck, shift: ShiftEstimate | None = None, path: str | Path | None = None,
                     title: str = ""):
    """The compounding check (`theory.compounding_check`). Left, if given: the per-turn shift with its CI. Right: the
    signed gap against H with its CI, both fits and the bound (+-, since it bounds |gap|)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2 if shift is not None else 1, figsize=(11 if shift is not None else 6, 3.8))
    axes = np.atleast_1d(axes)
    if shift is not None:
        ax = axes[0]
        ax.plot(shift.turns, shift.estimate, "o-", label=shift.kind)
        ax.fill_between(shift.turns, shift.lo, shift.hi, alpha=0.25)
        ax.set_xlabel("turn i")
        ax.set_ylabel("shift of the history after turn i")
        ax.legend(fontsize=8, loc="upper left")
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
    # the y-axis follows the data (the gap's intervals and the fits), not the bound: a bound far above the data would
    # squash it into a line; a bound off the axes is named in the legend
    data_lo = min(np.min(check.gap_ci[:, 0]), np.min(check.fitted(grid, 1)), np.min(check.fitted(grid, 2)))
    data_hi = max(np.max(check.gap_ci[:, 1]), np.max(check.fitted(grid, 1)), np.max(check.fitted(grid, 2)))
    pad = 0.15 * max(data_hi - data_lo, 1e-9)
    ylim = (min(data_lo, 0.0) - pad, max(data_hi, 0.0) + pad)
    bound = np.asarray(check.bound, dtype=float)
    beyond = bool(bound.max() > ylim[1])
    label = f"+- bound R_max {form}{kind}" + (f" (reaches {bound.max():.3g}: beyond the axes)" if beyond else "")
    ax.plot(h, bound, "s:", color="grey", label=label)
    ax.plot(h, -bound, "s:", color="grey")
    ax.set_ylim(*ylim)
    ax.set_xlabel("horizon H (turns)")
    ax.set_ylabel("J_P - J_Q")
    ax.set_title(title or f"verdict: {check.verdict} (detectable c: {check.min_detectable_quadratic:.2g})")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def layout_problems(fig) -> list[str]:
    """What keeps a figure from being read, where it can be checked: a plot without an axis label, x tick labels
    that run into each other, a legend drawn over plotted points. Empty when none is found."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for i, ax in enumerate(fig.axes):
        if ax.get_label() == "<colorbar>" or not (ax.lines or ax.collections or ax.patches or ax.images):
            continue
        name = ax.get_title() or f"axes {i}"
        for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
            if not label.strip():
                problems.append(f"{name}: no {axis} label")
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_visible() and t.get_text()]
        if any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])):
            problems.append(f"{name}: x tick labels overlap")
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        points = [line.get_xydata() for line in ax.lines if len(line.get_xydata())]
        points += [c.get_offsets() for c in ax.collections if len(np.atleast_2d(c.get_offsets())) > 1]
        if points:
            xy = ax.transData.transform(np.concatenate([np.asarray(p, dtype=float).reshape(-1, 2) for p in points]))
            frame = ax.bbox  # only points drawn inside the axes can be covered
            xy = xy[(xy[:, 0] >= frame.x0) & (xy[:, 0] <= frame.x1) & (xy[:, 1] >= frame.y0) & (xy[:, 1] <= frame.y1)]
            covered = int(np.sum((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0)
                                 & (xy[:, 1] <= box.y1)))
            if covered:
                problems.append(f"{name}: the legend covers {covered} plotted point(s)")
    return problems


def agreement_scatter(val: pd.DataFrame, judges: dict[str, str], rho: dict[str, dict],
                      keys: Sequence[str] = ("goal", "relationship"), path: str | Path | None = None):
    """A judge's estimates against GPT-4's, one panel per judge (rows: judges {column prefix: label}) and key: each
    side's `val[f"{judge}_{key}"]` against `val[f"gpt4_{key}"]`, jittered a little up or down (seed 0) so that tied
    scores show, titled with Spearman's rho (`rho[judge][f"{key}_spearman"]`, None: not defined)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(judges), len(keys), figsize=(4.5 * len(keys), 3.2 * len(judges)), squeeze=False)
    for row, (j, label) in zip(axes, judges.items()):
        for ax, key in zip(row, keys):
            r = rho[j][f"{key}_spearman"]
            ax.scatter(val[f"gpt4_{key}"], val[f"{j}_{key}"] + np.random.default_rng(0).normal(0, 0.08, len(val)),
                       s=14, alpha=0.7)
            ax.set_xlabel(f"GPT-4 {key}")
            ax.set_ylabel(f"{label} {key}")
            ax.set_title(f"{key}: Spearman {r if r is not None else float('nan'):.2f}")
    fig.tight_layout()
    return _save(fig, path)


def spread_bars(spread: pd.DataFrame, measures: Sequence[str] = ("similarity", "act_entropy"), hue: str = "model",
                path: str | Path | None = None):
    """How spread each simulator's replies are at a state (`collapse.reply_spread`'s rows): one panel per measure,
    a bar per simulator and `hue`, with its 95% interval over states."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(1, len(measures), figsize=(4.5 * len(measures), 3.2), squeeze=False)
    for ax, measure in zip(axes[0], measures):
        sns.barplot(spread, x="simulator", y=measure, hue=hue, errorbar=("ci", 95), ax=ax)
        ax.set_title(f"{measure} of the replies at a state")
    fig.tight_layout()
    return _save(fig, path)
