"""The human Deal or No Deal dialogues (Lewis et al. 2017) as the game's own types, from either source:
  - the original release's text files (`data.txt` raw format, `train/val/test.txt` tagged format), from a local path;
  - the hub dataset `mikelewis0/deal_or_no_dialog` (needs internet or the local HF cache): its Parquet export
    (`refs/convert/parquet`, config `dialogues`), since datasets 4.x no longer runs the loading script on its main
    branch; or a local copy of that export (a folder of `<split>/*.parquet`).
Each dialogue becomes a DondRecord: the scenario with A = the first speaker, the talk turns, and each role's own
selection where the file records it. `replay(task, record)` plays it through the task's rules; `dond_human_corpus`
is the corpus of `tiny-dond-human`. The data is never committed to this repository; tests read a local copy (see
tests/conftest.py).
"""
from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dialogrl.envs.dealnodeal.task import SELECTION_TOKEN, DealOrNoDeal, DondScenario
from dialogrl.game import GameState
from dialogrl.hub import HUB_ID_PATTERN, hub_reachable
from dialogrl.run import text_lines

DOND_HUB_ID = "mikelewis0/deal_or_no_dialog"
# the hub's automatic Parquet export of the dataset (its main branch holds only a loading script) and the folder of
# the `dialogues` config in it (the other, `self_play`, has contexts without dialogues)
DOND_HUB_REVISION, DOND_HUB_CONFIG = "refs/convert/parquet", "dialogues"


@dataclass
class DondRecord:
    """One logged Deal or No Deal dialogue, as the roles A (first speaker) and B saw it."""
    scenario: DondScenario
    turns: list[tuple[str, str]]                      # (role, text); the last talk turn holds <selection>
    selections: dict[str, tuple | None] = field(default_factory=dict)  # role -> own counts, None = no agreement
    recorded: dict = field(default_factory=dict)      # what the file says (agree flag, reward field per role)


