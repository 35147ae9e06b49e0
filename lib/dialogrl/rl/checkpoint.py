"""A training run's checkpoints: `save` writes a trainer's adapters, value heads, optimizers, schedulers, every RNG
state and its step into one file (written aside and renamed: a killed save leaves the last one whole); `load` restores
one, refusing another run's (the configuration fields that differ named); `resume` loads the newest that loads,
passing over a damaged one. `Trainer.save_checkpoint`, `.load_checkpoint` and `.resume` call these.
"""
from __future__ import annotations

import os
import random
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np
import torch

from dialogrl.models import adapter_parameters, load_adapter_state
from dialogrl.rl.config import TrainConfig


def agent_rngs(trainer) -> dict[str, random.Random]:
    """The private RNGs of the fixed agents (scripted personas, population members), by a stable name."""
    found = {}
    for role, spec in sorted(trainer.roles.items()):
        if spec.agent is None:
            continue
        members = getattr(spec.agent, "members", {"": spec.agent})
        for name, agent in sorted(members.items()):
            if isinstance(getattr(agent, "rng", None), random.Random):
                found[f"{role}/{name}"] = agent.rng
    return found


def save(trainer, path: str | Path) -> Path:
    """Adapters, value heads, optimizers, schedulers, every RNG state and the step, in one file (main
    process only; every process holds the same weights)."""
    path = Path(path)
    if not trainer.accelerator.is_main_process:
        return path
    path.mkdir(parents=True, exist_ok=True)
    numpy_state = np.random.get_state()
    state = {
        "step": trainer.step_count,
        **trainer.config_dict(),
        "adapters": {a: {n: p.detach().cpu().clone() for n, p in adapter_parameters(trainer.model, a).items()}
                     for a in trainer.adapter_roles},
        "critics": {a: c.state_dict() for a, c in trainer.critics.items()},
        "optimizers": {a: o.state_dict() for a, o in trainer.optimizers.items()},
        "schedulers": {a: s.state_dict() for a, s in trainer.schedulers.items()},
        "scaler": trainer.scaler.state_dict(), "skipped_steps": dict(trainer.skipped_steps),   # fp16's loss scale
        "rng": {"python": random.getstate(), "torch": torch.get_rng_state(),
                "numpy": [numpy_state[0], numpy_state[1].tolist(), *(x.item() if hasattr(x, "item") else x
                                                                     for x in numpy_state[2:])],
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "agents": {n: r.getstate() for n, r in agent_rngs(trainer).items()}},
    }
    tmp = path / "trainer.pt.tmp"        # written aside and renamed: a killed save leaves the last one whole
    torch.save(state, tmp)
    os.replace(tmp, path / "trainer.pt")
    return path


def resume(trainer, checkpoint_dir: str | Path) -> Path | None:
    """Load the newest checkpoint under checkpoint_dir that loads; a damaged one (a save cut short by a full disk,
    say) is passed over with a warning naming it. None when there is none; CheckpointError when none loads."""
    found = saved(checkpoint_dir)
    for path in reversed(found):
        try:
            load(trainer, path)
            return path
        except CheckpointDamagedError as err:   # another configuration is not passed over: it raises
            warnings.warn(f"{err}; resuming from the checkpoint before it", stacklevel=2)
    if found:
        raise CheckpointError(f"no checkpoint under {checkpoint_dir} loads ({', '.join(p.name for p in found)})")
    return None


def load(trainer, path: str | Path) -> None:
    """Restore a checkpoint written by `save`: training continues as if it had never stopped. Tensors and
    plain data only (`weights_only`); a checkpoint of another configuration (any field but the run's length,
    saving and logging) or other roles is refused, naming the fields that differ."""
    file = Path(path) / "trainer.pt"
    if not file.exists():
        raise FileNotFoundError(f"no trainer checkpoint at {file}")
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:   # truncated (zip), garbled, or not tensors and plain data
        lines = str(err).splitlines() or [""]
        detail = next((x.strip() for x in lines if "WeightsUnpickler error" in x), lines[0])  # torch's is long
        raise CheckpointDamagedError(f"the checkpoint {file} does not load ({type(err).__name__}: {detail})"
                                     ) from err
    mine = trainer.config_dict()
    theirs = {f.name: state["config"].get(f.name, f.default) for f in fields(TrainConfig)}  # older: defaults
    differ = [f"{k}: {theirs[k]!r} there, {v!r} here" for k, v in mine["config"].items()
              if k not in RESUMABLE and theirs[k] != v]
    differ += [f"role {r}: {state.get('roles', {}).get(r)!r} there, {v!r} here" for r, v in mine["roles"].items()
               if state.get("roles", {}).get(r) != v]
    if differ or set(state["adapters"]) != set(trainer.adapter_roles):
        raise CheckpointError(f"the checkpoint {file} is of another training run; it differs in "
                              f"{'; '.join(differ) or 'its update paths ' + str(sorted(state['adapters']))}")
    for a, tensors in state["adapters"].items():
        load_adapter_state(trainer.model, a, tensors)
    for a, sd in state["critics"].items():
        trainer.critics[a].load_state_dict(sd)
    for a, sd in state["optimizers"].items():
        trainer.optimizers[a].load_state_dict(sd)
    for a, sd in state["schedulers"].items():
        trainer.schedulers[a].load_state_dict(sd)
    if trainer.scaler.is_enabled() and state.get("scaler"):   # older checkpoints and disabled scalers hold none
        trainer.scaler.load_state_dict(state["scaler"])
    trainer.skipped_steps = dict(state.get("skipped_steps", {}))
    rng = state["rng"]
    random.setstate(_as_tuples(rng["python"]))
    np.random.set_state((rng["numpy"][0], np.array(rng["numpy"][1], dtype=np.uint32), *rng["numpy"][2:]))
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    for n, r in agent_rngs(trainer).items():
        if n in rng["agents"]:
            r.setstate(_as_tuples(rng["agents"][n]))
    trainer.step_count = state["step"]


def saved(checkpoint_dir: str | Path) -> list[Path]:
    """The checkpoint folders under checkpoint_dir (step-NNNNNN with a trainer.pt), oldest first."""
    return [p.parent for p in sorted(Path(checkpoint_dir).glob("step-*/trainer.pt"))]


def _as_tuples(state):
    """A random.Random state as getstate() gives it (tuples), from what a checkpoint may hold (lists)."""
    return tuple(_as_tuples(x) for x in state) if isinstance(state, (list, tuple)) else state


class CheckpointError(ValueError):
    """A checkpoint that belongs to another training run (the message names what differs), or none that loads."""


class CheckpointDamagedError(CheckpointError):
    """A checkpoint file that does not load: truncated, garbled, or holding more than tensors and plain data."""


# the TrainConfig fields a run may change when it resumes: how long it runs, how it saves and where it reports
RESUMABLE = ("steps", "save_every", "keep_checkpoints", "report_to", "log_dir")
