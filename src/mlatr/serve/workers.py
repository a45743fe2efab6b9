"""``mlatr serve --workers N``: N server processes answering on one listening socket.

One server process runs its Python on one core at a time (the GIL), so its requests per second stop at the
CPU one request costs (HTTP, the query's embedding, ranking, the JSON answer). N processes, each with its
own model and the same memory-mapped index (the vectors' pages are shared through the page cache), answer
up to N times as many on N free cores, as ``uvicorn --workers`` or gunicorn do.

The supervisor (this module, in the process ``mlatr serve`` started) binds the socket, starts the workers
(``spawn``: each imports and loads everything itself, no state forked from a half-started parent), prints
"serving at" once every worker has loaded its index, restarts a worker that dies, and stops them all on
Ctrl-C or SIGTERM. The kernel hands each new connection to one worker.

Reloads: every worker watches the index file (``--watch``); ``POST /reload`` reaches one worker, which
reloads and signals the supervisor (SIGUSR1), which signals every worker to reload if the file changed, so
all of them serve the same index.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

#: The signal a worker sends the supervisor after a reload, and the supervisor sends every worker.
RELOAD_SIGNAL = signal.SIGUSR1
#: A worker that dies this many times within RESTART_WINDOW seconds of its start is not started again.
MAX_QUICK_DEATHS, RESTART_WINDOW = 3, 30.0


def tell_siblings() -> None:
    """From a worker (its parent is the supervisor): ask the supervisor to have every worker reload."""
    os.kill(os.getppid(), RELOAD_SIGNAL)


def on_reload_signal(reload_if_changed: Callable[[], Any]) -> None:
    """In a worker: reload (in a thread, off the signal handler) when the supervisor says so."""
    def handler(_signum, _frame):
        threading.Thread(target=reload_if_changed, name="mlatr-sibling-reload", daemon=True).start()

    signal.signal(RELOAD_SIGNAL, handler)


def supervise(target: Callable, options: dict, sock, workers: int, announce: Callable[[], None]) -> int:
    """Run ``target(options, sock, worker, ready)`` in ``workers`` spawned processes until Ctrl-C / SIGTERM;
    ``announce()`` once all have put their number on ``ready``. 0 on a normal stop, 1 when a worker could
    not be kept running."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    procs: dict[int, Any] = {}
    deaths: dict[int, list[float]] = {i: [] for i in range(workers)}
    stopping = threading.Event()

    def start(i: int) -> None:
        p = ctx.Process(target=target, args=(options, sock, i, ready), name=f"mlatr-serve-{i}", daemon=False)
        p.start()
        procs[i] = p

    def forward_reload(_signum, _frame):
        for p in procs.values():
            if p.is_alive():
                os.kill(p.pid, RELOAD_SIGNAL)

    def stop(_signum, _frame):
        stopping.set()

    signal.signal(RELOAD_SIGNAL, forward_reload)
    # Ctrl-C and SIGTERM only set a flag the loop below checks every half second: no exception can land
    # inside the queue or a restart, and the workers are always stopped on the way out
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    for i in range(workers):
        start(i)
    code, loaded, announced = 0, set(), False
    try:
        while not stopping.is_set():
            try:
                loaded.add(ready.get(timeout=0.5))  # a worker has loaded its index
            except queue.Empty:
                pass
            if not announced and len(loaded) == workers:
                announce()
                announced = True
            if stopping.is_set():  # Ctrl-C reaches the workers too (one process group): not a death to restart
                break
            for i, p in list(procs.items()):
                if p.is_alive():
                    continue
                now = time.monotonic()
                deaths[i] = [t for t in deaths[i] if now - t < RESTART_WINDOW] + [now]
                if i not in loaded or len(deaths[i]) >= MAX_QUICK_DEATHS:  # never started, or keeps dying
                    print(f"mlatr serve: worker {i} exited with code {p.exitcode}"
                          + ("" if i not in loaded else f", {len(deaths[i])} times in {RESTART_WINDOW:.0f} s")
                          + "; stopping", file=sys.stderr, flush=True)
                    stopping.set()
                    code = 1
                    break
                print(f"mlatr serve: worker {i} exited with code {p.exitcode}; starting it again", file=sys.stderr,
                      flush=True)
                start(i)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for p in procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
