"""A function over items in worker processes, the results in order: how the audio path uses every core.

:func:`ordered_map` runs ``work(item)`` for each item, in this process (``workers <= 1``) or in ``workers``
processes that each run torch on ``threads`` threads (``workers x threads`` = the cores given to the job:
:func:`threads_per_worker`), this process one of them (its share of the items, so one process fewer is
started and held in memory), and yields the results in the items' order, a few items in flight per process.
``work`` is given once to each process (pickled), the items and results are pickled.

The processes come from a fork server (a clean interpreter that has imported torch and mlatr once, then forks
a worker per request: fast to start, the imported pages shared), never forked from the caller: a child forked
from a process that has run a parallel region of GNU OpenMP (torch's CPU threads), or an ONNX Runtime / OpenVINO
session, hangs in its first parallel call. ``work`` is therefore pickled to each worker (a model's audio side:
:meth:`~mlatr.models.dual_encoder.DualEncoder.audio_tower`); objects holding threads of their own (an optimised
runtime's session, :mod:`mlatr.inference.runtime`) open them again in the process that calls them. Where there
is no fork server (macOS, Windows) the workers are spawned.

An error in a worker reaches the caller as the same exception (an :class:`~mlatr.errors.MlatrError` with its
message, an :class:`~mlatr.errors.InputError` with its file, line and field); any other as a
:class:`RuntimeError` carrying the worker's traceback. Interrupting the caller stops the workers.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import pickle
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mlatr.errors import MlatrError

log = logging.getLogger("mlatr.inference")

#: The function this worker process runs, set when it starts (:func:`_start`).
_WORK: dict[str, Callable[[Any], Any]] = {}


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, e.g. under ``taskset`` or a container's
    limit), what a command encodes with by default."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def threads_per_worker(cores: int, workers: int) -> int:
    """Torch threads for each of ``workers`` processes sharing ``cores`` (at least one)."""
    return max(1, cores // max(1, workers))


@dataclass
class _Failed:
    """What a worker sends back instead of a result: the exception, or its traceback when it does not pickle."""

    error: BaseException | None
    text: str


def _start(work: Callable[[Any], Any], threads: int) -> None:
    torch.set_num_threads(threads)
    _WORK["work"] = work


def _run(item: Any) -> Any:
    try:
        return _WORK["work"](item)
    except Exception as exc:  # sent back whole: raised again by the caller
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:  # an exception that does not pickle would stop the pool's result thread
            return _Failed(None, traceback.format_exc())
        return _Failed(exc, traceback.format_exc())


def _checked(result: Any) -> Any:
    if isinstance(result, _Failed):
        if isinstance(result.error, MlatrError):
            raise result.error
        raise RuntimeError(f"a worker process failed:\n{result.text}") from result.error
    return result


def context() -> mp.context.BaseContext:
    """Where the worker processes come from: a fork server on Linux (see the module docstring), else spawn."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["mlatr.inference.audio"])  # torch and mlatr imported once, in the server
        return ctx
    return mp.get_context("spawn")


def _pickles(work: Callable[[Any], Any]) -> bool:
    try:
        pickle.dumps(work)
    except Exception:  # any object of a model may refuse pickling, each in its own way
        return False
    return True


def ordered_map(work: Callable[[Any], Any], items: Iterable[Any], workers: int, threads: int = 1, *,
                caller_works: bool = True, prefetch: int = 2) -> Iterator[Any]:
    """``work(item)`` of each item, in order: in this process when ``workers <= 1`` (with the caller's torch
    threads), else by ``workers`` processes of ``threads`` torch threads each, this one among them
    (``caller_works``: every ``workers``-th item, so only ``workers - 1`` are started; else ``workers`` are started
    and this process only receives). At most ``prefetch`` items per process are in flight ahead of the one
    yielded, so results a slow caller has not taken yet never pile up."""
    items = list(items)
    if workers > 1 and len(items) > 1 and not _pickles(work):
        log.warning("mlatr: this model cannot be sent to worker processes (it does not pickle); encoding in one "
                    "process")
        workers = 1
    if workers <= 1 or len(items) <= 1:
        yield from (work(item) for item in items)
        return
    workers = min(workers, len(items))
    helpers = workers - 1 if caller_works else workers
    mine = (lambda i: i % workers == workers - 1) if caller_works else (lambda i: False)
    caller_threads = torch.get_num_threads()
    with context().Pool(helpers, initializer=_start, initargs=(work, threads)) as pool:
        pending: deque = deque()
        upcoming = iter(enumerate(items))

        def top_up() -> None:
            while len(pending) < prefetch * workers:
                nxt = next(upcoming, None)
                if nxt is None:
                    return
                i, item = nxt
                pending.append((item, None if mine(i) else pool.apply_async(_run, (item,))))

        top_up()
        torch.set_num_threads(threads)  # this process's share of the cores while it works too
        try:
            while pending:
                item, result = pending.popleft()
                top_up()
                yield work(item) if result is None else _checked(result.get())
        finally:
            torch.set_num_threads(caller_threads)
