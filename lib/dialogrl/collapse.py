"""Simulator collapse, measured where it happens: many replies of a simulator sampled at the same dialogue states,
and how spread they are (notebook 03; papers/03, "Simulator collapse").

A state is a played game cut just before the simulator's last reply (`states_before_reply`). At each state every
simulator samples n replies: `reply_sample` draws them in one batch from torch's global generator (seed it first),
`sample_replies` draws reply j at state i from its own named stream (common random numbers across simulators,
whatever the batch). A Verbalized Sampling simulator writes n answers and each gives one candidate, drawn as its
mode draws (`vs_pick`); an unusable answer gives its raw text, as after VS's retries, and its usability is appended
to the caller's `unusable` list. `evaluate.reply_spread` and `evaluate.pooled_gamma` then measure the spread, and
`state_claims` compares two simulators state by state.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from dialogrl.agents import VerbalizedSampling
from dialogrl.claims import judge
from dialogrl.envs.base import ActRequest, Agent, GameState, Task
from dialogrl.evaluate import cross_play, pooled_gamma, t_interval
from dialogrl.seeds import stream_rng, stream_seed
from dialogrl.verbalized import parse_vs, vs_messages


def before_last_reply(state: GameState, role: str) -> GameState:
    """The state before `role`'s last turn in a played game (the state after the first turn, if it never spoke)."""
    idx = [i for i, t in enumerate(state.turns) if t.role == role]
    return GameState(state.scenario, state.turns[:idx[-1]] if idx else state.turns[:1])


def states_before_reply(task: Task, policy: Agent, simulator: Agent, scenarios: Sequence, role: str, seed: int,
                        name: str) -> list[GameState]:
    """Games of `policy` (in seat `role`) against `simulator` on `scenarios`, each cut before the simulator's last
    reply; the games are cross_play's, the simulator named `name` (its streams: evaluate.cross_play)."""
    played = cross_play(task, {"policy": policy}, {name: simulator}, scenarios, seats=[role], seed=seed,
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
    prompt = vs_messages(request.messages, agent.k, agent.speaker, agent.partner)
    return [vs_reply(agent, u.text, rng, unusable) for u in agent.lm.generate([prompt] * n)]


def sample_at_states(task: Task, states: Sequence[GameState], role: str, agents: Mapping[str, Agent], n: int,
                     rng: np.random.Generator, unusable: list[bool]) -> dict[str, list[list[str]]]:
    """{name: replies per state} of each agent in seat `role` at each state (`reply_sample`; state by state, the
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
    rows = [vs_messages(c, agent.k, agent.speaker, agent.partner) if vs else c for c in chats for _ in range(n)]
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
    """The collapse of simulators that play the game's own seat: `policy` (seat `role`) plays simulators[reference]
    (named `name` in the games, which keys their streams) on `scenarios`; each game is cut before the simulator's
    last reply, and at each cut every simulator samples `samples` replies (`sample_at_states`: one batch per state
    from torch's generator, so seed it first; VS draws from default_rng(seed)). `spread` measures the replies
    (evaluate.reply_spread). Returns `spread_record`'s record and the spread's rows."""
    states = states_before_reply(task, policy, simulators[reference], scenarios, role, seed, name=name)
    unusable: list[bool] = []
    replies = sample_at_states(task, states, task.other(role), simulators, samples, np.random.default_rng(seed),
                               unusable)
    rows = spread(replies)
    return spread_record(replies, rows, measures, samples, unusable, reference), rows


def collapse_at_chats(task: Task, talker, simulators: Mapping[str, Agent], policy: Agent, scenarios: Sequence,
                      role: str, samples: int, seed: int, spread: Callable[[dict], pd.DataFrame],
                      measures: Sequence[str], reference: str = "reference") -> tuple[dict, pd.DataFrame]:
    """The collapse of a model's simulators, sampled on the model's own chats: `policy` (seat `role`) plays `talker`
    (a counterpart.LMCounterpart of the model) on `scenarios`; each game is cut before the talker's last reply
    (`states_before_reply`), and at each cut every simulator samples `samples` replies to the chat the talker saw
    (`sample_replies`, streams keyed "collapse/<talker.name>"). `spread` measures the replies (evaluate.reply_spread).
    Returns `spread_record`'s record and the spread's rows."""
    other = task.other(role)
    states = states_before_reply(task, policy, talker, scenarios, role, seed, name=talker.name)
    chats = [talker.talk_messages(ActRequest(task, st, other, task.view(st, other))) for st in states]
    unusable: list[bool] = []
    replies = {name: sample_replies(agent, chats, samples, seed, f"collapse/{talker.name}", other, unusable)
               for name, agent in simulators.items()}
    rows = spread(replies)
    return spread_record(replies, rows, measures, samples, unusable, reference), rows
