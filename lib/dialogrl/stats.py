"""Statistics of evaluation games and training seeds (pandas, numpy and scipy; no torch): means and paired
differences with intervals valid for a few training seeds, power and minimal detectable effects, and the tables the
notebooks build from `evaluate.game_rows`' per-game rows.

    table = summarize(games)            # one row per (policy, counterpart): mean and 95% CI of every metric
    diff = paired_difference(games, "ibrl", "base", "score")   # paired by scenario, role and counterpart
    claim = paired_clustered(a, b, "score")                     # a - b, paired by game and seed, t over seeds

Intervals. The unit of replication is the training seed (a training run, with its own warm-start build, evaluated on
its own draw of scenarios that every method of that seed plays): games of one seed share its policy, so they are not
independent draws. A method's mean gets a t-interval on its per-seed means with n_seeds - 1 degrees of freedom, and a
difference between methods a t-interval on the per-seed mean differences (`clustered_ci`, `paired_clustered`). A
percentile bootstrap over 3-5 seeds undercovers (about 70-83% for a nominal 95%; tests/test_stats.py checks the
t-interval's coverage), so it is used only for a single seed, over games, with a warning that the interval then
ignores seed-to-seed variation.

Power. `power_analysis` gives a claim's minimal detectable effect (two-sided alpha 0.05, 80% power, the same t-test
over seeds) beside the paper's effect, and the seed-level and scenario-level variance components from which
`design_mde` plans other designs (more seeds, more scenarios per seed).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd


def bootstrap_ci(x: Sequence[float], level: float = 0.95, n_resamples: int = 2000, seed: int = 0
                 ) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean (scipy.stats.bootstrap) of independent draws x; a constant sample gives
    (x0, x0). Valid for many independent games, not for a few training seeds (use `t_interval` there)."""
    from scipy.stats import bootstrap

    x = np.asarray(x, dtype=float)
    if len(x) == 0:
        return (float("nan"), float("nan"))
    if np.all(x == x[0]):
        return (float(x[0]), float(x[0]))
    res = bootstrap((x,), np.mean, confidence_level=level, n_resamples=n_resamples, method="percentile",
                    random_state=np.random.default_rng(seed))
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def t_interval(x: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Student-t CI of the mean of n >= 2 independent replicates x (e.g. per-seed means):
    mean +- t_{n-1} * sd / sqrt(n)."""
    from scipy.stats import t

    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        raise ValueError(f"a t-interval needs 2 or more replicates, got {len(x)}")
    half = t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return (float(x.mean() - half), float(x.mean() + half))


def seed_means(df: pd.DataFrame, metric: str, cluster: str = "seed") -> pd.Series:
    """The mean of `metric` per cluster (training seed), in cluster order."""
    return df.groupby(cluster, sort=True)[metric].mean()


def _one_seed_warning(what: str) -> None:
    warnings.warn(f"{what}: one training seed, so the interval is a bootstrap over games; it ignores seed-to-seed "
                  "variation and is too narrow for a claim about the method", stacklevel=3)


def clustered_ci(df: pd.DataFrame, metric: str, cluster: str = "seed", level: float = 0.95,
                 n_resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """CI of a method's mean of `metric` over training seeds: a t-interval on the per-seed means, n_seeds - 1 degrees
    of freedom. Seed-to-seed variation of the training runs counts, not only the evaluation noise.

    With one cluster (or no `cluster` column) it falls back to the percentile bootstrap over rows (games), with a
    warning: that interval only measures evaluation noise. `n_resamples` and `seed` are the fallback's.
    """
    if cluster not in df.columns or df[cluster].nunique() <= 1:
        _one_seed_warning(f"clustered_ci({metric!r})")
        return bootstrap_ci(df[metric].to_numpy(), level=level, n_resamples=n_resamples, seed=seed)
    return t_interval(seed_means(df, metric, cluster).to_numpy(), level=level)


def _pair_games(a: pd.DataFrame, b: pd.DataFrame, metric: str, keys: Sequence[str], cluster: str | None
                ) -> tuple[pd.DataFrame, list[str]]:
    """a's games with a `diff` column (metric(a) - metric(b) of the paired game), and the keys they paired on."""
    use_seed = cluster is not None and cluster in b and b[cluster].nunique() > 1
    keys = list(keys) + ([cluster] if use_seed else [])
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
    paired = set(d[keys].itertuples(index=False, name=None))
    unpaired_b = sum(k not in paired for k in b[keys].itertuples(index=False, name=None))
    if len(d) < len(a) or unpaired_b:
        warnings.warn(f"paired games of {metric!r}: {len(a) - len(d)} of {len(a)} games of a and {unpaired_b} of "
                      f"{len(b)} games of b have no match on {keys}; they are left out", stacklevel=3)
    return d, keys


def paired_clustered(a: pd.DataFrame, b: pd.DataFrame, metric: str, keys: Sequence[str] = ("counterpart", "scenario"),
                     cluster: str | None = "seed") -> dict:
    """Mean of metric(a) - metric(b) over games paired by `keys`, with a t-interval over training seeds.

    a, b: game rows (`game_rows`) of two methods. Games pair on `keys` and, when b has several training seeds, on the
    seed too (seed i of one method beside seed i of the other). The difference is averaged per seed and the interval
    is the t-interval on those per-seed mean differences (n_seeds - 1 degrees of freedom). A single-seed b (one
    evaluation of a fixed reference) pairs with every seed of a; its own evaluation noise is then common to every
    seed's difference and not in the interval. cluster=None, or a single seed: pairs on `keys` only, with the
    percentile bootstrap over games (and a warning when a seed column shows that only one seed was there).
    Games of either side without a match are dropped with a warning that counts them.
    Returns {"diff", "ci", "holds" (CI above 0), "games", "seeds", "se", "interval"} ("interval" names the method).
    """
    d, keys = _pair_games(a, b, metric, keys, cluster)
    n_seeds = d[cluster].nunique() if cluster is not None and cluster in d else 1
    if n_seeds > 1:
        per_seed = seed_means(d, "diff", cluster).to_numpy()
        lo, hi = t_interval(per_seed)
        se = float(per_seed.std(ddof=1) / np.sqrt(n_seeds))
        interval = f"t over {n_seeds} seeds"
    else:
        if cluster is not None and cluster in d:
            _one_seed_warning(f"paired_clustered({metric!r})")
        lo, hi = bootstrap_ci(d["diff"].to_numpy())
        se = float(d["diff"].std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
        interval = "bootstrap over games"
    return {"diff": float(d["diff"].mean()), "ci": [lo, hi], "holds": bool(lo > 0), "games": int(len(d)),
            "seeds": int(n_seeds), "se": se, "interval": interval}


def mde(sd: float, n_seeds: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The minimal detectable effect: the smallest true mean difference that the library's test (a two-sided t-test
    on n_seeds per-seed mean differences, n_seeds - 1 df) rejects with probability `power` at level `alpha`, when
    the per-seed differences have standard deviation `sd`. Exact (noncentral t); nan with fewer than 2 seeds."""
    from scipy import integrate, optimize, stats

    if n_seeds < 2 or not np.isfinite(sd):
        return float("nan")
    if sd == 0:
        return 0.0
    df = n_seeds - 1
    crit = stats.t.ppf(1 - alpha / 2, df)

    def rejects(nc):  # P(|T| > crit), T = (Z + nc) / sqrt(V / df), V ~ chi2(df): integrated over V (scipy's nct
        def given(v):  # returns nan far in its tails for df = 1)
            c = crit * np.sqrt(v / df)
            return stats.chi2.pdf(v, df) * (stats.norm.sf(c - nc) + stats.norm.cdf(-c - nc))
        return integrate.quad(given, *stats.chi2.ppf([1e-12, 1 - 1e-12], df), limit=200)[0]

    hi = 1.0
    while rejects(hi) < power:
        hi *= 2
        if hi > 1e6:
            raise ValueError(f"no effect reaches power {power} with {n_seeds} seeds at alpha {alpha}")
    nc = optimize.brentq(lambda x: rejects(x) - power, 0.0, hi, xtol=1e-10)
    return float(nc * sd / np.sqrt(n_seeds))


def seeds_for(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8, most: int = 1000) -> int | None:
    """The fewest training seeds whose `mde` (the same t-test on per-seed mean differences of standard deviation
    `sd`) is at most |effect|: the seeds a confirmatory design needs to detect a paper's effect. None when even
    `most` seeds cannot (or the inputs are not finite)."""
    if not (np.isfinite(effect) and np.isfinite(sd)) or effect == 0 or sd < 0:
        return None
    if sd == 0:
        return 2
    lo = 2
    if mde(sd, most, alpha, power) > abs(effect):
        return None
    hi = most
    while lo < hi:   # mde falls as the seeds grow: the first n with mde(n) <= |effect|
        mid = (lo + hi) // 2
        if mde(sd, mid, alpha, power) <= abs(effect):
            hi = mid
        else:
            lo = mid + 1
    return lo


def variance_components(d: pd.DataFrame, metric: str = "diff", cluster: str = "seed", unit: str = "scenario"
                        ) -> dict:
    """Seed-level and unit-level variance of `metric` (e.g. paired differences) by the method of moments.

    Games are first averaged per (seed, unit): the games of one scenario (against several counterparts, in several
    roles) are not independent, so the scenario, not the game, is the unit within a seed. Then
    Var(seed means) = tau2 + sigma2 / m, with sigma2 the within-seed variance of the unit means and m the units per
    seed; tau2 (the training seed's own variance, build included) is clipped at 0.
    Returns {"tau2", "sigma2", "seeds", "units" (per seed), "sd_seed" (the SD of the seed means)}.
    """
    per_unit = d.groupby([cluster, unit])[metric].mean()
    seeds = per_unit.groupby(level=0).mean()
    m = float(per_unit.groupby(level=0).size().mean())
    sigma2 = float(per_unit.groupby(level=0).var(ddof=1).mean())
    sd_seed = float(seeds.std(ddof=1)) if len(seeds) > 1 else float("nan")
    tau2 = max(0.0, sd_seed ** 2 - sigma2 / m) if len(seeds) > 1 else float("nan")
    return {"tau2": tau2, "sigma2": sigma2, "seeds": int(len(seeds)), "units": m, "sd_seed": sd_seed}


def design_mde(components: dict, n_seeds: int, units: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The MDE of a design with `n_seeds` training seeds and `units` evaluation scenarios per seed, from measured
    variance components (`variance_components`): sd = sqrt(tau2 + sigma2 / units)."""
    return mde(float(np.sqrt(components["tau2"] + components["sigma2"] / units)), n_seeds, alpha, power)


def power_analysis(a: pd.DataFrame, b: pd.DataFrame, metric: str, paper_effect: float | None,
                   keys: Sequence[str] = ("counterpart", "scenario"), cluster: str = "seed",
                   unit: str = "scenario") -> dict:
    """Power of the claim "a beats b on metric" as the notebook measured it: the MDE of its design (from the
    per-seed mean paired differences' SD), beside the paper's effect on the same scale, with the variance
    components for planning other designs (`design_mde`).

    Returns {"mde", "paper_effect", "detectable" (mde <= |paper_effect|), "seeds", "games", "units", "sd_seed",
    "tau2", "sigma2"}; what a single seed cannot estimate is None.
    """
    d, _ = _pair_games(a, b, metric, keys, cluster)
    comp = variance_components(d, "diff", cluster, unit) if cluster in d else None
    seeds = comp["seeds"] if comp else 1
    out = {"mde": mde(comp["sd_seed"], seeds) if comp else float("nan"),
           "paper_effect": None if paper_effect is None else float(paper_effect),
           "seeds": seeds, "games": int(len(d))}
    out["detectable"] = (bool(out["mde"] <= abs(paper_effect)) if paper_effect is not None and np.isfinite(out["mde"])
                         else None)  # None: no paper effect to compare with, or one seed (no MDE)
    if comp:
        out.update({k: comp[k] for k in ("units", "sd_seed", "tau2", "sigma2")})
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in out.items()}  # JSON: no nan


def summarize(games: pd.DataFrame, by: Sequence[str] = ("policy", "counterpart"),
              metrics: Sequence[str] = ("score", "agreed", "pareto", "joint", "invalid_rate"),
              cluster: str = "seed") -> pd.DataFrame:
    """Mean and 95% CI of each metric per group: columns <metric>, <metric>_lo, <metric>_hi, n (games), seeds.

    Groups with several training seeds (a `cluster` column not among `by`) get the t-interval over seeds
    (`clustered_ci`); groups with one seed or no seed column the bootstrap over games."""
    out = []
    for key, g in games.groupby(list(by), sort=False):
        row = dict(zip(by, key if isinstance(key, tuple) else (key,)))
        seeds = g[cluster].nunique() if cluster in g and cluster not in by else 1
        row.update({"n": len(g), "seeds": int(seeds)})
        for m in metrics:
            lo, hi = clustered_ci(g, m, cluster) if seeds > 1 else bootstrap_ci(g[m].to_numpy())
            row.update({m: float(g[m].mean()), f"{m}_lo": lo, f"{m}_hi": hi})
        out.append(row)
    return pd.DataFrame(out)


def ci_dict(table: pd.DataFrame, metric: str, by: str = "method") -> dict:
    """A `summarize` table's `metric` as a summary's entry: {group: mean, "<group>_ci": [lo, hi]} in row order."""
    out = {}
    for r in table.itertuples():
        out[getattr(r, by)] = getattr(r, metric)
        out[f"{getattr(r, by)}_ci"] = [getattr(r, f"{metric}_lo"), getattr(r, f"{metric}_hi")]
    return out


def ci_long(table: pd.DataFrame, column: str, by: str = "method", **labels) -> pd.DataFrame:
    """A `summarize` table's metric `column` as long rows to display beside others: the labels (e.g. metric="score"),
    the group, mean, lo, hi, games, seeds."""
    return pd.DataFrame({**labels, by: table[by], "mean": table[column], "lo": table[f"{column}_lo"],
                         "hi": table[f"{column}_hi"], "games": table["n"], "seeds": table["seeds"]})


def by_counterpart(games: pd.DataFrame, metric: str, methods: Sequence[str]) -> tuple[dict, pd.DataFrame]:
    """Each method's mean `metric` against each counterpart (methods in the order given): as a summary's entry
    {method: {counterpart: mean}}, and as its table (methods x counterparts)."""
    table = games.pivot_table(index="method", columns="counterpart", values=metric).loc[list(methods)]
    return {m: row.to_dict() for m, row in table.iterrows()}, table


def mean_ci(key: str, x: Sequence[float]) -> dict:
    """{key: the mean of x, "<key>_ci": its t-interval} (a value per training seed: the interval over seeds); the
    interval is left out for a single value."""
    x = np.asarray(x)
    return {key: float(x.mean()), **({f"{key}_ci": list(t_interval(x))} if len(x) > 1 else {})}


def mean_ci_by(frame: pd.DataFrame, column: str, by: str = "method") -> dict:
    """`mean_ci` of `column` per group of `by` (each group a value per training seed; missing values left out):
    {group: mean, "<group>_ci": the t-interval over seeds}, in the groups' order of appearance."""
    out = {}
    for name, g in frame.groupby(by, sort=False):
        out.update(mean_ci(name, g[column].dropna()))
    return out


def change_over_training(curves: pd.DataFrame, column: str, by: str = "method") -> dict:
    """How far a logged value moved in training, per group: each seed's value at its group's last logged step minus
    at its first (rows of `run.read_metrics` with `by`, "seed", "step" and `column`; rows without the value are
    left out), as `mean_ci` entries {group: mean, "<group>_ci": the t-interval over seeds}."""
    out = {}
    for name, g in curves.dropna(subset=[column]).groupby(by, sort=False):
        first, last = g["step"].min(), g["step"].max()
        per_seed = g[g["step"] == last].set_index("seed")[column] - g[g["step"] == first].set_index("seed")[column]
        out.update(mean_ci(name, per_seed.dropna()))
    return out


def fisher_ci(rho: float, n: int) -> list[float]:
    """The Fisher-z 95% interval (z = atanh(rho) +- 1.96 / sqrt(n - 3)) of a correlation measured on n pairs."""
    z, se = np.arctanh(np.clip(rho, -0.999999, 0.999999)), 1 / np.sqrt(max(n - 3, 1))
    return [float(np.tanh(z - 1.96 * se)), float(np.tanh(z + 1.96 * se))]


def rank_agreement(frame: pd.DataFrame, judge: str, reference: str = "gpt4",
                   keys: Sequence[str] = ("goal", "relationship")) -> dict:
    """How a judge's estimates rank as a reference's do, per key: Spearman's rho of the columns "<judge>_<key>" and
    "<reference>_<key>" (one row per scored dialogue side) with its Fisher-z 95% interval, as {"<key>_spearman",
    "<key>_spearman_ci"}; both None where rho is not defined (a constant column)."""
    from scipy.stats import spearmanr

    out = {}
    for key in keys:
        rho = float(spearmanr(frame[f"{judge}_{key}"], frame[f"{reference}_{key}"]).statistic)
        out[f"{key}_spearman"] = rho if np.isfinite(rho) else None
        out[f"{key}_spearman_ci"] = fisher_ci(rho, len(frame)) if np.isfinite(rho) else None
    return out


def mean_claim(d: pd.DataFrame, metric: str, cluster: str = "seed") -> dict:
    """A claim record of one quantity measured per game (e.g. `counterpart_gap`'s gaps; not a difference of two
    methods): {"diff": its mean, "ci": its interval (`clustered_ci`: over training seeds), "games", "seeds"}."""
    lo, hi = clustered_ci(d, metric, cluster)
    return {"diff": float(d[metric].mean()), "ci": [lo, hi], "games": len(d), "seeds": int(d[cluster].nunique())}


def counterpart_gap(train: pd.DataFrame, heldout: pd.DataFrame, metric: str,
                    keys: Sequence[str] = ("seed", "scenario")) -> pd.DataFrame:
    """How much more a policy gets against its training counterpart than against held-out ones: per `keys`
    (a training seed's scenario, and role where it has several), metric of the game in `train` minus the mean metric
    of the games in `heldout` at the same keys; keys without a held-out game are dropped. Returns one row per key
    (the keys, `metric`, counterpart "-"), ready for `clustered_ci` and, against another method's gap (a difference
    of differences: the mismatch beyond the base's), `paired_clustered`."""
    keys = list(keys)
    trained = train.set_index(keys)[metric]
    held = heldout.groupby(keys)[metric].mean()
    return (trained - held.reindex(trained.index)).dropna().rename(metric).reset_index().assign(counterpart="-")


def mismatch(games: pd.DataFrame, method: str, train: str, heldout: Sequence[str], metric: str, base: str = "base",
             base_train: str | None = None, keys: Sequence[str] = ("seed", "scenario"), by: str = "method"
             ) -> dict | None:
    """How much more `method` gets against its training counterpart than against held-out ones, beyond the
    untrained base's own such gap: {"gap": its `counterpart_gap` (its games against counterpart `train` minus its mean
    against the `heldout` counterparts, per keys) as a `mean_claim`, "base_gap": the base's (against `base_train`,
    default `train`), "minus_base": gap minus base_gap paired game by game (`paired_clustered`, a difference of
    differences)}. None when the method has no game against `train`."""
    def gap(m: str, against: str) -> pd.DataFrame:
        g = games[games[by] == m]
        return counterpart_gap(g[g["counterpart"] == against], g[g["counterpart"].isin(list(heldout))], metric, keys)

    d = gap(method, train)
    if not len(d):
        return None
    b = gap(base, base_train or train)
    return {"gap": mean_claim(d, metric), "base_gap": mean_claim(b, metric),
            "minus_base": paired_clustered(d, b, metric, keys=[k for k in keys if k != "seed"])}


def paired_difference(games: pd.DataFrame, a: str, b: str, metric: str, by: str = "policy") -> dict:
    """Mean of metric(a) - metric(b) over games paired by scenario, role and counterpart, with its 95% CI: the
    bootstrap over games (`paired_clustered` without the seed level), for one table of one run's games."""
    out = paired_clustered(games[games[by] == a], games[games[by] == b], metric,
                           keys=("counterpart", "role", "scenario"), cluster=None)
    return {"diff": out["diff"], "lo": out["ci"][0], "hi": out["ci"][1], "n": out["games"]}
