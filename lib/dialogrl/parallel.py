"""Independent runs (training seeds, methods) in parallel worker processes, with the results of a serial loop.

    results = map_runs(run_one, jobs, processes=4)     # the same list as [run_one(job) for job in jobs]

Runs that do not depend on each other (each seed of each method) go to `processes` worker processes of one torch
thread each: on 8 cores, up to 8 runs at a time. Even on 2 cores two one-thread workers beat one two-thread process,
because a dialogue rollout is bound by per-token Python overhead that a second thread does not share (TeleSales
training, `bench/throughput.py`: 235 dialogues/min in two workers against 151 in one process, 2026-12-02).

Same results as serial, when two rules hold (the notebooks' runs follow them):
- a job seeds itself (`seed_everything` at its start) and reads nothing that an earlier job wrote, so its result
  does not depend on which jobs ran before it; each job runs in a fresh worker process, forked from the calling
  process (or spawned), i.e. from the state the serial loop starts from;
- the thread count is the same: CPU kernels may add in another order with another number of threads, and sampling
  then drifts apart. Workers run one thread, so a serial loop to compare with runs with `threads=1`.
Workers are forked where they can be (Linux, macOS) and inherit `fn` and the jobs, so `fn` may be any function, a
closure or one defined in a notebook (only each job's index goes to a worker, and its result comes back pickled);
one thread per worker also keeps clear of OpenMP's trouble with forking a process whose thread pool is running. Once
CUDA has started in the calling process (a notebook's models on the GPU), a fork could not use it: the workers are
spawned instead, `fn` and each job sent by value (cloudpickle) over a pipe, and worker i takes GPU i (modulo the
visible ones), so several runs share one GPU or spread over several. A spawned worker lets the bytes go once it has
unpickled them (it holds each model it was sent once, as `estimate` counts it), and first runs what modules
registered with `worker_setup` (the attention implementation the models name). Where fork does not exist
(Windows) they are spawned too. A job that raises re-raises here with the worker's traceback; a worker that dies
(killed, out of memory) raises RuntimeError naming its job, instead of waiting for a result that never comes.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from dialogrl.run import progress, recorded_appends, write_bytes


@contextlib.contextmanager
def torch_threads(n: int | None):
    """Run the block with `n` torch intra-op threads (None: unchanged), restoring the count after."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


_TASK: tuple | None = None  # (fn, jobs) of the running map_runs: forked workers inherit it


RUNS_AT_ONCE = "DIALOGRL_RUNS_AT_ONCE"   # set in each worker: how many runs share the machine (and its GPU) with it


def runs_at_once() -> int:
    """How many runs share this process's machine: set in the workers of `map_runs`, 1 elsewhere (what a vLLM
    engine sizes its share of the GPU by: `agents.vllm_engine.memory_share`)."""
    try:
        return max(1, int(os.environ.get(RUNS_AT_ONCE, "1")))
    except ValueError:
        return 1


def auto_gpus_per_run(processes: int) -> float:
    """A Ray task's GPU reservation when none is given: an equal share of one GPU per run at once where CUDA is
    here (a reservation of 0 hides the GPUs from the task), none on a CPU-only machine."""
    return 1.0 / max(1, processes) if torch.cuda.is_available() else 0.0


