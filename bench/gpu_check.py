"""The GPU path, measured: every GPU code path of the library at reduced size, on one CUDA GPU, offline.

    python bench/gpu_check.py                      # on a CUDA machine: all stages, about 8 minutes (estimate)
    python bench/gpu_check.py --notebooks none     # the library stages only
    python bench/gpu_check.py --device cpu --small --notebooks none   # check this script itself without a GPU
    python bench/gpu_check.py --device cpu --small --stand-in packaged --no-library   # the hub-model path, on the CPU

On a machine without CUDA it says so and exits 0 with nothing measured (unless --device cpu is asked for).
No hub model is needed: the stages build larger embedded models on the GPU (the `gpu` size, about 26M parameters,
against the CPU default's 1.4M), one per game the notebooks play, and use them where the `gpu` profiles name hub models.
With `--stand-in packaged` the packaged pretrained model (SmolLM2-135M-Instruct, dialogrl.packaged) plays the library
stages' model, and the notebooks take it where their `gpu` profiles name hub models: a real tokenizer and chat template,
a Llama-family model, LoRA on it, bf16 weights (on a CPU with native bf16 too): the hub-model code path, run before any
GPU is at hand.

Stages, each with its wall time and peak GPU memory (torch.cuda.max_memory_allocated, reset per stage):
  build      the embedded models: corpus, tokenizer, TRL SFT warm start on the GPU (bf16 autocast where supported)
  load       bf16 weights, one LoRA adapter per role (peft)
  rollout    batched multi-turn self-play through the rollout engine, both roles LM agents; generated tokens/s for
             the transformers decoding path and the lean engine (`lean=True`); no CUDA graphs or torch.compile are
             used anywhere in the library, so none is measured
  update     one training step of each algorithm (grpo, rloo, ppo with its critic), both roles trainable, bf16 autocast
             in the update: rollout and update seconds of the second step, dialogues per update second
  checkpoint two PPO steps straight against one, a checkpoint (CUDA RNG state included) and a fresh trainer's
             second: the largest difference between their adapter weights
  memory-model  a hub-shaped Qwen2.5-0.5B (random weights, committed config): one update of a gpu-profile-shaped
             chunk, its measured peak over the memory model's prediction (dialogrl.estimate), and the KV cache's
             bytes a token over hub.kv_bytes_per_token's
  rates      the same model's batched decoding pass (ms) and the update's sustained TFLOP/s: the rates the estimate
             assumes, measured (`python -m dialogrl estimate --calibrate <report>` reads them: report["rates"])
  judge      notebook 02's LLM judge at its gpu profile's step: a hub-shaped Qwen2.5-1.5B (random weights) answers
             the step's 384 prompts under its judge_batch_tokens; seconds, tokens/s, peak over estimate.judge_memory
  notebooks  each notebook at its `gpu` profile with the embedded models in place of the hub models and the smoke
             profile's sizes, two runs at once in spawned workers (papermill; wall time, and whether it wrote its
             summary.json)
The last lines are a markdown table (paste it into papers/README.md with the date and the GPU) and the JSON's path.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GAMES = {"dond": "tiny-dond", "telesales": "tiny-telesales", "persuasion": "tiny-persuasion", "social": "tiny-social"}
PACKAGED = "smollm2-135m-instruct"   # --stand-in packaged: the packaged pretrained model


def notebooks() -> list[str]:
    """The registered papers' notebooks (`dialogrl.rl.methods.papers`)."""
    from dialogrl.rl.methods import papers

    return list(papers())


def stand_ins(stem: str, stand_in: str = "embedded") -> dict:
    """Which model plays each hub-model parameter of notebook `stem`'s gpu profile: its paper's `stand_ins` (a game of
    GAMES: its embedded model, built here), or with stand_in="packaged" its `packaged_stand_ins` (PACKAGED)."""
    from dialogrl.rl import methods

    paper = methods.paper(stem)
    if stand_in != "packaged":
        return dict(paper.stand_ins)

    def swap(v):
        return [swap(x) for x in v] if isinstance(v, list) else PACKAGED if v == methods.PACKAGED else v
    return {k: swap(v) for k, v in paper.packaged_stand_ins.items()}


