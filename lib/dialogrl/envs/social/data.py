"""SOTOPIA's released data, from a local folder: the SOTOPIA-hard episodes with GPT-4's scores (the judge's
validation set) and the 40 character profiles (the held-out partners' traits). Never committed to this repository.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dialogrl.run import read_json, read_jsonl

SOTOPIA_EPISODES = "hard_episodes_gpt35_gpt4"
SOTOPIA_SCORES = "complete_gpt_score.json"
_SAID = re.compile(r'^(?:Turn #\d+:?\s*)?([^\n"]+?) said: "(.*)"\s*$')   # 'Turn #0: A said: "..."' or on its own line


@dataclass
class SotopiaEpisode:
    """One stored SOTOPIA episode (LLM-LLM, on a SOTOPIA-hard scenario): the two participants' names, their goals
    (as rendered), the turns as (name, text), the models ([evaluator, agent1, agent2]) and GPT-4's scores per side
    ({"agent1": {"goal": 0..10, "relationship": -5..5, ...}, "agent2": ...}; None where the file has none)."""
    pk: str
    env_id: str
    names: tuple[str, str]
    goals: tuple[str, str]
    turns: list[tuple[str, str]]
    models: list[str]
    scores: dict | None


def load_sotopia_episodes(source: str | Path) -> list[SotopiaEpisode]:
    """The SOTOPIA-hard episodes of a local folder holding `hard_episodes_gpt35_gpt4/*.json` and
    `complete_gpt_score.json` (sotopia-lab/sotopia's human-evaluation release), sorted by episode id."""
    path = Path(source).expanduser()
    if not (path / SOTOPIA_EPISODES).is_dir():
        raise FileNotFoundError(f"no SOTOPIA episodes at {source!r}: need a folder with {SOTOPIA_EPISODES}/ and "
                                f"{SOTOPIA_SCORES}")
    scores = read_json(path / SOTOPIA_SCORES) if (path / SOTOPIA_SCORES).is_file() else {}
    out = []
    for f in sorted((path / SOTOPIA_EPISODES).glob("*.json")):
        d = read_json(f)
        text = d.get("rewards_prompt", "")
        m = re.search(r"^Participants: (.+?) and (.+?)$", text, re.M)
        if m is None:
            raise ValueError(f"{f}: no 'Participants: A and B' line in rewards_prompt")
        names = (m.group(1).strip(), m.group(2).strip())
        goals = tuple((re.search(rf"^{re.escape(n)}'s goal: (.*)$", text, re.M) or [None, ""])[1] for n in names)
        turns = []
        for line in text.splitlines():
            s = _SAID.match(line.strip())
            if s and s.group(1).strip() in names:
                turns.append((s.group(1).strip(), s.group(2)))
        out.append(SotopiaEpisode(d["pk"], d["environment"], names, goals, turns, d.get("models", []),
                                  scores.get(d["pk"])))
    if not out:
        raise ValueError(f"{path / SOTOPIA_EPISODES}: no episodes")
    return out


def load_sotopia_profiles(source: str | Path) -> list[dict]:
    """SOTOPIA's 40 character profiles (`agent_profiles.jsonl`: names, Big Five, decision-making style, ...)."""
    path = Path(source).expanduser() / "agent_profiles.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no SOTOPIA character profiles at {path}")
    return read_jsonl(path)


@dataclass
class ScoredSide:
    """One side of a scored SOTOPIA episode, as a judge reads it: the episode, the side ("agent1" or "agent2"), and
    the dialogue (its turns, the side's character, (its goal, the other's goal)); `reference` is GPT-4's scores of
    that side."""
    episode: SotopiaEpisode
    side: str
    dialogue: tuple[list[tuple[str, str]], str, tuple[str, str]]

    @property
    def reference(self) -> dict:
        return self.episode.scores[self.side]


def scored_sides(episodes: list[SotopiaEpisode], n: int) -> list[ScoredSide]:
    """Both sides of each of the first n episodes with GPT-4's scores (the judge's validation set)."""
    return [ScoredSide(e, side, (e.turns, name, (e.goals[i], e.goals[1 - i])))
            for e in [e for e in episodes if e.scores][:n]
            for i, (side, name) in enumerate(zip(("agent1", "agent2"), e.names))]


def validation_rows(sides: list[ScoredSide], estimates: dict[str, list[dict]],
                    keys: tuple[str, ...] = ("goal", "relationship")) -> list[dict]:
    """A row per side: the episode, the side, GPT-4's score per key ("gpt4_<key>") and each estimator's
    ("<name>_<key>": estimates[name][i], in the order of `sides`)."""
    return [{"episode": s.episode.pk, "side": s.side, **{f"gpt4_{key}": s.reference[key] for key in keys},
             **{f"{name}_{key}": est[i][key] for name, est in estimates.items() for key in keys}}
            for i, s in enumerate(sides)]
