import io
import json
import math
import os

import numpy as np
import pytest
import torch

from dialogrl.run import (
    MetricsLogger,
    choose_device,
    make_run_dir,
    params_hash,
    progress,
    read_metrics,
    save_summary,
    seed_everything,
    start_run,
    use_run_dir,
)


def test_seed_everything_repeats_all_generators():
    def draw():
        import random
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    seed_everything(7)
    a = draw()
    seed_everything(7)
    assert draw() == a
    seed_everything(8)
    assert draw() != a


def test_cublas_workspace_is_set_on_import_before_any_gpu_work():
    """Deterministic cuBLAS kernels need CUBLAS_WORKSPACE_CONFIG before cuBLAS starts: importing dialogrl sets it
    (a user's own value stays)."""
    import subprocess
    import sys

    code = "import os, dialogrl; print(os.environ['CUBLAS_WORKSPACE_CONFIG'])"
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ":4096:8"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "CUBLAS_WORKSPACE_CONFIG": ":16:8"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ":16:8"


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_seed_must_be_a_nonnegative_int(bad):
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)


def test_run_dirs_never_overwrite(tmp_path):
    a = make_run_dir("nb", root=tmp_path, run_id="same")
    b = make_run_dir("nb", root=tmp_path, run_id="same")
    assert a != b and a.name == "same" and b.name == "same-1"
    assert (a / "figures").is_dir()


def test_use_run_dir_refuses_a_used_folder(tmp_path):
    run = use_run_dir(tmp_path / "r")
    (run / "summary.json").write_text("{}")
    with pytest.raises(FileExistsError, match="never overwrite"):
        use_run_dir(run)


def test_summary_refuses_nan_and_names_the_key(tmp_path):
    with pytest.raises(ValueError, match="score.ibrl"):
        save_summary(tmp_path, {"score": {"base": 1.0, "ibrl": math.nan}})
    path = save_summary(tmp_path, {"score": np.float32(1.5), "ci": np.array([1.0, 2.0])})
    assert json.loads(path.read_text()) == {"score": 1.5, "ci": [1.0, 2.0]}


def test_start_run_writes_config_and_env(tmp_path):
    run = start_run("nb", {"seed": 3, "lr": 0.1}, root=tmp_path)
    assert json.loads((run / "config.json").read_text()) == {"seed": 3, "lr": 0.1}
    env = json.loads((run / "env.json").read_text())
    assert env["packages"]["torch"] and env["packages"]["transformers"]
    pre = json.loads((run / "preregistration.json").read_text())   # papers/nb.md registers nothing: recorded so
    assert pre == {"params_hash": params_hash({"seed": 3, "lr": 0.1}), "registered": None, "commit": None,
                   "paper": "papers/nb.md"}


def test_resume_refuses_another_run_and_keeps_only_what_it_reuses(tmp_path, monkeypatch, capsys):
    """A resume checks the parameters, the environment and that the run did not finish, before touching anything;
    then it clears what the run wrote except its config, env, executed notebook and finished training runs."""
    import dialogrl.run as run_module

    params = {"seed": 3, "lr": 0.1, "processes": 1, "run_dir": None, "resume": None}
    run = start_run("nb", params, root=tmp_path)
    for name in ("metrics.jsonl", "games.csv", "nb.ipynb", "jobs/job-0000-aa.pkl", "figures/a.png",
                 "simulator-0/model.safetensors"):
        (run / name).parent.mkdir(exist_ok=True)
        (run / name).write_text(name)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"config.json: the run was started with other parameters: lr \(0.1 then, "
                                         r"0.2 now\); steps \(unset then, 5 now\)"):
        start_run("nb", {**params, "lr": 0.2, "steps": 5}, resume=run)
    with pytest.raises(ValueError, match="a resumed run writes into the folder it resumes"):
        start_run("nb", params, run_dir=tmp_path / "elsewhere", resume=run)
    info = run_module.environment_info
    monkeypatch.setattr(run_module, "environment_info",
                        lambda: {**info(), "git_commit": "f" * 40, "packages": {**info()["packages"], "trl": "0.1"}})
    with pytest.raises(ValueError, match=r"env.json: the run started in another environment: git_commit '\w+' then, "
                                         r"'f+' now; trl '[\d.]+' then, '0.1' now\. "):
        start_run("nb", params, resume=run)
    monkeypatch.setattr(run_module, "environment_info", info)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before   # refused: nothing touched
    (run / "summary.json").write_text("{}")
    with pytest.raises(ValueError, match="this run finished"):
        start_run("nb", params, resume=run)
    (run / "summary.json").unlink()
    with pytest.raises(ValueError, match="no config.json there"):
        start_run("nb", params, resume=tmp_path)

    assert start_run("nb", {**params, "processes": 2, "run_dir": str(run), "resume": str(run)}, resume=run) == run
    assert "1 finished training run taken from jobs/" in capsys.readouterr().out
    left = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    assert left == [".lock", "config.json", "env.json", "figures", "jobs", "jobs/job-0000-aa.pkl", "nb.ipynb",
                    "preregistration.json"]   # what was registered when the run began, kept
    assert json.loads((run / "config.json").read_text()) == params   # as the run began


