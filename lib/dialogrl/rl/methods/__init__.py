"""Each paper's methods in one shape: a `MethodSpec` says how a method trains (the trainer's roles, config overrides,
hooks and per-turn rewards) and which adapter plays each role afterwards. One module per paper builds them by name:

    calibrated   paper 1, From Static Context to Calibrated Interactive RL (notebook 01)
    socialrl     paper 2, SocialRL (notebook 02)
    scope        paper 3, simulator collapse: SCOPE (notebook 03)
    ibrl         paper 4, IB-RL: Isolated Bilateral RL (notebook 04)

and every notebook trains a method with the same three lines:

    spec = ibrl.method_spec("ibrl", task.roles)                     # each module's method_spec(name, ...)
    model, tok = load_model(path, adapters=spec.adapters)
    trainer = spec.trainer(task, model, tok, TrainConfig.from_params(params, seed=s))   # None: trains nothing
    trainer.train(...)

Each module also registers its paper: `PAPER = Paper(stem, title, method_spec, workload, stand_ins, ...)`, what the
tools outside the notebook know of it (`estimate`'s workload, `bench/gpu_check.py`'s stand-ins, the notebook tests)
and what its notebook's parameters may be (`checks`, `check`): the notebook's second cell is
`params = PAPER.parameters(globals())`.
`papers()` finds every module here that exports PAPER, so a fifth paper is its module here, its notebook, its params
folder and its papers file (papers/README.md, "Adding a paper"; tests/test_new_paper.py).
"""
from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dialogrl.estimate import DEVICES, fit_processes
from dialogrl.params import Int, OneOf, Rule, Str, check_params, resolve_profile
from dialogrl.rl.config import TRACKERS
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer


@dataclass(frozen=True)
class MethodSpec:
    """One method of one paper: how it trains, and what plays each role at evaluation."""
    name: str
    roles: dict[str, RoleSpec] = field(default_factory=dict)                 # Trainer RoleSpecs ({}: trains nothing)
    config_overrides: dict[str, Any] = field(default_factory=dict)           # TrainConfig fields the method sets
    eval_adapters: dict[str, str | None] = field(default_factory=dict)       # role -> adapter it plays at evaluation
                                                                             # (None: the warm start); roles it leaves
                                                                             # unnamed too
    hooks: tuple[Callable[[Trainer], None], ...] = ()                        # Trainer hooks, at the start of each step
    turn_rewards: Callable | None = None                                     # per-turn rewards (rewards.ProcessReward)
    adapters: tuple[str, ...] = ()                                           # LoRA adapters to create, in this order
                                                                             # (it sets their initialisation)
    train_counterparts: dict[str, str | None] = field(default_factory=dict)  # role -> the adapter it faced in training
    trainer_class: type[Trainer] = Trainer                                   # e.g. rl.static.StaticContextTrainer
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)             # the trainer class's own fields

    def trainer(self, task, model, tokenizer, config: TrainConfig,
                hooks: tuple[Callable[[Trainer], None], ...] = ()) -> Trainer | None:
        """The method's trainer on `model` (created with `adapters`), its config `config` with the method's
        overrides, its hooks followed by `hooks` (a notebook's own logging); None for a method that trains
        nothing."""
        if not self.roles:
            return None
        return self.trainer_class(task, model, tokenizer, self.roles,
                                  config=dataclasses.replace(config, **self.config_overrides),
                                  turn_rewards=self.turn_rewards, hooks=[*self.hooks, *hooks], **self.trainer_kwargs)


