"""The library's layout: imports run one way (no cycles inside dialogrl; the layers of lib/dialogrl/README.md, bottom
to top), every module imports first in a fresh interpreter, and every game is one package of the same shape."""
from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dialogrl

LIB = Path(dialogrl.__file__).parent
GAMES_DIR = LIB / "envs"
# The layers, bottom to top (module names without "dialogrl.", fnmatch patterns): a module imports only from its own
# layer and the layers below it, at import time and inside functions alike. lib/dialogrl/README.md states this map.
LAYERS = {
    "base": ["game", "heldout", "seeds", "run", "hub", "tokens", "verbalized", "rewards", "colab",
             "parallel", "stats"],
    "rollout": ["rollout"],
    "games": ["envs", "envs.*"],
    "models": ["tiny", "models", "packaged", "trl_compat", "data", "params", "estimate"],
    "agents": ["agents", "agents.*"],
    "rl": ["rl", "rl.*", "calibration"],
    "evaluate": ["evaluate", "collapse", "theory", "claims", "room", "plots", "compare"],
    "entry points": ["dialogrl", "reproduce", "__main__"],
}


def module_names() -> dict[str, Path]:
    out = {}
    for path in sorted(LIB.rglob("*.py")):
        parts = path.relative_to(LIB.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(path: Path, name: str, modules: dict[str, Path], top_level_only: bool, root: ast.AST | None = None
               ) -> set[str]:
    """The dialogrl modules that `name` (at `path`) imports: `from a.b import c` names a.b.c when that is a module,
    else a.b. With top_level_only, only the imports that run when the module is imported (not those inside
    functions). root: only the imports under this node of the module's tree."""
    tree = root or ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for a in node.names:
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


# The library's modules imported inside a function, each with its reason (everywhere else they are imported at the
# module's top: lib/dialogrl/README.md)
LAZY_IMPORTS = {
    ("dialogrl.__main__", "*"): "each command imports what it runs: --help answers without importing torch",
    ("dialogrl.rl.trainer", "dialogrl.agents.vllm_engine"):
        "an optional dependency (vllm), imported when engine='vllm'",
}


def function_level_imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The dialogrl modules that `name` imports inside a function (an `if TYPE_CHECKING:` block imports nothing when
    the module runs: not counted)."""
    functions = [node for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    return set().union(*(imports_of(path, name, modules, False, root=f) for f in functions))


def test_the_library_is_imported_at_the_top_but_where_a_reason_is_stated():
    modules = module_names()
    unstated = sorted(f"{name} imports {dep} inside a function" for name, path in modules.items()
                      for dep in function_level_imports(path, name, modules)
                      if (name, dep) not in LAZY_IMPORTS and (name, "*") not in LAZY_IMPORTS)
    assert not unstated, "move to the module's top, or state the reason in LAZY_IMPORTS:\n" + "\n".join(unstated)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a list of modules (the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


@pytest.mark.parametrize("top_level_only", [True, False], ids=["import-time", "including-function-level"])
def test_no_import_cycles(top_level_only):
    modules = module_names()
    graph = {name: imports_of(path, name, modules, top_level_only) for name, path in modules.items()}
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def layer_of(module: str) -> str | None:
    """The layer of a dialogrl module (its full name): the layer that names it, else the first whose pattern matches."""
    short = module.removeprefix("dialogrl.")
    for layer, patterns in LAYERS.items():   # a name wins over a later layer's pattern
        if short in patterns:
            return layer
    for layer, patterns in LAYERS.items():
        if any(fnmatch.fnmatchcase(short, p) for p in patterns):
            return layer
    return None


def test_imports_run_down_the_layers():
    modules = module_names()
    order = {layer: k for k, layer in enumerate(LAYERS)}
    unplaced = sorted(m for m in modules if layer_of(m) is None)
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"
    upward = []
    for name, path in modules.items():
        for dep in sorted(imports_of(path, name, modules, top_level_only=False)):
            if order[layer_of(dep)] > order[layer_of(name)]:
                upward.append(f"{name} ({layer_of(name)}) imports {dep} ({layer_of(dep)})")
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


def test_the_layer_finder_places_modules():
    assert layer_of("dialogrl.game") == "base" and layer_of("dialogrl.envs.social.judge") == "games"
    assert layer_of("dialogrl.rl.trainer") == "rl" and layer_of("dialogrl.evaluate") == "evaluate"
    assert layer_of("dialogrl.nowhere") is None


def test_the_library_map_states_the_layers():
    """lib/dialogrl/README.md's layering line names LAYERS in order, and each module its table names (a `.py` path)
    sits in the layer of its row."""
    text = (LIB / "README.md").read_text()
    line = re.search(r"bottom to top: `([^`]+)`", text)
    assert line and [x.strip() for x in line.group(1).split("->")] == list(LAYERS), \
        f"the README's layering line {line and line.group(1)!r} is not {' -> '.join(LAYERS)}"
    table = text[text.index("| layer |"):].split("\n\n")[0].splitlines()[2:]   # the map: the first table
    modules, layer, misplaced = module_names(), None, []
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        layer = cells[0] or layer
        assert layer in LAYERS, f"table row in no layer: {row[:80]}"
        for path in re.findall(r"`([\w/]+\.py)`", cells[1]):
            name = "dialogrl." + path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            assert name in modules, f"the map names {path}, which is not a module"
            if layer_of(name) != layer:
                misplaced.append(f"{path}: row {layer}, module in {layer_of(name)}")
    assert not misplaced, misplaced


def test_every_module_imports_first():
    """Each module imported first, in one interpreter with dialogrl's modules dropped between imports (third-party
    libraries stay loaded, so this is fast)."""
    names = sorted(module_names())
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    for m in [m for m in sys.modules if m == 'dialogrl' or m.startswith('dialogrl.')]:\n"
        "        del sys.modules[m]\n"
        "    importlib.import_module(name)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("game", sorted(p.name for p in GAMES_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"))
def test_each_game_is_one_package_of_the_same_shape(game):
    """The files of envs/README.md, the exports every game has under the same names, and the registries that
    collect them: the game's task in TASKS, its embedded models in tiny.TINY_MODELS."""
    import inspect

    from dialogrl.envs import GAME_EXPORTS, GAMES, TASKS
    from dialogrl.tiny import TINY_MODELS

    files = {p.name for p in (GAMES_DIR / game).glob("*.py")}
    assert {"__init__.py", "task.py", "personas.py", "corpus.py"} <= files, f"envs/{game}: {sorted(files)}"
    package = next((m for m in GAMES.values() if m.__name__ == f"dialogrl.envs.{game}"), None)
    assert package is not None, f"envs/{game} is not registered in dialogrl.envs.GAMES (does it export TASK?)"
    assert all(hasattr(package, n) for n in GAME_EXPORTS)
    assert TASKS[package.TASK.name] is package.TASK and package.TASK.__module__ == f"dialogrl.envs.{game}.task"
    assert list(inspect.signature(package.population).parameters)[:4] == ["role", "names", "weights", "seed"]
    assert package.TINY_MODELS and all(TINY_MODELS[n].corpus.__module__.startswith(f"dialogrl.envs.{game}.")
                                       for n in package.TINY_MODELS)


