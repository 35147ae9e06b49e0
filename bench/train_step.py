"""One policy update: our Trainer vs TRL's GRPOTrainer, on the same model, LoRA config and batch of token sequences.

    python bench/train_step.py [--model tiny-dond] [--scenarios 16] [--group 4] [--reps 3] [--modes ours,trl,...]

The batch: one rollout of the model as role A (LoRA adapter "A") against ScriptedAgent("fair") in Deal or No Deal,
`scenarios` x `group` games at a fixed seed, played by dialogrl's Trainer. The Samples of path "A" (one per turn of A:
its exact prompt ids, sampled completion ids, sampling log-probs and GRPO advantage) go to a JSON file, trimmed to a
multiple of `minibatch_turns` (TRL splits a batch into equal micro-batches; this way both modes run micro-batches of
the same number of sequences), and every mode updates on exactly these token sequences. Tokens/s counts the trained
tokens: the completion tokens of the batch, the same number for every mode (also printed: the forward tokens,
prompt + completion without padding, and the padded positions the forward passes lay out: ours' attention runs on
them, its linear layers on the real tokens only, fastdecode.hidden).

Timed in every mode: one optimizer step on the whole batch, i.e. for each micro-batch of `minibatch_turns` (64)
sequences a forward with the adapter, the clipped-surrogate loss (token mean over the batch) and its backward; then
gradient-norm clipping (1.0), one AdamW step and one LR-scheduler step. Same learning rate, LoRA r=8, alpha=16 on
every linear layer of the blocks, fp32, no gradient checkpointing, no generation. Model loading, building the
padded tensors and one warm-up step are not timed; each step is timed `reps` times and the median is reported, in
wall-clock seconds (tokens/s, the ratio) and in CPU seconds of the process (less disturbed on a shared machine).
Each mode runs in its own process, so its peak memory (max RSS, as in bench/rollout.py) is its own; the process
peak includes what the imports hold (TRL imports much more), so `update` is also printed: the peak over the RSS just
before the first update, i.e. what the update itself adds. With glibc's default allocator, RSS also counts freed
blocks the heap keeps (it depends on the order of allocations, not only on the live tensors); --live-memory sets
MALLOC_MMAP_THRESHOLD_ in the modes' processes so that large blocks go back to the system when freed and the peak
follows the live tensors (slower: its tokens/s are not comparable with a default run).

  ours       Trainer.update("A", samples) with the default minibatch_turns: a game's turns packed into one left-padded
             sequence (its last prompt + completion) where each prompt continues the previous one token for token,
             chunks of whole games sorted by length, logits only at the completion positions; the loss uses the
             rollout's sampling log-probs as pi_old.
  trl        PlainGRPOTrainer (dialogrl.rl.trl_rollout.grpo_trainer_class() on CPU) with peft_config (the same LoRA
             config; TRL wraps the base model itself), beta=0, loss_type="dapo" (token mean over the batch, as ours),
             per_device_train_batch_size x gradient_accumulation_steps = the batch, set up as `Trainer.train` does
             (`_prepare_for_training`: optimizer, scheduler, accelerator.prepare). One optimizer step exactly as
             transformers' training loop (`Trainer._run_epoch`) runs it: for each micro-batch `training_step` (model.
             train, `_prepare_inputs`: shuffle and split the generation batch; `compute_loss` -> `_compute_loss`:
             forward with logits_to_keep, log-probs and entropies, loss; backward), then `_clip_grad_norm`,
             optimizer.step, lr_scheduler.step, model.zero_grad. Generation is replaced by a function returning the
             dict `_generate_and_score_completions` returns for these samples: prompt_ids/mask left-padded,
             completion_ids/mask right-padded (over the whole batch), advantages (B,), num_items_in_batch. No
             old_per_token_logps: TRL skips them when generation and update are aligned (num_iterations=1,
             steps_per_generation = gradient_accumulation_steps) and uses the detached current log-probs.
  ours-kl, trl-kl   the same with the k3 KL to the base model (kl_coef = beta = 0.04): both add a no-grad forward
             with the adapter disabled inside the timed step (TRL does it in `_generate_and_score_completions`; the
             replacement does it there, as TRL does, with `use_adapter(model, None)`).
  trl-games  TRL with its multi-turn layout (dialogrl.rl.trl_rollout.layout_turns): one sequence per game, the role's
             last view, its own turns trained through tool_mask = env_mask; the same trained tokens, scored once
             (less the rest of any turn whose tokens do not reappear verbatim in the next prompt: layout_turns masks
             them, the batch line counts such turns, and this mode's token count is its own).
  trl-gc     trl with TRL's default gradient_checkpointing=True (less memory, one more forward per micro-batch).
  ours-sorted  ours with the samples sorted by length before the call: a game's turns no longer follow each other, so
             nothing packs and every turn is its own sequence (the trainer's computation before packing).

Prints one line per mode, then `ratio: <ours tok/s / trl tok/s>`, then the update's own roofline: the matmul work an
update must do on these packed rows (`update_flops`: forward and backward through the frozen base and the LoRA
adapters, padding not counted) per second, over the best matmul rate this machine reaches at the same thread count
(bench/rollout.py's `matmul_gflops`: the model's linear shapes at 2048 rows, or a 1024^3 square); the last line is
`update roofline: <ours' fraction of that peak>`, after where ours' time goes (one more update under torch.profiler:
the top ops by self time, and the matmuls' share). One thread by default (--threads): on
a CPU shared with other jobs, multi-threaded ops wait for descheduled threads and time the scheduler instead.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("ours", "trl", "ours-kl", "trl-kl", "trl-games", "trl-gc", "ours-sorted")
KL_COEF = 0.04  # beta of the -kl modes (TRL's former default)


def rss_gib() -> float:
    """The current resident set size of this process."""
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return kb / 2**20


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def time_steps(step, reps: int, model, moves: bool) -> dict:
    """One untimed warm-up call of step(), then `reps` timed ones: wall-clock and CPU seconds (all threads) each.
    moves: whether the batch has a nonzero advantage, so that the step must change the adapter."""
    import torch

    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained), "only the LoRA adapter may be trained"
    before = rss_gib()
    step()
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    params = dict(model.named_parameters())
    assert all(torch.isfinite(p).all() for p in params.values())
    assert not moves or any(not torch.equal(params[n], p0) for n, p0 in trained.items()), \
        "the update left the adapter as it was"
    return {"seconds": wall, "cpu_seconds": cpu, "before_gib": before}


def make_trainer(args, kl_coef: float = 0.0):
    """Our Trainer: role A through LoRA adapter "A" (trainable), role B the scripted fair persona."""
    from dialogrl.envs import DealOrNoDeal
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.models import load_model
    from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer

    model, tok = load_model(args.model, adapters=["A"], device="cpu")
    config = TrainConfig(scenarios_per_step=args.scenarios, group_size=args.group, seed=args.seed, kl_coef=kl_coef,
                         minibatch_turns=args.minibatch_turns)
    roles = {"A": RoleSpec(adapter="A", trainable=True, lr=args.lr), "B": RoleSpec(agent=ScriptedAgent("fair"))}
    return Trainer(DealOrNoDeal(), model, tok, roles, config)


# ------------------------------------------------------------------------------------------------ the batch

def make_batch(args) -> dict:
    """Play one rollout and write the Samples of path "A" (and the same games laid out one sequence per game)."""
    from dialogrl.rl.trl_rollout import layout_turns
    from dialogrl.run import seed_everything

    seed_everything(args.seed)
    trainer = make_trainer(args)
    episodes, groups = trainer.rollout(0)
    samples = trainer.samples(episodes, groups)["A"]
    mb = min(args.minibatch_turns, len(samples))             # sequences per micro-batch, the same in every mode
    keep = len(samples) - len(samples) % mb                   # TRL splits a batch into equal micro-batches
    turns = [{"prompt_ids": s.prompt_ids, "completion_ids": s.completion_ids, "logprobs": s.logprobs,
              "advantage": s.advantage} for s in samples[:keep]]
    games, k, unmatched = [], 0, 0                            # samples come game by game, each game's turns in order
    for ep in episodes:
        own = [t for t in ep.state.turns if t.role == "A" and t.completion_ids]
        if not own:
            continue
        lay = layout_turns(own)  # a turn that does not reappear verbatim in the next prompt is masked from there
        unmatched += lay.n_unmatched_turns
        p = len(lay.prompt_ids)
        for j, t in enumerate(own):  # the turns trimmed off above are context here, so both train the same tokens
            if k + j >= keep:
                start = len(t.prompt_ids) - p
                lay.env_mask[start:start + len(t.completion_ids)] = [0] * len(t.completion_ids)
        games.append({"prompt_ids": lay.prompt_ids, "completion_ids": lay.completion_ids, "env_mask": lay.env_mask,
                      "advantage": samples[k].advantage})
        k += len(own)
    batch = {"turns": turns, "games": games}
    Path(args.batch).write_text(json.dumps(batch))
    return {"samples": len(samples), "kept": keep, "games": len(games), "unmatched": unmatched}


# ------------------------------------------------------------------------------------------------ the modes

def run_ours(args, batch: dict) -> dict:
    from dialogrl.rl.batching import Sample, chains, chunk_chains

    trainer = make_trainer(args, kl_coef=KL_COEF if args.mode == "ours-kl" else 0.0)
    samples = [Sample("A", t["prompt_ids"], t["completion_ids"], t["logprobs"], t["advantage"]) for t in batch["turns"]]
    if args.mode == "ours-sorted":  # similar lengths share a chunk; the loss is the same token mean over the batch
        samples.sort(key=lambda s: len(s.prompt_ids) + len(s.completion_ids))
    seq_len = lambda s: len(s.prompt_ids) + len(s.completion_ids)  # noqa: E731
    rows, padded, keys, chunks = 0, 0, 0, chunk_chains(samples, trainer.config.minibatch_turns)
    for chunk in chunks:  # what Trainer.update lays out: one row per chain (a game's turns packed), right-padded
        lengths = [seq_len(samples[chunk[c[-1]]]) for c in chains([samples[i] for i in chunk])]
        rows, padded = rows + sum(lengths), padded + len(lengths) * max(lengths)
        keys += sum(n * (n + 1) // 2 for n in lengths)  # causal attention: position p sees p + 1 keys
    res = time_steps(lambda: trainer.update("A", samples), args.reps, trainer.model,
                     moves=any(s.advantage for s in samples))
    if args.mode == "ours":  # where the time goes: one more update under the profiler
        res["ops"] = profile_ops(lambda: trainer.update("A", samples))
    tokens = sum(len(s.completion_ids) for s in samples)
    lora = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    work = update_flops(trainer.model.config, rows, keys, tokens, lora, reference=args.mode == "ours-kl")
    return {**res, "padded_positions": padded, "micro_batches": len(chunks), "tokens": tokens, "forward_tokens": rows,
            "update_flops": work}


MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")  # leaf ops of the linear layers' matmuls


def profile_ops(step) -> dict:
    """Self CPU time per aten op (microseconds) over one call of step() under torch.profiler: where an update's time
    goes. The profiler's own overhead inflates cheap ops, so read the shares, not the total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return {e.key: e.self_cpu_time_total for e in prof.key_averages() if e.self_cpu_time_total > 0}


