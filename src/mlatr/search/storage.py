"""Where an index lives, behind one interface: the tables it holds, and how they are read, searched and written.

An index is two tables of columns (:mod:`mlatr.search.columns`: its clips and their captions), the meta of how it
was made and the rows deleted since (:class:`Tables`). Where they are kept is a :class:`Storage`, chosen once,
when an index is opened or written (:func:`mlatr.search.storage_choice.open_storage`), and never asked about
again: every other module reads, searches and writes through these methods.

- :class:`MemoryStorage` (here): an index built or taken in memory (``Index.build``, ``index.live()``);
- :class:`~mlatr.search.shards.FolderStorage`: an index folder (append-only shards, tombstones, approximate
  search per shard);
- :class:`~mlatr.search.npz_index.NpzStorage`: the legacy single ``.npz`` file, rewritten whole;
- :class:`~mlatr.search.milvus.MilvusStorage`: a Milvus collection (milvus-lite file or server), the vectors
  searched there.

Adding a storage is one module with one subclass, listed in :data:`mlatr.search.storage_choice.STORAGES`; the
index behaviour tests run over every listed storage (``tests/test_index_storages.py``).

What a storage supplies, and its defaults here (the in-memory ones: exact search over whole arrays):

- reading: :meth:`Storage.exists`, :meth:`Storage.read` (the :class:`Tables`), :meth:`Storage.signature` (what
  changes when another process writes: a server's reload), :meth:`Storage.size`, :meth:`Storage.describe` and
  :meth:`Storage.summary` (what ``repr`` and ``mlatr index info`` say of it);
- searching: :meth:`Storage.searcher` (top-k over the clips' or the captions' vectors, deleted rows skipped),
  :meth:`Storage.moments` (the segments of the long clips, scored and searched: :mod:`mlatr.search.segments`),
  :meth:`Storage.text_ranker` (the source of a text query's candidates: :mod:`mlatr.search.hybrid`),
  :meth:`Storage.fusion_window`;
- writing: :meth:`Storage.check_output` (before a build encodes anything), :meth:`Storage.write` (a build's new
  rows, added or replacing), :meth:`Storage.replace` (``Index.save``, ``index compact``), :meth:`Storage.delete`,
  :meth:`Storage.record_meta` (one meta entry, the rows untouched).
  A storage that a writer lock guards takes it itself (:mod:`mlatr.writer_lock`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mlatr.errors import MlatrError
from mlatr.search.backends import BACKENDS, ShardedSearcher, make_backend
from mlatr.search.columns import CaptionColumns, ClipColumns, SegmentColumns
from mlatr.search.hybrid import TextRanker
from mlatr.search.segments import Segments, local_segments


@dataclass
class Tables:
    """What an index holds: its clips, their captions and the segments of its long clips
    (:mod:`mlatr.search.columns`; ``segments`` None: none), its ``meta`` and the clip rows deleted since they were
    written (tombstones: kept in the tables, never returned by a search)."""

    clips: ClipColumns
    captions: CaptionColumns
    meta: dict[str, Any] = field(default_factory=dict)
    deleted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    segments: SegmentColumns | None = None

    def __post_init__(self):
        if self.segments is None:
            self.segments = SegmentColumns.empty(self.clips.dim)

    def take(self, rows: Sequence[int] | np.ndarray) -> Tables:
        """The clips ``rows`` (in that order), their captions and segments, in memory, without tombstones."""
        rows = np.asarray(rows, np.int64)
        new_row = np.full(len(self.clips), -1, np.int64)
        new_row[rows] = np.arange(len(rows))
        caption_rows = np.flatnonzero(new_row[self.captions.clip] >= 0)
        return Tables(self.clips.take(rows), self.captions.take(caption_rows, new_row), dict(self.meta),
                      segments=self.segments.of_clips(new_row))

    def live(self) -> Tables:
        """The tables without their deleted rows (themselves when none is deleted); copied in memory."""
        if not len(self.deleted):
            return self
        return self.take(np.setdiff1d(np.arange(len(self.clips)), self.deleted))

    def live_rows(self) -> dict[str, int]:
        """id -> row of every clip not deleted (the latest row of an id encoded again)."""
        ids = self.clips.ids
        rows = dict(zip(ids, range(len(ids)), strict=True))  # the last row of each id
        stale = {ids[g] for g in self.deleted.tolist() if rows[ids[g]] == g}  # ids whose last row is deleted
        if stale:  # their latest live row, if any (one more pass, only then)
            gone = set(self.deleted.tolist())
            for cid in stale:
                del rows[cid]
            for i, cid in enumerate(ids):
                if cid in stale and i not in gone:
                    rows[cid] = i
        return rows

    def renewed_rows(self, drop: dict[str, int], new_ids: Sequence[str]) -> list[int]:
        """The live rows to delete when the clips ``new_ids`` are written: those of the ids in ``drop`` (encoded
        again, or their file gone) and of every id written again."""
        renewed = set(drop) | set(new_ids)
        return [row for cid, row in self.live_rows().items() if cid in renewed]

    def merged(self, part: Tables, drop: dict[str, int]) -> Tables:
        """These tables without their deleted rows and the rows of ``drop``'s ids (and of the ids ``part`` writes
        again), then ``part``, in memory; the meta is ``part``'s."""
        live = self.live()
        renewed = set(drop) | set(part.clips.ids)
        live = live.take([i for i, cid in enumerate(live.clips.ids) if cid not in renewed])
        dim = part.clips.dim
        return Tables(ClipColumns.concat([live.clips, part.clips], dim),
                      CaptionColumns.concat([live.captions, part.captions], [len(live.clips)], dim), part.meta,
                      segments=SegmentColumns.concat([live.segments, part.segments], [len(live.clips)], dim))


