"""The memory model (dialogrl.estimate): its parameter counts against the models themselves, its prediction of an
update's peak against the peak measured on CPU under bf16 (tests/scripts/update_peak.py), a spawned run's worker
against the resident set measured in it, in float32 (tests/scripts/worker_peak.py), and the notebooks' gpu profiles
estimated whole (`python -m dialogrl estimate`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from dialogrl.estimate import (
    DEVICES,
    PROCESS_BYTES,
    chunk_shape,
    decode_memory,
    estimate,
    fit_processes,
    lora_param_count,
    model_bytes,
    param_count,
    saved_bytes_per_token,
    update_memory,
    weight_bytes,
)
from dialogrl.hub import HUB_CONFIGS, hub_config, kv_bytes_per_token
from dialogrl.models import add_adapters, hub_shaped_model
from dialogrl.reproduce import estimate_table, profile_params
from dialogrl.rl.methods import paper, papers

SCRIPT = Path(__file__).parent / "scripts" / "update_peak.py"


@pytest.mark.parametrize("hub_id", sorted(HUB_CONFIGS))
def test_parameter_counts_are_the_models_own(hub_id):
    model, _ = hub_shaped_model(hub_id, num_hidden_layers=1, vocab_size=4096)
    assert param_count(model.config) == sum(p.numel() for p in model.parameters())
    model = add_adapters(model, ["policy"], r=4)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_param_count(model.config, 4) == trained


def test_the_largest_configs_count_as_published():   # 0.49B, 1.54B, 1.71B
    counts = {h: param_count(hub_config(h)) for h in HUB_CONFIGS}
    assert counts["Qwen/Qwen2.5-0.5B-Instruct"] == 494_032_768
    assert round(counts["Qwen/Qwen2.5-1.5B-Instruct"] / 1e9, 2) == 1.54
    assert round(counts["HuggingFaceTB/SmolLM2-1.7B-Instruct"] / 1e9, 2) == 1.71


def test_decoding_memory_is_weights_cache_and_logits():
    config = hub_config("Qwen/Qwen2.5-0.5B-Instruct")
    m = decode_memory(config, context_tokens=1000, rows=8, precision="bf16")
    assert m["kv_cache"] == 1000 * kv_bytes_per_token(config, 2) == 1000 * 12 * 1024
    assert m["weights"] == 2 * 494_032_768
    assert m["total"] == m["weights"] + m["kv_cache"] + m["logits"]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures the peak resident set (Linux)")
@pytest.mark.parametrize("precision, layers, games, turns, prompt, completion", [
    # float32 with logits dominating: the spawned run's update below (the model's own forward, as on a GPU)
    ("bf16", 3, 8, 2, 300, 16),    # activations dominate, bf16 weights and autocast (the gpu profiles' path)
])
def test_an_updates_peak_memory_is_predicted_within_30_percent(precision, layers, games, turns, prompt, completion):
    hub_id = "Qwen/Qwen2.5-0.5B-Instruct"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}   # freed blocks leave the resident set
    out = subprocess.run([sys.executable, str(SCRIPT), hub_id, *map(str, (layers, games, turns, prompt, completion)),
                          precision], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    m = update_memory(hub_config(hub_id, num_hidden_layers=layers), measured["row_tokens"],
                      measured["logit_positions"], precision=precision, lora_r=16, device="cpu")
    predicted = m["activations"] + m["logits"]   # the weights and the optimizer's state were there before
    assert 0.7 <= measured["peak"] / predicted <= 1.3, (measured, m)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures the peak resident set (Linux)")
def test_a_spawned_runs_memory_is_what_the_estimate_counts_for_its_worker():
    """A notebook-like run in a spawned map_runs worker (tests/scripts/worker_peak.py: a trained model and two frozen
    ones sent with the job, a rollout against one of them, an update) holds what the estimate counts for a run's
    worker: every model once when the job starts (not also the bytes they came in), and decoding and the update within
    30% of `decode_memory` and `update_memory` with the frozen models as other weights. (Its forward passes there
    raised a KeyError before a spawned worker registered the attention implementation its models name.)"""
    hub_id = "Qwen/Qwen2.5-0.5B-Instruct"   # a 256-wide, 2-layer model of its shape: its vocabulary's logits weigh
    shape = {"num_hidden_layers": 2, "hidden_size": 256, "intermediate_size": 768, "num_attention_heads": 4,
             "num_key_value_heads": 2}
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}   # freed blocks leave the resident set
    out = subprocess.run([sys.executable, str(SCRIPT.parent / "worker_peak.py"), hub_id, "2", json.dumps(shape)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    config = hub_config(hub_id, **shape)
    frozen = 2 * weight_bytes(config)
    predicted = {"start": 3 * weight_bytes(config),
                 "decode": decode_memory(config, measured["context_tokens"], measured["rows"],
                                         other_weights=frozen)["total"],
                 "update": update_memory(config, measured["row_tokens"], measured["logit_positions"], lora_r=8,
                                         device="cpu", other_weights=frozen)["total"]}
    assert all(0.7 <= measured[k] / predicted[k] <= 1.3 for k in predicted), (measured, predicted)


@pytest.mark.parametrize("stem", papers())
def test_every_gpu_profile_is_estimated_and_its_runs_are_the_notebooks(stem):
    params = profile_params(stem, "gpu")
    rows = estimate(paper(stem), params)
    assert rows and all(r["peak"] > 0 and r["seconds_per_run"] > 0 for r in rows)
    trained = [m for m in params.get("methods", []) if m != "base"]
    runs = sum(r["runs"] for r in rows)
    if stem == "02_socialrl":
        assert runs == params["n_seeds"] * len(trained)
    if stem == "03_scope_simulator_collapse":
        assert runs == params["n_seeds"] * len(trained)
    if stem == "04_ibrl_bilateral":
        assert runs == params["n_seeds"] * len(params["tasks"]) * (2 + bool(params["ablation"]))
    table = estimate_table(stem)
    assert table.count("\n| ") == len(rows) + 1 and "fits 80)" in table


@pytest.mark.parametrize("profile, hours", [("gpu", 6.0), ("colab", 1.0)])
@pytest.mark.parametrize("stem", papers())
def test_the_gpu_and_colab_profiles_fit_their_gpu_and_hours(stem, profile, hours):
    """Issue 52's sizing, held: by the estimate each notebook's gpu profile finishes within 6 hours on one 80 GB GPU
    and its colab profile within the hour on a T4, the runs it holds at once within the GPU's memory."""
    device = DEVICES[profile]
    rows = estimate(paper(stem), profile_params(stem, profile), device)
    assert sum(r["hours"] for r in rows) <= hours
    assert all(r["memory"] <= device.memory_gib * 2**30 for r in rows)


