"""The index a server answers from: loaded once with its model, replaced whole when its file changes.

:class:`LiveIndex` holds one :class:`Snapshot` (the :class:`~mlatr.search.Index` with its model loaded,
an id -> row map, the query languages the model accepts). A request takes the current snapshot and
keeps it to its end, so a reload never changes an answer half-way. :meth:`LiveIndex.reload` reads the
index again (``POST /reload``); :meth:`LiveIndex.start_watch` polls the identity (inode, size, mtime) of
the index's file (an index folder's ``index.json``) and reloads when it changes: ``mlatr index build
--add`` replaces that file atomically (``os.replace``) after writing the rest, so a poll never sees half
an index. A Milvus target has no file: the poll asks it which writes it holds (each build, add and delete
appends its statistics last, under a new id), so another process's add or delete is picked up the same way.

A reload that fails (a corrupt or foreign file) keeps the previous snapshot and records the error; when
no snapshot was ever loaded (a corrupt index at start-up), :meth:`LiveIndex.current` raises
:class:`IndexUnavailable` with that error until a reload succeeds. The model is kept when the new file
names the same checkpoint (path and SHA-256), so picking up ``--add`` re-reads the index only (an
index folder's shards are memory-mapped: a reload maps them again, it does not read their vectors).

Model calls go through :attr:`LiveIndex.lock`: the encoders keep state (an embedding cache, torch
modules) that is not made for concurrent calls.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mlatr.audio.io import audio_duration
from mlatr.errors import MissingFileError, MlatrError
from mlatr.inference.model_identity import OtherModelError
from mlatr.models.protocols import QueryLanguages, query_languages
from mlatr.search.index import Index
from mlatr.search.query import TextQuery
from mlatr.search.storage_choice import open_storage

log = logging.getLogger("mlatr.serve")

#: The frozen text encoders memoise every text they embed; a server clears that memo past this many
#: entries so that a stream of distinct queries cannot grow it without bound (one entry holds one
#: embedding, a few KiB at most).
TEXT_CACHE_LIMIT = 20_000


class IndexUnavailable(MlatrError):
    """No index is loaded (it could not be read at start-up, nor since)."""


@dataclass
class Snapshot:
    """One loaded index with its model; never changed after loading except the duration memo."""

    index: Index
    rows: dict[str, int]
    languages: QueryLanguages
    signature: tuple | None  # LiveIndex.signature() when loaded
    loaded_at: float
    _durations: dict[int, float | None] = field(default_factory=dict, repr=False)

    def duration(self, row: int) -> float | None:
        """Seconds of clip ``row``'s audio file (read from its header once), ``None`` if unreadable."""
        if row not in self._durations:
            self._durations[row] = audio_duration(self.index.paths[row])
        return self._durations[row]