#: ``check(meta)``: refuses to add to an index made by another model or with other audio settings.
CheckMeta = Callable[[dict], None]


class Storage:
    """Where an index lives (module docstring). The defaults are an index held in memory: exact search over its
    whole arrays, nothing to read back or write."""

    #: the ``format`` ``mlatr index info`` reports
    format: ClassVar[str] = "memory"
    #: whether a build may be split over processes, each writing its part (``torchrun ... index build``)
    splits_over_processes: ClassVar[bool] = False

    def __init__(self, where: str | Path | None = None):
        self.where = where

    @classmethod
    def claims(cls, where: str | os.PathLike) -> bool:
        """Whether an index named ``where`` lives in this storage (:mod:`mlatr.search.storage_choice`)."""
        return False

    # ---- where it is --------------------------------------------------------------------------------------
    @property
    def path(self) -> Path | None:
        """The local file or folder of the index (None: in memory, or in a database)."""
        return None

    @property
    def local_file(self) -> Path | None:
        """The local file or folder holding the index (a report is written beside it): :attr:`path`, or a
        database's own file; None where the index is remote or in memory."""
        return self.path

    @property
    def single_file(self) -> bool:
        """Whether the index is one file (an output that must not be one of the build's inputs)."""
        return False

    def exists(self) -> bool:
        """Whether an index is there to read (a build with ``--add`` adds to it)."""
        return False

    @property
    def opens_in_several_processes(self) -> bool:
        """Whether several processes may hold it open at once (the workers of one server)."""
        return True

    def signature(self) -> tuple | None:
        """What changes when the index is written (a server polls it to reload); None: cannot tell."""
        return None

    def size(self) -> int:
        """Bytes the index takes where it lives (0 where that is not known)."""
        return 0

    # ---- reading ------------------------------------------------------------------------------------------
    def read(self) -> Tables:
        raise MlatrError(f"{self.where or 'the index'}: nothing to read (an index in memory)")

    def describe(self, tables: Tables) -> str:
        """Where the index lives, for its ``repr``."""
        return "in memory"

    def summary(self, tables: Tables) -> dict[str, Any]:
        """``format``, ``bytes`` and ``shards`` (name, rows, deleted, approximate structures) for ``index info``."""
        return {"format": self.format, "bytes": self.size(),
                "shards": [{"name": self._part_name(), "rows": len(tables.clips), "deleted": 0}]}

    def _part_name(self) -> str:
        return "memory"

    # ---- searching ----------------------------------------------------------------------------------------
    def searcher(self, tables: Tables, which: str, backend: str):
        """Top-k over the clips' (``audio``) or the captions' (``captions``) vectors, deleted rows skipped:
        exact (``backend`` numpy or faiss; ``auto`` is numpy here)."""
        check_backend(backend)
        emb = tables.clips.embeddings if which == "audio" else tables.captions.embeddings
        return ShardedSearcher([(0, emb.shape[0], make_backend(backend, emb))], deleted_of(tables, which))

    def moments(self, tables: Tables, backend: str) -> Segments | None:
        """The segments of the long clips, to score a clip's sound by its best one and to find clips by them
        (:mod:`mlatr.search.segments`; exact, ``backend`` numpy or faiss); None: the index holds none."""
        emb = tables.segments.embeddings
        return local_segments(tables.segments, len(tables.clips), tables.deleted,
                              [(0, emb.shape[0], make_backend("numpy" if backend == "auto" else backend, emb))])

    def fusion_window(self, tables: Tables, backend: str) -> int | None:
        """The window of a windowed text ranking (:class:`~mlatr.search.hybrid.TextRanker`); None: exact."""
        return None

    def text_ranker(self, tables: Tables, backend: str, window: int | None = None, searchers: tuple | None = None,
                    segments: Segments | None = None):
        """The source of a text query's candidates over the live clips (:mod:`mlatr.search.hybrid`): exact, or
        windowed with ``window`` (``searchers``: the audio and caption searchers the windows are found with);
        ``segments``: :meth:`moments`, whose best segment raises a clip's sound score."""
        keywords, stats = self.library(tables)
        return TextRanker(tables.clips.embeddings, tables.captions.embeddings, tables.captions.clip,
                          tables.captions.get("text"), tables.captions.get("lang"), tables.deleted, keywords=keywords,
                          stats=stats, window=window, searchers=searchers if window is not None else None,
                          segments=segments)

    def library(self, tables: Tables) -> tuple:
        """``(keywords, stats)``: the live rows' keyword index and library statistics where the storage keeps
        them; ``(None, None)``: the text ranker computes them from the rows."""
        return None, None

    # ---- writing ------------------------------------------------------------------------------------------
    def check_output(self) -> None:
        """Refuse a place a build could not write, before anything is encoded (and clear what a killed build
        of this place left behind)."""
        raise MlatrError("an index in memory is written with Index.save(PATH)")

    def write(self, part: Tables, *, add: bool, drop: dict[str, int], dtype: str, ann, check: CheckMeta | None
              ) -> int:
        """Write a build's new rows ``part``: with ``add`` and an index there, added to it (the rows of ``drop``'s
        ids and of the ids ``part`` writes again deleted; ``check(meta)`` of the index as read first), else
        replacing it; returns the bytes written."""
        raise MlatrError("an index in memory is written with Index.save(PATH)")

    def replace(self, tables: Tables, dtype: str = "float32", ann=None) -> None:
        """Replace whatever is there by ``tables`` (live rows only)."""
        raise MlatrError("an index in memory is written with Index.save(PATH)")

    def delete(self, ids: Sequence[str]) -> int:
        """Delete the clips ``ids`` (an unknown id is an error, nothing deleted); the count."""
        raise MlatrError("an index in memory has no stored rows to delete")

    def record_meta(self, key: str, value: Any) -> None:
        """Store ``value`` as the index meta's ``key`` where the index lives, its rows untouched (what an index
        measures of itself after a write: its "nothing relevant" level, :mod:`mlatr.search.abstention`). In
        memory there is nowhere else: the index's own meta holds it."""


class MemoryStorage(Storage):
    """An index built or taken in memory (the defaults of :class:`Storage`)."""


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise MlatrError(f"unknown search backend {backend!r} (choose from {', '.join(BACKENDS)})")


def deleted_of(tables: Tables, which: str) -> np.ndarray:
    """The deleted rows of the clips (``audio``) or of the captions of deleted clips (``captions``)."""
    if which == "audio":
        return tables.deleted
    return np.flatnonzero(np.isin(tables.captions.clip, tables.deleted))


def unknown_ids(tables: Tables, ids: Sequence[str], where: str) -> dict[str, int]:
    """id -> live row of each of ``ids``; an :class:`MlatrError` naming the unknown ones (nothing deleted)."""
    rows = tables.live_rows()
    unknown = [cid for cid in ids if cid not in rows]
    if unknown:
        raise MlatrError(f"{where}: no clip {', '.join(map(repr, unknown[:5]))}"
                         + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "") + "; nothing deleted")
    return {cid: rows[cid] for cid in ids}