def _init_worker(at_once: int = 1) -> None:
    torch.set_num_threads(1)
    os.environ[RUNS_AT_ONCE] = str(at_once)
    # a forked worker's progress bars (transformers' "Loading weights") would send widget messages over the
    # notebook kernel's socket that no frontend displays (papermill logs them as stray messages)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _die_with_parent(parent: int) -> None:
    """Linux: this worker is killed when the process that started it dies (a notebook's kernel killed by the
    out-of-memory killer, say), so that no orphan goes on training and writing into a run folder that a resume has
    taken up again (`run.resume_run`)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    if os.getppid() != parent:   # it died before that took effect
        os._exit(1)


def _worker(payload: int | multiprocessing.connection.Connection, conn, gpu: int, parent: int, at_once: int = 1
            ) -> None:
    """One job in its own process: `payload` is the job's index into the inherited `_TASK` (fork), or the receiving
    end of a pipe that brings `(setup, fn, job)` pickled by value (spawn: `_pickled`), read and let go before the job
    runs, so that the worker does not hold the bytes of every model it was sent beside the models themselves (the
    process's arguments live as long as it does). Sends back ("ok", result) or ("error", exception or None,
    traceback), as plain pickle bytes: multiprocessing's own pickler would send torch tensors as shared-memory handles
    that the receiver opens from a sender which has exited by then."""
    try:
        _die_with_parent(parent)
        _init_worker(at_once)
        if isinstance(payload, int):
            fn, jobs = _TASK
            job = jobs[payload]
        else:   # spawn: a fresh interpreter, its current GPU chosen before anything loads
            if torch.cuda.is_available():
                torch.cuda.set_device(gpu % torch.cuda.device_count())
            fn, job = _unpickled(payload.recv_bytes())
            payload.close()
        message = ("ok", fn(job))
    except BaseException as e:  # noqa: BLE001 - every failure of the job goes back to the caller
        message = ("error", e, traceback.format_exc())
    try:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - a result or an exception that does not pickle
        what = "result" if message[0] == "ok" else f"exception ({message[2]})"
        data = pickle.dumps(("error", None, f"the job's {what} does not pickle: {e!r}"))
    conn.send_bytes(data)
    conn.close()


_SETUP: list[Callable[[], Any]] = []   # run in each spawned worker before its job (`worker_setup`)


def worker_setup(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Run `fn` (a module-level function of no arguments) in every spawned worker and Ray task before its job: what a
    module did to this process that the objects sent to a worker need there too (`models`: the attention
    implementation registered with transformers, which a model unpickled in a fresh interpreter names). Returns fn."""
    if fn not in _SETUP:
        _SETUP.append(fn)
    return fn


def _pickled(fn: Callable[[Any], Any], job: Any) -> bytes:
    """`fn` and `job` by value (cloudpickle), with the setup functions registered here (`worker_setup`)."""
    import cloudpickle

    return cloudpickle.dumps((list(_SETUP), fn, job))


def _unpickled(data: bytes) -> tuple:
    """(fn, job) from `_pickled`'s bytes, the setup functions run."""
    setup, fn, job = pickle.loads(data)
    for f in setup:
        f()
    return fn, job


def _send(conn, data: bytes) -> None:
    """Write `data` to the pipe and close it (in a thread: the write waits until the worker has started and reads)."""
    with contextlib.suppress(OSError):   # the worker died before it read: map_runs reports that
        conn.send_bytes(data)
    conn.close()


def start_method() -> str:
    """How map_runs starts its workers here: "fork" where the platform has it and no CUDA context exists in this
    process (a forked child cannot use the parent's CUDA context), else "spawn"."""
    if "fork" in multiprocessing.get_all_start_methods() and not torch.cuda.is_initialized():
        return "fork"
    return "spawn"


class _Kept:
    """fn, with its result saved to the job's file as it returns (map_runs' `keep`): a (job, file) pair in. The file
    holds the result and the lines the job appended to its run's files (`run.recorded_appends`; their paths relative
    to the keep folder's parent, the run folder, where they lie in it)."""

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def __call__(self, pair: tuple) -> Any:
        job, file = pair
        with recorded_appends() as appends:
            result = self.fn(job)
        base = file.parent.parent.resolve()
        lines = [(str(p.relative_to(base)) if p.is_relative_to(base) else str(p), line) for p, line in appends]
        write_bytes(file, pickle.dumps((result, lines)))
        return result


def _saved(file: Path) -> Any:
    """A job's saved result (`_Kept`); the lines it appended to its run's files are appended to them again (the
    folder they were in was cleared for the resume: `run.resume_run`)."""
    result, lines = pickle.loads(file.read_bytes())
    for path, line in lines:
        with open(file.parent.parent / path, "a") as f:   # an absolute path stays itself
            f.write(line)
    return result


