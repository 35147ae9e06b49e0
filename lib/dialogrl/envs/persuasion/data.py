"""The human Persuasion for Good dialogues (Wang et al. 2019), from a local folder of the release's CSV files
(`load_p4g`): each dialogue a P4GRecord with its turns, the persuadee's donation and, for the 300 annotated
dialogues, the strategy label of every persuader sentence; `p4g_human_corpus` is the corpus of
`tiny-persuasion-human`. The data is never committed to this repository; tests read a local copy.
"""
from __future__ import annotations

import csv
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from dialogrl.envs.persuasion.task import PERSUADEE_PROFILES, PersuasionForGood, PersuasionScenario, donate_marker
from dialogrl.run import text_lines

P4G_ROLES = {"0": "persuader", "1": "persuadee"}   # the release's B4 codes: 0 persuader (ER), 1 persuadee (EE)
P4G_FILES = ("full_dialog.csv", "full_info.csv")


@dataclass
class P4GRecord:
    """One Persuasion for Good dialogue. turns: (role, text), consecutive units of one speaker joined. donation: the
    persuadee's actual donation in dollars (B6), clipped to the $2 payment (the release holds a few larger values,
    `raw_donation`); None where the file has none. sentences: for the 300 annotated dialogues, every persuader
    sentence as (turn number of the release, text, strategy label er_label_1), else None; responses: the same for
    every persuadee sentence (its dialogue act ee_label_1: agree-donation, ask-org-info, ...)."""
    id: str
    turns: list[tuple[str, str]]
    donation: float | None
    raw_donation: float | None = None
    sentences: list[tuple[int, str, str]] | None = None
    responses: list[tuple[int, str, str]] | None = None


def _read_csv(path: Path) -> list[dict]:
    return list(csv.DictReader(line for _, line in text_lines(path)))


def load_p4g(source: str | Path, payment: float = 2.0) -> list[P4GRecord]:
    """Persuasion for Good records from a local folder holding the release's `full_dialog.csv` and `full_info.csv`
    (and, for the strategy annotations, `300_dialog.csv`), in the order of `full_dialog.csv`."""
    path = Path(source).expanduser()
    missing = [n for n in P4G_FILES if not (path / n).is_file()]
    if not path.is_dir() or missing:
        raise FileNotFoundError(f"no Persuasion for Good release at {source!r}: need a folder with "
                                f"{', '.join(P4G_FILES)} (missing: {', '.join(missing) or 'the folder'})")
    turns: dict[str, list[tuple[str, str]]] = {}
    for n, row in enumerate(_read_csv(path / "full_dialog.csv"), 2):
        role = P4G_ROLES.get(row.get("B4", ""))
        if role is None or not row.get("B2"):
            raise ValueError(f"{path / 'full_dialog.csv'}:{n}: malformed row (B4 must be 0 or 1, B2 a dialogue id)")
        text = " ".join((row.get("Unit") or "").split())
        said = turns.setdefault(row["B2"], [])
        if said and said[-1][0] == role:
            said[-1] = (role, f"{said[-1][1]} {text}".strip())
        elif text:
            said.append((role, text))
    donations: dict[str, float] = {}
    for row in _read_csv(path / "full_info.csv"):
        if row.get("B4") == "1" and row.get("B6") not in (None, ""):
            donations[row["B2"]] = float(row["B6"])
    sentences: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    responses: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    if (path / "300_dialog.csv").is_file():
        for row in _read_csv(path / "300_dialog.csv"):
            for role, column, into in (("0", "er_label_1", sentences), ("1", "ee_label_1", responses)):
                if row.get("B4") == role and row.get(column):
                    into[row["B2"]].append((int(float(row["Turn"])), " ".join(row["Unit"].split()),
                                            row[column].strip()))
    out = []
    for did, said in turns.items():
        raw = donations.get(did)
        out.append(P4GRecord(did, said, None if raw is None else min(max(raw, 0.0), payment), raw,
                             sentences.get(did), responses.get(did)))
    return out


def p4g_human_corpus(source: str | Path | None, max_exchanges: int = 5, seed: int = 0,
                     n_dialogues: int | None = None) -> list[list[dict]]:
    """The human persuadees of Persuasion for Good as chat conversations: the corpus of `tiny-persuasion-human`, the
    held-out "human" persuadee of notebook 03.

    Each dialogue from the persuadee's view, cut to the game's first `max_exchanges` exchanges, its last kept turn
    ending with the persuadee's recorded donation as the game's marker ([DONATE $x]: the study recorded it after the
    chat). The system prompt names a persuadee profile drawn uniformly (seeded) from PERSUADEE_PROFILES, so that the
    model, like the humans, answers every profile's prompt the same way. Dialogues without a recorded donation are
    left out; n_dialogues keeps the first so many of the rest (None: all).
    """
    if source is None:
        raise ValueError("tiny-persuasion-human is built from the Persuasion for Good release: give a local copy, "
                         "`python -m dialogrl build-tiny tiny-persuasion-human --data <folder with full_dialog.csv>`")
    task = PersuasionForGood(max_exchanges=max_exchanges)
    rng = random.Random(seed)
    out = []
    for i, rec in enumerate(load_p4g(source)):
        if rec.donation is None or len(rec.turns) < 2:
            continue
        turns = rec.turns[:2 * max_exchanges]
        if turns[-1][0] != "persuadee":
            turns = turns[:-1]
        state = task.reset(PersuasionScenario(rng.choice(sorted(PERSUADEE_PROFILES)), 0.0, id=i))
        for k, (_, text) in enumerate(turns):
            said = text.replace("[", "(").replace("]", ")")   # the humans' own brackets are not markers
            task.step(state, f"{said} {donate_marker(rec.donation)}" if k == len(turns) - 1 else said)
        out.append(task.view(state, "persuadee"))
    return out if n_dialogues is None else out[:n_dialogues]
