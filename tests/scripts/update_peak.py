"""One Trainer.update on a hub-shaped model with random weights, its peak memory measured; run by
tests/test_estimate.py in a fresh process with MALLOC_MMAP_THRESHOLD_ set (freed large blocks go back to the system,
so the peak resident set follows the live tensors). Prints a JSON line: the peak the update adds, in bytes, and the
chunk's row tokens and logit positions (`rl.batching.chunk_tokens`).

    python update_peak.py HUB_ID LAYERS GAMES TURNS PROMPT COMPLETION PRECISION
"""
import json
import random
import sys

import torch

from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.models import add_adapters, hub_shaped_model
from dialogrl.rl.batching import Sample, chunk_tokens
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer

hub_id, layers, games, turns, prompt, completion = sys.argv[1], *map(int, sys.argv[2:7])
precision = sys.argv[7]
torch.set_num_threads(1)
model, tok = hub_shaped_model(hub_id, num_hidden_layers=layers, bf16=precision == "bf16")
model = add_adapters(model, ["A"], r=16, alpha=32)
config = TrainConfig(scenarios_per_step=1, group_size=2, kl_coef=0.0, minibatch_turns=10**6,
                     mixed_precision=precision)
trainer = Trainer(DealOrNoDeal(), model, tok, {"A": RoleSpec(adapter="A", trainable=True, lr=1e-4),
                                               "B": RoleSpec(agent=ScriptedAgent("fair"))}, config)
rng = random.Random(0)
samples = []
for _ in range(games):   # each turn's prompt continues the last prompt and completion: a game packs into one row
    context = [rng.randrange(tok.vocab_size) for _ in range(prompt)]
    for _ in range(turns):
        ids = [rng.randrange(tok.vocab_size) for _ in range(completion)]
        samples.append(Sample("A", list(context), ids, [-1.0] * completion, rng.choice([-1.0, 1.0])))
        context += ids + [rng.randrange(tok.vocab_size) for _ in range(prompt // 4)]
trainer.update("A", samples[:2])   # the optimizer's state exists before the measured update


def status(field: str) -> int:   # VmRSS: the resident set now; VmHWM: its peak since the last reset
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


with open("/proc/self/clear_refs", "w") as f:
    f.write("5")   # resets the peak resident set (Linux)
before = status("VmRSS")
trainer.update("A", samples)
positions = sum(len(s.completion_ids) for s in samples)
print(json.dumps({"peak": status("VmHWM") - before, "logit_positions": positions,
                  "row_tokens": chunk_tokens(samples, list(range(len(samples)))) - positions}))
