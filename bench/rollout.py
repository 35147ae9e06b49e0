"""Batched rollout engine vs a naive loop, on the same tiny model and the same 64 Deal or No Deal scenarios.

    python bench/rollout.py [--model tiny-dond] [--games 64] [--max-new-tokens 48] [--repeats 3] [--modes ...]
    python bench/rollout.py --model smollm2-135m-instruct --modes engine-1 batched --repeats 1   (the packaged model)

Three modes, each in its own process so that peak memory (max RSS) is its own:
  naive     one game at a time, one `model.generate` call per turn (the whole context re-encoded every turn);
  engine-1  the rollout engine on one game at a time (KV cache kept from turn to turn, no batching);
  batched   the rollout engine on all games at once (continuous batching plus the per-game KV cache).
Each mode plays the same games `--repeats` times and reports the median time (a 3-second run on a shared 2-core machine
varies by 20%). Prints generated tokens/s and peak memory per mode.

The roofline. The model's FLOPs per generated token, from its config (norms, RoPE, softmax and biases, O(hidden) per
token, left out):

    F_tok = 2 * P_lin + n_layers * 4 * n_heads * head_dim * ctx
    P_lin = n_layers * (H * (n_heads + 2 * n_kv_heads) * head_dim   # q, k, v
                        + n_heads * head_dim * H                   # o
                        + 3 * H * I)                               # gate, up, down (SwiGLU)
            + H * V                                                # lm_head
    ctx   = the mean number of keys a generated token attends to (prompt + earlier completion tokens + itself),
            measured over the batched mode's turns; 4 * n_heads * head_dim * ctx per layer is q.k^T and p.V.

The machine's matmul throughput: torch.mm timed on the model's own (rows, in) x (in, out) shapes, at a decoding batch
(--batch-rows) and a prefill-sized block (2048 rows), and on a 1024^3 square, with the benchmark's thread count and no
other mode running; `peak` is the best of them. The decode roofline is peak / F_tok tokens/s; a mode's roofline fraction
is its generated tokens/s over that. That fraction leaves out the prompts: in a multi-turn game each turn first runs the
prompt tokens its role's cache does not hold yet (the counterpart's reply, the chat template), about three per generated
token here, so even an engine at the matmul peak reaches about 0.25 of the decode roofline. The work roofline counts
them: the FLOPs any cache-reusing engine must spend on these games (`necessary_work`: those prompt tokens, and every
sampled token but the last fed back; block matmuls, lm_head where logits are needed, attention over the keys each token
sees), per second, over the peak. The last three lines are `work roofline: <batched>`,
`roofline: <batched fraction>` and `speedup: <batched tok/s / naive tok/s>`.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from dialogrl.game import Agent, Utterance


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
    turns = [t for ep in episodes for t in ep.state.turns if t.completion_ids]
    tokens = sum(len(t.completion_ids) for t in turns)
    # the j-th completion token (from 0) is predicted attending to len(prompt) + j keys
    keys = sum(len(t.prompt_ids) * len(t.completion_ids) + len(t.completion_ids) * (len(t.completion_ids) - 1) / 2
               for t in turns)
    return {"mode": args.mode, "seconds": seconds, "tokens": tokens, "tok_per_s": tokens / seconds,
            "work": necessary_work(episodes),
            "ctx": keys / tokens, "prompt_tokens": sum(len(t.prompt_ids) for t in turns),
            "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "agreement": task.metrics([e.state for e in episodes])["agreement"]}


def necessary_work(episodes) -> dict:
    """The forward work that any engine keeping each game's KV cache from turn to turn must do for these games: per
    LM turn, the prompt tokens its role's cache does not hold (the cache holds the role's previous prompt and
    completion, less the last sampled token) and every sampled token but the last (fed back to predict the next).
    Returns {"prefill": prompt tokens run, "decode": sampled tokens fed back, "keys": the keys all of them attend to
    (a token at position p sees p + 1), "turns": LM turns (one lm_head row per prefill)}."""
    from dialogrl.agents.sampling import common_prefix

    prefill = decode = keys = turns = 0
    for ep in episodes:
        cached: dict[str, list[int]] = {}
        for t in ep.state.turns:
            if not t.completion_ids:
                continue
            prompt, comp = t.prompt_ids, t.completion_ids
            start = min(common_prefix(cached.get(t.role, []), prompt), len(prompt) - 1)
            prefill += len(prompt) - start
            decode += len(comp) - 1
            keys += sum(range(start + 1, len(prompt) + 1)) + sum(range(len(prompt) + 1, len(prompt) + len(comp)))
            turns += 1
            cached[t.role] = prompt + comp[:-1]
    return {"prefill": prefill, "decode": decode, "keys": keys, "turns": turns}


def work_flops(config, work: dict) -> float:
    """FLOPs of `necessary_work`: the block matmuls for every token run, the lm_head for every decoded token and one
    per prefill (logits only at a prompt's last token), q.k^T and p.V over the keys each token attends to."""
    H, V, L = config.hidden_size, config.vocab_size, config.num_hidden_layers
    nh = config.num_attention_heads
    d = getattr(config, "head_dim", None) or H // nh
    _, p_lin = flops_per_token(config, 0)
    p_blocks = p_lin - H * V
    tokens = work["prefill"] + work["decode"]
    return 2 * p_blocks * tokens + 2 * H * V * (work["decode"] + work["turns"]) + L * 4 * nh * d * work["keys"]


def flops_per_token(config, ctx: float) -> tuple[float, int]:
    """(F_tok, P_lin): the model's FLOPs per generated token at mean context `ctx`, and its matmul parameters."""
    H, n_inter, V, L = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    nh, kvh = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or H // nh
    p_lin = L * (H * (nh + 2 * kvh) * d + nh * d * H + 3 * H * n_inter) + H * V
    return 2 * p_lin + L * 4 * nh * d * ctx, p_lin


def matmul_gflops(config, rows: int, threads: int, seconds: float = 0.5) -> float:
    """GFLOP/s of torch.mm over the model's linear shapes (rows, in) x (in, out), all of them in turn; rows=0: the
    1024^3 square."""
    import torch

    torch.set_num_threads(threads)
    H, n_inter, V = config.hidden_size, config.intermediate_size, config.vocab_size
    nh, kvh = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or H // nh
    shapes = [(H, (nh + 2 * kvh) * d), (nh * d, H), (H, 2 * n_inter), (n_inter, H), (H, V)] if rows else [(1024, 1024)]
    pairs = [(torch.randn(rows or 1024, a), torch.randn(a, b)) for a, b in shapes]
    flop = sum(2 * x.shape[0] * x.shape[1] * w.shape[1] for x, w in pairs)
    for x, w in pairs:
        x @ w                                      # warm-up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for x, w in pairs:
            torch.mm(x, w)
        n += 1
    return flop * n / (time.perf_counter() - t0) / 1e9


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-dond")
    p.add_argument("--games", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3, help="timed runs per mode; the median is reported")
    p.add_argument("--batch-rows", type=int, default=64, help="rows of the decoding-batch matmul shapes timed")
    p.add_argument("--modes", nargs="+", default=["naive", "engine-1", "batched"],
                   choices=["naive", "engine-1", "batched"],
                   help="modes to run (default all; `--modes batched` for a large model, whose naive loop takes long)")
    p.add_argument("--mode", choices=["naive", "engine-1", "batched"], help=argparse.SUPPRESS)  # worker process
    args = p.parse_args()
    if args.mode:
        print(json.dumps(worker(args)))
        return
    results = {}
    if "batched" not in args.modes:
        p.error("--modes must include batched (the roofline is measured on it)")
    for mode in args.modes:
        cmd = [sys.executable, __file__, "--mode", mode, "--model", args.model, "--games", str(args.games),
               "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads),
               "--repeats", str(args.repeats)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        r = results[mode] = json.loads(out)
        print(f"{mode:9s} {r['tokens']:6d} tokens in {r['seconds']:6.2f} s = {r['tok_per_s']:7.0f} tok/s, "
              f"peak memory {r['peak_gib']:.2f} GiB, self-play agreement {r['agreement']:.2f}, "
              f"prompt tokens {r['prompt_tokens']}, mean context {r['ctx']:.0f}")
    from transformers import AutoConfig

    from dialogrl.models import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(args.model))
    f_tok, p_lin = flops_per_token(config, results["batched"]["ctx"])
    rates = {f"model shapes x {args.batch_rows} rows": matmul_gflops(config, args.batch_rows, args.threads),
             "model shapes x 2048 rows": matmul_gflops(config, 2048, args.threads),
             "1024^3 square": matmul_gflops(config, 0, args.threads)}
    peak = max(rates.values())
    print(f"model: {p_lin / 1e6:.2f}M matmul parameters, F_tok = 2 * P_lin + attention at mean context "
          f"{results['batched']['ctx']:.0f} = {f_tok / 1e6:.2f} MFLOP per generated token")
    print(f"matmul ({args.threads} threads): " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
          + f" GFLOP/s; peak {peak:.0f} GFLOP/s -> decode roofline {peak * 1e9 / f_tok:.0f} tok/s")
    for mode, r in results.items():
        w = r["work"]
        achieved = work_flops(config, w) / r["seconds"] / 1e9
        print(f"{mode:9s} roofline fraction {r['tok_per_s'] * f_tok / (peak * 1e9):.3f} (generated tokens only); "
              f"work roofline {achieved / peak:.3f} ({achieved:.0f} GFLOP/s over the {w['prefill']} prompt tokens "
              f"and {w['decode']} fed-back tokens a cache-reusing engine must run)")
    if "engine-1" in results:
        batching = results['batched']['tok_per_s'] / results['engine-1']['tok_per_s']
        print(f"batching alone (batched vs engine-1): {batching:.2f}x")
    b = results["batched"]
    print(f"work roofline: {work_flops(config, b['work']) / b['seconds'] / 1e9 / peak:.3f}")
    print(f"roofline: {b['tok_per_s'] * f_tok / (peak * 1e9):.3f}")
    if "naive" in results:
        print(f"speedup: {results['batched']['tok_per_s'] / results['naive']['tok_per_s']:.2f}")


if __name__ == "__main__":
    main()
