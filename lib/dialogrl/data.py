"""The public dialogue data the notebooks can read, and where it comes from.

    python -m dialogrl data list              # each data set: its files here, checked, or what is missing
    python -m dialogrl data fetch [NAME ...]  # download into $DIALOGRL_DATA/<name>/ (default: <model cache>/data)

Each file is fetched from the public commit its data set names (GitHub's raw files), written aside, checked against
its SHA-256 and renamed into place; a file already there with the right checksum is kept. A few files are derived
from fetched ones (SOTOPIA's character profiles from its Redis dump; Persuasion for Good's annotated dialogues from
their spreadsheet), as the loaders read them. Offline, `fetch` says which file to place where. `source=` (a folder
laid out as the addresses, `<source>/<host>/<path>`) stands in for the web: the tests fetch from one.

The notebooks' data parameters name a data set (`human_data = "persuasionforgood"`) that `data_path` finds under
$DIALOGRL_DATA, or a folder of a local copy in the original release's format.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from dialogrl.run import sha256_file, write_bytes
from dialogrl.tiny import cache_root

DATA_ENV = "DIALOGRL_DATA"
RAW = "https://raw.githubusercontent.com"


def data_root() -> Path:
    """$DIALOGRL_DATA, else the data folder in the model cache (`tiny.cache_root()`/data)."""
    return Path(os.environ[DATA_ENV]).expanduser() if os.environ.get(DATA_ENV) else cache_root() / "data"


@dataclass(frozen=True)
class Remote:
    """One published file: where it lies in the data set's folder, its address, and its SHA-256 (None: a file that
    is only the source of a derived one and whose published bytes were never checked here)."""
    file: str
    url: str
    sha256: str | None


@dataclass(frozen=True)
class DataSet:
    name: str
    title: str
    license: str
    used_by: str
    files: tuple[Remote, ...]
    derived: tuple[str, ...] = ()                          # files `derive` makes from the fetched ones
    derive: Callable[[Path], None] | None = None


def _github(repo: str, commit: str, path: str, file: str | None = None, sha256: str | None = None) -> Remote:
    return Remote(file or path.rsplit("/", 1)[-1], f"{RAW}/{repo}/{commit}/{path}", sha256)


def _sotopia_profiles(folder: Path) -> None:
    """agent_profiles.jsonl: the 40 AgentProfile values of SOTOPIA's Redis dump, one JSON line each, in its order."""
    dump = json.loads((folder / "redis_json_data.json").read_text(encoding="utf-8"))
    lines = [json.dumps(v) + "\n" for k, v in dump.items() if ".AgentProfile:" in k]
    write_bytes(folder / "agent_profiles.jsonl", "".join(lines).encode())


def _xlsx_rows(path: Path) -> list[list[str]]:
    """The first sheet of an .xlsx file as rows of cell texts (shared and inline strings, numbers as written), empty
    cells as empty strings: the standard library's reading of the format, no spreadsheet package needed."""
    ns = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        shared = []
        if "xl/sharedStrings.xml" in names:
            root = ElementTree.fromstring(z.read("xl/sharedStrings.xml"))
            shared = ["".join(t.text or "" for t in si.iter(f"{{{ns['m']}}}t")) for si in root.findall("m:si", ns)]
        sheet = ElementTree.fromstring(z.read("xl/worksheets/sheet1.xml"))
    rows = []
    for row in sheet.iter(f"{{{ns['m']}}}row"):
        cells: dict[int, str] = {}
        for c in row.findall("m:c", ns):
            letters = re.match(r"[A-Z]+", c.get("r", "")).group(0)
            col = 0
            for ch in letters:
                col = col * 26 + ord(ch) - 64
            kind, v = c.get("t"), c.find("m:v", ns)
            if kind == "inlineStr":
                text = "".join(t.text or "" for t in c.iter(f"{{{ns['m']}}}t"))
            elif kind == "s":
                text = shared[int(v.text)]
            else:
                text = v.text if v is not None and v.text is not None else ""
            cells[col - 1] = text
        rows.append([cells.get(i, "") for i in range(max(cells, default=-1) + 1)])
    return rows


def _p4g_annotations(folder: Path) -> None:
    """300_dialog.csv and 300_info.csv from the release's spreadsheets (every cell, the header row kept)."""
    for name in ("300_dialog", "300_info"):
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(_xlsx_rows(folder / f"{name}.xlsx"))
        write_bytes(folder / f"{name}.csv", out.getvalue().encode("utf-8"))


