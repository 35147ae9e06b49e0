"""The real Deal or No Deal logs (Lewis et al. 2017) through the task's rules.

Reads the copies in ../shared/data/dealnodeal/ (never committed here); skipped with a message where they are absent.
"""
from collections import Counter

import pytest

from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import split_value
from dialogrl.envs.dealnodeal.data import (
    DOND_HUB_ID,
    dond_record_from_hub_row,
    load_dond,
    load_dond_raw,
    parse_raw_line,
    replay,
)

TASK = DealOrNoDeal(protocol="selection", max_turns=1000)  # humans were not capped at 10 turns


def test_every_logged_dialogue_reproduces_its_recorded_agreement_and_reward(shared_data):
    records = load_dond_raw(shared_data / "dealnodeal" / "data.txt")
    assert len(records) > 5800
    n = Counter()
    for rec in records:
        out = TASK.outcome(replay(TASK, rec))
        both = len(rec.recorded) == 2
        for role, line in rec.recorded.items():
            values = rec.scenario.values[TASK.roles.index(role)]
            own = rec.selections[role]
            if own is not None:  # the reward field is the value of the role's own selection (not zeroed)
                assert line["reward"] == split_value(values, own)
            if not both:
                n["single"] += 1
                continue
            # the file's flag: the two selections match (a deal, or both said "no agreement", or both disconnected)
            same_refusal = len({r["selection"] for r in rec.recorded.values()}) == 1 and own is None
            assert line["agree"] == (out[role]["agreed"] or same_refusal)
            if out[role]["agreed"]:
                assert out[role]["score"] == line["reward"]
                n["deal"] += 1
            else:
                assert out[role]["score"] == 0
                n["no deal"] += 1
    assert n["deal"] > 9000 and n["no deal"] > 1000  # both outcomes are exercised


@pytest.mark.parametrize("split", ["val", "test"])
def test_tagged_files_agree_with_the_rules(shared_data, split):
    records = load_dond(shared_data / "dealnodeal" / f"{split}.txt")
    assert len(records) > 1000
    for rec in records:
        deal = all(s is not None for s in rec.selections.values())
        out = TASK.outcome(replay(TASK, rec))
        assert out["A"]["agreed"] == deal  # every numeric output splits the pool exactly
        if deal:
            assert tuple(a + b for a, b in zip(rec.selections["A"], rec.selections["B"])) == rec.scenario.counts


def test_scenarios_in_the_logs_obey_the_generator_rules(shared_data):
    from dialogrl.envs.dealnodeal import valid_values

    for rec in load_dond(shared_data / "dealnodeal" / "val.txt"):
        c, (va, vb) = rec.scenario.counts, rec.scenario.values
        assert sum(x * y for x, y in zip(c, va)) == 10 == sum(x * y for x, y in zip(c, vb))
        assert 5 <= sum(c) <= 7 and valid_values(va, vb)


def test_hub_row_format():
    row = {"input": {"count": [1, 4, 1], "value": [0, 2, 2]},
           "dialogue": "YOU: i would like 4 hats <eos> THEM: deal <eos> YOU: <selection>",
           "output": "item0=0 item1=4 item2=0 item0=1 item1=0 item2=1",
           "partner_input": {"count": [1, 4, 1], "value": [4, 1, 2]}}
    rec = dond_record_from_hub_row(row)
    assert rec.scenario.counts == (1, 4, 1) and rec.scenario.values == ((0, 2, 2), (4, 1, 2))
    out = TASK.outcome(replay(TASK, rec))
    assert out["A"]["score"] == 8 and out["B"]["score"] == 6


