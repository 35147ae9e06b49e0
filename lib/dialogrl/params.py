"""Notebook parameter checks: one declarative spec per notebook, checked before any work starts.

The parameters cell holds literals only (papermill injects overrides after it). The cell after it does

    params = check_params(globals(), {
        "profile": OneOf("smoke", "cpu", "gpu"),    # named profile of the run
        "seed": Int(min=0),
        "n_train_games": Int(min=1),
        "lr": Float(min=0, strict=True),
        "policy_model": ModelName(),
        "max_turns": Optional(Int(min=1)),
    })

and gets back a plain dict of every parameter (for config.json), or a ParameterError naming the parameter, the value
it got and what is allowed. Before it, `resolve_profile(globals(), stem)` applies the cell's `profile`: "auto" picks
gpu on a CUDA machine and cpu elsewhere; smoke and gpu take params/<stem>/<profile>.yaml's values over the cell's
(parameters papermill passed explicitly still win), cpu keeps the cell's own values.
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
        from dialogrl.models import check_model_name

        if not isinstance(value, str):
            raise ParameterError(name, value, "expected a model name (string)")
        try:
            check_model_name(value)
        except ValueError as err:
            raise ParameterError(name, value, str(err)) from None
        return value


def model_identity(name: str) -> str:
    """What a model name points at, for telling whether two names are one model: a hub id lower-cased (the hub
    matches ids case-insensitively); a local folder its resolved path, or the hub id when the folder is a snapshot in
    a Hugging Face cache (.../models--org--name/snapshots/<revision>); anything else (an embedded name) as it is."""
    from dialogrl.hub import HUB_ID_PATTERN

    path = Path(name).expanduser()
    if path.is_dir():
        path = path.resolve()
        cached = [p[len("models--"):].split("--", 1) for p in path.parts if p.startswith("models--")]
        return "/".join(cached[-1]).lower() if cached and len(cached[-1]) == 2 else str(path)
    return name.lower() if HUB_ID_PATTERN.match(name) and not name.startswith(("/", ".", "~")) else name


def check_judge_independent(judge_model: str | None, partner_models, name: str = "judge_model",
                            partners_name: str = "heldout_models") -> None:
    """Refuse an LLM judge (or another model of the training pipeline: a training partner, name="partner_model")
    that is also one of the held-out partner models (ParameterError, a ValueError).

    The judge's process reward shapes the policy toward what that model prefers, and a training partner is what the
    policy learns to play against; a held-out partner played by the same model would then not be held out from the
    training pipeline, and a gain against it would not be a held-out gain.
    judge_model: the model's name (None: no such model, nothing to check); partner_models: the held-out partners'
    model names. Names are compared by `model_identity` (case-insensitive hub ids, resolved paths).
    """
    if judge_model is None:
        return
    judge = model_identity(judge_model)
    for i, m in enumerate(partner_models):
        if model_identity(m) == judge:
            raise ParameterError(name, judge_model, f"it is also the held-out partner {partners_name}[{i}] = {m!r}: "
                                 "a model of the training pipeline (a judge that shapes the training reward, a "
                                 "training partner) cannot also play a held-out partner; choose another model or drop "
                                 "that partner")


def _check_range(name, value, lo, hi, strict):
    if lo is not None and (value <= lo if strict else value < lo):
        raise ParameterError(name, value, f"must be {'>' if strict else '>='} {lo}")
    if hi is not None and (value >= hi if strict else value > hi):
        raise ParameterError(name, value, f"must be {'<' if strict else '<='} {hi}")


def check_params(namespace: Mapping[str, Any], spec: Mapping[str, Rule]) -> dict:
    """Check every parameter named in `spec` against its rule; return {name: value} in spec order.

    namespace: where the parameters live (a notebook's `globals()`, or any dict).
    spec: {parameter name: Rule}. A name missing from the namespace is an error too.
    """
    out = {}
    for name, rule in spec.items():
        if name not in namespace:
            raise ParameterError(name, None, "missing: the parameters cell must define it")
        out[name] = rule.check(name, namespace[name])
    return out


def resolve_profile(namespace: MutableMapping[str, Any], stem: str, cuda: bool | None = None,
                    params_dir: str | Path | None = None, passed: set[str] | None = None) -> str:
    """Apply a notebook's profile to its parameters (its globals); returns the profile (smoke | cpu | gpu).

    `profile = "auto"` becomes `gpu` on a CUDA machine and `cpu` elsewhere. `cpu` keeps the parameters cell's values
    (the cell's defaults are the cpu profile); `smoke` and `gpu` replace them by params/<stem>/<profile>.yaml's, so
    that `profile = "smoke"` typed in the cell gives the run that `papermill -f params/<stem>/smoke.yaml` and
    `python -m dialogrl reproduce --profile smoke` give. A parameter passed explicitly (papermill's `-p`, or a key of
    its `-f` file) still wins over the profile's file.
    cuda: None asks torch (only for "auto"). passed: the explicitly passed parameter names; None reads them from
    papermill's injected-parameters cell in this kernel's history (`papermill_parameters`). Raises ParameterError for
    a missing profile file or a key of it that is not a parameter.
    """
    profile = namespace.get("profile")
    if profile == "auto":
        if cuda is None:
            import torch

            cuda = torch.cuda.is_available()
        profile = "gpu" if cuda else "cpu"
        print(f"profile auto -> {profile} ({'a' if cuda else 'no'} CUDA device)")
    if profile in ("smoke", "gpu"):
        import yaml

        from dialogrl.run import repo_root

        path = Path(params_dir or repo_root() / "params") / stem / f"{profile}.yaml"
        if not path.exists():
            raise ParameterError("profile", profile, f"{path} does not exist")
        values = yaml.safe_load(path.read_text()) or {}
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
    import ast

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