@dataclass(frozen=True)
class Paper:
    """One paper of the repository, as the tools outside its notebook know it.

    stem: its notebook notebooks/<stem>.ipynb, its profiles params/<stem>/<profile>.yaml, its record papers/<stem>.md.
    workload(p, base): what the notebook's training runs hold and do under its parameters `p`, one record per kind
        of run, each `base` (estimate's common record: steps, games, tokens, ...) updated (`estimate.workload` says
        every key).
    stand_ins: for `bench/gpu_check.py`, the model that plays each hub-model parameter of the gpu profile: a game's
        key in gpu_check's GAMES (its larger embedded model), an embedded recipe's name, or a value as it is;
        packaged_stand_ins: the same with the packaged pretrained model (`--stand-in packaged`; PACKAGED names it).
    checks: what the notebook's parameters cell does not say of each parameter, its choices and ranges
        (`dialogrl.params.check_params`' spec: the cell's literals give the types); check(params): the checks that
        read several parameters together, raising a ValueError that names them.
    """
    stem: str
    title: str
    method_spec: Callable[..., MethodSpec]
    workload: Callable[[dict, dict], list[dict]]
    stand_ins: Mapping[str, Any]
    packaged_stand_ins: Mapping[str, Any]
    checks: Mapping[str, Rule | str] = field(default_factory=dict)
    check: Callable[[dict], None] | None = None

    def parameters(self, namespace: dict) -> dict:
        """The notebook's parameters, checked before any work starts: its profile applied to `namespace` (its
        globals; `dialogrl.params.resolve_profile`: params/<stem>/<profile>.yaml), every parameter of its cell
        checked by its literal's type and `checks`, a `methods` list naming each method once, then by `check`.
        Returns {name: value} (what config.json records)."""
        resolve_profile(namespace, self.stem)
        params = check_params(namespace, self.checks, cell=self.stem)
        methods = params.get("methods")
        if isinstance(methods, list) and len(set(methods)) != len(methods):
            raise ValueError(f"methods={methods}: each method once")
        if self.check is not None:
            self.check(params)
        if params.get("n_seeds") == 1:
            print("note: one training seed: the intervals are bootstraps over games and ignore seed-to-seed variation")
        return self.fit_processes(params, namespace)

    def fit_processes(self, params: dict, namespace: dict | None = None, gpu_gib: float | None = None) -> dict:
        """The gpu and colab profiles on the GPU at hand: `processes` lowered to the most runs at once whose
        processes fit its memory by the estimate (`estimate.fit_processes`: the notebook's process and each run's,
        every model they hold counted; at least one), in `params` and `namespace`, with a note; unchanged where
        they fit, on a CPU, and where the estimate cannot size the models (the embedded builds, local folders).
        gpu_gib: the GPU's memory (None: torch's, where CUDA is available). Returns `params`."""
        if params.get("profile") not in DEVICES or "processes" not in params:
            return params
        if gpu_gib is None:
            if not torch.cuda.is_available():
                return params
            gpu_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
        device = dataclasses.replace(DEVICES[params["profile"]], memory_gib=float(gpu_gib))
        try:
            fit = fit_processes(self, params, device)
        except ValueError:   # a trained model the estimate does not size (no committed hub config)
            return params
        if fit < params["processes"]:
            print(f"note: processes {params['processes']} -> {max(fit, 1)}: by the estimate, "
                  + (f"only {fit} runs' processes at once fit" if fit else "not even one run fits")
                  + f" this GPU's {gpu_gib:.0f} GiB (python -m dialogrl estimate {self.stem} --profile "
                  f"{params['profile']} --gpu-memory {gpu_gib:.0f})")
            params["processes"] = max(fit, 1)
            if namespace is not None:
                namespace["processes"] = params["processes"]
        return params


COMMON_CHECKS = {   # the parameters every paper's notebook has: choices and ranges (Paper.checks takes them in)
    "minibatch_tokens": Int(min=1),   # None or a positive int
    "claims_panel": OneOf("responsive", "all"),
    "report_to": OneOf(*TRACKERS),
    "run_dir resume": Str(),   # None or a string
}
PACKAGED = "packaged"   # in packaged_stand_ins: the packaged pretrained model (gpu_check swaps in its name)
PAPER_FILES = ("notebooks/{stem}.ipynb", "params/{stem}/smoke.yaml", "params/{stem}/gpu.yaml",
               "params/{stem}/colab.yaml", "papers/{stem}.md")   # what a paper brings besides its module


def papers() -> dict[str, Paper]:
    """Every registered paper by stem, in stem order: the modules of this package (each folder of `__path__`) that
    export PAPER. Two modules registering one stem raise."""
    found: dict[str, Paper] = {}
    where: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        paper = getattr(module, "PAPER", None)
        if paper is None:
            continue
        if not isinstance(paper, Paper):
            raise TypeError(f"{module.__name__}.PAPER is a {type(paper).__name__}, not a dialogrl.rl.methods.Paper")
        if paper.stem in found:
            raise ValueError(f"two modules register the paper {paper.stem!r}: {where[paper.stem]} and "
                             f"{module.__name__}")
        found[paper.stem], where[paper.stem] = paper, module.__name__
    return dict(sorted(found.items()))


def paper(stem: str) -> Paper:
    """The registered paper of notebook `stem`; an unknown stem raises, naming the registered ones."""
    registered = papers()
    if stem not in registered:
        raise ValueError(f"no paper registers the notebook {stem!r}; registered: {', '.join(registered)} (a paper "
                         "registers with PAPER = Paper(...) in its module of dialogrl/rl/methods/)")
    return registered[stem]


def missing_files(paper: Paper, root: str | Path) -> list[str]:
    """The files of PAPER_FILES that `paper` lacks under the repository root `root`."""
    return [f.format(stem=paper.stem) for f in PAPER_FILES if not (Path(root) / f.format(stem=paper.stem)).exists()]
