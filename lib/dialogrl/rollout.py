"""The batched multi-agent, multi-turn rollout engine.

    episodes = play(task, {"A": agent_a, "B": agent_b}, scenarios)
    cells = play_cells(task, [({"A": a, "B": b}, scenarios, seeds), ({"A": a, "B": c}, scenarios, seeds)])

Many games advance together. Language-model agents stream: every game whose turn falls to an LMAgent joins that
agent's running batch, the batch samples one token per step for all its rows, and a game whose turn just ended is
stepped at once and its next turn queued (continuous batching: no game waits for the slowest turn of a round).
Both roles of a self-play game share one batch when they share the agent, and so do the games of several pairings
played at once (`play_cells`: an agent's games against every counterpart in one batch). Scripted agents answer as
soon as it is their turn, grouped per agent. Every LM turn keeps its prompt ids, sampled token ids and log-probs,
and its role, so trainers can mask by role and score exactly what was sampled.

Randomness. With `seeds` (one per game) every game draws from its own streams (dialogrl.seeds): its LM turns sample
tokens from per-(game, role) generators and its scripted agents key their draws on the game, so a game plays the
same whatever else is in the batch. Without seeds, LM sampling follows torch's global generator (seed_everything
makes a run deterministic on CPU, but a game then depends on the batch).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dialogrl.game import MAX_TURN_CHARS, ActRequest, Agent, GameState, StreamingAgent, Task, Utterance


@dataclass
class Episode:
    """A finished game: its final state (all turns), which agent played each role, and the outcome per role."""
    state: GameState
    agents: dict[str, str]
    outcome: dict[str, dict]

    @property
    def scenario(self):
        return self.state.scenario

    def transcript(self) -> dict:
        """A JSON-ready record for transcripts.jsonl."""
        sc = self.state.scenario
        scenario = dataclasses.asdict(sc) if dataclasses.is_dataclass(sc) else getattr(sc, "__dict__", str(sc))
        return {"scenario": scenario, "seed": self.state.seed, "agents": self.agents,
                "turns": [{"role": t.role, "text": t.text, "invalid": t.invalid, "phase": t.phase}
                          for t in self.state.turns],
                "end": self.state.end_reason, "outcome": self.outcome}


def role_turns(episodes: Sequence[Episode], role: str) -> list[str]:
    """The texts `role` said in `episodes`, game by game and turn by turn."""
    return [t.text for e in episodes for t in e.state.turns if t.role == role]


def play(task: Task, agents: Mapping[str, Agent] | Sequence[Mapping[str, Agent]], scenarios: Sequence,
         max_turns: int = 1000, seeds: Sequence[int] | None = None, max_live: int | None = None) -> list[Episode]:
    """Play one game per scenario with `agents[role]` speaking for each role; returns the finished Episodes.

    agents: one mapping {role: agent} for every game, or one per scenario (games of several pairings at once: an
        agent in several pairings answers all its games in one batch; `play_cells` builds these).
    seeds: one per scenario, each game's own seed (GameState.seed; e.g. seeds.stream_seed("eval-games", ...)), or
    None (games without seeds: see the module docstring).
    max_turns guards against a task that never ends a game (a RuntimeError past that many turns in one game).
    max_live: at most this many games at once (the others start, in order, as games end), which bounds the KV
    caches the batches hold: an evaluation cell of hundreds of games on a GPU. None: all at once. Seeded games play
    the same either way.
    """
    if max_live is not None and max_live < 1:
        raise ValueError(f"max_live={max_live!r}: must be >= 1 (or None: every game at once)")
    per_game = [agents] * len(scenarios) if isinstance(agents, Mapping) else list(agents)
    if len(per_game) != len(scenarios):
        raise ValueError(f"{len(per_game)} agent mappings for {len(scenarios)} scenarios: give one per game")
    for pairing in {id(a): a for a in per_game}.values():
        missing = [r for r in task.roles if r not in pairing]
        if missing:
            raise ValueError(f"no agent for role(s) {missing}; the task's roles are {task.roles}")
        for role in task.roles:
            if not isinstance(pairing[role], Agent):
                raise TypeError(f"the agent for role {role!r} is a {type(pairing[role]).__name__}, not an Agent: "
                                "subclass dialogrl.game.Agent (act) or StreamingAgent (submit, busy, advance)")
    states = [task.reset(s) for s in scenarios]
    if seeds is not None:
        if len(seeds) != len(states):
            raise ValueError(f"{len(seeds)} seeds for {len(states)} scenarios: give one seed per game")
        for state, seed in zip(states, seeds):
            state.seed = seed
    index = {id(s): i for i, s in enumerate(states)}
    every = list({id(a): a for pairing in per_game for a in pairing.values()}.values())
    streaming = [a for a in every if isinstance(a, StreamingAgent)]

    def record(i: int, agent: Agent, said) -> None:
        u = said if isinstance(said, Utterance) else Utterance(str(said))
        if len(u.text) > MAX_TURN_CHARS:   # before the game's parser sees it; counted in the game's info
            u = dataclasses.replace(u, text=u.text[:MAX_TURN_CHARS])
            states[i].info["cut_turns"] = states[i].info.get("cut_turns", 0) + 1
        turn = task.step(states[i], u.text)
        turn.agent = getattr(agent, "name", None)
        turn.prompt_ids, turn.completion_ids, turn.logprobs = u.prompt_ids, u.completion_ids, u.logprobs
        if len(states[i].turns) > max_turns and not states[i].done:
            raise RuntimeError(f"a game is still running after {max_turns} turns: the task never ended it")

    def dispatch(games: list[int]) -> None:
        """Hand each of these games to the agent whose turn it is; scripted agents answer at once."""
        while games:
            groups: dict[int, list[tuple[int, str]]] = {}
            for i in games:
                if not states[i].done:
                    role = task.current_role(states[i])
                    groups.setdefault(id(per_game[i][role]), []).append((i, role))
            games = []
            for members in groups.values():
                agent = per_game[members[0][0]][members[0][1]]
                requests = [ActRequest(task, states[i], role, task.view(states[i], role)) for i, role in members]
                if isinstance(agent, StreamingAgent):
                    agent.submit(requests)
                    continue
                for (i, _), said in zip(members, agent.act(requests)):
                    record(i, agent, said)
                    games.append(i)

    waiting = list(range(len(states)))[::-1]   # games not started yet, popped in order

    def admit() -> None:
        """Start waiting games while fewer than max_live are running."""
        if not waiting:
            return
        n = len(states) - len(waiting)
        free = len(waiting) if max_live is None else max_live - sum(not s.done for s in states[:n])
        dispatch([waiting.pop() for _ in range(min(max(free, 0), len(waiting)))])

    admit()
    while waiting or any(a.busy() for a in streaming):
        for agent in streaming:
            if agent.busy():
                ended = []
                for request, said in agent.advance():
                    record(index[id(request.state)], agent, said)
                    ended.append(index[id(request.state)])
                dispatch(ended)
        admit()
    for agent in every:
        agent.clear_cache()  # e.g. the finished games' KV caches
    return [Episode(s, _agent_names(task, per_game[i], s), task.outcome(s)) for i, s in enumerate(states)]


def play_cells(task: Task, cells: Sequence[tuple[Mapping[str, Agent], Sequence, Sequence[int] | None]],
               max_live: int | None = None) -> list[list[Episode]]:
    """Several plays at once: cells of (agents, scenarios, seeds), each as `play` would play it alone (seeded games
    play the same), all in one `play`, so that an agent in several cells answers all its games in one batch (the
    design checks' probes and rooms, an evaluation's counterparts). Cells whose agents would share a wrapped
    streaming agent with another agent (two counterparts around one LMAgent: each hands back only the turns it
    asked for) go to the next play, in order. Returns each cell's Episodes, in order."""
    plays: list[list[int]] = []
    owner: dict[int, int] = {}   # id(a streaming agent, wrapped or not) -> id(the agent in a pairing that holds it)
    for k, (pairing, _, _) in enumerate(cells):
        wants = {inner: id(a) for a in pairing.values() for inner in _streams(a)}
        if not plays or any(owner.get(inner, holder) != holder for inner, holder in wants.items()):
            plays.append([])
            owner = {}
        plays[-1].append(k)
        owner.update(wants)
    out: list[list[Episode]] = [[] for _ in cells]
    for group in plays:
        agents, scenarios, seeds = [], [], []
        for k in group:
            pairing, mine, own = cells[k]
            agents += [pairing] * len(mine)
            scenarios += list(mine)
            seeds += list(own) if own is not None else [None] * len(mine)
        episodes = play(task, agents, scenarios, seeds=seeds, max_live=max_live)
        start = 0
        for k in group:
            out[k] = episodes[start:start + len(cells[k][1])]
            start += len(cells[k][1])
    return out


def _streams(agent: Agent) -> set[int]:
    """The streaming agents `agent` drives: itself, and those it wraps (an `lm`, a population's `members`)."""
    found = {id(agent)} if isinstance(agent, StreamingAgent) else set()
    inner = [getattr(agent, "lm", None), *getattr(agent, "members", {}).values()]
    for a in inner:
        if isinstance(a, Agent):
            found |= _streams(a)
    return found


def _agent_names(task: Task, agents: Mapping[str, Agent], state: GameState) -> dict[str, str]:
    picks = state.info.get("population", {})
    return {r: picks.get(r, getattr(agents[r], "name", "agent")) for r in task.roles}
