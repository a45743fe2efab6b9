"""Micro-batching of concurrent text queries: embedded in one encoder call and searched in one backend call.

A text encoder embeds a batch of queries in little more time than one (a transformer's cost per call is
mostly fixed overhead at query lengths), and the model lock lets one call run at a time. Answering each
request alone therefore caps a server at one encoder call per request. :class:`TextBatcher` puts each
request's checked query in a queue; one worker thread takes whatever has arrived, waits at most
``max_wait_ms`` more for a fuller batch (never past ``max_batch``), embeds the batch with
:func:`~mlatr.search.search.encode_query_texts` under :attr:`LiveIndex.lock`, ranks every query with one
:func:`~mlatr.search.search.search_vectors` call, and hands each request its own hits. A lone request
waits at most ``max_wait_ms``; under load the batches fill and the per-query cost falls toward the
encoder's batched rate.

Requests of one batch are grouped by the index snapshot they started on, so a reload between two
requests never mixes indexes. An error (a bug, a bad embedding) fails only the requests of its group.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from mlatr.search.hybrid import check_rank
from mlatr.search.search import Hit, check_query_text, encode_query_texts, rank_text, search_vectors, sound_evidence

#: Most queries embedded in one call.
MAX_BATCH = 64
#: Longest a query waits for others to join its batch (milliseconds).
MAX_WAIT_MS = 2.0


@dataclass
class _Pending:
    snap: object
    query: str
    lang: str | None
    k: int
    rank: str = "hybrid"
    done: threading.Event = field(default_factory=threading.Event)
    hits: list[Hit] | None = None
    error: BaseException | None = None


class TextBatcher:
    """Embeds and searches concurrent text queries of a :class:`~mlatr.serve.live_index.LiveIndex` together."""

    def __init__(self, live, max_batch: int = MAX_BATCH, max_wait_ms: float = MAX_WAIT_MS):
        self.live, self.max_batch, self.max_wait = live, int(max_batch), float(max_wait_ms) / 1e3
        self._queue: list[_Pending] = []
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self.batches = 0
        self.queries = 0

    def search(self, snap, query: str, lang: str | None, k: int, rank: str = "hybrid") -> list[Hit]:
        """The ``k`` best clips of ``snap``'s index for ``query`` in ``lang`` ranked by ``rank``
        (:func:`~mlatr.search.search.search_text`; checked here: an empty query, a missing required
        language or an unknown rank raises :class:`~mlatr.errors.MlatrError` at once)."""
        lang = check_query_text(snap.index, query, lang)
        check_rank(rank)
        item = _Pending(snap, query, lang, int(k), rank)
        with self._cond:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._run, name="mlatr-text-batcher", daemon=True)
                self._worker.start()
            self._queue.append(item)
            self._cond.notify_all()
        item.done.wait()
        if item.error is not None:
            raise item.error
        return item.hits

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
            for items in groups.values():
                self._answer(items)
            self.batches += 1
            self.queries += len(batch)

    def _answer(self, items: list[_Pending]) -> None:
        snap = items[0].snap
        try:
            with self.live.lock:
                vectors = encode_query_texts(snap.index, [i.query for i in items], [i.lang for i in items])
                self.live.bound_text_cache(snap)
            by_sound = [j for j, i in enumerate(items) if i.rank == "audio"]
            found = search_vectors(snap.index, vectors[by_sound], [items[j].k for j in by_sound]) if by_sound else []
            for j, hits in zip(by_sound, found, strict=True):
                items[j].hits = sound_evidence(hits)
            for j, item in enumerate(items):
                if item.rank != "audio":  # captions and keywords: per query, on the batch's embeddings
                    item.hits = rank_text(snap.index, vectors[j], item.query, item.k, item.rank)
        except BaseException as exc:  # handed to the waiting requests, which answer it as an error
            for item in items:
                item.error = exc
        finally:
            for item in items:
                item.done.set()