def map_runs(fn: Callable[[Any], Any], jobs: Iterable, processes: int = 1, threads: int | None = None,
             desc: str | None = None, cost: Callable[[Any], float] | None = None, method: str | None = None,
             backend: str = "local", gpus_per_run: float | None = None, keep: str | os.PathLike | None = None
             ) -> list:
    """[fn(job) for job in jobs], in order; with processes > 1 each job runs in a fresh worker process of one torch
    thread, at most `processes` at a time. threads: torch threads of the serial loop (None: unchanged).
    An exception in a job is raised here, the worker's traceback added as a note; a worker that dies (killed, out of
    memory) raises RuntimeError naming its job; the other workers are stopped either way.
    desc: show a progress bar over the jobs with this description (`dialogrl.run.progress`).
    cost: a job's expected length (any unit); the workers take the jobs longest first (`dispatch_order`), so that a
    long job does not start last and run alone while the other workers idle. The results stay in job order.
    method: "fork" or "spawn" (None: `start_method()`). A forked worker inherits `fn` and the jobs, so `fn` may be
    anything, a notebook's closure included. A spawned one (once CUDA has started in this process) receives
    `fn` and its job pickled by value (cloudpickle: closures and the notebook objects they use, models included, are
    copied into each worker), and takes worker slot i's GPU (i modulo the visible GPUs) as its current device: the
    models a job loads go there, objects it captured keep the device they had.
    backend: "local" (the worker processes above) or "ray": the jobs go to a Ray cluster as tasks, at most
    `processes` at a time, each in a fresh worker process (`max_calls=1`) with `fn` and its job by value; the
    cluster is the one `RAY_ADDRESS` names, or the one this process already joined (`ray.init`), else a local one of
    `processes` CPUs. gpus_per_run: the GPUs each Ray task reserves (0.5: two runs share one; None: one GPU shared
    by the runs at once where CUDA is here, `auto_gpus_per_run`). Ray is an optional extra (`pip install -e .[ray]`).
    Each worker knows how many runs share the machine with it (`runs_at_once`).
    keep: a folder where each job's result is saved as soon as the job finishes (pickled, written whole: aside, then
    renamed), named by the job's place and its repr, with the lines it logged to its run's files (metrics.jsonl,
    train_configs.jsonl: `run.recorded_appends`); a later call with the same folder and jobs takes the saved results,
    logs their lines again, and runs only the jobs without one (a notebook's resume: `run.resume_run`)."""
    jobs = list(jobs)
    if keep is not None:
        folder = Path(keep)
        folder.mkdir(parents=True, exist_ok=True)
        files = [folder / f"job-{i:04d}-{hashlib.blake2b(repr(job).encode(), digest_size=6).hexdigest()}.pkl"
                 for i, job in enumerate(jobs)]
        todo = [i for i, f in enumerate(files) if not f.exists()]
        saved = {i: _saved(f) for i, f in enumerate(files) if i not in todo}
        ran = map_runs(_Kept(fn), [(jobs[i], files[i]) for i in todo], processes, threads, desc,
                       None if cost is None else (lambda pair: cost(pair[0])), method, backend, gpus_per_run)
        saved.update(zip(todo, ran))
        return [saved[i] for i in range(len(jobs))]
    if processes < 1:
        raise ValueError(f"processes={processes}: must be >= 1")
    if backend not in ("local", "ray"):
        raise ValueError(f"backend={backend!r}: local or ray")
    if backend == "ray":
        with progress(total=len(jobs), desc=desc, enabled=desc is not None, unit="run") as bar:
            gpus = auto_gpus_per_run(processes) if gpus_per_run is None else gpus_per_run
            return _map_ray(fn, jobs, processes, dispatch_order(jobs, cost), gpus, bar)
    method = method or start_method()
    if method not in ("fork", "spawn"):
        raise ValueError(f"method={method!r}: fork or spawn")
    bar = progress(total=len(jobs), desc=desc, enabled=desc is not None, unit="run")
    if processes == 1 or len(jobs) <= 1:
        with torch_threads(threads), bar:
            return [_ticked(fn(job), bar) for job in jobs]
    global _TASK
    ctx = multiprocessing.get_context(method)
    pending = dispatch_order(jobs, cost)[::-1]   # popped from the end: longest first
    running: dict = {}        # receiving end of a worker's pipe -> (job index, process, its slot)
    slots = min(processes, len(jobs))
    free = list(range(slots))[::-1]   # worker slots (slot i: GPU i modulo the visible ones)
    out: list = [None] * len(jobs)
    _TASK = (fn, jobs)
    try:
        with bar:
            while pending or running:
                while pending and free:
                    i, slot = pending.pop(), free.pop()
                    receive, send = ctx.Pipe(duplex=False)
                    task, source = (i, None) if method == "fork" else ctx.Pipe(duplex=False)
                    worker = ctx.Process(target=_worker, args=(task, send, slot, os.getpid(), slots), daemon=True)
                    worker.start()
                    send.close()   # the worker holds the sending end: its exit without a message reads as EOF
                    if source is not None:   # spawn: the job by value, from a thread that lets it go once written
                        task.close()
                        threading.Thread(target=_send, args=(source, _pickled(fn, jobs[i])), daemon=True).start()
                    running[receive] = (i, worker, slot)
                for receive in multiprocessing.connection.wait(list(running)):
                    i, worker, slot = running.pop(receive)
                    free.append(slot)
                    try:
                        message = pickle.loads(receive.recv_bytes())
                    except EOFError:
                        worker.join()
                        raise RuntimeError(f"map_runs: the worker of job {i} ({jobs[i]!r}) died without a result "
                                           f"(exit code {worker.exitcode}; a negative code is the signal that ended "
                                           "it, -9 as the out-of-memory killer sends)") from None
                    finally:
                        receive.close()
                    worker.join()
                    if message[0] == "error":
                        _, error, trace = message
                        error = error or RuntimeError(trace)
                        error.add_note(f"in map_runs' worker of job {i} ({jobs[i]!r}):\n{trace}")
                        raise error
                    out[i] = _ticked(message[1], bar)
        return out
    finally:
        _TASK = None
        for receive, (_, worker, _) in running.items():
            worker.kill()
            worker.join()
            receive.close()


