"""The batched multi-agent, multi-turn rollout engine.

    episodes = play(task, {"A": agent_a, "B": agent_b}, scenarios)

Many games advance together, one turn per round. In each round the games are grouped by the agent whose role
speaks next, and each agent acts once on its whole group: an LMAgent makes one batched `generate` call for all of
them (both roles of a self-play game share that call when they share the agent), scripted agents answer in the
same loop. Every LM turn keeps its prompt ids, sampled token ids and log-probs, and its role, so trainers can mask
by role and score exactly what was sampled. With a fixed seed (seed_everything) the result is deterministic on CPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dialogrl.agents import ActRequest, Agent, Utterance
from dialogrl.envs.base import GameState, Task


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
        return {"scenario": sc.__dict__ if hasattr(sc, "__dict__") else str(sc), "agents": self.agents,
                "turns": [{"role": t.role, "text": t.text, "invalid": t.invalid, "phase": t.phase}
                          for t in self.state.turns],
                "end": self.state.end_reason, "outcome": self.outcome}


def play(task: Task, agents: dict[str, Agent], scenarios: Sequence, max_rounds: int | None = None) -> list[Episode]:
    """Play one game per scenario with `agents[role]` speaking for each role; returns the finished Episodes."""
    missing = [r for r in task.roles if r not in agents]
    if missing:
        raise ValueError(f"no agent for role(s) {missing}; the task's roles are {task.roles}")
    states = [task.reset(s) for s in scenarios]
    rounds = 0
    while True:
        active = [i for i, s in enumerate(states) if not s.done]
        if not active:
            break
        rounds += 1
        if max_rounds is not None and rounds > max_rounds:
            raise RuntimeError(f"games still running after {max_rounds} rounds: the task never ended them")
        groups: dict[int, list[tuple[int, str]]] = {}
        for i in active:
            role = task.current_role(states[i])
            groups.setdefault(id(agents[role]), []).append((i, role))
        for members in groups.values():
            agent = agents[members[0][1]]
            requests = [ActRequest(task, states[i], role, task.view(states[i], role)) for i, role in members]
            for (i, role), said in zip(members, agent.act(requests)):
                u = said if isinstance(said, Utterance) else Utterance(str(said))
                turn = task.step(states[i], u.text)
                turn.agent = getattr(agent, "name", None)
                turn.prompt_ids, turn.completion_ids, turn.logprobs = u.prompt_ids, u.completion_ids, u.logprobs
    for agent in {id(a): a for a in agents.values()}.values():
        if hasattr(agent, "clear_cache"):
            agent.clear_cache()  # the finished games' KV caches
    return [Episode(s, _agent_names(task, agents, s), task.outcome(s)) for s in states]


def _agent_names(task: Task, agents: dict[str, Agent], state: GameState) -> dict[str, str]:
    picks = state.info.get("population", {})
    return {r: picks.get(r, getattr(agents[r], "name", "agent")) for r in task.roles}
