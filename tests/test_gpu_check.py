"""bench/gpu_check.py: without CUDA it measures nothing and exits 0; its notebook runs name no hub model (the GPU
machine is offline); on the CPU (--device cpu --small) its library stages run, so the script does not rot between
GPU sessions."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dialogrl.models import check_model_name
from dialogrl.params import check_judge_independent
from dialogrl.reproduce import notebook_parameters

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_it_says_so_and_exits_0():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0 and "no CUDA device here: nothing measured" in out.stdout


@pytest.mark.parametrize("stand_in", ["embedded", "packaged"])
@pytest.mark.parametrize("stem", gpu_check.notebooks())
def test_notebook_runs_use_embedded_models_only(stem, stand_in, tmp_path):
    paths = {game: str(tmp_path / game) for game in gpu_check.GAMES}
    for path in paths.values():
        Path(path).mkdir()
    params = gpu_check.notebook_check_parameters(stem, paths, stand_in)
    assert set(params) <= set(notebook_parameters(REPO / "notebooks" / f"{stem}.ipynb"))
    assert params["profile"] == "gpu" and params.get("bf16", True) and params.get("precision", "auto") == "auto"
    assert params["processes"] == 2   # spawned workers after CUDA, as the gpu profiles run
    for name, value in params.items():
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and "/" in v and not v.startswith(str(tmp_path)):
                pytest.fail(f"{stem}: {name}={v!r} names a hub model or dataset; the GPU machine is offline")
            if name.endswith("_model") or name.endswith("_heldout") or name == "heldout_models":
                assert v is None or check_model_name(v) in ("local", "tiny", "packaged"), f"{stem}: {name}={v!r}"
    assert params.get("human_logs") is None
    if stand_in == "packaged":   # the hub-model path: the pretrained model plays the policy
        assert gpu_check.PACKAGED in [params.get("policy_model"), params.get("telesales_model")]
    check_judge_independent(params.get("judge_model"), params.get("heldout_models", []))


@pytest.mark.slow
def test_the_library_stages_run_on_the_cpu(tmp_path):
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--small", "--dialogues", "30", "--games",
                          "8", "--notebooks", "none", "--out", str(out)], capture_output=True, text=True, cwd=REPO,
                         timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    report = json.loads(out.read_text())
    stages = {r["stage"]: r for r in report["stages"]}
    assert {"build", "load", "rollout", "update-grpo", "update-rloo", "update-ppo", "checkpoint",
            "memory-model", "rates", "judge"} <= set(stages)
    assert stages["checkpoint"]["resumed_steps"] == [1] and stages["checkpoint"]["identical"]   # exact on the CPU
    assert not [r for r in report["stages"] if "error" in r]
    assert stages["rollout"]["transformers_tokens_per_s"] > 0 and stages["rollout"]["lean_tokens_per_s"] > 0
    assert all(stages[f"update-{a}"]["update_s"] > 0 for a in ("grpo", "rloo", "ppo"))
    memory = stages["memory-model"]   # on the CPU: the KV cache counted, the update's peak predicted (measured on CUDA)
    assert memory["kv_bytes_per_token"] == memory["kv_bytes_per_token_predicted"] > 0
    assert memory["predicted_gib"] > 0 and memory["row_tokens"] + memory["logit_positions"] <= 4096
    assert report["rates"]["forward_ms"] > 0 and report["rates"]["tflops"] > 0   # what estimate --calibrate reads
    judge = stages["judge"]   # 8 prompts of 128 tokens, 4 at once under 640 tokens: two waves of 32-token answers
    assert (judge["prompt_tokens"], judge["passes_predicted"]) == (128, 64) and 0 < judge["written_tokens"] <= 256
    assert "| stage | seconds |" in res.stdout