def _ctx(tokens: list[str]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """'c0 v0 c1 v1 c2 v2' -> (counts, values)."""
    xs = [int(t) for t in tokens]
    return tuple(xs[0::2]), tuple(xs[1::2])


def _turns(dialogue: str) -> list[tuple[str, str]]:
    """'YOU: hi <eos> THEM: ok <eos> YOU: <selection>' -> [('YOU', 'hi'), ('THEM', 'ok'), ('YOU', '<selection>')]"""
    out = []
    for chunk in dialogue.split("<eos>"):
        chunk = chunk.strip()
        if not chunk:
            continue
        speaker, _, text = chunk.partition(":")
        if speaker not in ("YOU", "THEM"):
            raise ValueError(f"malformed turn {chunk!r}: expected 'YOU: ...' or 'THEM: ...'")
        out.append((speaker, text.strip()))
    return out


_RAW = re.compile(r"^(?P<you>(?:\d+\s+){6})(?P<dialogue>.*?)\s+reward=(?P<reward>\S+(?: agreement)?)\s+"
                  r"(?P<agree>agree|disagree)\s+(?P<them>(?:\d+\s*){6})$")
_SEL = re.compile(r"<selection>\s*(?P<sel>item0=\d+ item1=\d+ item2=\d+|no agreement|disconnect)")


def parse_raw_line(line: str) -> dict:
    """One perspective line of `data.txt` -> dict(you, them, turns, selection, reward, agree)."""
    m = _RAW.match(line.strip())
    if not m:
        raise ValueError(f"not a Deal or No Deal data.txt line: {line[:80]!r}")
    dialogue = m["dialogue"]
    sel = _SEL.search(dialogue)
    if not sel:
        raise ValueError(f"no selection in line: {line[:80]!r}")
    turns = _turns(dialogue[:sel.start()] + SELECTION_TOKEN)
    s = sel["sel"]
    selection = None if not s.startswith("item0") else tuple(int(x.split("=")[1]) for x in s.split())
    reward = int(m["reward"]) if m["reward"].isdigit() else None
    return {"you": _ctx(m["you"].split()), "them": _ctx(m["them"].split()), "turns": turns,
            "selection": selection, "selection_text": s, "reward": reward, "agree": m["agree"] == "agree"}


def _record_from_perspectives(lines: list[dict]) -> DondRecord:
    """Merge the one or two perspective lines of a dialogue into a record with roles A (first speaker) and B."""
    first = lines[0]
    you_first = first["turns"][0][0] == "YOU"
    role_of = {"YOU": "A" if you_first else "B", "THEM": "B" if you_first else "A"}
    ctx = {role_of["YOU"]: first["you"], role_of["THEM"]: first["them"]}
    counts = ctx["A"][0]
    scenario = DondScenario(counts, (ctx["A"][1], ctx["B"][1]))
    turns = [(role_of[s], t) for s, t in first["turns"]]
    rec = DondRecord(scenario, turns)
    for line in lines:
        own = "A" if (line["turns"][0][0] == "YOU") else "B"
        rec.selections[own] = line["selection"]
        rec.recorded[own] = {"reward": line["reward"], "agree": line["agree"], "selection": line["selection_text"]}
    return rec


def load_dond_raw(path: str | Path) -> list[DondRecord]:
    """Read `data.txt` (raw format): pair the two perspective lines of each dialogue into one record.

    A dialogue whose other perspective line is missing gives a record with one role's selection only.
    """
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for n, line in text_lines(path):
        if not line.strip():
            continue
        try:
            p = parse_raw_line(line)
        except ValueError as err:
            raise ValueError(f"{path}:{n}: {err}") from None
        # the same key from both sides: contexts of (first speaker, second speaker) and the texts
        you_first = p["turns"][0][0] == "YOU"
        a, b = (p["you"], p["them"]) if you_first else (p["them"], p["you"])
        key = (a, b, tuple(t for _, t in p["turns"]))
        groups[key].append(p)
    records = []
    for lines in groups.values():
        # a key can (rarely) repeat across dialogues; take perspectives in pairs of one YOU-first and one THEM-first
        firsts = [p for p in lines if p["turns"][0][0] == "YOU"]
        seconds = [p for p in lines if p["turns"][0][0] == "THEM"]
        for i in range(max(len(firsts), len(seconds))):
            records.append(_record_from_perspectives([p for p in (firsts[i:i + 1] + seconds[i:i + 1])]))
    return records


_TAGGED = re.compile(r"<input>(?P<input>.*?)</input>\s*<dialogue>(?P<dialogue>.*?)</dialogue>\s*"
                     r"<output>(?P<output>.*?)</output>\s*<partner_input>(?P<partner_input>.*?)</partner_input>")


def _output_shares(output: str) -> tuple[tuple | None, tuple | None]:
    """'item0=2 item1=0 item2=1 item0=1 item1=3 item2=0' -> ((2,0,1), (1,3,0)); '<disagree> ...' -> (None, None)."""
    toks = output.split()
    if len(toks) != 6 or not all(t.startswith("item") for t in toks):
        return None, None
    xs = [int(t.split("=")[1]) for t in toks]
    return tuple(xs[:3]), tuple(xs[3:])


def dond_record_from_fields(you_input: Iterable[int], dialogue: str, output: str,
                            partner_input: Iterable[int]) -> DondRecord:
    """A record from one perspective of the tagged format (or a hub row): the output holds both roles' shares."""
    you, them = _ctx(list(you_input)), _ctx(list(partner_input))
    turns = _turns(dialogue)  # ends with the <selection> turn of whoever ended the talk
    you_first = not turns or turns[0][0] == "YOU"
    role_of = {"YOU": "A" if you_first else "B", "THEM": "B" if you_first else "A"}
    ctx = {role_of["YOU"]: you, role_of["THEM"]: them}
    scenario = DondScenario(ctx["A"][0], (ctx["A"][1], ctx["B"][1]))
    rec = DondRecord(scenario, [(role_of[s], t) for s, t in turns])
    own, theirs = _output_shares(output)
    rec.selections = {role_of["YOU"]: own, role_of["THEM"]: theirs}
    rec.recorded = {"output": output.strip()}
    return rec


def load_dond_tagged(path: str | Path) -> list[DondRecord]:
    """Read a tagged file (`train/val/test.txt`): one record per line (one perspective each)."""
    records = []
    for n, line in text_lines(path):
        if not line.strip():
            continue
        m = _TAGGED.search(line)
        if not m:
            raise ValueError(f"{path}:{n}: not a tagged Deal or No Deal line: {line[:80]!r}")
        records.append(dond_record_from_fields([int(x) for x in m["input"].split()], m["dialogue"],
                                               m["output"], [int(x) for x in m["partner_input"].split()]))
    return records


def dond_record_from_hub_row(row: dict) -> DondRecord:
    """A row of the hub dataset: {'input': {'count', 'value'}, 'dialogue', 'output', 'partner_input': {...}}."""
    def flat(x):
        return [v for pair in zip(x["count"], x["value"]) for v in pair]
    return dond_record_from_fields(flat(row["input"]), row["dialogue"], row["output"], flat(row["partner_input"]))


def load_dond(source: str | Path, split: str = "train") -> list[DondRecord]:
    """Deal or No Deal records from a local file/folder of the original release, the hub id, or a local copy of the
    hub's Parquet export.

    source: a path to `data.txt` or a tagged `*.txt`, a folder holding them (data.txt preferred, else <split>.txt),
    the hub id `mikelewis0/deal_or_no_dialog` (its Parquet export's `split`), or a folder of that export as
    `huggingface-cli download --repo-type dataset --revision refs/convert/parquet` writes it (`dialogues/<split>/
    *.parquet`, or `<split>/*.parquet`).
    """
    path = Path(source).expanduser()
    if path.is_dir():
        for name in ("data.txt", f"{split}.txt"):
            if (path / name).exists():
                path = path / name
                break
        else:
            parquet = sorted((path / DOND_HUB_CONFIG / split).glob("*.parquet")) or sorted(
                (path / split).glob("*.parquet"))
            if parquet:
                from datasets import load_dataset

                rows = load_dataset("parquet", data_files=[str(p) for p in parquet], split="train")
                return [dond_record_from_hub_row(r) for r in rows]
            raise FileNotFoundError(f"no data.txt, {split}.txt or {split}/*.parquet in {source}")
    if path.is_file():
        first = next((line for _, line in text_lines(path)), "")
        return load_dond_tagged(path) if first.lstrip().startswith("<input>") else load_dond_raw(path)
    if HUB_ID_PATTERN.match(str(source)) and not str(source).startswith((".", "~")):
        from datasets import load_dataset

        if not hub_reachable():
            raise OSError(f"cannot load {source!r}: this machine is offline (the hub is unreachable); give a local "
                          "copy of the original release instead (a folder with data.txt or train/val/test.txt)")
        rows = load_dataset(str(source), revision=DOND_HUB_REVISION, data_dir=DOND_HUB_CONFIG, split=split)
        return [dond_record_from_hub_row(r) for r in rows]
    raise FileNotFoundError(f"no Deal or No Deal data at {source!r}")


def replay(task: DealOrNoDeal, record: DondRecord) -> GameState:
    """Play a logged dialogue through the task's rules (selection protocol): talk turns, then both selections."""
    if task.protocol != "selection":
        raise ValueError("human logs carry no offer markers: replay them with protocol='selection'")
    state = task.reset(record.scenario)
    for role, text in record.turns:
        if state.info.get("phase") == "select":
            break
        if task.current_role(state) != role:
            raise ValueError(f"turn order broken in the log at {text!r}")
        task.step(state, text)
    while not state.done:
        role = task.current_role(state)
        share = record.selections.get(role)
        task.step(state, "no agreement" if share is None else " ".join(
            f"{item}={n}" for item, n in zip(("book", "hat", "ball"), share)))
    return state


def selection_conversations(task: DealOrNoDeal, games: Sequence[GameState],
                            roles: Sequence[Sequence[str]] | None = None) -> list[list[dict]]:
    """Finished selection-protocol games as chat conversations: each role's view of the talk, ending with its
    selection as its last assistant message (the corpus of a warm start or a human proxy built on human logs).

    roles: per game, the roles to write it for (default: both).
    """
    out = []
    for k, state in enumerate(games):
        before = GameState(state.scenario, [t for t in state.turns if t.phase == "talk"], info={"phase": "select"})
        for role in (task.roles if roles is None else roles[k]):
            sel = next(t.text for t in state.turns if t.phase == "select" and t.role == role)
            out.append(task.view(before, role) + [{"role": "assistant", "content": sel}])
    return out


def dond_human_corpus(source: str | Path, max_turns: int = 20, views: str = "both") -> list[list[dict]]:
    """The human logs as chat conversations (selection protocol), the warm-start corpus of a human-log tiny-dond.

    Each role's view of a logged dialogue, ending with its selection as its last assistant message. Dialogues
    longer than `max_turns` talk turns are left out (the prompt promises that cap).
    """
    task = DealOrNoDeal(protocol="selection", max_turns=max_turns)
    games, roles = [], []
    for k, rec in enumerate(load_dond(source)):
        if sum(1 for _, t in rec.turns) > max_turns:
            continue
        keep = [r for r in (task.roles if views == "both" else (task.roles[k % 2],)) if r in rec.selections]
        games.append(replay(task, rec))  # roles the file lacks a selection for are left out
        roles.append(keep)
    return selection_conversations(task, games, roles)