NOT_FROM_SMOKE = {"profile", "warm_start_dialogues", "heldout_corpus_seeds"}  # smoke keys about embedded builds


def model_config(small: bool):
    from dialogrl.tiny import TinyConfig

    if small:  # the CPU self-check: the CPU default's size
        return TinyConfig()
    return TinyConfig(vocab_size=2048, hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=4,
                      intermediate_size=1536, lr=1e-3, batch_size=32)


class Stage:
    """Times one stage and reads its peak GPU memory; keeps going after a failure (reported, exit code 1)."""

    def __init__(self, report: dict, name: str, device: str):
        self.report, self.name, self.device = report, name, device

    def __enter__(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        self.row = {"stage": self.name}
        print(f"[{self.name}] ...", flush=True)
        return self.row

    def __exit__(self, kind, err, tb):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            self.row["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        self.row["seconds"] = round(time.perf_counter() - self.t0, 1)
        if err is not None:
            self.row["error"] = f"{kind.__name__}: {err}"
            traceback.print_exception(kind, err, tb)
        self.report["stages"].append(self.row)
        print(f"[{self.name}] {json.dumps(self.row, default=str)}", flush=True)
        return kind is None or issubclass(kind, Exception)  # the next stage still runs (not after Ctrl-C)


def build_models(games: list[str], n_dialogues: int, small: bool) -> dict[str, str]:
    from dialogrl.tiny import TINY_MODELS, build_tiny

    cfg = model_config(small)
    paths = {}
    for game in games:
        recipe = TINY_MODELS[GAMES[game]]
        corpus = recipe.make_corpus(n_dialogues=n_dialogues)
        config = replace(cfg, epochs=recipe.config.epochs)  # persuasion's VS answers need its second pass
        # the recipe's own model where the size is the recipe's (--small): one cache entry with the notebooks' builds
        name = GAMES[game] if config == recipe.config else f"gpu-check-{game}{'-small' if small else ''}"
        paths[game] = str(build_tiny(corpus, config, name=name))
    return paths


def generated_tokens(episodes) -> int:
    return sum(len(t.completion_ids or []) for e in episodes for t in e.state.turns)


def cpu_bf16() -> bool:
    import torch

    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def rollout_stage(row: dict, path: str, device: str, games: int, max_new_tokens: int, half: bool) -> None:
    import torch

    from dialogrl.agents import LMAgent
    from dialogrl.envs import make_task
    from dialogrl.models import load_model
    from dialogrl.rollout import play
    from dialogrl.run import seed_everything

    task = make_task("dealnodeal")
    model, tok = load_model(path, adapters=list(task.roles), device=device, bf16=half)
    scenarios = task.sample_scenarios(games, seed=1)
    for engine, lean in (("transformers", False), ("lean", True)):
        seed_everything(0)
        agents = {r: LMAgent(model, tok, adapter=r, max_new_tokens=max_new_tokens, lean=lean) for r in task.roles}
        play(task, agents, scenarios[:8])  # warm-up: kernels, allocator
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        episodes = play(task, agents, scenarios)
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        row[f"{engine}_tokens_per_s"] = round(generated_tokens(episodes) / seconds)
        row[f"{engine}_games_per_s"] = round(games / seconds, 2)


def update_stage(row: dict, path: str, device: str, algorithm: str, scenarios: int, group: int,
                 max_new_tokens: int, half: bool) -> None:
    from dialogrl.envs import make_task
    from dialogrl.models import load_model
    from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
    from dialogrl.run import seed_everything

    task = make_task("dealnodeal")
    seed_everything(0)
    model, tok = load_model(path, adapters=list(task.roles), device=device, bf16=half)
    roles = {r: RoleSpec(adapter=r, trainable=True, lr=1e-4) for r in task.roles}
    cfg = TrainConfig(steps=2, scenarios_per_step=scenarios, group_size=group, algorithm=algorithm, kl_coef=0.05,
                      max_new_tokens=max_new_tokens, mixed_precision="bf16" if device == "cuda" else "no",
                      minibatches=2)  # two optimizer steps per rollout: PPO's clip acts, as the notebooks run it
    trainer = Trainer(task, model, tok, roles, config=cfg)
    trainer.step()  # the first step pays for kernel selection and allocator growth
    step = trainer.step()
    row["rollout_s"] = round(step["time/rollout_s"], 2)
    row["update_s"] = round(step["time/update_s"], 2)
    row["update_dialogues_per_s"] = round(scenarios * group / step["time/update_s"], 1)
    row["reward"] = {k: round(v, 3) for k, v in step.items() if k.startswith("reward/")}
    row["clipfrac"] = {k: round(v, 3) for k, v in step.items() if k.endswith("/clipfrac")}


def checkpoint_stage(row: dict, path: str, device: str, scenarios: int, max_new_tokens: int, half: bool,
                     folder: Path) -> None:
    """Stop and resume on this device: 2 PPO steps straight (`scenarios` x 2 dialogues, both roles trainable, two
    minibatches, bf16 autocast on CUDA) against 1 step, a fresh trainer from its checkpoint (the CUDA RNG state
    included) and the second:
    the largest difference between the two runs' adapter weights (0 where the device's kernels are deterministic;
    tests/test_trainer.py asks for exactly 0 on the CPU)."""
    import shutil

    import torch

    from dialogrl.envs import make_task
    from dialogrl.models import adapter_parameters, load_model
    from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
    from dialogrl.run import seed_everything

    task = make_task("dealnodeal")

    def trainer(out: Path) -> tuple[Trainer, list[dict]]:
        seed_everything(0)
        model, tok = load_model(path, adapters=list(task.roles), device=device, bf16=half)
        cfg = TrainConfig(steps=2, scenarios_per_step=scenarios, group_size=2, algorithm="ppo", kl_coef=0.05,
                          minibatches=2, max_new_tokens=max_new_tokens, save_every=1,
                          mixed_precision="bf16" if device == "cuda" else "no")
        t = Trainer(task, model, tok, {r: RoleSpec(adapter=r, trainable=True, lr=1e-4) for r in task.roles}, cfg)
        return t, t.train(progress=False, checkpoint_dir=out, resume=True)

    straight, _ = trainer(folder / "straight")
    shutil.copytree(folder / "straight" / "step-000001", folder / "resumed" / "step-000001")   # stopped after 1
    resumed, rows = trainer(folder / "resumed")
    diff = max((p - adapter_parameters(resumed.model, a)[n]).abs().max().item()
               for a in straight.adapter_roles for n, p in adapter_parameters(straight.model, a).items())
    row.update(resumed_steps=[r["step"] for r in rows], cuda_rng_saved=torch.cuda.is_available(),
               max_weight_diff=diff, identical=diff == 0.0)


def memory_stage(row: dict, device: str, small: bool, half: bool) -> None:
    """The memory model (dialogrl.estimate) against this device: one Trainer.update of a Qwen2.5-0.5B-shaped model
    (random weights from the committed config, nothing downloaded; 2 layers with --small) on a chunk of the gpu
    profiles' shape (two games of a 256-token prompt and five 64-token turns, under their 4,096-token bound), the
    peak it adds beside `estimate.update_memory`'s activations and logits (measured on CUDA only: the CPU's is the
    suite's tests/test_estimate.py); and the KV cache's bytes a token beside `hub.kv_bytes_per_token`."""
    import random

    import torch

    from dialogrl.envs import DealOrNoDeal
    from dialogrl.envs.dealnodeal import ScriptedAgent
    from dialogrl.estimate import update_memory
    from dialogrl.hub import kv_bytes_per_token
    from dialogrl.models import add_adapters, hub_shaped_model
    from dialogrl.rl.batching import Sample, chunk_tokens
    from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer

    hub_id = "Qwen/Qwen2.5-0.5B-Instruct"
    model, tok = hub_shaped_model(hub_id, device=device, bf16=half, **({"num_hidden_layers": 2} if small else {}))
    ids = torch.randint(0, 1000, (1, 256), device=device)
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
    kv = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)) / 256
    row.update(hub_shape=hub_id, layers=model.config.num_hidden_layers, kv_bytes_per_token=int(kv),
               kv_bytes_per_token_predicted=kv_bytes_per_token(model.config, 2 if half else 4))
    del cache
    model = add_adapters(model, ["A"], r=16, alpha=32)
    precision = "bf16" if half else "no"
    config = TrainConfig(scenarios_per_step=1, group_size=2, kl_coef=0.0, minibatch_tokens=4096,
                         mixed_precision=precision)
    trainer = Trainer(DealOrNoDeal(), model, tok, {"A": RoleSpec(adapter="A", trainable=True, lr=1e-4),
                                                   "B": RoleSpec(agent=ScriptedAgent("fair"))}, config)
    rng = random.Random(0)
    samples = []
    for _ in range(2):   # each turn's prompt continues the last prompt and completion: a game packs into one row
        context = [rng.randrange(tok.vocab_size) for _ in range(256)]
        for _ in range(5):
            out = [rng.randrange(tok.vocab_size) for _ in range(64)]
            samples.append(Sample("A", list(context), out, [-1.0] * 64, rng.choice([-1.0, 1.0])))
            context += out + [rng.randrange(tok.vocab_size) for _ in range(64)]
    trainer.update("A", samples[:2])   # the optimizer's state exists before the measured update
    positions = sum(len(x.completion_ids) for x in samples)
    rows = chunk_tokens(samples, list(range(len(samples)))) - positions
    m = update_memory(model.config, rows, positions, precision, lora_r=16, device=device)
    row.update(row_tokens=rows, logit_positions=positions,
               predicted_gib=round((m["activations"] + m["logits"]) / 2**30, 3))
    if device != "cuda":   # nothing to measure: the update's path ran above (the CPU's peak: tests/test_estimate.py)
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    trainer.update("A", samples)
    torch.cuda.synchronize()
    row["measured_gib"] = round((torch.cuda.max_memory_allocated() - before) / 2**30, 3)
    row["measured_over_predicted"] = round(row["measured_gib"] / row["predicted_gib"], 3)


