"""A search index: a model's audio embeddings of a sound library, with ids, paths and captions.

An :class:`Index` is two tables of columns (:mod:`mlatr.search.columns`): its clips (embedding, id, audio
path, captions, the audio file's state when encoded) and their captions (embedding, clip row, language,
text), the meta of how it was made (the model's checkpoint, the SHA-256 of its file and of its weights:
:mod:`mlatr.inference.model_identity`; audio settings, caption languages:
:func:`mlatr.search.library_encoding.index_meta`) and the rows deleted since (tombstones: kept in the tables, never
returned by a search). Every embedding is finite and of unit norm: building, saving or
loading an index with a NaN, infinite or non-unit row is an error naming the file and the clips (a search
would rank such rows arbitrarily, FAISS drops them, and a non-unit row's score is no cosine).

Where an index lives:

- a folder (``mlatr-index-2``, any output not ending in ``.npz``): append-only shards, memory-mapped on
  load, deletions kept as tombstones (:mod:`mlatr.search.shards`; approximate search: :mod:`mlatr.search.ann`);
- one ``.npz`` (``mlatr-index-1``), rewritten whole on every change (:mod:`mlatr.search.npz_index`);
- Milvus (``milvus:PATH.db``, ``milvus://HOST:PORT/COLLECTION``: :mod:`mlatr.search.milvus`): the tables'
  columns read here, the vectors searched there.

Writing one: :mod:`mlatr.search.build` (``build_index``, ``write_rows``, ``delete_clips``, under the writer
lock); what a build encodes: :mod:`mlatr.search.build_plan`; searching one: :mod:`mlatr.search.search`.
A hit whose file has been deleted or changed since it was encoded is reported (:meth:`Index.stale`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlatr import api_args
from mlatr.errors import MlatrError
from mlatr.file_state import file_state
from mlatr.inference import LoadedModel, load_model
from mlatr.inference.library import LibrarySource, open_library
from mlatr.inference.model_identity import check_index_model, model_sha256
from mlatr.model_registry import default_model, resolve_model
from mlatr.search import milvus, npz_index, shard_stats
from mlatr.search import shards as shard_files
from mlatr.search.ann import AnnBuild, AnnSearcher
from mlatr.search.backends import BACKENDS, ShardedSearcher, make_backend
from mlatr.search.columns import CaptionColumns, ClipColumns, check_vectors
from mlatr.search.fused_recall import DEFAULT_WINDOW, measure_fused_recall
from mlatr.search.hybrid import TextRanker
from mlatr.search.library_encoding import EncodeSettings, build_settings, encode_clips, index_meta
from mlatr.search.search import search_audio, search_text


class _Column:
    """An :class:`Index` attribute that is one column of one of its tables: ``index.paths`` reads (and an
    assignment replaces) ``index.clip_columns["path"]``."""

    def __init__(self, table: str, key: str):
        self.table, self.key = table, key

    def __get__(self, index, owner=None):
        return self if index is None else getattr(index, self.table).get(self.key)

    def __set__(self, index, value) -> None:
        getattr(index, self.table).set(self.key, value)


@dataclass
class Index:
    """Audio embeddings of a library and what is needed to search them (see the module docstring)."""

    clip_columns: ClipColumns
    caption_columns: CaptionColumns
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    backend: str = "auto"
    #: rows deleted (tombstones): kept in the tables, never returned by a search
    deleted_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the folder's shards (their manifest entries and tables), for an index loaded from a folder
    shards: list[shard_files.Shard] = field(default_factory=list, repr=False)
    _model: Any = field(default=None, repr=False)
    _searchers: dict[str, Any] = field(default_factory=dict, repr=False)

    # ---- the columns (read and written through the tables) ------------------------------------------
    embeddings = _Column("clip_columns", "embeddings")  # [N, d] unit norm (a folder's: memory-mapped)
    ids = _Column("clip_columns", "ids")
    paths = _Column("clip_columns", "path")
    captions = _Column("clip_columns", "captions")  # per clip, {language: [caption | None]}
    states = _Column("clip_columns", "state")  # per clip, its audio's size and mtime when encoded (None: not recorded)
    caption_embeddings = _Column("caption_columns", "embeddings")  # [M, d]
    caption_clip = _Column("caption_columns", "clip")  # [M] int64: the row of the clip each caption describes
    caption_lang = _Column("caption_columns", "lang")
    caption_text = _Column("caption_columns", "text")

    def __repr__(self) -> str:
        """One line: ``Index(1,481 clips, 2 shards, hnsw, model=runs/demo-real/model.pt)``, not its columns."""
        if self.backend == "milvus":
            where = "milvus"
        elif self.shards:
            kinds = sorted({(s.entry.get("ann") or {}).get("kind", "exact") for s in self.shards})
            where = f"{len(self.shards)} shard{'s' * (len(self.shards) != 1)}, {'/'.join(kinds)}"
        else:
            where = "one file" if self.path else "in memory"
        deleted = f" ({len(self.deleted_rows):,} deleted)" if len(self.deleted_rows) else ""
        model = (self.meta.get("checkpoint") or {}).get("path", "?")
        return f"Index({len(self):,} clips{deleted}, {where}, dim {self.dim}, model={model})"

    @property
    def shard_entries(self) -> list[dict]:
        return [s.entry for s in self.shards]

    def __len__(self) -> int:
        """Clips a search can return (rows not deleted)."""
        return len(self.ids) - len(self.deleted_rows)

    @property
    def dim(self) -> int:
        return self.clip_columns.dim

    # ---- rows ---------------------------------------------------------------------------------------
    def take(self, rows: Sequence[int] | np.ndarray) -> Index:
        """The clips ``rows`` (in that order) and their captions, in memory, without tombstones."""
        rows = np.asarray(rows, np.int64)
        new_row = np.full(len(self.ids), -1, np.int64)
        new_row[rows] = np.arange(len(rows))
        cap_rows = np.flatnonzero(new_row[self.caption_clip] >= 0)
        return Index(self.clip_columns.take(rows), self.caption_columns.take(cap_rows, new_row), dict(self.meta),
                     path=self.path, backend=self.backend, _model=self._model)

    def live(self) -> Index:
        """This index without its deleted rows (itself when none is deleted); tables copied in memory."""
        if not len(self.deleted_rows):
            return self
        return self.take(np.setdiff1d(np.arange(len(self.ids)), self.deleted_rows))

    def stale(self, row: int) -> str | None:
        """``"deleted"`` or ``"changed"`` when clip ``row``'s audio is gone or differs from when it was
        encoded (size or mtime), else None (also when nothing was recorded)."""
        recorded = self.states[row]
        if recorded is None:
            return None
        now = file_state(self.paths[row])
        if now is None:
            return "deleted"
        return "changed" if now != recorded else None

    # ---- persistence -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, dtype: str = "float32", ann: AnnBuild | None = None) -> Path:
        """Write the index's live rows: one ``.npz`` atomically when ``path`` ends in ``.npz``, else a new
        index folder of one shard (``dtype`` float32 | float16; ``ann``: how its approximate structure is
        built, default by size) whose manifest replaces the folder's previous one. Returns the path.
        The caller holds the writer lock of ``path`` where another process could write it."""
        path = Path(path)
        live = self.live()
        check_vectors(live.clip_columns, live.caption_columns, f"{path}: ", unit_captions=False)
        if shard_files.is_index_folder(path):
            meta = {k: v for k, v in live.meta.items() if k != "fusion"}  # measured again for the new folder
            shard_files.write_folder(path, live.clip_columns, live.caption_columns, meta, dtype, ann or AnnBuild())
            measure_fused_recall(Index.load(path))
        else:
            npz_index.write_npz(path, live.clip_columns, live.caption_columns, live.meta)
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, backend: str = "auto", model: LoadedModel | None = None,
             allow_other_model: bool = False) -> Index:
        """Read an index written by :meth:`save` / ``mlatr index build`` (a folder, an ``.npz`` or a Milvus
        target); ``backend`` = auto (a shard's approximate structure where it has one, else exact) | numpy |
        faiss (both exact).

        ``model`` (a :class:`~mlatr.inference.LoadedModel`) is used for queries instead of loading the index's
        checkpoint; it must be the model that made the index (its weights' SHA-256: another seed or epoch of
        the same config is refused, naming both) unless ``allow_other_model``
        (:func:`~mlatr.inference.model_identity.check_index_model`).
        """
        if model is not None:
            api_args.instance("model", model, LoadedModel, "mlatr.load(PATH), or None")
        index = cls._read(api_args.path("path", path), backend, model)
        if model is not None:
            check_index_model(index.meta, model, str(path), allow_other_model)
        return index

    @classmethod
    def _read(cls, path: str, backend: str, model: LoadedModel | None) -> Index:
        """:meth:`load`'s reading of the index at ``path``, ``model`` taken as it is."""
        if milvus.is_milvus(path):
            lib = milvus.read_milvus(str(path))
            index = cls(lib.clips, lib.captions, {k: v for k, v in lib.meta.items() if k != "format"},
                        backend="milvus", _model=model)
            index._searchers.update(audio=lib.audio, captions=lib.caption_search, text=lib.ranker)
            return index
        if backend not in BACKENDS:
            raise MlatrError(f"unknown search backend {backend!r} (choose from {', '.join(BACKENDS)})")
        path = Path(path)
        if path.is_dir():
            manifest, shards = shard_files.read_folder(path)
            dim, counts = manifest["dim"], [len(s.clips) for s in shards]
            starts = np.cumsum([0, *counts])
            deleted = [np.zeros(0, np.int64)] + [starts[i] + np.asarray(s.entry.get("deleted", []), np.int64)
                                                 for i, s in enumerate(shards)]
            return cls(ClipColumns.stack([s.clips for s in shards], dim),
                       CaptionColumns.stack([s.captions for s in shards], counts, dim),
                       dict(manifest["meta"], dim=dim, dtype=manifest["dtype"]), path=path, backend=backend,
                       deleted_rows=np.concatenate(deleted), shards=shards, _model=model)
        if not path.is_file():
            raise MlatrError(f"index not found: {path}")
        clips, captions, meta = npz_index.read_npz(path)
        return cls(clips, captions, meta, path=path, backend=backend, _model=model)

    @classmethod
    def build(cls, model: LoadedModel, source: LibrarySource, *, split: str = "all",
              caption_languages: Sequence[str] | None = None, batch_size: int = 16, max_seconds: float | None = None,
              window_seconds: float | None = None, skip_bad: bool = False, progress: bool = True,
              workers: int = 1) -> Index:
        """An index of the library ``source`` (a folder of sounds, a manifest file or :class:`Manifest`, sound
        files, webdataset shards, or a list of these: :func:`mlatr.inference.library.open_library`, the forms
        ``mlatr index build`` takes) embedded by ``model``, in memory (:meth:`save` writes it). Options as
        :func:`mlatr.search.build.build_index` (``workers``: processes reading and encoding the audio); unreadable
        clips are an error unless ``skip_bad``."""
        api_args.instance("model", model, LoadedModel, "mlatr.load(PATH)")
        batch_size = api_args.integer("batch_size", batch_size)
        max_seconds = api_args.positive_number("max_seconds", max_seconds)
        window_seconds = api_args.positive_number("window_seconds", window_seconds)
        skip_bad, progress = api_args.flag("skip_bad", skip_bad), api_args.flag("progress", progress)
        workers = max(1, api_args.integer("workers", workers, low=0))
        if caption_languages is not None:
            caption_languages = api_args.language_codes("caption_languages", caption_languages)
        library = open_library(source, split=api_args.text("split", split), skip_bad=skip_bad, progress=progress)
        manifest = library.manifest
        sample_rate, max_seconds, window_seconds = build_settings(model, max_seconds, window_seconds, None)
        langs = list(caption_languages) if caption_languages else manifest.languages()
        meta = index_meta(model, manifest, sample_rate, max_seconds, langs, window_seconds)
        how = EncodeSettings(sample_rate, max_seconds, window_seconds, batch_size, skip_bad, progress, library.shards,
                             workers=workers)
        clips, captions, _ = encode_clips(model, manifest, manifest.clips, langs, how)
        return cls(clips, captions, meta, _model=model)

    # ---- queries (implemented in mlatr.search.search) ----------------------------------------------
    def searcher(self, which: str = "audio"):
        """The backend over the clip (``audio``) or caption (``captions``) embeddings, built once: one per
        shard for a folder (a shard's approximate structure with backend ``auto``), deleted rows skipped."""
        if which not in self._searchers:
            self._searchers[which] = self._make_searcher(which)
        return self._searchers[which]

    def _make_searcher(self, which: str):
        if which == "audio":
            deleted = self.deleted_rows
        else:  # the captions of deleted clips
            deleted = np.flatnonzero(np.isin(self.caption_clip, self.deleted_rows))
        if not self.shards:
            emb = self.embeddings if which == "audio" else self.caption_embeddings
            return ShardedSearcher([(0, emb.shape[0], make_backend(self.backend, emb))], deleted)
        parts, first = [], 0
        key = "ann" if which == "audio" else "caption_ann"
        for shard in self.shards:
            emb = shard.clips.embeddings if which == "audio" else shard.captions.embeddings
            if self.backend == "auto" and shard.entry.get(key):
                searcher = AnnSearcher.open(shard.folder, emb, shard.entry[key])
            else:
                searcher = make_backend(self.backend, emb)
            parts.append((first, emb.shape[0], searcher))
            first += emb.shape[0]
        return ShardedSearcher(parts, deleted)

    def text_ranker(self, window: int | None = None) -> TextRanker:
        """Caption and keyword ranking of the index's clips for text queries (:mod:`mlatr.search.hybrid`),
        built once. A folder's keyword index and library statistics are read from its shards
        (:mod:`mlatr.search.shard_stats`). The ranking is windowed (each source's top ``window`` found by its
        searcher, approximate at scale: :class:`~mlatr.search.hybrid.TextRanker`) where a shard has an
        approximate structure (``--ann``) and the backend is ``auto``, with the window the build chose
        (:func:`~mlatr.search.fused_recall.measure_fused_recall`); else exact. ``window``: force a windowed
        ranking with this window (a new ranker, not kept)."""
        if window is None and "text" in self._searchers:
            return self._searchers["text"]
        keywords = stats = None
        if self.shards:
            gone = np.zeros(len(self.ids), bool)
            gone[self.deleted_rows] = True
            caption_gone = gone[np.asarray(self.caption_clip)]
            keywords = shard_stats.keyword_index(self.shards, ~caption_gone)
            stats = shard_stats.library_stats(self.shards, gone, caption_gone)
        chosen = window if window is not None else self.fusion_window()
        searchers = (self.searcher("audio"), self.searcher("captions")) if chosen is not None else None
        ranker = TextRanker(self.embeddings, self.caption_embeddings, self.caption_clip, self.caption_text,
                            self.caption_lang, self.deleted_rows, keywords=keywords, stats=stats, window=chosen,
                            searchers=searchers)
        if window is None:
            self._searchers["text"] = ranker
        return ranker

    def fusion_window(self) -> int | None:
        """The window of a windowed text ranking (:meth:`text_ranker`): the one the build recorded, or
        :data:`~mlatr.search.fused_recall.DEFAULT_WINDOW`; None (exact) where no shard has an approximate
        structure or the backend is forced."""
        windowed = self.backend == "auto" and any(e.get("ann") or e.get("caption_ann") for e in self.shard_entries)
        if not windowed:
            return None
        return int(self.meta.get("fusion", {}).get("window", DEFAULT_WINDOW))

    def model(self) -> LoadedModel:
        """The model that made the embeddings (loaded from the index's checkpoint on first use)."""
        if self._model is None:
            self._model = load_index_model(self.meta, str(self.path or "the index"))
        return self._model

    def search_text(self, query: str, lang: str | None = "eng", k: int = 10, rank: str = "hybrid",
                    min_relevance: float | None = None):
        """Clips for a text query in ``lang`` (ISO 639-3; ``None`` where the model does not read it), best
        first: :class:`~mlatr.search.search.Results`, a list of :class:`~mlatr.search.search.Hit` that says
        ``nothing_relevant`` when no hit reaches ``min_relevance`` (default: the relevance model's threshold);
        ``rank`` = hybrid | audio | captions (:mod:`mlatr.search.hybrid`)."""
        return search_text(self, query, lang, k, rank, min_relevance)

    def search_audio(self, path: str | os.PathLike, k: int = 10, min_relevance: float | None = None):
        """Clips for a sound query (a file), best first: :class:`~mlatr.search.search.Results` as
        :meth:`search_text` answers, each hit saying ``same_audio`` where the clip is the query's own sound;
        the indexed captions nearest to it (sound-to-caption) in the list's ``caption_hits``.
        ``min_relevance`` as for :meth:`search_text` (default: the sound-query model's threshold)."""
        return search_audio(self, path, k, min_relevance)

    def summary(self, check: bool = False) -> dict[str, Any]:
        """What ``mlatr index info`` prints: counts, format, shards with their approximate structure and
        measured recall, the model (its file's path and SHA-256, its weights' SHA-256 where recorded: what a search
        checks its model against) and audio settings; ``check``: clips whose audio is deleted or changed."""
        path = self.path
        folder = bool(self.shards)
        info: dict[str, Any] = {
            "format": shard_files.FORMAT if folder else milvus.FORMAT if self.backend == "milvus" else npz_index.FORMAT,
            "clips": len(self), "deleted": len(self.deleted_rows),
            "captions": len(self.caption_text), "dim": self.dim, "dtype": self.meta.get("dtype", "float32"),
            "bytes": (shard_files.bytes_of(path) if folder else path.stat().st_size) if path else 0,  # milvus: 0
            "checkpoint": self.meta["checkpoint"]["path"], "checkpoint_sha256": self.meta["checkpoint"].get("sha256"),
            "weights_sha256": self.meta["checkpoint"].get("weights_sha256"), "sample_rate": self.meta["sample_rate"],
            "max_seconds": self.meta["max_seconds"], "caption_languages": self.meta.get("caption_languages", []),
            "shards": [{"name": e["name"], "rows": e["rows"], "deleted": len(e.get("deleted", [])),
                        **{key: e[key] for key in ("ann", "caption_ann") if e.get(key)}} for e in self.shard_entries]
            or [{"name": path.name if path else self.backend if self.backend == "milvus" else "memory",
                 "rows": len(self.ids), "deleted": 0}]}
        if self.fusion_window() is not None and self.meta.get("fusion"):
            info["fusion"] = self.meta["fusion"]
        if check:
            gone = set(self.deleted_rows.tolist())
            stale: dict[str, list[str]] = {"deleted": [], "changed": []}
            for row in range(len(self.ids)):
                why = None if row in gone else self.stale(row)
                if why:
                    stale[why].append(self.ids[row])
            info["stale"] = stale
        return info


def load_index_model(meta: dict[str, Any], where: str, device: str = "cpu") -> LoadedModel:
    """The model an index's ``meta`` records (``checkpoint``: ``{"path", "sha256", "weights_sha256"}``); refuses
    a file whose bytes changed. When that file is gone, the default model (``$MLATR_MODEL`` or the nearest
    ``mlatr.toml``: :mod:`mlatr.model_registry`) is used if there is one, checked against the index's weights
    digest (:func:`~mlatr.inference.model_identity.check_index_model`)."""
    checkpoint = meta["checkpoint"]
    path = checkpoint["path"]
    if not Path(path).exists():
        if default_model() is None:
            raise MlatrError(f"the index's model {path} is gone; the index needs its model to encode queries "
                             "(a moved model: give --model PATH, set $MLATR_MODEL, or Index.load(..., "
                             "model=mlatr.load(PATH)))")
        loaded = load_model(resolve_model(None).path, device)
        check_index_model(meta, loaded, where)
        return loaded
    if model_sha256(path) != checkpoint["sha256"]:
        raise MlatrError(f"checkpoint {path} changed since the index was built (sha256 differs): "
                         "rebuild the index with mlatr index build")
    return load_model(path, device)