def test_malformed_lines_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="not a Deal or No Deal data.txt line"):
        parse_raw_line("hello world")
    bad = tmp_path / "data.txt"
    bad.write_text("1 0 4 2 1 2 YOU: hi <eos> reward=8 agree 1 4 4 1 1 2\n")
    with pytest.raises(ValueError, match="data.txt:1: no selection"):
        load_dond(bad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no data.txt, train.txt or train/\\*.parquet"):
        load_dond(empty)


def test_a_data_file_in_another_encoding_or_cut_short_is_named_with_its_line(tmp_path):
    """A Latin-1 line in data.txt, a truncated SOTOPIA episode, a bad line of the profiles, a Latin-1 CSV row:
    each a ValueError naming the file (and line), never a bare UnicodeDecodeError or JSONDecodeError."""
    from dialogrl.envs.persuasion.data import _read_csv
    from dialogrl.envs.social.data import SOTOPIA_EPISODES, load_sotopia_episodes, load_sotopia_profiles

    good = ("1 0 4 2 1 2 YOU: i would like 4 hats and you can have the rest . <eos> THEM: deal <eos> YOU: "
            "<selection> item0=0 item1=4 item2=0 <eos> reward=8 agree 1 4 4 1 1 2\n")
    data = tmp_path / "data.txt"
    data.write_bytes(good.encode() + "1 0 4 2 1 2 YOU: caf\xe9 <eos>\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"data.txt:2: not UTF-8 text \(byte 0xe9 at column 21"):
        load_dond(data)
    (tmp_path / SOTOPIA_EPISODES).mkdir()
    (tmp_path / SOTOPIA_EPISODES / "ep1.json").write_text('{"pk": "ep1", "rewards_prompt": "Participants')
    with pytest.raises(ValueError, match=r"ep1.json: not valid JSON \(Unterminated string.*line 1"):
        load_sotopia_episodes(tmp_path)
    (tmp_path / SOTOPIA_EPISODES / "ep1.json").write_text("")
    with pytest.raises(ValueError, match="ep1.json: empty"):
        load_sotopia_episodes(tmp_path)
    (tmp_path / "agent_profiles.jsonl").write_text('{"first_name": "A"}\n{"first_name": \n')
    with pytest.raises(ValueError, match="agent_profiles.jsonl:2: not a JSON line"):
        load_sotopia_profiles(tmp_path)
    rows = tmp_path / "full_info.csv"
    rows.write_bytes(b"B2,B4\nx,0\n" + "y\xe9,1\n".encode("latin-1"))
    with pytest.raises(ValueError, match="full_info.csv:3: not UTF-8 text"):
        _read_csv(rows)


def test_hub_id_offline_is_a_clear_error(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="offline"):
        load_dond(DOND_HUB_ID)


def hub_rows(path):
    """The rows of a tagged file in the hub dataset's schema (what its Parquet export holds)."""
    import re

    def pairs(ints):
        return {"count": ints[0::2], "value": ints[1::2]}
    rows = []
    for line in path.read_text().splitlines():
        m = re.search(r"<input>(.*?)</input>\s*<dialogue>(.*?)</dialogue>\s*<output>(.*?)</output>\s*"
                      r"<partner_input>(.*?)</partner_input>", line)
        rows.append({"input": pairs([int(x) for x in m[1].split()]), "dialogue": m[2].strip(), "output": m[3].strip(),
                     "partner_input": pairs([int(x) for x in m[4].split()])})
    return rows


def test_the_hub_parquet_export_reads_as_the_release(shared_data, tmp_path, monkeypatch):
    """The hub id loads the dataset's Parquet export (datasets 4.x runs no loading script); a local copy of that
    export, here written from the release's val.txt, gives the records the release gives."""
    import datasets

    from dialogrl.envs.dealnodeal import data

    release = load_dond(shared_data / "dealnodeal" / "val.txt")
    folder = tmp_path / "export" / "dialogues" / "validation"
    folder.mkdir(parents=True)
    datasets.Dataset.from_list(hub_rows(shared_data / "dealnodeal" / "val.txt")).to_parquet(folder / "0000.parquet")
    exported = load_dond(tmp_path / "export", split="validation")
    assert len(exported) == len(release) == 1087
    assert [(r.scenario, r.turns, r.selections) for r in exported] == [(r.scenario, r.turns, r.selections)
                                                                       for r in release]
    calls = []
    monkeypatch.setattr(data, "hub_reachable", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **kw: calls.append((a, kw)) or [])
    assert load_dond(DOND_HUB_ID, split="test") == []
    assert calls == [((DOND_HUB_ID,), {"revision": "refs/convert/parquet", "data_dir": "dialogues", "split": "test"})]


def _fmt(share):
    return "no agreement" if share is None else " ".join(f"{i}={n}" for i, n in zip(("book", "hat", "ball"), share))


def test_selection_classifier_reads_held_out_human_talk(shared_data):
    """Fitted on 1,500 logged dialogues, it states the human's own selection on 200 held-out ones far more often
    than the warm start's likelihood step does (~17% exact, ~5% of role pairs agreeing), always a valid split."""
    from dialogrl.envs.dealnodeal import SelectionClassifier, parse_selection

    games = [replay(TASK, r) for r in load_dond(shared_data / "dealnodeal" / "data.txt")[:1800]]
    games = [g for g in games if set(g.info["selections"]) == {"A", "B"}]
    train, test = games[:1500], games[1500:1700]
    clf = SelectionClassifier(n_features=2**14).fit(TASK, train)
    said = {r: clf.predict(test, [r] * len(test)) for r in TASK.roles}
    exact = [said[r][k] == _fmt(g.info["selections"][r]) for r in TASK.roles for k, g in enumerate(test)]
    assert all(parse_selection(s, g.scenario.counts)[1] is None for r in TASK.roles for s, g in zip(said[r], test))
    agreed = []
    for k, g in enumerate(test):
        state = TASK.reset(g.scenario)
        for t in g.talk_turns():
            TASK.step(state, t.text)
        TASK.step(state, said["A"][k])
        TASK.step(state, said["B"][k])
        agreed.append(TASK.outcome(state)["A"]["agreed"])
    assert sum(exact) / len(exact) > 0.3 and sum(agreed) / len(agreed) > 0.15, (sum(exact) / len(exact), sum(agreed))
    with pytest.raises(RuntimeError, match="not fitted"):
        SelectionClassifier().predict(test[:1], ["A"])