NEGOTIATOR = ("facebookresearch/end-to-end-negotiator", "bbb93bbf00f69fced75d5c0d22e855bda07c9b78")
P4G = ("ohyj1002/persuasionforgood", "3fbc0df7bd2a081413cad6e6092e7c712efc26c4")
SOTOPIA_RL = ("sotopia-lab/sotopia-rl", "2ebb14ea4802c4b8cb3def40e9a0f9a0398265c5")
SOTOPIA_GEN = ("sotopia-lab/sotopia", "882b94be198109b861758331d56ccc4df29ee913")
SOTOPIA_EVAL = ("sotopia-lab/sotopia", "b72bd754cfda8546bc64fb3be4b882a95966312c")
# the 28 SOTOPIA-hard episodes of GPT-4 with GPT-3.5 (human_eval/otree_project/sotopia_official_study/GPT3.5-GPT4/)
SOTOPIA_EPISODES = {
    "01H7VM65KGGY7842XGE5A7PEK1": "39090ba0d6a279c9e5d4bdeba34726839dff87e32f5865b5e655950622a326c6",
    "01H7ZBQKAV28573QWESP12FPF9": "f86c5aed6c17479bbdc5cbb339fd0acd3424782a84e668aaf7fa459c81141277",
    "01H7ZE3VN3XX594BQDGW4159XM": "c39f61f0db044bfbd75218a17e4d19c672f893f58b1e262886b45b16ea7c595e",
    "01H84SW7PCD8ACM4K0S2BTEXYJ": "67e4e21661156716dc2b1eb80a061cc39dbae2afb02765b1771e053f4a9a258d",
    "01H84TPAKBWCM0JZ77RCYBYZTE": "dd1b0f0c48ff21061d37b2bd0d057ad86804f2452d83ca4ed15e74f100f52ed2",
    "01H84XXWFJHDKB1T0XB4M3TTJZ": "99f43dcd5a6991a59877a7321453b510223720853b13c5c54992677da9826259",
    "01H87HF7X0SZS9Y5PJ2QER6H55": "ffcd6945d57fbff707c5ff607a4f4ed368628b9c39a2a60804196697f9e8b047",
    "01H87J87QCY7D3C23G415ZQBPW": "2a8d34802a0dad7d7fbe63bb727471eeab991b231545dfd886083b568af8df1d",
    "01H8WW3F7585KPJP4VKE6GMB07": "71bd01f45266813c72f45c4fc07eb241705e46b772f2f6de7feb0f2191775065",
    "01H8WWBFS2P4033GKTEW5Z8ZKH": "fd8e60d409e454cfe2dd923bf77acaac57bf6f8ae116cb2e7b90dfa953f07e7b",
    "01H8WWQDM9J4VDVCSWNXFRYT3T": "a9da637e6e3c0c6f338ef4176c05f04a9e636685339e418189b89faa4f1229bb",
    "01H8XN69V9XK68A7KM559RSTAN": "93b8451e963d25db55c22e5523013281a82576cbaedbeceefd91157b56653d2c",
    "01H8XNGF51SP201RZMNH7N6J6Y": "13dde300095664f5b6cd5a85f8e8b396e57eddbc1ac39855975cc558b08b04e8",
    "01H8XNNSHQ7TWBB87786H32FJY": "f70fe56e10663af80c93499542e859ef6aa0891eee96afedab6e3db0b4ae13cd",
    "01H8XXPRAMM87VEMJE16Z4357D": "f091a8ed0c16c881213a18f98a97813106ec6b9a8a009aed8d1fcb2f30f6a3f7",
    "01H8XY3HMB31PM0SAWXPCQG5R1": "de58996f1e14f88dc23fc25efe743330087bb5eaf986871327cbdbbe81afa7b0",
    "01H8Y03TVHQSHN790HV9SJCSFP": "ccea34235bb36e63c28c360d69eee2add57eb4b6a0685cc2ab9913898536c36a",
    "01H8ZNC0N5HGM6X1GYX9H1Q9RF": "844cd9c31428c9f253aef292e3d10541e7c1bdb6db0c9b826b84df487d89b72d",
    "01HB44THFBJFQPXRV92P8ZAMM5": "451e3bbcef7165e3775869cfeff7004c03a8b33dee12b4f02f4f64d49dff7777",
    "01HB45KTZM8V0RAYXJYS4RK471": "c4b25fd0fb8a49198af9a512c8c0492cfe39e2b3cd48030c98f48af67a7bef0a",
    "01HB5GT8SZ8ZHRYZBFMHPQFAKW": "6b366bbe70d40fc50a13cbf71a7f948245bee2318c90978776a320ae2eef4f35",
    "01HB5H3HYBR5FBXK2YWYSJV1H0": "7863aa963daa6e177ca2688fa855b31c0f92d399ca8c5781c825be840b531352",
    "01HB5HA6WWY92T037M8C4B4KMP": "6f8d7395dd98218c0a1b6775ffe2bdb40a9ff43d650ce3c2216d620671cbdfe5",
    "01HB5HMNCZYCM6909TZCN3Q7MY": "6ffa7a7f639dfe9ab4e595f2c783e28733eff6459ddccd79ede043f0b8719d33",
    "01HB5HWR4VZFF96AY5F005D0S6": "01858aa9efde0d0001f2196b27977079ca7052b73670cdd7eabc44480900b5cb",
    "01HB5J35B6TADMW4JWFEPMX4BW": "a3937d6aa16489445949ce7bc1ac1962dcfe98e4dde3eb4d6e54f2c55a6e1dd7",
    "01HB5JARXHQVRM4FB8V4RBTSQB": "9b1c417d9e8d123952e3201b9898af63a37277279c8efc803d53b6e14c0b046b",
    "01HB5JSJEHXW78MW4YT0WZ1K8A": "aa28a86ba535782aacdbfe309d95911b16c1f88bcb6da0fc4c5b88d7f89cf635",
}

