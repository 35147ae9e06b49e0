"""Notebook parameter checks, done before any work starts.

The parameters cell holds literals only (papermill injects overrides after it); each literal gives its parameter's
type. What the types do not say, the choices and the ranges, each paper declares in its module
(`dialogrl.rl.methods.<paper>.CHECKS`), and its notebook's cell after the parameters runs them with
`params = <paper>.PAPER.parameters(globals())`, which is:

    resolve_profile(globals(), "01_calibrated_interactive_rl")
    params = check_params(globals(), {
        "selection": OneOf("classifier", "likelihood"),   # a str parameter: one of these
        "policy_model": ModelName(),                       # a model name (embedded, local folder or hub id)
        "human_personas": OneOf(*ALL_PERSONAS),            # a list parameter: the rule applies to each item
        "human_logs run_dir": Str(),                       # a None literal needs its type: None or this
        "seed kl_coef": ">= 0",                            # a range, for every parameter named in the key
        "lr calibration_lr": "> 0",
    }, cell="01_calibrated_interactive_rl")

and gets back a plain dict of every parameter of the cell (for config.json), or a ParameterError naming the
parameter, the value it got and what is allowed. `cell` is the notebook's stem (its parameters cell is read from
notebooks/; a parameter the cell does not have, or one declared twice, is an error) or the {name: literal} mapping
itself; without it, `spec` holds a full Rule for every parameter. Before it, `resolve_profile(globals(), stem)`
applies the cell's `profile`: "auto" picks gpu on a CUDA machine and cpu elsewhere; smoke and gpu take
params/<stem>/<profile>.yaml's values over the cell's (parameters papermill passed explicitly still win), cpu keeps
the cell's own values.
"""
from __future__ import annotations

import ast
import json
import numbers
import operator
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from dialogrl.hub import HUB_ID_PATTERN
from dialogrl.models import check_model_name
from dialogrl.run import repo_root

PROFILES = ("smoke", "cpu", "gpu", "colab", "confirm")  # the named profiles (README: profiles; confirm: a paper's
# preregistered confirmatory run, papers/PROTOCOL.md)
GPU_PROFILE_GIB = 40  # "auto" on a CUDA GPU with at least this much memory runs gpu (sized for 80 GB), else colab


class ParameterError(ValueError):
    """A notebook or function parameter has a value it cannot take."""

    def __init__(self, name: str, value: Any, allowed: str):
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"parameter {name!r} = {value!r} is not allowed: {allowed}")


