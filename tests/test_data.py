"""The real Deal or No Deal logs (Lewis et al. 2017) through the task's rules.

Reads the copies in ../shared/data/dealnodeal/ (never committed here); skipped with a message where they are absent.
"""
from collections import Counter
from pathlib import Path

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
    assert clf.exact(test) == pytest.approx(sum(exact) / len(exact))   # what notebook 01 prints
    with pytest.raises(RuntimeError, match="not fitted"):
        SelectionClassifier().predict(test[:1], ["A"])


def _web(shared_data, tmp_path, names) -> Path:
    """A folder that stands in for the web (`<host>/<path>` of each address), holding the shared copies of the
    published files of the data sets `names`."""
    from dialogrl.data import DATASETS

    web = tmp_path / "web"
    for name in names:
        for r in DATASETS[name].files:
            if (shared_data / name / r.file).is_file():
                dest = web / r.url.split("://", 1)[1]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes((shared_data / name / r.file).read_bytes())
    return web


def test_data_fetch_checks_each_file_and_derives_what_the_loaders_read(shared_data, tmp_path, capsys):
    """`data fetch` from a local stand-in for the web: each file checked against its published SHA-256 and renamed
    into place, the derived character profiles byte for byte the shared copy's, the loaders reading the result; a
    damaged file is fetched again; `data list` shows what is there."""
    from dialogrl.__main__ import main
    from dialogrl.data import fetch, list_table, status
    from dialogrl.envs.social.data import load_sotopia_episodes, load_sotopia_profiles

    web, root = _web(shared_data, tmp_path, ["dealnodeal", "sotopia"]), tmp_path / "data"
    folder = fetch("sotopia", root, source=web)
    derived = (folder / "agent_profiles.jsonl").read_bytes()
    assert derived == (shared_data / "sotopia" / "agent_profiles.jsonl").read_bytes()
    assert len(load_sotopia_profiles(folder)) == 40 and len(load_sotopia_episodes(folder)) == 28
    assert main(["data", "fetch", "dealnodeal", "--root", str(root), "--source", str(web)]) == 0
    assert set(status("dealnodeal", root).values()) == {"ok"} and len(load_dond(root / "dealnodeal")) > 5000
    (root / "dealnodeal" / "val.txt").write_text("garbled")
    assert status("dealnodeal", root)["val.txt"] == "damaged"
    fetch("dealnodeal", root, source=web)
    assert (root / "dealnodeal" / "val.txt").read_bytes() == (shared_data / "dealnodeal" / "val.txt").read_bytes()
    table = list_table(root)
    assert "dealnodeal" in table and "persuasionforgood    0/6 files" in table
    assert "get it: python -m dialogrl data fetch persuasionforgood" in table


def test_data_fetch_offline_names_each_file_its_address_and_its_place(shared_data, tmp_path):
    """Offline (the spreadsheets are in no stand-in here), `fetch` places what it can and names each file it could
    not get, with its address and where to put a copy; a file that arrives with other bytes is refused."""
    from dialogrl.data import DATASETS, fetch

    web, root = _web(shared_data, tmp_path, ["persuasionforgood"]), tmp_path / "data"
    with pytest.raises(RuntimeError, match=r"2 of 4 files not fetched:\n  .*300_dialog.xlsx: from https://raw\."
                                           r"githubusercontent.com/ohyj1002/persuasionforgood/\w+/data/Annotated"):
        fetch("persuasionforgood", root, source=web)
    assert (root / "persuasionforgood" / "full_dialog.csv").is_file()
    url = DATASETS["dealnodeal"].files[1].url
    (web / url.split("://", 1)[1]).parent.mkdir(parents=True, exist_ok=True)
    (web / url.split("://", 1)[1]).write_text("not the release")
    with pytest.raises(RuntimeError, match=r"val.txt: .* sent other bytes \(SHA-256 \w+\.\.\., expected 5ad7df00"):
        fetch("dealnodeal", root, source=web)
    assert not (root / "dealnodeal" / "val.txt").exists()


def test_spreadsheets_become_the_csv_files_the_loader_reads(tmp_path):
    """Persuasion for Good's annotations come as .xlsx: read with the standard library (shared and inline strings,
    numbers as written, empty cells kept in place) into the CSV files `load_p4g` reads."""
    import zipfile

    from dialogrl.data import _p4g_annotations

    def sheet(rows):
        cells = "".join(f'<row r="{i + 1}">' + "".join(
            f'<c r="{col}{i + 1}" t="s"><v>{v[1:]}</v></c>' if str(v).startswith("#") else
            f'<c r="{col}{i + 1}" t="inlineStr"><is><t>{v}</t></is></c>' if isinstance(v, str) else
            f'<c r="{col}{i + 1}"><v>{v}</v></c>' for col, v in row.items()) + "</row>" for i, row in enumerate(rows))
        return ('<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
                f"{cells}</sheetData></worksheet>")

    shared = ('<sst xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><si><t>a, "quoted"</t></si>'
              "</sst>")
    for name, rows in (("300_dialog", [{"B": "B2", "C": "Unit"}, {"A": 0, "B": "d1", "C": "#0"}]),
                       ("300_info", [{"A": "B2", "B": "B6"}, {"A": "d1", "B": 0.5}])):
        with zipfile.ZipFile(tmp_path / f"{name}.xlsx", "w") as z:
            z.writestr("xl/worksheets/sheet1.xml", sheet(rows))
            z.writestr("xl/sharedStrings.xml", shared)
    _p4g_annotations(tmp_path)
    assert (tmp_path / "300_dialog.csv").read_text() == ',B2,Unit\n0,d1,"a, ""quoted"""\n'
    assert (tmp_path / "300_info.csv").read_text() == "B2,B6\nd1,0.5\n"


def test_a_notebooks_data_parameter_names_a_data_set_or_a_folder(tmp_path, monkeypatch, capsys):
    from dialogrl.data import data_folder, data_path

    monkeypatch.setenv("DIALOGRL_DATA", str(tmp_path))
    assert data_path("sotopia") == str(tmp_path / "sotopia") and data_path("mikelewis0/deal_or_no_dialog") == \
        "mikelewis0/deal_or_no_dialog" and data_path(None) is None
    assert data_folder("sotopia", without="the partners") is None
    assert capsys.readouterr().out == (f"note: no data at {tmp_path / 'sotopia'} (`python -m dialogrl data fetch "
                                       "sotopia` gets it): running without the partners\n")
    (tmp_path / "sotopia").mkdir()
    assert data_folder("sotopia", without="x") == str(tmp_path / "sotopia") and data_folder(None, without="x") is None