DATASETS = {d.name: d for d in (
    DataSet("dealnodeal", "Deal or No Deal (Lewis et al., 2017): 5,808 human negotiation dialogues",
            "CC BY-NC 4.0 (non-commercial use, with attribution)",
            "notebook 01's human_logs (the real-logs design), tiny-dond-human",
            tuple(_github(*NEGOTIATOR, f"src/data/negotiate/{f}", sha256=h) for f, h in (
                ("data.txt", "bbde61d159079c20ebad86801d2326a636bdf803337c6e03b5ab7d32362ca15a"),
                ("val.txt", "5ad7df00b8bc4b1fff565cb4dc38b23afc7874c496b0ed2e1c58c232326ff996"),
                ("test.txt", "37be3150bf656195b61a7547b45cf307acce929f2a8140036890a561c3597c83")))),
    DataSet("persuasionforgood", "Persuasion for Good (Wang et al., ACL 2019): 1,017 human persuasion dialogues",
            "Apache-2.0 (cite Wang et al. 2019)", "notebook 03's human_data (strategy classifier, human-fit persuadee)",
            (_github(*P4G, "data/FullData/full_dialog.csv",
                     sha256="3ecaa3e9f0577170b91c3306d2439c910150cf010b76e7637ef3bab724075a9f"),
             _github(*P4G, "data/FullData/full_info.csv",
                     sha256="93be6f62d41f4925e8be21534c23cd75444e1a5d5384abe13b15eda2b37838b4"),
             _github(*P4G, "data/AnnotatedData/300_dialog.xlsx"),
             _github(*P4G, "data/AnnotatedData/300_info.xlsx")),
            derived=("300_dialog.csv", "300_info.csv"), derive=_p4g_annotations),
    DataSet("sotopia", "SOTOPIA (Zhou et al., ICLR 2024): the 40 characters, the SOTOPIA-hard episodes, GPT-4 scores",
            "MIT (sotopia), Apache-2.0 (sotopia-rl)",
            "notebook 02's sotopia_data (held-out partners, the judge's validation)",
            (_github(*SOTOPIA_RL, "data/env_ids.txt",
                     sha256="26815f293eb03a4217a11901a016d7c288a6033b20ce8f9e80181b31d3ae45ff"),
             _github(*SOTOPIA_GEN, "data_gen/redis_json_data.json",
                     sha256="e6d4fc9237f9c8c225973528ae86f39d98d610442dfef0167cf2274bd576a3e9"),
             _github(*SOTOPIA_EVAL, "human_eval/complete_gpt_score.json",
                     sha256="7bc64629963d38ca322c2e96884e5efc63fdcafc48977228d9e66891d5a899eb"),
             *(_github(*SOTOPIA_EVAL, f"human_eval/otree_project/sotopia_official_study/GPT3.5-GPT4/{pk}.json",
                       f"hard_episodes_gpt35_gpt4/{pk}.json", h) for pk, h in SOTOPIA_EPISODES.items())),
            derived=("agent_profiles.jsonl",), derive=_sotopia_profiles),
)}