def test_runs_at_once_share_the_time_and_add_their_memory():
    stem = "04_ibrl_bilateral"
    params = profile_params(stem, "gpu")
    one, six = (estimate(paper(stem), {**params, "processes": k})[0] for k in (1, 6))
    assert six["at_once"] == 6 and six["memory"] == six["main"] + 6 * six["worker"]
    assert six["worker"] == max(six["phases"]["update"], six["phases"]["decode"]) + PROCESS_BYTES
    assert six["hours"] < one["hours"] / 2 and six["peak"] == one["peak"]
    slow = estimate(paper(stem), {**params, "processes": 6}, replace(DEVICES["gpu"], bandwidth=20.0))[0]
    assert slow["hours"] > six["hours"]   # a GPU busy with every run's passes no longer hides them


def test_every_model_a_process_holds_is_counted_and_processes_follow_the_cards_memory():
    """Each run's worker holds the held-out models it plays (loaded there, one copy per worker), so they count once
    per run at once; fit_processes picks the most runs at once whose processes fit the card, none when one does not."""
    stem = "03_scope_simulator_collapse"
    params = profile_params(stem, "gpu")
    without = estimate(paper(stem), {**params, "heldout_models": []})[0]
    full = estimate(paper(stem), params)[0]
    held = sum(model_bytes(m, "bf16") for m in params["heldout_models"])
    assert held > 6 * 2**30 and full["worker"] - without["worker"] == held
    assert full["memory"] - without["memory"] == full["at_once"] * held
    assert fit_processes(paper(stem), {**params, "processes": 6}) == params["processes"] == 4   # six: not in 80 GB
    assert fit_processes(paper(stem), params, replace(DEVICES["gpu"], memory_gib=10)) == 0
    assert model_bytes("smollm2-135m-instruct", "no") == 4 * 134_515_008 and model_bytes("tiny-persuasion") == 0
    assert "GiB per process: main + at once x run" in estimate_table(stem)


