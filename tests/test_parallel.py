"""Independent runs in parallel worker processes give the results of the serial loop, in the same order."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dialogrl.envs import DealOrNoDeal
from dialogrl.envs.dealnodeal import ScriptedAgent
from dialogrl.models import adapter_parameters, load_model
from dialogrl.parallel import dispatch_order, map_runs, start_method, torch_threads
from dialogrl.rl.trainer import RoleSpec, TrainConfig, Trainer
from dialogrl.run import MetricsLogger, read_metrics, seed_everything

TASK = DealOrNoDeal()


def test_parallel_runs_equal_the_serial_loop(dond_toy_dir):
    """One training run per job (a seed: rollout, update, a second rollout with the updated adapter), as the
    notebooks' runs are: seeded at their start. Two workers give exactly the serial loop's results, in job order,
    torch tensors (the trained adapter's weights) and finished games included."""
    def run(job):
        seed, persona = job
        seed_everything(seed)
        model, tok = load_model(str(dond_toy_dir), adapters=["A"], device="cpu", lora_r=4)
        roles = {"A": RoleSpec(adapter="A", trainable=True, lr=1e-2), "B": RoleSpec(agent=ScriptedAgent(persona))}
        trainer = Trainer(TASK, model, tok, roles, TrainConfig(steps=2, scenarios_per_step=2, group_size=2,
                                                               max_new_tokens=12, seed=seed))
        rows = trainer.train(progress=False)
        episodes, _ = trainer.rollout(9)
        weights = {n: p.detach().clone() for n, p in adapter_parameters(model, "A").items()}
        return [r["reward/A"] for r in rows], episodes, weights

    jobs = [(0, "fair"), (1, "greedy"), (2, "fair")]
    serial = map_runs(run, jobs, threads=1)
    parallel = map_runs(run, jobs, processes=2)
    for (rewards, episodes, weights), (rewards2, episodes2, weights2) in zip(serial, parallel, strict=True):
        assert rewards2 == rewards
        assert [e.transcript() for e in episodes2] == [e.transcript() for e in episodes]
        assert [t.completion_ids for e in episodes2 for t in e.state.turns] == \
            [t.completion_ids for e in episodes for t in e.state.turns]
        assert weights2.keys() == weights.keys() and all(torch.equal(weights2[n], weights[n]) for n in weights)
    assert serial[0] != serial[2]                    # the seeds matter (the comparison is not vacuous)


def test_map_runs_keeps_order_and_raises():
    assert map_runs(lambda k: k * k, range(5), processes=3) == [0, 1, 4, 9, 16]
    assert map_runs(lambda k: k * k, range(5), processes=2, cost=lambda k: k % 3) == [0, 1, 4, 9, 16]  # job order
    assert map_runs(lambda k: k * k, range(5), processes=3, desc="runs") == [0, 1, 4, 9, 16]  # with a bar
    assert map_runs(lambda k: k * k, range(5), desc="runs") == [0, 1, 4, 9, 16]
    with pytest.raises(ValueError, match="processes=0"):
        map_runs(abs, [1], processes=0)

    def boom(k):
        if k == 2:
            raise RuntimeError(f"job {k} failed")
        return k
    with pytest.raises(RuntimeError, match="job 2 failed"):
        map_runs(boom, [1, 2, 3], processes=2)


def test_a_killed_worker_raises_naming_its_job():
    """A worker that dies without a result (the out-of-memory killer's SIGKILL) stops map_runs with an error that
    names the job, instead of a pool that waits for it forever."""
    def killed(k):
        if k == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return k
    with pytest.raises(RuntimeError, match=r"job 1 \(1\) died without a result \(exit code -9"):
        map_runs(killed, [0, 1, 2], processes=2)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"   # a zombie has ended
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a worker's death with its parent is Linux's prctl")
def test_workers_die_with_the_process_that_started_them(tmp_path):
    """A notebook's kernel killed mid-map (as the out-of-memory killer does) takes its workers with it: no orphan
    goes on training and writing into a run folder that a resume has taken up again."""
    script = ("import os, sys, time\nfrom dialogrl.parallel import map_runs\n"
              "def job(k):\n    (open(f'{sys.argv[1]}/pid-{k}', 'w')).write(str(os.getpid()))\n    time.sleep(120)\n"
              "map_runs(job, [0, 1], processes=2, method='fork')\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    try:
        deadline = time.time() + 120
        while len([f for f in tmp_path.glob("pid-*") if f.read_text()]) < 2 and time.time() < deadline:
            time.sleep(0.1)
        pids = [int(f.read_text()) for f in tmp_path.glob("pid-*")]
        assert len(pids) == 2 and all(map(_alive, pids))
    finally:
        proc.kill()
        proc.wait()
    deadline = time.time() + 10
    while any(map(_alive, pids)) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(map(_alive, pids)), "a worker outlived the process that started it"


@pytest.mark.parametrize("processes", [1, 2])
def test_kept_results_resume_an_interrupted_map_where_it_stopped(tmp_path, processes):
    """Each result is saved as its job finishes, with the lines it logged to its run folder; after a failure (a
    killed run) and the run folder's logs cleared (as `run.resume_run` does), the same call runs only the jobs without
    a result, logs the saved jobs' lines again, and returns and logs what an uninterrupted call does."""
    ran = tmp_path / "ran"
    ran.mkdir()
    log = MetricsLogger(tmp_path)   # the run folder: keep is its jobs/ folder

    def job(k):
        (ran / f"{k}-{len(list(ran.glob(f'{k}-*')))}").touch()   # one file per time job k runs
        log.tagged(k=k).log(step=0, value=k * k)
        if k == 3 and not (tmp_path / "healed").exists():
            raise RuntimeError("interrupted")
        log.tagged(k=k).log(step=1, value=-k)
        return {"k": k, "square": k * k}

    with pytest.raises(RuntimeError, match="interrupted"):
        map_runs(job, range(5), processes=processes, keep=tmp_path / "jobs")
    saved = {int(p.name.split("-")[1]) for p in (tmp_path / "jobs").glob("job-*.pkl")}
    assert 3 not in saved and (processes > 1 or saved == {0, 1, 2})
    (tmp_path / "healed").touch()
    (tmp_path / "metrics.jsonl").unlink()
    assert map_runs(job, range(5), processes=processes, keep=tmp_path / "jobs") == [{"k": k, "square": k * k}
                                                                                     for k in range(5)]
    runs = {k: len(list(ran.glob(f"{k}-*"))) for k in range(5)}
    assert runs[3] == 2 and all(runs[k] == 1 for k in saved)      # a job with a saved result is not run again
    assert len(list((tmp_path / "jobs").glob("job-*.pkl"))) == 5 and not list((tmp_path / "jobs").glob(".*"))
    rows = sorted((r["k"], r["step"], r["value"]) for r in read_metrics(tmp_path))
    assert rows == sorted([(k, 0, k * k) for k in range(5)] + [(k, 1, -k) for k in range(5)])


def test_a_jobs_exception_carries_the_workers_traceback():
    def boom(k):
        raise KeyError(f"no such thing {k}")
    with pytest.raises(KeyError, match="no such thing 3") as info:
        map_runs(boom, [3, 4], processes=2)
    assert any("in map_runs' worker of job" in note and "in boom" in note for note in info.value.__notes__)


def test_spawned_workers_take_closures_by_value():
    """Spawned workers (the start method once CUDA has started in the caller) get `fn` and the jobs by value: a
    closure over a local object and a torch tensor work as in a forked worker, in job order."""
    offset = torch.arange(3)
    assert map_runs(lambda k: (offset * k).tolist(), [2, 5, 1], processes=2, method="spawn") == \
        [[0, 2, 4], [0, 5, 10], [0, 1, 2]]
    assert start_method() == "fork"   # this CPU machine: nothing started CUDA
    with pytest.raises(ValueError, match="fork or spawn"):
        map_runs(abs, [1, 2], processes=2, method="forkserver")


def test_torch_threads_restores_the_count():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_dispatch_order_is_longest_first_and_stable():
    jobs = [("base", 0), ("static", 0), ("interactive", 0), ("base", 1), ("interactive", 1)]
    cost = {"base": 1, "static": 3, "interactive": 5}
    assert dispatch_order(jobs, lambda job: cost[job[0]]) == [2, 4, 1, 0, 3]
    assert dispatch_order(jobs) == [0, 1, 2, 3, 4]


def test_the_ray_backend_on_a_local_cluster():
    """The same runs as Ray tasks (a local cluster of 2 CPUs here; a real one where RAY_ADDRESS names it): results
    in job order, closures by value, a fresh process per job, a job's exception and a dead worker named."""
    ray = pytest.importorskip("ray")
    offset = torch.arange(3)
    try:
        out = map_runs(lambda k: ((offset * k).tolist(), os.getpid()), [2, 5, 1], processes=2, backend="ray",
                       cost=lambda k: k)
        assert [o[0] for o in out] == [[0, 2, 4], [0, 5, 10], [0, 1, 2]]
        assert len({o[1] for o in out}) == 3 and os.getpid() not in {o[1] for o in out}   # a process per job

        def boom(k):
            raise KeyError(f"no such thing {k}")
        with pytest.raises(KeyError, match="no such thing 3") as info:
            map_runs(boom, [3], processes=2, backend="ray")
        assert any("Ray task of job 0" in note for note in info.value.__notes__)

        def killed(k):
            if k == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            return k
        with pytest.raises(RuntimeError, match=r"job 1 \(1\) died without a result"):
            map_runs(killed, [0, 1], processes=2, backend="ray")
        with pytest.raises(ValueError, match="local or ray"):
            map_runs(abs, [1], backend="dask")
    finally:
        ray.shutdown()


def _runs_sharing(_job) -> int:
    from dialogrl.parallel import runs_at_once

    return runs_at_once()


def test_each_worker_knows_how_many_runs_share_the_machine(monkeypatch):
    """map_runs tells its workers how many runs share the machine (what a vLLM engine sizes its share of the GPU by:
    six runs at a fixed 0.3 each asked for 1.8 GPUs); Ray's tasks reserve an equal share of a GPU where there is one
    (a reservation of 0 hid the GPUs from them)."""
    from dialogrl.agents.vllm_engine import memory_share
    from dialogrl.parallel import auto_gpus_per_run

    assert map_runs(_runs_sharing, range(3), processes=2) == [2, 2, 2]
    assert map_runs(_runs_sharing, range(3), processes=1) == [1, 1, 1]   # the serial loop: this process alone
    assert [memory_share(n) for n in (1, 2, 3, 6)] == pytest.approx([0.3, 0.3, 0.2, 0.1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert auto_gpus_per_run(4) == 0.25
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert auto_gpus_per_run(4) == 0.0