def update_flops(config, positions: int, keys: int, completions: int, lora_params: int, reference: bool) -> float:
    """The matmul FLOPs one update must do on these packed rows, padding not counted. Forward (bench/rollout.py's
    `work_flops` with every position a prompt token): the blocks' linear layers at every position, attention over the
    keys each position sees (q.k^T and p.V), the lm_head at the completion positions only; plus the LoRA adapters' two
    thin matmuls (2 P_lora per position). Backward through the frozen base: the input gradients only (as much as the
    forward again; the base's weights get none), attention once more (its backward is twice its forward), the
    adapters' input and weight gradients (twice their forward). `reference`: one more no-grad forward without the
    adapter (the k3 KL's reference log-probs)."""
    from rollout import work_flops

    forward = work_flops(config, {"prefill": positions, "decode": 0, "keys": keys, "turns": completions})
    attention = work_flops(config, {"prefill": 0, "decode": 0, "keys": keys, "turns": 0})
    adapters = 2 * lora_params * positions
    return 2 * forward + attention + 3 * adapters + (forward if reference else 0)


def trl_inputs(rows: list[dict], pad_id: int, games: bool):
    """The dict `_generate_and_score_completions` returns, for these prompt/completion rows (no generation)."""
    import torch
    from trl.trainer.utils import pad

    prompt_ids = pad([torch.tensor(r["prompt_ids"]) for r in rows], padding_value=pad_id, padding_side="left")
    prompt_mask = pad([torch.ones(len(r["prompt_ids"]), dtype=torch.long) for r in rows], padding_value=0,
                      padding_side="left")
    completion_ids = pad([torch.tensor(r["completion_ids"]) for r in rows], padding_value=pad_id,
                         padding_side="right")
    completion_mask = pad([torch.ones(len(r["completion_ids"]), dtype=torch.long) for r in rows], padding_value=0,
                          padding_side="right")
    out = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
           "completion_mask": completion_mask, "advantages": torch.tensor([r["advantage"] for r in rows])}
    loss_mask = completion_mask
    if games:  # the role's own sampled tokens; counterpart and template tokens are context (rollout_func's env_mask)
        out["tool_mask"] = pad([torch.tensor(r["env_mask"]) for r in rows], padding_value=1, padding_side="right")
        loss_mask = completion_mask * out["tool_mask"]
    out["num_items_in_batch"] = loss_mask.sum()
    return out