def test_an_llm_judges_step_holds_the_caches_of_the_prompts_it_decodes_at_once():
    """Notebook 02's judge reads every turn of a step's games: its phase holds every model of the run and the judge's
    KV cache for as many prompts as its token budget admits (all of them without one), and its answers take a wave
    of passes per batch of prompts that fit (by hand: 384 prompts of 1,888 tokens; 138 fit 262,144 tokens)."""
    stem = "02_socialrl"
    params = profile_params(stem, "gpu")
    judge = hub_config(params["judge_model"])
    kv = kv_bytes_per_token(judge, 2)
    rows = {}
    for budget in (None, 262_144):
        rows[budget] = estimate(paper(stem), {**params, "judge_batch_tokens": budget})[0]
    others = sum(model_bytes(m, "bf16") for m in (params["partner_model"], params["judge_model"],
                                                 *params["heldout_models"], *params["heldout_packaged"]))
    weights = model_bytes(params["policy_model"], "bf16") + others
    assert rows[None]["phases"]["judge"] == weights + 384 * 1888 * kv + 384 * judge.vocab_size * 8
    assert rows[262_144]["phases"]["judge"] == weights + 262_144 * kv + 138 * judge.vocab_size * 8
    assert rows[None]["worker"] - PROCESS_BYTES == rows[None]["phases"]["judge"] > rows[None]["phases"]["update"]
    # three waves of 600-token answers a step instead of one, at a decoding pass each
    extra = (rows[262_144]["seconds_per_run"] - rows[None]["seconds_per_run"]) / params["steps"]
    assert extra == pytest.approx(2 * 600 * DEVICES["gpu"].forward_ms / 1000)


def test_a_notebook_on_a_smaller_gpu_runs_as_many_at_once_as_fit_it(capsys):
    """Paper.parameters lowers a gpu or colab profile's `processes` to what the GPU at hand fits by the estimate (here
    its memory given: a 48 GB card under the 80 GB profile), and leaves it where it fits, on a CPU, and where the
    estimate cannot size the models."""
    stem = "01_calibrated_interactive_rl"
    p01 = paper(stem)
    params = {**profile_params(stem, "gpu"), "profile": "gpu"}
    namespace = dict(params)
    fitted = p01.fit_processes(dict(params), namespace, gpu_gib=48)
    expected = fit_processes(p01, params, replace(DEVICES["gpu"], memory_gib=48))
    assert 1 <= expected < params["processes"] and fitted["processes"] == namespace["processes"] == expected
    assert f"processes {params['processes']} -> {expected}" in capsys.readouterr().out
    assert p01.fit_processes(dict(params), gpu_gib=80)["processes"] == params["processes"]   # sized for 80 GB
    assert p01.fit_processes(dict(params), gpu_gib=4)["processes"] == 1   # not even one: one, with the note
    assert "not even one run fits" in capsys.readouterr().out
    tiny = {**params, "policy_model": "tiny-dond"}   # an embedded build: nothing to size, nothing changed
    assert p01.fit_processes(dict(tiny), gpu_gib=16)["processes"] == params["processes"]
    cpu = {**profile_params(stem, "cpu"), "profile": "cpu"}
    assert p01.fit_processes(dict(cpu), gpu_gib=16)["processes"] == cpu["processes"]


