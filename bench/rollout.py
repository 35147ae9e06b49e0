"""Batched rollout engine vs a naive loop, on the same tiny model and the same 64 Deal or No Deal scenarios.

    python bench/rollout.py [--model tiny-dond] [--games 64] [--max-new-tokens 48] [--repeats 3]

Three modes, each in its own process so that peak memory (max RSS) is its own:
  naive     one game at a time, one `model.generate` call per turn (the whole context re-encoded every turn);
  engine-1  the rollout engine on one game at a time (KV cache kept from turn to turn, no batching);
  batched   the rollout engine on all games at once (continuous batching plus the per-game KV cache).
Each mode plays the same games `--repeats` times and reports the median time (a 3-second run on a shared 2-core machine
varies by 20%). Prints generated tokens/s and peak memory per mode; the last line is
`speedup: <batched tok/s / naive tok/s>`.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from dialogrl.envs.base import Agent, Utterance


class GenerateAgent(Agent):
    """The naive baseline: one `model.generate` call per turn, sampling at temperature 1 with no top-k / top-p."""

    def __init__(self, model, tok, max_new_tokens: int):
        self.model, self.tok, self.max_new_tokens, self.name = model, tok, max_new_tokens, "generate"

    def act(self, requests):
        import torch

        out = []
        for r in requests:
            ids = self.tok.apply_chat_template(r.messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)["input_ids"]
            with torch.no_grad():
                seq = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                          temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=self.max_new_tokens,
                                          eos_token_id=self.tok.eos_token_id, pad_token_id=self.tok.pad_token_id)
            completion = seq[0, ids.shape[1]:].tolist()
            out.append(Utterance(self.tok.decode(completion, skip_special_tokens=True).strip(), ids[0].tolist(),
                                 completion, [0.0] * len(completion)))
        return out


def worker(args) -> dict:
    import torch

    from dialogrl.agents import LMAgent
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.models import load_model
    from dialogrl.rollout import play
    from dialogrl.run import seed_everything

    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, device="cpu")
    task = DealOrNoDeal()
    scenarios = task.sample_scenarios(args.games, seed=777)
    agent = LMAgent(model, tok, max_new_tokens=args.max_new_tokens)
    if args.mode == "naive":
        agent = GenerateAgent(model, tok, args.max_new_tokens)
    times = []
    for _ in range(args.repeats):          # the same seed each time: the same games; the median time is reported
        seed_everything(0)
        t0 = time.perf_counter()
        if args.mode == "batched":
            episodes = play(task, {"A": agent, "B": agent}, scenarios)
        else:
            episodes = [ep for sc in scenarios for ep in play(task, {"A": agent, "B": agent}, [sc])]
        times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)
    tokens = sum(len(t.completion_ids) for ep in episodes for t in ep.state.turns if t.completion_ids)
    return {"mode": args.mode, "seconds": seconds, "tokens": tokens, "tok_per_s": tokens / seconds,
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "agreement": task.metrics([e.state for e in episodes])["agreement"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-dond")
    p.add_argument("--games", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per mode; the median is reported")
    p.add_argument("--mode", choices=["naive", "engine-1", "batched"], help=argparse.SUPPRESS)  # worker process
    args = p.parse_args()
    if args.mode:
        print(json.dumps(worker(args)))
        return
    results = {}
    for mode in ("naive", "engine-1", "batched"):
        cmd = [sys.executable, __file__, "--mode", mode, "--model", args.model, "--games", str(args.games),
               "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads),
               "--repeats", str(args.repeats)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        r = results[mode] = json.loads(out)
        print(f"{mode:9s} {r['tokens']:6d} tokens in {r['seconds']:6.1f} s = {r['tok_per_s']:7.0f} tok/s, "
              f"peak memory {r['peak_gib']:.2f} GiB, self-play agreement {r['agreement']:.2f}")
    batching = results['batched']['tok_per_s'] / results['engine-1']['tok_per_s']
    print(f"batching alone (batched vs engine-1): {batching:.2f}x")
    print(f"speedup: {results['batched']['tok_per_s'] / results['naive']['tok_per_s']:.2f}")


if __name__ == "__main__":
    main()
