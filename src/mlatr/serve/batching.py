"""Micro-batching of concurrent text queries: embedded in one encoder call and searched in one backend call.

A text encoder embeds a batch of queries in little more time than one (a transformer's cost per call is
mostly fixed overhead at query lengths), and the model lock lets one call run at a time. Answering each
request alone therefore caps a server at one encoder call per request. :class:`TextBatcher` puts each
request's query (checked where it entered: :func:`mlatr.search.query.text_query`) in a queue; one worker
thread takes whatever has arrived, waits at most ``max_wait_ms`` more for a fuller batch (never past
``max_batch``), translates the queries the index translates (:meth:`~mlatr.search.index.Index.translate_queries`,
outside the lock), embeds the batch and the translations with :meth:`~mlatr.search.index.Index.embed_queries` and
:meth:`~mlatr.search.index.Index.embed_translations` under
:attr:`LiveIndex.lock`, ranks the batch with one :meth:`~mlatr.search.index.Index.rank_texts` call (the
sound-ranked queries through one searcher call, the others through one product with each embedding matrix),
and hands each request its own :class:`~mlatr.search.results.Results`. A lone request
waits at most ``max_wait_ms``; under load the batches fill and the per-query cost falls toward the
encoder's batched rate.

Requests of one batch are grouped by the index snapshot they started on, so a reload between two
requests never mixes indexes. An error (a bug, a bad embedding) fails only the requests of its group.

:meth:`TextBatcher.search` blocks its thread until the answer is there; :meth:`TextBatcher.search_async`
awaits it on the caller's event loop instead (the worker hands the answer over with
``call_soon_threadsafe``), so the HTTP server waits on concurrent queries without a thread each: with 50
clients, a thread per waiting request spent more time taking turns on the GIL than the queries took.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from mlatr.search.query import TextQuery
from mlatr.search.results import Results

#: Most queries embedded in one call.
MAX_BATCH = 64
#: Longest a query waits for others to join its batch (milliseconds).
MAX_WAIT_MS = 2.0


@dataclass
class _Pending:
    snap: object
    query: TextQuery
    notify: Callable[[], None]  # called by the worker once hits or error is set
    hits: Results | None = None
    error: BaseException | None = None

    def result(self) -> Results:
        if self.error is not None:
            raise self.error
        return self.hits


class TextBatcher:
    """Embeds and searches concurrent text queries of a :class:`~mlatr.serve.live_index.LiveIndex` together."""

    def __init__(self, live, max_batch: int = MAX_BATCH, max_wait_ms: float = MAX_WAIT_MS):
        self.live, self.max_batch, self.max_wait = live, int(max_batch), float(max_wait_ms) / 1e3
        self._queue: list[_Pending] = []
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self.batches = 0
        self.queries = 0

    def search(self, snap, query: TextQuery) -> Results:
        """The best clips of ``snap``'s index for a checked ``query``
        (:meth:`~mlatr.search.index.Index.search_query`, embedded and ranked with the queries around it)."""
        done = threading.Event()
        item = self._pending(snap, query, done.set)
        done.wait()
        return item.result()

    async def search_async(self, snap, query: TextQuery) -> Results:
        """:meth:`search` awaited on the running event loop (no thread waits for the answer)."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def resolve() -> None:
            if not done.done():  # a request cancelled meanwhile (its client went away) wants nothing
                done.set_result(None)

        def notify() -> None:
            try:
                loop.call_soon_threadsafe(resolve)
            except RuntimeError:  # the loop was closed (server shutdown): nobody is waiting
                pass

        item = self._pending(snap, query, notify)
        await done
        return item.result()

    def _pending(self, snap, query: TextQuery, notify) -> _Pending:
        """Queue ``query`` for the worker (started when needed); its :class:`_Pending`."""
        item = _Pending(snap, query, notify)
        with self._cond:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="mlatr-text-batcher", daemon=True)
                self._worker.start()
            self._queue.append(item)
            self._cond.notify_all()
        return item

    def _take(self) -> list[_Pending]:
        with self._cond:
            while not self._queue:
                self._cond.wait()
            if len(self._queue) < self.max_batch:  # let others join, briefly
                self._cond.wait_for(lambda: len(self._queue) >= self.max_batch, timeout=self.max_wait)
            batch, self._queue = self._queue[:self.max_batch], self._queue[self.max_batch:]
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            groups: dict[int, list[_Pending]] = {}
            for item in batch:
                groups.setdefault(id(item.snap), []).append(item)
            self.batches += 1  # counted before the answers wake their requests
            self.queries += len(batch)
            for items in groups.values():
                self._answer(items)

    def _answer(self, items: list[_Pending]) -> None:
        snap = items[0].snap
        try:
            queries = [i.query for i in items]
            translated = snap.index.translate_queries(queries)  # no encoder call: outside the lock
            with self.live.lock:
                vectors = snap.index.embed_queries(queries)
                translations = snap.index.embed_translations(translated)
                self.live.bound_text_cache(snap)
            found = snap.index.rank_texts(vectors, queries, translations)  # one pass of the batch
            for item, hits in zip(items, found, strict=True):
                item.hits = hits
        except BaseException as exc:  # handed to the waiting requests, which answer it as an error
            for item in items:
                item.error = exc
        finally:
            for item in items:
                item.notify()
