"""The top-level README as a newcomer reads it: at most 120 lines, a Quick start of exactly two commands, a Layout
whose every path exists, and relative links that resolve. The details live in notebooks/README.md, papers/README.md
and lib/dialogrl/README.md."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO

README = REPO / "README.md"
MAX_LINES = 120


def section(title: str) -> str:
    """The text of the README's `## title` section, up to the next `## ` heading."""
    text = README.read_text()
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def test_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES}): move details to the other READMEs"


def test_quick_start_is_two_commands():
    block = re.search(r"```bash\n(.*?)```", section("Quick start"), re.S)
    assert block, "the Quick start has no ```bash block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]
    assert commands == ["make reproduce", "make test"], f"the Quick start's commands are {commands}"


def test_layout_names_only_paths_that_exist():
    """Every backticked name in the Layout section without a space is a path from the repository root (`<stem>` stands
    for any name; a trailing / means a folder), and it exists."""
    names = [n for n in re.findall(r"`([^`]+)`", section("Layout")) if " " not in n]
    assert len(names) >= 10, f"the Layout names too few paths: {names}"
    missing = []
    for name in names:
        kind = Path.is_dir if name.endswith("/") else Path.is_file
        if not any(kind(p) for p in REPO.glob(re.sub(r"<[^>]+>", "*", name.rstrip("/")))):
            missing.append(name)
    assert not missing, f"the README's Layout names paths that are not in the repository: {missing}"


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text())
    relative = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:|#", link)]
    assert relative, "README.md links to no file of the repository"
    broken = [link for link in relative if not (REPO / link).exists()]
    assert not broken, f"README.md links to files that do not exist: {broken}"


DOCS = ["README.md", "notebooks/README.md", "papers/README.md", "lib/dialogrl/README.md", "lib/dialogrl/envs/README.md"]
IMPORT = re.compile(r"^\s*(from dialogrl[\w.]* import [\w, ]+|import dialogrl[\w.]*)\s*(#.*)?$", re.M)
INLINE = re.compile(r"`(from dialogrl[\w.]* import [\w, ]+|import dialogrl[\w.]*)`")


def doc_imports() -> list[tuple[str, str]]:
    """(file, line) for every line of code in the docs that imports from dialogrl: in code blocks, and inline."""
    out = []
    for name in DOCS:
        text = (REPO / name).read_text()
        out += [(name, m.group(1).strip()) for m in IMPORT.finditer(text)]
        out += [(name, m.group(1).strip()) for m in INLINE.finditer(text)]
    return out


def test_every_import_the_docs_show_runs():
    """A reader who copies an import from the docs gets the module and the names it says (issue 70: a README once
    imported `summarize` from where it no longer lived)."""
    found = doc_imports()
    assert len(found) >= 8, found   # the notebooks README's examples at least
    failed = []
    for name, line in found:
        try:
            exec(line, {})
        except ImportError as err:
            failed.append(f"{name}: {line} ({err})")
    assert not failed, "\n".join(failed)


def test_every_dialogrl_name_the_docs_cite_exists():
    """Each `dialogrl.<module>[.<name>]` the docs cite in backticks is a module, or a name in one."""
    import importlib

    missing = []
    for name in DOCS + ["papers/PROTOCOL.md"]:
        for cited in sorted(set(re.findall(r"`(dialogrl(?:\.\w+)+)`", (REPO / name).read_text()))):
            parts, obj = cited.split("."), None
            for k in range(len(parts), 0, -1):
                try:
                    obj, rest = importlib.import_module(".".join(parts[:k])), parts[k:]
                    break
                except ImportError:
                    continue
            for attr in rest:
                obj = getattr(obj, attr, None)
            if obj is None:
                missing.append(f"{name}: {cited}")
    assert not missing, "\n".join(missing)