def _ray_task(payload: bytes, at_once: int = 1) -> bytes:
    """One job as a Ray task: `(setup, fn, job)` by value in (`_pickled`), its result as plain pickle bytes out."""
    _init_worker(at_once)
    fn, job = _unpickled(payload)
    return pickle.dumps(fn(job), protocol=pickle.HIGHEST_PROTOCOL)


def _map_ray(fn, jobs: list, processes: int, order: list[int], gpus_per_run: float, bar) -> list:
    try:
        import ray
    except ImportError:
        raise ImportError("backend='ray' needs Ray: pip install -e .[ray] (or pip install ray)") from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address, num_cpus=None if address else processes, include_dashboard=False,
                 log_to_driver=False)
    task = ray.remote(num_cpus=1, num_gpus=gpus_per_run, max_calls=1, max_retries=0)(_ray_task)
    pending, running, out = order[::-1], {}, [None] * len(jobs)   # running: object ref -> job index
    try:
        while pending or running:
            while pending and len(running) < processes:
                i = pending.pop()
                running[task.remote(_pickled(fn, jobs[i]), min(processes, len(jobs)))] = i
            done, _ = ray.wait(list(running), num_returns=1)
            i = running.pop(done[0])
            try:
                out[i] = _ticked(pickle.loads(ray.get(done[0])), bar)
            except ray.exceptions.RayTaskError as e:   # the job raised: its own exception, the worker's traceback
                error = e.cause if isinstance(e.cause, BaseException) else RuntimeError(str(e))
                error.add_note(f"in map_runs' Ray task of job {i} ({jobs[i]!r}):\n{e}")
                raise error from None
            except ray.exceptions.RayError as e:       # the worker died (killed, out of memory) or the node went
                raise RuntimeError(f"map_runs: the Ray task of job {i} ({jobs[i]!r}) died without a result: "
                                   f"{type(e).__name__}: {e}") from None
        return out
    finally:
        for ref in running:
            ray.cancel(ref, force=True)


def dispatch_order(jobs: list, cost: Callable[[Any], float] | None = None) -> list[int]:
    """The indices of `jobs` in the order the workers take them: by decreasing `cost`, ties (and cost None) in job
    order."""
    if cost is None:
        return list(range(len(jobs)))
    return sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))


def _ticked(result: Any, bar) -> Any:
    bar.update()
    return result