class LiveIndex:
    """The index file at ``path`` as served: see the module docstring."""

    def __init__(self, path: str | os.PathLike, backend: str = "auto", model=None, allow_other_model: bool = False):
        self.path = Path(path)
        self.storage = open_storage(path)  # what it is polled through (a file's identity, a Milvus target's writes)
        self.backend = backend
        self.model = model  # a LoadedModel given with --model: used instead of the index's recorded checkpoint
        self.allow_other_model = allow_other_model  # --allow-other-model: the given model even if not the index's
        self.lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self.snapshot: Snapshot | None = None
        self.error: str | None = None
        self.reloads = 0
        self._tried: tuple | None = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None

    def current(self) -> Snapshot:
        """The snapshot to answer from; :class:`IndexUnavailable` when none could be loaded."""
        snap = self.snapshot
        if snap is None:
            raise IndexUnavailable(f"no index loaded: {self.error}")
        return snap

    def reload(self) -> Snapshot:
        """Read the file now and swap it in; on failure keep the old snapshot, record and raise the error."""
        with self._reload_lock:
            try:
                signature = self._tried = self.signature()
                snap = self._load(signature)
            except Exception as exc:  # a half-copied or foreign file must not stop the server
                if not isinstance(exc, MlatrError):  # a bug: its details go to the log, not to a client
                    log.exception("reloading %s failed", self.path)
                self.error = str(exc) if isinstance(exc, MlatrError) else f"{self.path}: could not be loaded (an " \
                    "unexpected error, written to the server's log)"
                if isinstance(exc, MlatrError):
                    raise
                raise MlatrError(self.error) from exc
            self.snapshot, self.error = snap, None
            self.reloads += 1
            return snap

    def _load(self, signature) -> Snapshot:
        old = self.snapshot
        if signature is None and self.storage.path is not None:
            raise MissingFileError(self.path, "an index: the folder or .npz file mlatr index build writes")
        source = self.storage.where
        keep = self.model or (old.index.model() if old is not None else None)
        try:
            index = Index.load(source, backend=self.backend, model=keep, allow_other_model=self.allow_other_model)
        except OtherModelError:
            if self.model is not None:  # the given model does not fit the new index: keep serving the old one
                raise
            index = Index.load(source, backend=self.backend)  # another model: its own checkpoint
        with ThreadPoolExecutor(1) as pool:  # the ANN files are read (FAISS frees the GIL) while the model loads
            opened = pool.submit(lambda: (index.searcher("audio"), index.searcher("captions")))
            model = index.model()  # loads and checks the checkpoint now, not at the first query
            languages = query_languages(model.model.text_encoder)
            warm = TextQuery("warm-up", languages.known[0] if languages.required else None, 1, translate=False)
            if model is not keep:  # a first query warms the encoder up (a frozen encoder's first call is slow)
                with self.lock:
                    warm_vec = index.embed_queries([warm])
            opened.result()
        if model is not keep:  # and the ranking, once the searchers are open (no model call: outside the lock)
            index.rank_texts(warm_vec, [warm])
        return Snapshot(index=index, rows=index.tables.live_rows(), languages=languages,
                        signature=signature, loaded_at=time.time())

    def bound_text_cache(self, snap: Snapshot) -> None:
        """Clear the text encoder's embedding memo past :data:`TEXT_CACHE_LIMIT` entries (call under ``lock``)."""
        cache = getattr(snap.index.model().model.text_encoder, "cache", None)
        if cache is not None and len(cache) > TEXT_CACHE_LIMIT:
            cache.clear()

    def signature(self):
        """What identifies the index's present state (its storage's: an index folder's manifest or a file's
        identity, a Milvus target's writes: another process's ``--add`` or delete changes it)."""
        return self.storage.signature()

    def changed(self) -> bool:
        """True when the index is not the one last loaded or tried (a Milvus target that cannot be asked now:
        False, logged; the next poll asks again)."""
        try:
            return self.signature() != self._tried
        except MlatrError as exc:
            log.warning("cannot check %s for changes: %s", self.path, exc)
            return False

    def reload_if_changed(self) -> bool:
        """One poll of the watch: reload when the file changed; errors are logged, not raised."""
        if not self.changed():
            return False
        try:
            snap = self.reload()
        except MlatrError as exc:
            log.warning("index %s changed but could not be reloaded: %s", self.path, exc)
            return False
        log.info("reloaded %s: %d clips", self.path, len(snap.index))
        return True

    def start_watch(self, every: float) -> None:
        """Poll the file every ``every`` seconds in a daemon thread (``stop_watch`` ends it)."""
        if every <= 0 or self._watcher is not None:
            return
        self._stop.clear()

        def run():
            while not self._stop.wait(every):
                self.reload_if_changed()

        self._watcher = threading.Thread(target=run, name="mlatr-index-watch", daemon=True)
        self._watcher.start()

    def stop_watch(self) -> None:
        if self._watcher is not None:
            self._stop.set()
            self._watcher.join(timeout=10)
            self._watcher = None
