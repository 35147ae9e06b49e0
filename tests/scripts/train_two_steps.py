"""Two trainer steps on a given model folder; run under `accelerate launch --cpu --num_processes 2` by
tests/test_trainer_distributed.py. Every process writes its adapter parameters' checksum and the logged rows."""
import json
import sys
from pathlib import Path

import torch

from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.models import adapter_parameters, load_model
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.run import MetricsLogger, seed_everything

model_dir, out = sys.argv[1], Path(sys.argv[2])
seed_everything(0)
model, tok = load_model(model_dir, adapters=["A"], device="cpu", lora_r=4)
before = {n: p.detach().clone() for n, p in adapter_parameters(model, "A").items()}
trainer = Trainer(DealOrNoDeal(max_turns=4), model, tok,
                  {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(agent=ScriptedAgent("fair", 0))},
                  TrainConfig(steps=2, scenarios_per_step=4, group_size=2, max_new_tokens=12))
acc = trainer.accelerator
seed_everything(acc.process_index)  # each process samples its own games
rows = trainer.train(log=MetricsLogger(out) if acc.is_main_process else None, progress=False)
params = adapter_parameters(model, "A")
record = {"rank": acc.process_index, "world": acc.num_processes,
          "checksum": float(sum(p.double().sum() for p in params.values())),
          "changed": any(not torch.equal(p, before[n]) for n, p in params.items()),
          "scenario_groups": sorted(set(trainer.scenarios(0)[1])), "rows": rows}
(out / f"rank{acc.process_index}.json").write_text(json.dumps(record))
# Leave the gloo group cleanly: a process that exits with the group alive can abort in its threads' teardown
# ("terminate called without an active exception"), seen once in a full-suite run under load.
acc.wait_for_everyone()
if torch.distributed.is_initialized():
    torch.distributed.destroy_process_group()