def run_trl(args, batch: dict) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import use_adapter

    from dialogrl.models import LORA_TARGETS, load_model
    from dialogrl.rl.trl_rollout import grpo_trainer_class

    games = args.mode == "trl-games"
    rows = batch["games"] if games else batch["turns"]
    mb = min(args.minibatch_turns, len(rows))                 # per_device_train_batch_size
    ga = len(rows) // mb                                      # gradient_accumulation_steps = steps_per_generation
    rows = rows[:mb * ga]
    beta = KL_COEF if args.mode == "trl-kl" else 0.0
    model, tok = load_model(args.model, device="cpu")
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=list(LORA_TARGETS), bias="none",
                      task_type="CAUSAL_LM")                    # dialogrl.models' adapters
    out_dir = tempfile.TemporaryDirectory(prefix="bench-trl-")  # nothing is saved there; removed at exit
    config = GRPOConfig(output_dir=out_dir.name, per_device_train_batch_size=mb,
                        gradient_accumulation_steps=ga, num_generations=mb, learning_rate=args.lr,
                        lr_scheduler_type="constant", max_grad_norm=1.0, beta=beta, loss_type="dapo",
                        gradient_checkpointing=args.mode == "trl-gc", use_cpu=True, bf16=False, report_to="none",
                        save_strategy="no", seed=args.seed, dataloader_num_workers=0)

    def no_reward(completions, **kwargs):
        return [0.0] * len(completions)

    trainer = grpo_trainer_class()(model=model, processing_class=tok, reward_funcs=no_reward, args=config,
                                   train_dataset=Dataset.from_list([{"prompt": "-"}] * len(rows)), peft_config=lora)
    fixed = trl_inputs(rows, tok.pad_token_id, games)

    def generate_and_score(_inputs):
        out = dict(fixed)
        if trainer.beta != 0.0:  # as _generate_and_score_completions does it for a fresh PEFT adapter
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
            attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
            with torch.no_grad(), disable_gradient_checkpointing(trainer.model,
                                                                 trainer.args.gradient_checkpointing_kwargs):
                with use_adapter(trainer.accelerator.unwrap_model(trainer.model), adapter_name=None):
                    out["ref_per_token_logps"], _, _ = trainer._get_per_token_logps_and_entropies(
                        trainer.model, ids, attn, out["completion_ids"].size(1), batch_size=mb)
        return out

    trainer._generate_and_score_completions = generate_and_score
    if config.gradient_checkpointing:  # what Trainer.train sets up before its loop
        gc_kwargs = dict(config.gradient_checkpointing_kwargs or {})
        every_n_layers, offload = gc_kwargs.pop("every_n_layers", 1), gc_kwargs.pop("offload", False)
        trainer.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gc_kwargs or None,
                                                    every_n_layers=every_n_layers, offload=offload)
    model, _ = trainer._prepare_for_training(args.reps + 1, None, None)  # optimizer, scheduler, accelerator.prepare

    def step():
        """One optimizer step, as transformers.Trainer._run_epoch runs it."""
        trainer.current_gradient_accumulation_steps = ga
        for i in range(ga):
            trainer.accelerator.gradient_state._set_sync_gradients(i == ga - 1)
            trainer.training_step(model, [{"prompt": "-"}] * mb, None)
        trainer._clip_grad_norm(model)
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
        model.zero_grad()

    L = fixed["prompt_ids"].size(1) + fixed["completion_ids"].size(1)
    res = time_steps(step, args.reps, model, moves=bool(fixed["advantages"].any()))
    trained = sum(sum(r["env_mask"]) for r in rows) if games else sum(len(r["completion_ids"]) for r in rows)
    return {**res, "padded_positions": mb * ga * L, "micro_batches": ga,
            "tokens": trained, "forward_tokens": sum(len(r["prompt_ids"]) + len(r["completion_ids"]) for r in rows)}


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.mode == "batch":
        return make_batch(args)
    batch = json.loads(Path(args.batch).read_text())
    res = (run_ours if args.mode.startswith("ours") else run_trl)(args, batch)
    sec, cpu = statistics.median(res["seconds"]), statistics.median(res["cpu_seconds"])
    return {"mode": args.mode, **res, "median_s": sec, "median_cpu_s": cpu, "tok_per_s": res["tokens"] / sec,
            "tok_per_cpu_s": res["tokens"] / cpu, "peak_gib": peak_gib(), "update_gib": peak_gib() - res["before_gib"]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-dond")
    p.add_argument("--scenarios", type=int, default=16)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--minibatch-turns", type=int, default=64, help="sequences per forward/backward (ours' default)")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=3)
    # one thread by default: on a CPU shared with other jobs, every multi-threaded op waits for a descheduled
    # thread, which times the scheduler instead of the update (a 0.25 s update took 0.7 to 14 s with 2 threads)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)}")
    p.add_argument("--live-memory", action="store_true", help="peak RSS that follows the live tensors (slower)")
    p.add_argument("--batch", default=None, help="the batch JSON (default: a temporary file, played first)")
    p.add_argument("--mode", choices=("batch",) + MODES, help=argparse.SUPPRESS)  # worker process
    args = p.parse_args()
    if args.mode:
        print(json.dumps(worker(args)))
        return
    modes = args.modes.split(",")
    if "ours" not in modes or "trl" not in modes or any(m not in MODES for m in modes):
        p.error(f"--modes must include ours and trl, from {', '.join(MODES)}")
    common = ["--model", args.model, "--scenarios", str(args.scenarios), "--group", str(args.group),
              "--minibatch-turns", str(args.minibatch_turns), "--lr", str(args.lr), "--seed", str(args.seed),
              "--reps", str(args.reps), "--threads", str(args.threads)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if args.live_memory:  # blocks of 64 KiB and more are mmapped, so free() returns them to the system
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"

    def run(mode: str, batch: str) -> dict:
        cmd = [sys.executable, __file__, "--mode", mode, "--batch", batch, *common]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode:
            sys.exit(f"{mode} failed:\n{out.stderr[-4000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    batch = args.batch or str(Path(tempfile.mkdtemp(prefix="bench-train-step-")) / "batch.json")
    if not Path(batch).exists():
        b = run("batch", batch)
        print(f"batch: {b['games']} games, {b['samples']} turns of A ({b['samples'] - b['kept']} dropped to split "
              f"evenly; {b['unmatched']} not verbatim in the game layout) -> {batch}")
    results = {}
    for mode in modes:
        r = results[mode] = run(mode, batch)
        print(f"{mode:11s} {r['tokens']:5d} trained tokens ({r['forward_tokens']} forward, {r['padded_positions']} "
              f"padded positions, {r['micro_batches']} micro-batches) in {r['median_s']:6.2f} s = "
              f"{r['tok_per_s']:5.0f} tok/s (CPU {r['median_cpu_s']:6.2f} s = {r['tok_per_cpu_s']:4.0f} tok/CPU-s), "
              f"peak memory {r['peak_gib']:.2f} GiB (update +{r['update_gib']:.2f})")
    # the machine may be shared: CPU time is less disturbed by other processes than wall-clock time
    print(f"ratio by CPU time: {results['ours']['tok_per_cpu_s'] / results['trl']['tok_per_cpu_s']:.2f}")
    print(f"ratio: {results['ours']['tok_per_s'] / results['trl']['tok_per_s']:.2f}")  # ours / trl, tok/s
    # the update's own roofline: its necessary matmul work per second over the best matmul rate of this machine at
    # the same thread count (the model's linear shapes at 2048 rows, or a 1024^3 square)
    from rollout import matmul_gflops  # bench/rollout.py, beside this file
    from transformers import AutoConfig

    from dialogrl.models import resolve_model_path

    config = AutoConfig.from_pretrained(resolve_model_path(args.model))
    rates = {"model shapes x 2048 rows": matmul_gflops(config, 2048, args.threads),
             "1024^3 square": matmul_gflops(config, 0, args.threads)}
    peak = max(rates.values())
    for mode, r in results.items():
        if mode.startswith("ours"):
            achieved = r["update_flops"] / r["median_s"] / 1e9
            print(f"{mode:11s} update work {r['update_flops'] / 1e9:.1f} GFLOP in {r['median_s']:.2f} s = "
                  f"{achieved:.1f} GFLOP/s; matmul peak {peak:.0f} GFLOP/s ("
                  + ", ".join(f"{k} {v:.0f}" for k, v in rates.items()) + ")")
    ops = results["ours"]["ops"]
    total = sum(ops.values())
    matmul = sum(ops.get(k, 0) for k in MATMUL_OPS)
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:8]
    print("where the time goes (ours, one profiled update, shares of its ops' self time): "
          + ", ".join(f"{k.removeprefix('aten::')} {v / total:.0%}" for k, v in top))
    print(f"matmul ops ({', '.join(k.removeprefix('aten::') for k in MATMUL_OPS)}) take {matmul / total:.0%} of it: "
          f"at the matmul peak the update would still take {1 - matmul / total:.0%} of its time")
    print(f"update roofline: {results['ours']['update_flops'] / results['ours']['median_s'] / 1e9 / peak:.3f}")


if __name__ == "__main__":
    main()