class Rule:
    """A check for one parameter; `check(name, value)` returns the (possibly normalised) value or raises."""

    def check(self, name: str, value: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class OneOf(Rule):
    choices: tuple

    def __init__(self, *choices: Any):
        self.choices = tuple(choices)

    def check(self, name, value):
        if value not in self.choices:
            raise ParameterError(name, value, "choose one of " + ", ".join(repr(c) for c in self.choices))
        return value


@dataclass
class Int(Rule):
    min: int | None = None
    max: int | None = None

    def check(self, name, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ParameterError(name, value, "expected an int")
        _check_range(name, value, self.min, self.max, strict=False)
        return int(value)


@dataclass
class Float(Rule):
    min: float | None = None
    max: float | None = None
    strict: bool = False  # min/max excluded

    def check(self, name, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ParameterError(name, value, "expected a number")
        _check_range(name, value, self.min, self.max, strict=self.strict)
        return float(value)


@dataclass
class Bool(Rule):
    def check(self, name, value):
        if not isinstance(value, bool):
            raise ParameterError(name, value, "expected True or False")
        return value


@dataclass
class Str(Rule):
    nonempty: bool = True

    def check(self, name, value):
        if not isinstance(value, str) or (self.nonempty and not value.strip()):
            raise ParameterError(name, value, "expected a non-empty string" if self.nonempty else "expected a string")
        return value


@dataclass
class ListOf(Rule):
    item: Rule
    min_len: int = 0

    def check(self, name, value):
        if not isinstance(value, (list, tuple)):
            raise ParameterError(name, value, "expected a list")
        if len(value) < self.min_len:
            raise ParameterError(name, value, f"expected a list of at least {self.min_len} item(s)")
        return [self.item.check(f"{name}[{i}]", v) for i, v in enumerate(value)]


@dataclass
class DictOf(Rule):
    value_rule: Rule
    keys: tuple | None = None  # allowed keys; None allows any

    def check(self, name, value):
        if not isinstance(value, Mapping):
            raise ParameterError(name, value, "expected a dict")
        if self.keys is not None:
            unknown = sorted(set(value) - set(self.keys))
            if unknown:
                raise ParameterError(name, value, f"unknown key(s) {unknown}; allowed keys: {list(self.keys)}")
        return {k: self.value_rule.check(f"{name}[{k!r}]", v) for k, v in value.items()}


@dataclass
class Optional(Rule):
    rule: Rule

    def check(self, name, value):
        return None if value is None else self.rule.check(name, value)


@dataclass
class ModelName(Rule):
    """An embedded tiny model name, a local folder, or a hub id 'org/name'. Reachability is checked at load time."""

    def check(self, name, value):
        if not isinstance(value, str):
            raise ParameterError(name, value, "expected a model name (string)")
        try:
            check_model_name(value)
        except ValueError as err:
            raise ParameterError(name, value, str(err)) from None
        return value


@dataclass
class Range(Rule):
    """Bounds on a number, as the notebook reads them: ">= 1", "> 0", "<= 0", ">= 1, <= 28" (the type comes from the
    cell's literal)."""
    text: str

    def __post_init__(self):
        self.bounds = []
        for part in self.text.split(","):
            op, _, bound = part.strip().partition(" ")
            if op not in _COMPARE:
                raise ValueError(f"range {self.text!r}: write each bound as '<op> <number>' with op one of "
                                 f"{', '.join(_COMPARE)}")
            self.bounds.append((op, float(bound)))

    def check(self, name, value):
        for op, bound in self.bounds:
            if not _COMPARE[op](value, bound):
                raise ParameterError(name, value, f"must be {op} {bound:g}")
        return value


_COMPARE = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt}


@dataclass
class Both(Rule):
    """`first`, then `second` on what it returns (a literal's type, then a declared range)."""
    first: Rule
    second: Rule

    def check(self, name, value):
        return self.second.check(name, self.first.check(name, value))


def literal_rule(name: str, literal: Any, declared: Rule | str | None = None) -> Rule:
    """The rule of a parameter whose cell literal is `literal`, with what the notebook `declared` for it (a Rule, a
    Range's text, or nothing). The literal gives the type: a bool, int, float or str is checked as one (a float also
    takes an int); a list's items as its first item's type, or by the declared rule (a ListOf declared is the whole
    rule); a declared rule that is not a Range replaces the scalar type check (OneOf, ModelName); a None literal
    takes None or the declared rule, which it needs."""
    declared = Range(declared) if isinstance(declared, str) else declared
    if isinstance(declared, (ListOf, Optional)):
        return declared
    if literal is None:
        if declared is None or isinstance(declared, Range):
            raise ValueError(f"parameter {name!r}: its literal is None; declare the rule of its other values "
                             "(e.g. Str(), ModelName(), Float(...))")
        return Optional(declared)
    if isinstance(literal, list):
        if not literal and declared is None:
            raise ValueError(f"parameter {name!r}: an empty list literal; declare the rule of its items")
        return ListOf(literal_rule(f"{name}[0]", literal[0], declared) if literal else declared)
    if declared is not None and not isinstance(declared, Range):
        return declared
    typed = Bool() if isinstance(literal, bool) else Int() if isinstance(literal, int) else (
        Float() if isinstance(literal, float) else Str() if isinstance(literal, str) else None)
    if typed is None:
        raise ValueError(f"parameter {name!r}: a {type(literal).__name__} literal; parameters are bool, int, float, "
                         "str, None or a list of them")
    if declared is not None and not isinstance(typed, (Int, Float)):
        raise ValueError(f"parameter {name!r}: a range for a {type(literal).__name__} literal")
    return typed if declared is None else Both(typed, declared)


def cell_literals(stem: str) -> dict:
    """{name: value} of the parameters cell (the cell tagged "parameters") of the notebook `stem`, found as
    notebooks/<stem>.ipynb or notebooks/*/<stem>.ipynb under the repository root (or a path ending in .ipynb, relative
    to the repository root: a notebook outside notebooks/, such as the tests' fixture)."""
    if stem.endswith(".ipynb"):
        found = [p for p in [repo_root() / stem] if p.exists()]
    else:
        found = [*repo_root().glob(f"notebooks/{stem}.ipynb"), *repo_root().glob(f"notebooks/*/{stem}.ipynb")]
    if not found:
        raise ValueError(f"no notebook {stem}.ipynb under {repo_root() / 'notebooks'}")
    cells = [c for c in json.loads(found[0].read_text())["cells"] if "parameters" in c["metadata"].get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{found[0]}: expected one cell tagged 'parameters', found {len(cells)}")
    tree = ast.parse("".join(cells[0]["source"]))
    return {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets}


def load_yaml(path: str | Path, mapping: bool = True) -> Any:
    """A YAML file's contents (an empty file: {}), or a ValueError naming the file, the line and the problem (not the
    parser's traceback); with `mapping`, anything but a mapping of names to values is refused too."""
    path = Path(path)
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{path} is not valid YAML{where}: {getattr(err, 'problem', None) or err}") from None
    values = {} if values is None else values
    if mapping and not isinstance(values, dict):
        raise ValueError(f"{path}: expected a mapping of parameter names to values, found a {type(values).__name__}")
    return values


def parse_value(name: str, text: str) -> Any:
    """A parameter's value given on a command line (`-p NAME VALUE`): a Python literal (60, 0.5, True, None, "x",
    [1, 2]), or a bare word (tensorboard) as that string; anything else is a ParameterError naming it."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if text.isidentifier() or all(part.isidentifier() for part in text.replace("-", "_").split("/")):
            return text   # a bare word or a model id (HuggingFaceTB/SmolLM2-135M-Instruct): a string
        raise ParameterError(name, text, "not a Python literal (a number, True/False/None, a quoted string or a "
                                         "list); quote a string that has spaces or symbols") from None


def check_values(values: Mapping[str, Any], literals: Mapping[str, Any], where: str) -> None:
    """Check values given to a notebook from outside (a command line) against its parameters cell's `literals`
    before it runs: every name a parameter of the cell, every value of its literal's type (`literal_rule`; the
    notebook's own checks of choices and ranges run when it starts). `where` names the notebook in the error."""
    unknown = sorted(set(values) - set(literals))
    if unknown:
        raise ValueError(f"{unknown} are not parameters of {where} (its parameters: {', '.join(literals)})")
    for name, value in values.items():
        if literals[name] not in (None, []):   # a None or empty-list literal's rule is the notebook's own
            literal_rule(name, literals[name]).check(name, value)


def model_identity(name: str) -> str:
    """What a model name points at, for telling whether two names are one model: a hub id lower-cased (the hub
    matches ids case-insensitively); a local folder its resolved path, or the hub id when the folder is a snapshot in
    a Hugging Face cache (.../models--org--name/snapshots/<revision>); anything else (an embedded name) as it is."""
    path = Path(name).expanduser()
    if path.is_dir():
        path = path.resolve()
        cached = [p[len("models--"):].split("--", 1) for p in path.parts if p.startswith("models--")]
        return "/".join(cached[-1]).lower() if cached and len(cached[-1]) == 2 else str(path)
    return name.lower() if HUB_ID_PATTERN.match(name) and not name.startswith(("/", ".", "~")) else name


def check_judge_independent(judge_model: str | None, counterpart_models, name: str = "judge_model",
                            counterparts_name: str = "heldout_models") -> None:
    """Refuse an LLM judge (or another model of the training pipeline: a training counterpart, e.g. notebook 02's
    name="partner_model") that is also one of the held-out counterpart models (ParameterError, a ValueError).

    The judge's process reward shapes the policy toward what that model prefers, and a training counterpart is what
    the policy learns to play against; a held-out counterpart played by the same model would then not be held out
    from the training pipeline, and a gain against it would not be a held-out gain.
    judge_model: the model's name (None: no such model, nothing to check); counterpart_models: the held-out
    counterparts' model names. Names are compared by `model_identity` (case-insensitive hub ids, resolved paths).
    """
    if judge_model is None:
        return
    judge = model_identity(judge_model)
    for i, m in enumerate(counterpart_models):
        if model_identity(m) == judge:
            raise ParameterError(name, judge_model, f"it is also the held-out counterpart {counterparts_name}[{i}] = "
                                 f"{m!r}: a model of the training pipeline (a judge that shapes the training reward, a "
                                 "training counterpart) cannot also play a held-out counterpart; choose another model "
                                 "or drop that counterpart")


def _check_range(name, value, lo, hi, strict):
    if lo is not None and (value <= lo if strict else value < lo):
        raise ParameterError(name, value, f"must be {'>' if strict else '>='} {lo}")
    if hi is not None and (value >= hi if strict else value > hi):
        raise ParameterError(name, value, f"must be {'<' if strict else '<='} {hi}")


def check_params(namespace: Mapping[str, Any], spec: Mapping[str, Rule | str],
                 cell: str | Mapping[str, Any] | None = None) -> dict:
    """Check the parameters in `namespace`; return {name: value} in the cell's order (or spec's, without a cell).

    namespace: where the parameters live (a notebook's `globals()`, or any dict).
    spec: {name(s): rule}. A key may name several parameters, space-separated; a rule is a Rule or a Range's text.
    cell: the notebook's stem (its parameters cell is read by `cell_literals`) or its {name: literal}: every
    parameter of the cell is checked by `literal_rule`. None: spec holds a full Rule for each parameter it checks.
    A name missing from the namespace is an error too.
    """
    rules = {}
    for key, rule in spec.items():
        for name in key.split():
            if name in rules:
                raise ValueError(f"parameter {name!r} is declared twice")
            rules[name] = rule
    if cell is not None:
        literals = cell_literals(cell) if isinstance(cell, str) else cell
        unknown = sorted(set(rules) - set(literals))
        if unknown:
            raise ValueError(f"{unknown} are declared but not parameters of the cell ({', '.join(literals)})")
        rules = {name: literal_rule(name, value, rules.get(name)) for name, value in literals.items()}
    out = {}
    for name, rule in rules.items():
        if name not in namespace:
            raise ParameterError(name, None, "missing: the parameters cell must define it")
        out[name] = rule.check(name, namespace[name])
    return out


def resolve_profile(namespace: MutableMapping[str, Any], stem: str, cuda: bool | float | None = None,
                    params_dir: str | Path | None = None, passed: set[str] | None = None) -> str:
    """Apply a notebook's profile to its parameters (its globals); returns the profile (one of PROFILES).

    `profile = "auto"` becomes `gpu` on a CUDA GPU of GPU_PROFILE_GIB or more, `colab` on a smaller one (a T4), and
    `cpu` elsewhere. `cpu` keeps the parameters cell's values (the cell's defaults are the cpu profile); the others
    replace them by params/<stem>/<profile>.yaml's, so that `profile = "smoke"` typed in the cell gives the run that
    `papermill -f params/<stem>/smoke.yaml` and `python -m dialogrl reproduce --profile smoke` give. A parameter
    passed explicitly (papermill's `-p`, or a key of its `-f` file) still wins over the profile's file.
    cuda: None asks torch (only for "auto"); True, False, or the GPU's memory in GiB. passed: the explicitly passed
    parameter names; None reads them from papermill's injected-parameters cell in this kernel's history
    (`papermill_parameters`). Raises ParameterError for a missing profile file or a key of it that is not a
    parameter.
    """
    profile = namespace.get("profile")
    if profile not in ("auto", *PROFILES):
        raise ParameterError("profile", profile, "choose one of " + ", ".join(map(repr, ("auto", *PROFILES))))
    if profile == "auto":
        if cuda is None:
            cuda = (torch.cuda.get_device_properties(0).total_memory / 2**30 if torch.cuda.is_available() else 0)
        gib = 80.0 if cuda is True else float(cuda)   # True: a GPU of unstated memory, taken as a large one
        profile = "cpu" if not cuda else "gpu" if gib >= GPU_PROFILE_GIB else "colab"
        print(f"profile auto -> {profile} (" + (f"a CUDA GPU of {gib:.0f} GiB" if cuda else "no CUDA device") + ")")
    if profile != "cpu":
        path = Path(params_dir or repo_root() / "params") / stem / f"{profile}.yaml"
        if not path.exists():
            raise ParameterError("profile", profile, f"{path} does not exist")
        values = load_yaml(path)
        unknown = sorted(set(values) - set(namespace))
        if unknown:
            raise ParameterError("profile", profile, f"{path} sets {unknown}, which are not parameters of {stem}")
        kept = sorted(set(values) & (papermill_parameters() if passed is None else set(passed)) - {"profile"})
        changed = {k: v for k, v in values.items() if k not in kept and namespace[k] != v}
        namespace.update({k: v for k, v in values.items() if k not in kept})
        print(f"profile {profile}: {path} sets {len(changed)} value(s) ({', '.join(changed) or 'none changed'})"
              + (f"; passed explicitly, kept: {', '.join(kept)}" if kept else ""))
    namespace["profile"] = profile
    return profile


def papermill_parameters() -> set[str]:
    """Names of the parameters papermill passed to this kernel (the assignments of the last executed cell that
    starts with papermill's "# Parameters" line); empty outside IPython or when papermill injected none."""
    try:
        from IPython import get_ipython
    except ImportError:
        return set()
    shell = get_ipython()
    history = shell.user_ns.get("In", []) if shell is not None else []
    injected = [src for src in history if src.startswith("# Parameters\n")]
    if not injected:
        return set()
    try:
        tree = ast.parse(injected[-1])
    except SyntaxError:
        return set()
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
