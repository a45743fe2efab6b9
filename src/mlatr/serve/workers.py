"""``mlatr serve --workers N``: N server processes answering on one listening socket.

One server process runs its Python on one core at a time (the GIL), so its requests per second stop at the
CPU one request costs (HTTP, the query's embedding, ranking, the JSON answer). N processes, each with its
own model and the same memory-mapped index (the vectors' pages are shared through the page cache), answer
up to N times as many on N free cores, as ``uvicorn --workers`` or gunicorn do.

The supervisor (this module, in the process ``mlatr serve`` started) binds the socket, starts the workers
(``spawn``: each imports and loads everything itself, no state forked from a half-started parent), prints
"serving at" once every worker has loaded its index, restarts a worker that dies, and stops them all on
Ctrl-C or SIGTERM. The kernel hands each new connection to one worker. A worker that keeps dying (its
:data:`MAX_QUICK_DEATHS` th death within :data:`RESTART_WINDOW` seconds) is started again after a delay that
doubles each time (up to :data:`MAX_BACKOFF` seconds) while the others keep serving; the server stops only
when a worker cannot load its index at start-up, or when every worker keeps dying.

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
#: A worker that dies this many times within RESTART_WINDOW seconds is started again only after a delay.
MAX_QUICK_DEATHS, RESTART_WINDOW = 3, 30.0
#: The longest delay before a worker that keeps dying is started again (the delay doubles from 2 s).
MAX_BACKOFF = 60.0


def restart_delay(deaths: int) -> float:
    """Seconds to wait before starting again a worker that died ``deaths`` times within :data:`RESTART_WINDOW`:
    none for the first deaths, then 2, 4, 8, ... up to :data:`MAX_BACKOFF`."""
    if deaths < MAX_QUICK_DEATHS:
        return 0.0
    return min(MAX_BACKOFF, 2.0 ** (deaths - MAX_QUICK_DEATHS + 1))


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
    ``announce()`` once all have put their number on ``ready``. 0 on a normal stop, 1 when a worker could not
    load at start-up or every worker keeps dying (a worker that keeps dying while others serve is started
    again after :func:`restart_delay`)."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    procs: dict[int, Any] = {}  # None while a worker waits out its restart delay
    due: dict[int, float] = {}
    deaths: dict[int, list[float]] = {i: [] for i in range(workers)}
    stopping = threading.Event()

    def start(i: int) -> None:
        p = ctx.Process(target=target, args=(options, sock, i, ready), name=f"mlatr-serve-{i}", daemon=False)
        p.start()
        procs[i] = p

    def forward_reload(_signum, _frame):
        for p in procs.values():
            if p is not None and p.is_alive():
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
            now = time.monotonic()
            for i, p in list(procs.items()):
                if p is None:
                    if now >= due[i]:  # its delay is over
                        start(i)
                    continue
                if p.is_alive():
                    continue
                deaths[i] = [t for t in deaths[i] if now - t < RESTART_WINDOW] + [now]
                if i not in loaded:  # it never loaded its index: the index or the options are wrong
                    print(f"mlatr serve: worker {i} exited with code {p.exitcode} before it had loaded; stopping",
                          file=sys.stderr, flush=True)
                    stopping.set()
                    code = 1
                    break
                delay = restart_delay(len(deaths[i]))
                print(f"mlatr serve: worker {i} exited with code {p.exitcode}"
                      + (f", {len(deaths[i])} times in {RESTART_WINDOW:.0f} s; starting it again in {delay:.0f} s "
                         "(the other workers keep serving)" if delay else "; starting it again"),
                      file=sys.stderr, flush=True)
                procs[i], due[i] = None, now + delay
            alive = [p for p in procs.values() if p is not None and p.is_alive()]
            if not stopping.is_set() and not alive and all(len(d) >= MAX_QUICK_DEATHS for d in deaths.values()):
                print(f"mlatr serve: every worker keeps dying ({MAX_QUICK_DEATHS} times in {RESTART_WINDOW:.0f} s); "
                      "stopping", file=sys.stderr, flush=True)
                stopping.set()
                code = 1
    finally:
        running = [p for p in procs.values() if p is not None]
        for p in running:
            if p.is_alive():
                p.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        for p in running:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