@pytest.mark.skipif(os.name != "posix", reason="the run folder's lock is POSIX's flock")
def test_a_run_still_going_on_in_another_process_is_not_resumed(tmp_path):
    """`reproduce --resume` beside a reproduce still running would take up its newest unfinished run, the one being
    written: refused while that process lives, taken once it has ended."""
    import subprocess
    import sys

    script = ("import sys, time\nfrom dialogrl.run import start_run\n"
              "start_run('nb', {'seed': 0}, run_dir=sys.argv[1])\nprint('started', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "started\n"
        with pytest.raises(ValueError, match="another process is writing this run now"):
            start_run("nb", {"seed": 0}, resume=tmp_path / "run")
    finally:
        proc.kill()
        proc.wait()
    assert start_run("nb", {"seed": 0}, resume=tmp_path / "run") == tmp_path / "run"


def test_metrics_logger_round_trip(tmp_path):
    log = MetricsLogger(tmp_path)
    log.log(step=0, loss=torch.tensor(2.5), score=np.float64(1.0))
    log.log(step=1, loss=1.5)
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [0, 1] and rows[0]["loss"] == 2.5 and "time" in rows[0]
    log.tagged(task="dond", seed=2).log(step=0, loss=0.5)
    assert read_metrics(tmp_path)[-1] == {**read_metrics(tmp_path)[-1], "task": "dond", "seed": 2, "loss": 0.5}


def test_a_cut_metrics_line_names_its_file_and_line(tmp_path):
    log = MetricsLogger(tmp_path)
    log.log(step=1, loss=0.5)
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "lo')   # a process killed mid-line
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON line"):
        read_metrics(tmp_path)


def test_log_config_appends_to_train_configs_with_the_tags(tmp_path):
    log = MetricsLogger(tmp_path)
    log.tagged(task="dond", method="shared", seed=1).log_config(config={"steps": 2, "lr": torch.tensor(0.5)})
    log.log_config(config={"steps": 3})
    rows = read_metrics(tmp_path / "train_configs.jsonl")
    assert rows == [{"task": "dond", "method": "shared", "seed": 1, "config": {"steps": 2, "lr": 0.5}},
                    {"config": {"steps": 3}}]
    assert not (tmp_path / "metrics.jsonl").exists()  # configurations never mix with the metric rows


def test_choose_device():
    assert choose_device("cpu").type == "cpu"
    assert choose_device("auto").type in ("cpu", "cuda", "mps")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            choose_device("cuda")


def test_auto_device_is_the_ranks_own_gpu(monkeypatch):
    """Under `accelerate launch` every rank's frozen models go to its own GPU (LOCAL_RANK), not all to GPU 0."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert choose_device("auto") == torch.device("cuda")      # one process: the current device
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert choose_device("auto") == torch.device("cuda", 1)
    monkeypatch.setenv("LOCAL_RANK", "3")                       # more ranks than GPUs share them
    assert choose_device("auto") == torch.device("cuda", 1)


def test_progress_bars_are_off_in_tests_and_on_elsewhere(monkeypatch):
    assert os.environ.get("TQDM_DISABLE") == "1"  # conftest: no bars in test output or papermill kernels
    assert progress(range(3), "x").disable
    monkeypatch.delenv("TQDM_DISABLE")
    bar = progress(range(3), "x", file=io.StringIO())
    assert not bar.disable and list(bar) == [0, 1, 2]
    assert progress(range(3), "x", enabled=False).disable


def test_no_nan_makes_every_non_finite_float_null():
    from dialogrl.run import no_nan

    x = {"a": float("nan"), "b": [1.0, np.float64("inf"), (2, float("-inf"))], "c": {"d": np.nan, "e": "nan"}, "f": 3}
    assert no_nan(x) == {"a": None, "b": [1.0, None, [2, None]], "c": {"d": None, "e": "nan"}, "f": 3}
    assert json.loads(json.dumps(no_nan(x), allow_nan=False))["b"][1] is None


def test_save_games_show_transcripts_and_finish_run(tmp_path, capsys):
    import time

    import pandas as pd

    from dialogrl.run import finish_run, save_games, show_transcripts

    records = [{"policy": p, "role": "A", "counterpart": "x", "outcome": {"A": 1},
                "turns": [{"role": "A", "text": f"hi from {p}"}]} for p in ("base", "ibrl", "ibrl")]
    save_games(tmp_path, pd.DataFrame({"score": [1.0]}), records)
    assert pd.read_csv(tmp_path / "games.csv")["score"].tolist() == [1.0]
    show_transcripts(tmp_path, 1, keep=lambda rec: rec["policy"] == "ibrl")
    assert capsys.readouterr().out == "--- ibrl as A vs x: {'A': 1}\n  A: hi from ibrl\n"
    show_transcripts(tmp_path, 5, title=lambda rec: rec["policy"])
    assert capsys.readouterr().out.count("---") == 3
    seconds = finish_run(tmp_path, {"x": float("nan"), "y": 1}, time.time() - 2, runs=[{"seed": 0}])
    assert seconds >= 2 and json.loads((tmp_path / "summary.json").read_text()) == {"x": None, "y": 1}
    assert json.loads((tmp_path / "timings.json").read_text()) == {"seconds": seconds, "runs": [{"seed": 0}]}
    (tmp_path / "jobs").mkdir()   # the finished training runs a resume would reuse: the run's files hold them now
    (tmp_path / "jobs" / "job-0000-aa.pkl").write_bytes(b"")
    finish_run(tmp_path, {"y": 1}, time.time())
    assert not (tmp_path / "jobs").exists()


def test_print_timings_aligns_the_labels(capsys):
    from dialogrl.run import print_timings

    print_timings([{"task": "dond", "method": "ibrl", "seed": 0, "train_s": 12.0, "eval_s": 3.0},
                   {"task": "telesales", "method": "base", "seed": 1, "train_s": 0.4, "eval_s": 20.0}])
    assert capsys.readouterr().out.splitlines() == ["dond      ibrl seed 0: train    12 s, eval    3 s",
                                                    "telesales base seed 1: train     0 s, eval   20 s"]


def test_design_checks_are_kept_before_a_refusal(tmp_path):
    """A design refused by its checks (dialogrl.room) keeps what refused it: design_checks.json, NaN as null."""
    from dialogrl.room import require_responsive
    from dialogrl.run import save_design_checks

    rec = {"decision": "success", "kinds": ["good", "bad"], "good": 0.5, "bad": 0.4, "diff": 0.1, "ci": [-0.05, 0.25],
           "gap": 0.3, "games": 100, "responds": False}
    room = {"sim": {"metric": "success", "base": 0.7, "ceiling": float("nan"), "passed": False}}
    save_design_checks(tmp_path, {"single-1": rec}, room)
    with pytest.raises(ValueError, match="single-1"):
        require_responsive({"single-1": rec}, "training simulator")
    kept = json.loads((tmp_path / "design_checks.json").read_text())
    assert kept["counterparts"]["single-1"] == rec and kept["room"]["sim"]["ceiling"] is None


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGXFSZ"), reason="a file-size limit is POSIX's")
def test_a_full_disk_leaves_the_old_file_and_figure_whole(tmp_path):
    """A write that meets a full disk (here a file-size limit of 4 KiB in a child process) fails with its error and
    leaves the text file (papers/, README, summaries: run.write_text) and the figure (plots) as they were, with no
    temporary file behind."""
    import subprocess
    import sys

    (tmp_path / "paper.md").write_text("the old paper\n")
    (tmp_path / "fig.png").write_bytes(b"the old figure")
    script = """
import resource, signal, sys
from pathlib import Path
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from dialogrl.plots import _save
from dialogrl.run import write_text
folder = Path(sys.argv[1])
figure = plt.figure(figsize=(12, 12))
plt.plot(range(5000), [(k * 7919) % 101 for k in range(5000)])   # a figure of much more than 4 KiB
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # the write fails with EFBIG, as ENOSPC on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
for name, write in [("text", lambda: write_text(folder / "paper.md", "the new paper " * 1000)),
                    ("figure", lambda: _save(figure, folder / "fig.png"))]:
    try:
        write()
        print(name, "written")
    except OSError as err:
        print(name, "refused", err.errno)
"""
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["text refused 27", "figure refused 27"], out.stdout + out.stderr
    assert (tmp_path / "paper.md").read_text() == "the old paper\n"
    assert (tmp_path / "fig.png").read_bytes() == b"the old figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "paper.md"]


def test_the_steps_fp16_skipped_reach_the_summary(tmp_path):
    """`<adapter>/skipped_steps` (a running count per training run in metrics.jsonl) is summed into summary.json's
    `skipped_steps` by finish_run, per run and in total; a run that skipped none (or never counted: no fp16) adds
    no key, so its summary is what it always was."""
    import json
    import time

    from dialogrl.run import append_jsonl, finish_run, skipped_steps

    rows = [{"method": "ibrl", "seed": 0, "step": 0, "seller/skipped_steps": 0, "buyer/skipped_steps": 1, "time": 1.0},
            {"method": "ibrl", "seed": 0, "step": 1, "seller/skipped_steps": 2, "buyer/skipped_steps": 1},
            {"method": "ibrl", "seed": 1, "step": 0, "seller/skipped_steps": 0, "buyer/skipped_steps": 0}]
    append_jsonl(tmp_path / "metrics.jsonl", rows)
    assert skipped_steps(tmp_path) == {"total": 3, "runs": {"method=ibrl/seed=0/seller": 2,
                                                            "method=ibrl/seed=0/buyer": 1}}
    finish_run(tmp_path, {"a": 1}, time.time())
    assert json.loads((tmp_path / "summary.json").read_text())["skipped_steps"]["total"] == 3
    clean = tmp_path / "clean"
    clean.mkdir()
    append_jsonl(clean / "metrics.jsonl", [{"method": "x", "seed": 0, "step": 0, "policy/loss": 0.1}])
    finish_run(clean, {"a": 1}, time.time())
    assert json.loads((clean / "summary.json").read_text()) == {"a": 1}


def test_design_summary_heads_a_notebooks_summary():
    from dialogrl.run import design_summary

    p = {"profile": "cpu", "n_seeds": 1, "eval_scenarios": 50, "steps": 40, "scenarios_per_step": 6, "group_size": 4}
    head = design_summary(p, algorithm="grpo")
    assert head == {"profile": "cpu", "seeds": 1, "eval_scenarios": 50, "steps": 40, "dialogues_per_run": 960,
                    "interval": "bootstrap over games (one seed)", "algorithm": "grpo"}
    assert design_summary({**p, "n_seeds": 4})["interval"] == "t over training seeds"


def test_show_prints_outside_a_notebook(capsys):
    import pandas as pd

    from dialogrl.run import show

    show("| a |\n|---|", markdown=True)
    show(pd.DataFrame({"x": [1]}).style.set_caption("c"))
    out = capsys.readouterr().out
    assert "| a |" in out and "x" in out and "Styler" not in out