def rates_stage(row: dict, device: str, small: bool, half: bool, rows: int = 32, context: int = 512,
                tokens: int = 4096) -> None:
    """The two rates `dialogrl.estimate` assumes, measured on a hub-shaped Qwen2.5-0.5B (random weights from the
    committed config; 2 layers with --small): `forward_ms`, one batched decoding pass (`rows` rows each holding
    `context` tokens of KV cache, the mean of 20 passes after 5 to warm up), and `tflops`, the update's sustained rate
    (forward and input gradients through the frozen weights, 4 x parameters a token, as the estimate counts them, over
    one chunk of `tokens` tokens with a LoRA adapter, bf16 autocast where the weights are bf16). `python -m dialogrl
    estimate --calibrate <this report>` reads them (and the device's memory) in place of the assumed ones."""
    import torch

    from dialogrl.estimate import param_count
    from dialogrl.models import add_adapters, hub_shaped_model

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    model, _ = hub_shaped_model("Qwen/Qwen2.5-0.5B-Instruct", device=device, bf16=half,
                                **({"num_hidden_layers": 2} if small else {}))
    model.eval()
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 1000, (rows, context), device=device), use_cache=True).past_key_values
        step = torch.randint(0, 1000, (rows, 1), device=device)
        times = []
        for k in range(25):
            sync()
            t0 = time.perf_counter()
            model(input_ids=step, past_key_values=cache, use_cache=True)
            sync()
            if k >= 5:
                times.append(time.perf_counter() - t0)
            cache.crop(-1)   # each pass on the same cache length
    del cache
    model = add_adapters(model, ["A"], r=16, alpha=32)
    model.train()
    ids = torch.randint(0, 1000, (max(1, tokens // 512), 512), device=device)
    autocast = torch.autocast(device, dtype=torch.bfloat16) if half else torch.autocast(device, enabled=False)

    def update() -> None:
        with autocast:
            out = model.get_base_model().model(input_ids=ids).last_hidden_state
        out.float().pow(2).mean().backward()

    update()   # kernels chosen, memory grown
    sync()
    t0 = time.perf_counter()
    update()
    sync()
    seconds = time.perf_counter() - t0
    row.update(forward_ms=round(1000 * sum(times) / len(times), 2), forward_rows=rows, forward_context=context,
               tflops=round(4 * param_count(model.config) * ids.numel() / seconds / 1e12, 3),
               update_tokens=ids.numel(), layers=model.config.num_hidden_layers,
               memory_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
               if device == "cuda" else None)


def judge_stage(row: dict, device: str, small: bool, half: bool) -> None:
    """Notebook 02's LLM judge at its `gpu` profile's step: a Qwen2.5-1.5B-Instruct-shaped judge (random weights from
    the committed config; with --small 2 layers of width 256, and 8 prompts, 4 at once) answers a step's prompts
    (the profile's games x exchanges, each at the longest the estimate counts) through `LMAgent.generate`, what
    `rewards.LLMJudge` calls, under the profile's `judge_batch_tokens`: its wall time, the tokens it wrote (a random
    model writes every answer to its full length, the estimate's worst case), and its peak GPU memory beside
    `estimate.judge_memory`'s (CUDA only)."""
    import torch

    from dialogrl.agents import LMAgent
    from dialogrl.estimate import judge_memory, weight_bytes, workload
    from dialogrl.models import hub_shaped_model
    from dialogrl.reproduce import profile_params
    from dialogrl.rl.methods import paper

    judge = workload(paper("02_socialrl"), profile_params("02_socialrl", "gpu"))[0]["judge"]
    if small:
        judge = {**judge, "rows": 8, "tokens": 160, "answer": 32, "budget": 640}
    model, tok = hub_shaped_model(judge["model"], device=device, bf16=half, **(
        {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 4}
        if small else {}))
    agent = LMAgent(model, tok, name="judge", max_new_tokens=judge["answer"], max_batch_tokens=judge["budget"])
    head = "Judge this turn."
    overhead = len(agent.encode([[{"role": "user", "content": head}]])[0])
    messages = [[{"role": "user", "content": head + " the" * (judge["tokens"] - judge["answer"] - overhead)}]]
    messages *= judge["rows"]   # prompts of the longest the estimate counts (" the" is one token)
    tokens = len(agent.encode(messages[:1])[0]) + judge["answer"]
    precision = "bf16" if half else "no"
    predicted, passes = judge_memory({**judge, "tokens": tokens}, precision, weight_bytes(model.config, precision))
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    answers = agent.generate(messages)
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    written = sum(len(a.completion_ids) for a in answers)
    row.update(judge_shape=judge["model"], layers=model.config.num_hidden_layers, rows=judge["rows"],
               prompt_tokens=tokens - judge["answer"], answer_tokens=judge["answer"], budget=judge["budget"],
               passes_predicted=passes, judge_s=round(seconds, 1), written_tokens=written,
               tokens_per_s=round(written / seconds, 1), predicted_gib=round(predicted / 2**30, 3))
    if device == "cuda":
        row["measured_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        row["measured_over_predicted"] = round(row["measured_gib"] / row["predicted_gib"], 3)


def notebook_check_parameters(stem: str, paths: dict[str, str], stand_in: str = "embedded") -> dict:
    """The notebook's gpu profile (params/<stem>/gpu.yaml) at the smoke profile's sizes, with the embedded models
    in `paths` ({game: folder}), or the packaged model (stand_in="packaged"), in place of its hub models. Raises
    ValueError for a key that is not a parameter."""
    import yaml

    from dialogrl.reproduce import profile_parameters

    def swap(v):
        return [paths.get(x, x) for x in v] if isinstance(v, list) else paths.get(v, v) if isinstance(v, str) else v

    nb = REPO / "notebooks" / f"{stem}.ipynb"
    params = profile_parameters(nb, "gpu", REPO / "params")
    smoke = yaml.safe_load((REPO / "params" / stem / "smoke.yaml").read_text())
    params.update({k: v for k, v in smoke.items() if k not in NOT_FROM_SMOKE})
    params.update({k: swap(v) for k, v in stand_ins(stem, stand_in).items()})
    params["profile"] = "gpu"
    # two runs at once, as the gpu profiles run theirs (5-7): spawned workers after CUDA has started in the notebook,
    # each taking its slot's GPU (the smoke profiles run one, which never exercised that path)
    params["processes"] = 2
    return params


def notebook_stage(row: dict, stem: str, paths: dict[str, str], out_dir: Path, stand_in: str = "embedded") -> None:
    import papermill

    params = {**notebook_check_parameters(stem, paths, stand_in), "run_dir": str(out_dir / stem)}
    row["parameters"] = params
    papermill.execute_notebook(str(REPO / "notebooks" / f"{stem}.ipynb"), str(out_dir / f"{stem}.ipynb"),
                               parameters=params, cwd=str(REPO), progress_bar=False)
    row["summary"] = (out_dir / stem / "summary.json").exists()


def markdown(report: dict) -> str:
    lines = [f"GPU check, {report['date']}, {report['device_name']} ({report['device']}), commit {report['commit']}:",
             "", "| stage | seconds | peak GPU GiB | measured |", "|---|---|---|---|"]
    for r in report["stages"]:
        shown = {k: v for k, v in r.items() if k not in ("stage", "seconds", "peak_gpu_gib", "parameters")}
        lines.append(f"| {r['stage']} | {r['seconds']} | {r.get('peak_gpu_gib', '—')} | "
                     f"{json.dumps(shown)[:200]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="auto: the CUDA GPU, or exit 0 without one; cpu: run the stages on the CPU (a self-check)")
    p.add_argument("--small", action="store_true", help="the CPU default's model size, fewer games (self-check)")
    p.add_argument("--dialogues", type=int, default=None, help="warm-start corpus size per game (3000; small: 300)")
    p.add_argument("--games", type=int, default=None, help="self-play games of the rollout stage (256; small: 16)")
    p.add_argument("--notebooks", nargs="*", default=None,
                   help="stems to run at the gpu profile (default: every registered paper's), or none")
    p.add_argument("--stand-in", default="embedded", choices=["embedded", "packaged"],
                   help="the library stages' model and what plays the gpu profiles' hub models in the notebook "
                        "stage: larger embedded models, or the packaged SmolLM2-135M-Instruct (a real tokenizer, chat "
                        "template and Llama model)")
    p.add_argument("--no-library", action="store_true",
                   help="skip the library stages (load, rollout, update): build what the notebooks need, run them")
    p.add_argument("--out", default=None, help="the JSON report (default results/gpu_check/<date>.json)")
    args = p.parse_args(argv)

    import torch

    if args.device == "auto" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here: nothing measured (run it on a machine with one CUDA GPU; "
              "--device cpu checks the script itself)")
        return 0
    device = "cuda" if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    registered = notebooks()
    stems = registered if args.notebooks is None else [] if args.notebooks in ([], ["none"]) else args.notebooks
    unknown = sorted(set(stems) - set(registered))
    if unknown:
        p.error(f"--notebooks {unknown}: the notebooks are {', '.join(registered)}")
    n_dialogues = args.dialogues or (300 if args.small else 3000)
    n_games = args.games or (16 if args.small else 256)
    scenarios, group, max_new = (2, 2, 16) if args.small else (16, 8, 48)
    from dialogrl.run import git_state

    report = {"date": f"{datetime.now():%Y-%m-%d %H:%M}", "device": device,
              "commit": git_state().get("git_commit", "unknown")[:7],
              "device_name": torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "cpu",
              "torch": torch.__version__, "size": "small" if args.small else "gpu", "stand_in": args.stand_in,
              "stages": []}
    library = not args.no_library
    games = sorted(({"dond"} if library and args.stand_in == "embedded" else set())
                   | {g for s in stems for v in stand_ins(s, args.stand_in).values()
                      for g in (v if isinstance(v, list) else [v]) if g in GAMES})
    paths: dict[str, str] = {}
    t0 = time.perf_counter()
    if games:
        with Stage(report, "build", device) as row:
            paths = build_models(games, n_dialogues, args.small)
            row.update(games=games, dialogues_per_game=n_dialogues)
            from dialogrl.tiny import build_info

            row["parameters_M"] = round(build_info(paths[games[0]])["n_parameters"] / 1e6, 2)
    # the library stages' model: the embedded Deal or No Deal build, or the packaged model (bf16 weights where the
    # device computes in bf16 natively: a CUDA GPU, or a CPU with AVX512-BF16)
    lib_model = PACKAGED if args.stand_in == "packaged" else paths.get("dond")
    half = device == "cuda" or (args.stand_in == "packaged" and cpu_bf16())
    if library and lib_model:
        with Stage(report, "load", device) as row:
            from dialogrl.models import load_model

            model, _ = load_model(lib_model, adapters=["A", "B"], device=device, bf16=half)
            row["dtype"] = str(next(model.parameters()).dtype)
            row["adapters"] = sorted(model.peft_config)
            del model
        with Stage(report, "rollout", device) as row:
            row["games"] = n_games
            rollout_stage(row, lib_model, device, n_games, max_new, half)
        for algorithm in ("grpo", "rloo", "ppo"):
            with Stage(report, f"update-{algorithm}", device) as row:
                row["dialogues"] = scenarios * group
                update_stage(row, lib_model, device, algorithm, scenarios, group, max_new, half)
        with Stage(report, "checkpoint", device) as row:
            checkpoint_stage(row, lib_model, device, scenarios, max_new, half,
                             Path(tempfile.mkdtemp(prefix="gpu_check-ckpt-")))
    if library:
        with Stage(report, "memory-model", device) as row:
            memory_stage(row, device, args.small, device == "cuda")
        with Stage(report, "rates", device) as row:
            rates_stage(row, device, args.small, device == "cuda")
            report["rates"] = {k: row[k] for k in ("forward_ms", "tflops", "memory_gib")}
            report["rates"]["bf16"] = (device == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False))
        with Stage(report, "judge", device) as row:
            judge_stage(row, device, args.small, device == "cuda")
    out_dir = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    for stem in stems:
        with Stage(report, f"notebook-{stem}", device) as row:
            notebook_stage(row, stem, paths, out_dir, args.stand_in)
    report["total_seconds"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out or REPO / "results" / "gpu_check" / f"{datetime.now():%Y%m%d-%H%M%S}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(markdown(report))
    print(f"total {report['total_seconds']} s; report: {out}")
    return 1 if any("error" in r for r in report["stages"]) else 0


if __name__ == "__main__":
    sys.exit(main())
