"""Independent runs (training seeds, methods) in parallel worker processes, with the results of a serial loop.

    results = map_runs(run_one, jobs, processes=4)     # the same list as [run_one(job) for job in jobs]

Runs that do not depend on each other (each seed of each method) go to `processes` worker processes of one torch
thread each: on 8 cores, up to 8 runs at a time. Even on 2 cores two one-thread workers beat one two-thread process,
because a dialogue rollout is bound by per-token Python overhead that a second thread does not share (TeleSales
training, `bench/throughput.py`: 235 dialogues/min in two workers against 151 in one process, 2026-12-02).

Same results as serial, when two rules hold (the notebooks' runs follow them):
- a job seeds itself (`seed_everything` at its start) and reads nothing that an earlier job wrote, so its result
  does not depend on which jobs ran before it; each job runs in a fresh fork of the calling process
  (`maxtasksperchild=1`), i.e. from the state the serial loop starts from;
- the thread count is the same: CPU kernels may add in another order with another number of threads, and sampling
  then drifts apart. Workers run one thread, so a serial loop to compare with runs with `threads=1`.
Workers are forked (Linux, macOS) and inherit `fn` and the jobs, so `fn` may be any function, a closure or one
defined in a notebook (only each job's index goes to a worker, and its result comes back pickled); one thread per
worker also keeps clear of OpenMP's trouble with forking a process whose thread pool is running. Where fork is not
available (Windows) the jobs run serially, with a warning.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch


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


def _init_worker() -> None:
    torch.set_num_threads(1)
    # a forked worker's progress bars (transformers' "Loading weights") would send widget messages over the
    # notebook kernel's socket that no frontend displays (papermill logs them as stray messages)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _run_job(i: int) -> bytes:
    """Run job i; its result as plain pickle bytes. multiprocessing's own pickler sends torch tensors as shared
    memory handles that the receiver opens from the sender, which a worker that exits after its one job (and any
    result the parent fails to rebuild) turns into a pool that waits forever; plain bytes copy the tensors."""
    fn, jobs = _TASK
    return pickle.dumps(fn(jobs[i]), protocol=pickle.HIGHEST_PROTOCOL)


def map_runs(fn: Callable[[Any], Any], jobs: Iterable, processes: int = 1, threads: int | None = None,
             desc: str | None = None, cost: Callable[[Any], float] | None = None) -> list:
    """[fn(job) for job in jobs], in order; with processes > 1 in that many forked one-thread workers, each job in a
    fresh fork. threads: torch threads of the serial loop (None: unchanged). Exceptions in a job propagate.
    desc: show a progress bar over the jobs with this description (`dialogrl.run.progress`).
    cost: a job's expected length (any unit); the workers take the jobs longest first (`dispatch_order`), so that a
    long job does not start last and run alone while the other workers idle. The results stay in job order."""
    from dialogrl.run import progress

    jobs = list(jobs)
    if processes < 1:
        raise ValueError(f"processes={processes}: must be >= 1")
    if processes > 1 and "fork" not in multiprocessing.get_all_start_methods():
        warnings.warn("parallel runs need the fork start method (not available here): running them serially",
                      stacklevel=2)
        processes = 1
    bar = progress(total=len(jobs), desc=desc, enabled=desc is not None, unit="run")
    if processes == 1 or len(jobs) <= 1:
        with torch_threads(threads), bar:
            return [_ticked(fn(job), bar) for job in jobs]
    global _TASK
    _TASK = (fn, jobs)
    try:
        ctx = multiprocessing.get_context("fork")
        order = dispatch_order(jobs, cost)
        out: list = [None] * len(jobs)
        with ctx.Pool(min(processes, len(jobs)), initializer=_init_worker, maxtasksperchild=1) as pool, bar:
            for i, b in zip(order, pool.imap(_run_job, order, chunksize=1), strict=True):
                out[i] = pickle.loads(_ticked(b, bar))
        return out
    finally:
        _TASK = None


def dispatch_order(jobs: list, cost: Callable[[Any], float] | None = None) -> list[int]:
    """The indices of `jobs` in the order the workers take them: by decreasing `cost`, ties (and cost None) in job
    order."""
    if cost is None:
        return list(range(len(jobs)))
    return sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))


def _ticked(result: Any, bar) -> Any:
    bar.update()
    return result
