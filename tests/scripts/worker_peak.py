"""A notebook-like run in a spawned `map_runs` worker, its memory measured; run by tests/test_estimate.py in a fresh
process with MALLOC_MMAP_THRESHOLD_ set (freed large blocks go back to the system, so the resident set follows the
live tensors and buffers).

The run's job carries, as a notebook's run function does when CUDA has started (`parallel.map_runs` spawns and
sends what it captured by value), a hub-shaped model with a trained LoRA adapter and `FROZEN` frozen models of the
same shape: the counterpart it trains against, and a held-out one (held, as a run holds the panel it plays later).
In the worker it plays a training rollout against the first (both roles decode) and makes one update. A
baseline job, in a worker spawned beside it, carries models of the same classes and a token's width, and reads its
resident set once they are restored: what a worker holds before the run's models. (The run's forward passes also
check that a spawned worker registers the attention implementation its models name: `parallel.worker_setup`.)

Prints a JSON line, bytes: "start" (the run worker's resident set when its job starts, less the baseline's),
"decode" and "update" (its peaks in those phases, less the baseline), and the sizes the estimate reads: "row_tokens",
"logit_positions" (the update's chunk), "context_tokens", "rows" (the games' caches at their fullest).

    python worker_peak.py HUB_ID GAMES SHAPE      (SHAPE: the config's overrides as JSON, `hub.hub_config`)

Float32 weights, and the transformers forward in decoding and in the update (`lean=False`), the paths a GPU runs:
the CPU's lean engine holds fused copies of each layer's weights that a GPU run does not (`agents.fastdecode`).
"""
import copy
import json
import sys

import torch

from dialogrl.agents import LMAgent
from dialogrl.envs import DealOrNoDeal
from dialogrl.models import add_adapters, hub_shaped_model
from dialogrl.parallel import map_runs
from dialogrl.rl.batching import chunk_tokens
from dialogrl.rl.config import RoleSpec, TrainConfig
from dialogrl.rl.trainer import Trainer

FROZEN = 2      # frozen models beside the trained one: the training counterpart and a held-out one


def status(field: str) -> int:   # VmRSS: the resident set now; VmHWM: its peak since the last reset
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ":"))


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")   # resets the peak resident set (Linux)


def run(job: tuple) -> dict:
    """The job in its worker: its models arrived with it (unpickled before this runs)."""
    kind, policy, tok, frozen, games = job
    start = status("VmRSS")
    if kind == "baseline":
        return {"start": start}
    config = TrainConfig(scenarios_per_step=games, group_size=1, kl_coef=0.0, minibatch_turns=10**6,
                         max_new_tokens=16)
    train = Trainer(DealOrNoDeal(max_turns=6), policy, tok, {   # the policy's adapter against the first frozen model
        "A": RoleSpec(adapter="A", trainable=True, lr=1e-4),
        "B": RoleSpec(agent=LMAgent(frozen[0], tok, name="B", max_new_tokens=config.max_new_tokens))}, config,
        lean=False)
    for agent in train.agents.values():
        agent.lean = False   # the transformers forward, as on a GPU
    reset_peak()
    episodes, groups = train.rollout(0)
    decode = status("VmHWM")
    samples = train.samples(episodes, groups)["A"]
    reset_peak()
    train.update("A", samples)
    update = status("VmHWM")
    positions = len(samples) * max(len(s.completion_ids) for s in samples)
    return {"start": start, "decode": decode, "update": update, "logit_positions": positions,
            "row_tokens": chunk_tokens(samples, list(range(len(samples)))) - positions,
            "context_tokens": sum(len(t.prompt_ids) + len(t.completion_ids) for e in episodes
                                  for t in e.state.turns[-2:] if t.completion_ids),
            "rows": 2 * len(episodes)}


def main() -> None:
    hub_id, games, shape = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    torch.set_num_threads(1)

    def models(**shape) -> tuple:   # the frozen ones copies of the policy's warm start, as a run's often are
        policy, tok = hub_shaped_model(hub_id, **shape)
        frozen = [copy.deepcopy(policy) for _ in range(FROZEN)]
        return add_adapters(policy, ["A"], r=8, alpha=16), tok, frozen

    small = models(num_hidden_layers=1, hidden_size=16, intermediate_size=16, num_attention_heads=2,
                   num_key_value_heads=1, vocab_size=256)
    big = models(**shape)
    base, measured = map_runs(run, [("baseline", *small, games), ("run", *big, games)], processes=2, method="spawn")
    print(json.dumps({**measured, **{k: measured[k] - base["start"] for k in ("start", "decode", "update")}}))


if __name__ == "__main__":
    main()