def test_without_bf16_the_weights_stay_float32_and_the_update_keeps_half_copies():
    """On a T4 (no bf16) a bf16 profile keeps float32 weights under fp16 autocast: twice the weight bytes, and each
    linear layer keeps the float16 copy of its frozen weight for the backward pass (counted on CPU: a per-layer cost
    whatever the tokens, near the layer's parameters x 2 bytes)."""
    config = hub_config("Qwen/Qwen2.5-0.5B-Instruct")
    layer_params = (param_count(config) - config.vocab_size * config.hidden_size) / config.num_hidden_layers
    fixed = {p: saved_bytes_per_token(config, p, 16)[2] for p in ("no", "bf16", "fp16")}
    assert fixed["fp16"] == pytest.approx(2 * layer_params, rel=0.1)
    assert fixed["no"] < 0.05 * fixed["fp16"] and fixed["bf16"] < 0.05 * fixed["fp16"]
    params = profile_params("04_ibrl_bilateral", "gpu")
    gpu, t4 = (estimate(paper("04_ibrl_bilateral"), params, DEVICES[k])[0] for k in ("gpu", "colab"))
    assert t4["phases"]["decode"] > gpu["phases"]["decode"]


def test_a_token_bound_on_the_update_chunk_lowers_its_peak():
    stem = "04_ibrl_bilateral"
    params = {**profile_params(stem, "gpu"), "minibatch_tokens": None}
    free, bounded = estimate(paper(stem), params)[0], estimate(paper(stem), params, minibatch_tokens=4096)[0]
    assert sum(bounded["chunk"]) <= 4096 < sum(free["chunk"])
    assert bounded["phases"]["update"] < free["phases"]["update"]
    assert bounded["phases"]["decode"] == free["phases"]["decode"]


def test_chunk_shape_keeps_whole_games():
    assert chunk_shape(1000, 5, 96, minibatch_turns=64) == (12 * 1000, 12 * 5 * 96)
    assert chunk_shape(1000, 5, 96, minibatch_tokens=3000) == (2 * 1000, 2 * 5 * 96)
    assert chunk_shape(1000, 5, 96, minibatch_tokens=10) == (1000, 5 * 96)   # one game at least


def test_the_command_line_estimates_a_profile_on_a_given_gpu():
    out = subprocess.run([sys.executable, "-m", "dialogrl", "estimate", "04_ibrl_bilateral", "--profile", "colab",
                          "--gpu-memory", "12"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "profile colab, on a GPU of 12 GiB" in out.stdout and "(fits 12)" in out.stdout
    assert "(**no**)" in out.stdout   # two runs at once need 12.6 GiB


def test_a_gpu_check_report_calibrates_the_estimate(tmp_path, capsys):
    """`estimate --calibrate <report>`: bench/gpu_check.py's measured rates (its `rates` stage: a decoding pass's ms,
    the update's TFLOP/s, the GPU's memory) replace the assumed ones, so the first lent GPU turns the estimate into a
    measurement; a report without them is refused, naming the file."""
    from dialogrl.__main__ import main
    from dialogrl.estimate import calibrated

    report = {"date": "2026-12-08 10:00", "device_name": "NVIDIA H200", "stages": [],
              "rates": {"forward_ms": 50.0, "tflops": 40.0, "memory_gib": 139.8, "bf16": True}}
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(report))
    device = calibrated(DEVICES["gpu"], report)
    assert (device.forward_ms, device.tflops, device.memory_gib, device.bf16) == (50.0, 40.0, 139.8, True)
    stem = "04_ibrl_bilateral"
    assumed = sum(r["hours"] for r in estimate(paper(stem), profile_params(stem, "gpu")))
    measured = sum(r["hours"] for r in estimate(paper(stem), profile_params(stem, "gpu"), device))
    assert measured > 1.5 * assumed   # twice the assumed pass time, 40 TFLOP/s against 100
    assert main(["estimate", stem, "--calibrate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H200 (rates measured by gpu_check, 2026-12-08 10:00)" in out and "50 ms a decoding pass" in out
    (tmp_path / "cpu.json").write_text(json.dumps({"stages": []}))
    assert main(["estimate", stem, "--calibrate", str(tmp_path / "cpu.json")]) == 2
    assert "cpu.json: no measured rates" in capsys.readouterr().err