def test_no_file_names_a_design_document_outside_the_repository():
    """The protocol lives in the repository (papers/PROTOCOL.md): no tracked text file names the design document that
    sits outside it."""
    root = Path(__file__).resolve().parents[1]
    name = "DESIGN" + ".md"   # split, so that this file does not name it
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    naming = []
    for rel in filter(None, tracked.decode().split("\0")):
        path = root / rel
        data = path.read_bytes() if path.is_file() else b""
        if b"\0" not in data and name.encode() in data:
            naming += [f"{rel}:{k}" for k, line in enumerate(data.decode(errors="replace").splitlines(), 1)
                       if name in line]
    assert (root / "papers" / "PROTOCOL.md").is_file(), "papers/PROTOCOL.md is missing"
    assert not naming, f"{name} named (point to papers/PROTOCOL.md instead):\n" + "\n".join(naming)


def test_the_statistics_need_no_torch():
    """dialogrl.stats (intervals, power, the tables of games) imports without torch: a reader of results, or a
    notebook's analysis cells, can use it on a machine without the training stack."""
    code = "import sys, dialogrl.stats; assert 'torch' not in sys.modules, 'dialogrl.stats imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


def test_the_heaviest_tests_conftest_orders_exist():
    """Every test that conftest.HEAVIEST_FIRST orders and groups is a test function of its file (with its parameter
    where it has one): a renamed test would silently lose its place and its group."""
    from conftest import HEAVIEST_FIRST

    tests = Path(__file__).parent
    missing = []
    for name in [n for group in HEAVIEST_FIRST for n in group]:
        file, _, function = name.partition("::")
        source = (tests / file).read_text() if (tests / file).exists() else ""
        base, _, param = function.partition("[")
        if f"def {base}(" not in source or param.rstrip("]") not in source:
            missing.append(name)
    assert not missing, f"conftest.HEAVIEST_FIRST names tests that do not exist: {missing}"