def data_path(value: str | os.PathLike | None) -> str | None:
    """A notebook's data parameter as what its loader reads: a data set's name (`DATASETS`) is its folder under
    `data_root()`; anything else (a folder of a local copy in the release's format, a hub id) stays as it is, and so
    does None."""
    if value is None:
        return None
    return str(data_root() / str(value)) if str(value) in DATASETS else str(value)


def data_folder(value: str | os.PathLike | None, without: str) -> str | None:
    """A notebook's optional data folder (`data_path`), or None, after a note naming what is missing, how to get it
    and what the run goes `without`, where that folder is not there."""
    path = data_path(value)
    if path is not None and not Path(path).expanduser().is_dir():
        get = (f"`python -m dialogrl data fetch {value}` gets it" if str(value) in DATASETS else
               f"data sets by name: {', '.join(DATASETS)} (`python -m dialogrl data list`)")
        print(f"note: no data at {path} ({get}): running without {without}")
        return None
    return path


def status(name: str, root: str | os.PathLike | None = None) -> dict[str, str]:
    """{file: "ok" | "missing" | "damaged" (its SHA-256 is not the published one's)} for data set `name`."""
    ds, folder = DATASETS[name], Path(root or data_root()) / name
    out = {}
    for r in ds.files:
        path = folder / r.file
        out[r.file] = ("missing" if not path.is_file() else
                       "damaged" if r.sha256 and sha256_file(path) != r.sha256 else "ok")
    for f in ds.derived:
        out[f] = "ok" if (folder / f).is_file() else "missing"
    return out


def fetch(name: str, root: str | os.PathLike | None = None, source: str | os.PathLike | None = None,
          timeout: float = 60.0) -> Path:
    """Download data set `name` into <root>/<name>/ (root: `data_root()`): each file not yet there with its
    published checksum is fetched, written aside, checked and renamed; then the derived files are made. source: a
    local folder that stands in for the web (`<source>/<host>/<path>` for each address). A file that cannot be
    fetched, or arrives with another checksum, is a RuntimeError after the others were tried, naming each file, its
    address and where to place a copy by hand. Returns the data set's folder."""
    if name not in DATASETS:
        raise ValueError(f"no data set {name!r}; known: {', '.join(DATASETS)}")
    ds, folder = DATASETS[name], Path(root or data_root()) / name
    folder.mkdir(parents=True, exist_ok=True)
    failed = []
    for r, state in zip(ds.files, status(name, folder.parent).values()):
        if state == "ok":
            continue
        path = folder / r.file
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = _download(r.url, source, timeout)
        except OSError as err:
            failed.append(f"{path}: from {r.url} ({type(err).__name__}: {err})")
            continue
        got = hashlib.sha256(data).hexdigest()
        if r.sha256 and got != r.sha256:
            failed.append(f"{path}: {r.url} sent other bytes (SHA-256 {got[:16]}..., expected {r.sha256[:16]}...)")
            continue
        write_bytes(path, data)
    if failed:
        raise RuntimeError(f"data set {name}: {len(failed)} of {len(ds.files)} files not fetched:\n  "
                           + "\n  ".join(failed) + f"\nOffline, place each file at the path named (from its address)"
                           f" and run `python -m dialogrl data fetch {name}` again: it checks them and derives the "
                           "rest")
    if ds.derive is not None:
        ds.derive(folder)
    return folder


def _download(url: str, source: str | os.PathLike | None, timeout: float) -> bytes:
    if source is not None:
        return (Path(source) / url.split("://", 1)[1]).read_bytes()
    with urllib.request.urlopen(url, timeout=timeout) as response:   # noqa: S310 - fixed https addresses
        return response.read()


def list_table(root: str | os.PathLike | None = None) -> str:
    """`data list`: one line per data set (files present and checked, of all), then its missing or damaged files."""
    root = Path(root or data_root())
    lines = [f"data sets under {root} (${DATA_ENV} sets the folder):"]
    for name, ds in DATASETS.items():
        states = status(name, root)
        good = sum(s == "ok" for s in states.values())
        lines.append(f"  {name:18s} {good:3d}/{len(states)} files {'ok' if good == len(states) else ''}"
                     f"  {ds.title}; {ds.license}; used by {ds.used_by}")
        lines += [f"      {s}: {f}" for f, s in states.items() if s != "ok"][:5]
        if good < len(states):
            lines.append(f"      get it: python -m dialogrl data fetch {name}")
    return "\n".join(lines)
