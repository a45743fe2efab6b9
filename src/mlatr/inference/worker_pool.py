"""A function over items in worker processes, the results in order: how the audio path uses every core.

:func:`ordered_map` runs ``work(item)`` for each item, in this process (``workers <= 1``) or in ``workers``
processes that each run torch on ``threads`` threads (``workers x threads`` = the cores given to the job:
:func:`threads_per_worker`), and yields the results in the items' order. ``work`` is given once to each
process (by fork: shared, not copied; where fork is not safe, pickled), the items and results are pickled.

Fork is used only with one torch thread per process: GNU OpenMP, torch's CPU thread pool, hangs in a child
forked from a process that has already run a parallel region; with more threads per process the workers are
spawned (a fresh interpreter each, ``work`` pickled). Objects that hold threads of their own (an optimised
runtime's session, :mod:`mlatr.inference.runtime`) make them again in the process that calls them.

An error in a worker reaches the caller as the same exception (an :class:`~mlatr.errors.MlatrError` with its
message, an :class:`~mlatr.errors.InputError` with its file, line and field); any other as a
:class:`RuntimeError` carrying the worker's traceback. Interrupting the caller stops the workers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from mlatr.errors import MlatrError

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


def context(threads: int) -> mp.context.BaseContext:
    """Fork with one thread per process on Linux (shared memory, fast start), else spawn (see the docstring)."""
    if threads == 1 and sys.platform.startswith("linux"):
        return mp.get_context("fork")
    return mp.get_context("spawn")


def ordered_map(work: Callable[[Any], Any], items: Iterable[Any], workers: int, threads: int = 1) -> Iterator[Any]:
    """``work(item)`` of each item, in order: in this process when ``workers <= 1`` (with the caller's torch
    threads), else by ``workers`` processes of ``threads`` torch threads each."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        yield from (work(item) for item in items)
        return
    ctx = context(threads)
    with ctx.Pool(min(workers, len(items)), initializer=_start, initargs=(work, threads)) as pool:
        for result in pool.imap(_run, items):
            yield _checked(result)
