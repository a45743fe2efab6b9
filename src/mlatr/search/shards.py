"""The sharded index folder (``mlatr-index-2``): append-only shards, a manifest written last, tombstones.

An index folder (``mlatr index build -o LIB.idx``) holds::

    index.json            the manifest: format, dim, dtype, the build's meta (checkpoint, model config, audio
                          settings, ...), the list of shards (name, rows, deleted rows, ANN structure)
    shard-000000-xxxxxx/  one build or one ``--add``, written once and never changed:
        embeddings.npy            [n, d] float32 or float16, unit norm: loaded memory-mapped
        caption_embeddings.npy    [m, d] same dtype;  caption_clip.npy [m] int64 (row within the shard)
        ids.json                  the clips' ids (the only per-clip column read whole, for the id -> row map)
        clips.jsonl               per clip: path, captions, state (size, mtime of the audio when encoded)
        captions.jsonl            per caption: lang, text
        segment_embeddings.npy    optional, the segments of the shard's long clips (:mod:`mlatr.search.segments`):
        segment_clip.npy,         [s, d] same dtype; the clip row (within the shard) of each; its start and end
        segment_times.npy         in the clip's file (seconds, [s, 2] float64)
        *.offsets.npy             byte offset of each line of the two ``.jsonl`` files (a row is one seek)
        ann.faiss, ann.json       optional approximate-search structure of the shard (:mod:`mlatr.search.ann`)
        caption_ann.faiss, .json  the same over the shard's caption embeddings
        moments.npz, keywords.*   what text queries need of the library: the sums of the shard's embeddings and
                                  its captions' keyword counts (:mod:`mlatr.search.shard_stats`)

A writer (under :func:`mlatr.writer_lock.writer_lock` on the folder) writes a new shard into a temporary
folder, renames it into place, then replaces ``index.json`` atomically: a reader sees the old manifest or
the new one, never a shard half written, and adding clips writes only the new shard and the small manifest.
A shard folder that no manifest names (a killed writer's) is removed by the next writer. Deleting a clip
records its row in its shard entry's ``deleted`` list (a tombstone): searches skip it; ``mlatr index
compact`` rewrites the live rows into one shard and drops the tombstones.

:class:`FolderStorage` is this format as a :class:`~mlatr.search.storage.Storage`: its shards memory-mapped and
searched one by one (exactly, or through a shard's approximate structure), the text ranking's library statistics
read from what each shard stores, the windowed text ranking's window measured when the folder is written
(:mod:`mlatr.search.fused_recall`), and a build split over processes written as one shard per process.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.errors import InputError, MissingFileError, MlatrError
from mlatr.file_state import file_signature
from mlatr.io_utils import atomic_write_json, disk_full_named
from mlatr.json_input import expect_field, json_type, read_format_json
from mlatr.output_paths import check_output_path
from mlatr.search import shard_stats
from mlatr.search.ann import AnnBuild, AnnSearcher
from mlatr.search.backends import ShardedSearcher, make_backend
from mlatr.search.columns import (
    CaptionColumns,
    ClipColumns,
    SegmentColumns,
    check_finite_rows,
    check_unit_rows,
    check_vectors,
)
from mlatr.search.fused_recall import DEFAULT_WINDOW, measure_fused_recall
from mlatr.search.segments import local_segments, sound_searcher
from mlatr.search.shard_stats import write_shard_stats
from mlatr.search.storage import CheckMeta, Storage, Tables, check_backend, deleted_of, unknown_ids
from mlatr.stored_config import check_model_config
from mlatr.writer_lock import writer_lock

FORMAT = "mlatr-index-2"
MANIFEST = "index.json"
DTYPES = ("float32", "float16")
#: Rows of each shard whose norm and finiteness are checked when a folder is loaded.
LOAD_CHECK_ROWS = 1024


def refuse_foreign_folder(path: Path) -> None:
    """Refuse to write an index into an existing folder that holds other things than an index (a writer
    would mix its shards with someone's files)."""
    if not path.is_dir() or (path / MANIFEST).is_file():
        return
    other = sorted(p.name for p in path.iterdir() if not p.name.startswith((".", "shard-")))
    if other:
        raise MlatrError(f"{path}: a folder holding other files ({', '.join(other[:3])}"
                         f"{', ...' if len(other) > 3 else ''}), not an mlatr index; give a new name for the index")


# ---- reading ------------------------------------------------------------------------------------------
def _field_error(file: Path, field: str, message: str) -> InputError:
    return InputError(message, file=str(file), field=field)


_REBUILD = "a damaged index: rebuild it with mlatr index build"


def check_meta(file: Path, meta: Any, where: str = "") -> dict:
    """Refuse an index meta whose fields have the wrong types (``FILE: FIELD: message``); ``where``: the
    meta's own place in the file (``meta`` in a folder's manifest)."""
    if not isinstance(meta, dict):
        raise _field_error(file, where or "meta", f"expected an object, found {json_type(meta)}")
    ckpt = expect_field(file, meta, "checkpoint", dict, "an object with path and sha256", where=where, hint=_REBUILD)
    for key in ("path", "sha256"):
        expect_field(file, ckpt, key, str, "a string", where=f"{where}.checkpoint".lstrip("."), hint=_REBUILD)
    expect_field(file, ckpt, "weights_sha256", str, "a string", where=f"{where}.checkpoint".lstrip("."),
                 required=False)
    expect_field(file, meta, "sample_rate", int, "an integer (Hz)", where=where, test=lambda v: v > 0, must="> 0",
                 hint=_REBUILD)
    expect_field(file, meta, "max_seconds", (int, float), "a number (seconds)", where=where, test=lambda v: v > 0,
                 must="> 0", hint=_REBUILD)
    if meta.get("window_seconds") is not None:
        expect_field(file, meta, "window_seconds", (int, float), "a number (seconds)", where=where,
                     test=lambda v: v > 0, must="> 0")
    if meta.get("segments") is not None:  # how long clips were cut (mlatr.search.segments)
        cut = expect_field(file, meta, "segments", dict, "an object with seconds, hop and above", where=where)
        for key in ("seconds", "hop", "above"):
            expect_field(file, cut, key, (int, float), "a number (seconds)", where=f"{where}.segments".lstrip("."),
                         test=lambda v: v > 0, must="> 0")
    if "model_config" in meta:  # the model's config, copied for what the index reports (its text encoder)
        check_model_config(file, meta["model_config"], f"{where}.model_config".lstrip("."))
    if "caption_languages" in meta:
        expect_field(file, meta, "caption_languages", list, "a list of language codes", where=where,
                     test=lambda v: all(isinstance(x, str) for x in v), must="a list of strings")
    return meta


@dataclass
class Shard:
    """One shard as read: its manifest entry, its clips, captions and segments (vectors memory-mapped, column
    values read per row on demand: :mod:`mlatr.search.columns`)."""

    folder: Path
    entry: dict
    clips: ClipColumns
    captions: CaptionColumns
    segments: SegmentColumns


def read_shard(folder: Path, dim: int, entry: dict) -> Shard:
    """The shard in ``folder`` as the manifest ``entry`` describes it, checked against the manifest."""
    clips = ClipColumns.load(folder, dim)
    if entry.get("rows") != len(clips):
        raise InputError(f"{len(clips)} clips, the manifest says {entry.get('rows')}", file=str(folder / "ids.json"))
    return Shard(folder, entry, clips, CaptionColumns.load(folder, dim, len(clips)),
                 SegmentColumns.load(folder, dim, len(clips)))


def read_folder(path: Path) -> tuple[dict, list[Shard]]:
    """The manifest and the shards of the index folder ``path``; each shard's vectors are checked (finite,
    unit norm) on a sample of :data:`LOAD_CHECK_ROWS` rows (loading must not read a million rows)."""
    manifest = read_manifest(path)
    shards = [read_shard(path / e["name"], manifest["dim"], e) for e in manifest["shards"]]
    for shard in shards:
        n = len(shard.clips)
        if n:
            rows = np.unique(np.linspace(0, n - 1, min(n, LOAD_CHECK_ROWS)).astype(np.int64))
            sample = shard.clips.take(rows)
            where = f"{shard.folder / ClipColumns.VECTORS}"
            check_finite_rows(sample.embeddings, sample.ids, where)
            check_unit_rows(sample.embeddings, sample.ids, where)
    return manifest, shards


def read_manifest(folder: str | os.PathLike) -> dict:
    """The folder's ``index.json``, its types checked (``FILE: FIELD: message`` on a wrong one)."""
    file = Path(folder) / MANIFEST
    if not file.is_file():
        raise MlatrError(f"{folder}: not an mlatr index folder (no {MANIFEST}; build one with mlatr index build)")
    manifest = read_format_json(file, FORMAT, "an mlatr index folder's manifest")
    expect_field(file, manifest, "dim", int, "an integer", test=lambda v: v > 0, must="> 0", hint=_REBUILD)
    expect_field(file, manifest, "dtype", str, "a string", test=lambda v: v in DTYPES, must=" or ".join(DTYPES),
                 hint=_REBUILD)
    check_meta(file, expect_field(file, manifest, "meta", dict, "an object", hint=_REBUILD), "meta")
    shards = expect_field(file, manifest, "shards", list, "a list of shard entries", hint=_REBUILD)
    names: set[str] = set()
    for i, entry in enumerate(shards):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "/" in entry["name"] \
                or entry["name"].startswith(".") or not isinstance(entry.get("rows"), int):
            raise _field_error(file, f"shards[{i}]", "expected an object with a name and a row count")
        if entry["name"] in names:  # its clips would be found, and answered, twice
            raise _field_error(file, f"shards[{i}]", f"shard {entry['name']!r} is listed twice")
        names.add(entry["name"])
        deleted = entry.get("deleted", [])
        if not isinstance(deleted, list) or not all(isinstance(r, int) and 0 <= r < entry["rows"] for r in deleted):
            raise _field_error(file, f"shards[{i}].deleted", f"expected a list of rows in 0..{entry['rows'] - 1}")
        for key in ("ann", "caption_ann"):
            if key in entry and not (isinstance(entry[key], dict) and isinstance(entry[key].get("params"), dict)
                                     and entry[key].get("kind") in ("hnsw", "ivfpq")):
                raise _field_error(file, f"shards[{i}].{key}", "expected an object with kind (hnsw | ivfpq) and params")
    return manifest


# ---- writing (the caller holds the writer lock) -------------------------------------------------------
def write_shard(folder: Path, seq: int, dtype: str, clips: ClipColumns, captions: CaptionColumns, ann=None,
                name: str | None = None, segments: SegmentColumns | None = None) -> dict:
    """Write one shard of ``clips``, ``captions`` and ``segments`` (``.clip``: rows of ``clips``) into ``folder``
    (a temporary name, renamed when complete); its manifest entry.

    ``ann`` (a callable ``(shard_folder, embeddings, name) -> dict``: :class:`~mlatr.search.ann.AnnBuild`) builds
    the shard's approximate-search structures (``ann`` over the clips, ``caption_ann`` over the captions)
    inside the temporary folder and returns what the manifest records of each. The shard's stored statistics
    are written with it (:func:`~mlatr.search.shard_stats.write_shard_stats`). ``name``: the shard's folder
    name (default ``shard-SEQ-RANDOM``).
    """
    name = name or f"shard-{seq:06d}-{uuid.uuid4().hex[:6]}"
    tmp = folder / f".{name}.tmp"
    tmp.mkdir(parents=True)
    try:
        clips.save(tmp, dtype)
        captions.save(tmp, dtype)
        entry: dict[str, Any] = {"name": name, "rows": len(clips), "captions": len(captions)}
        if segments is not None and len(segments):
            segments.save(tmp, dtype)
            entry["segments"] = len(segments)
        audio = np.load(tmp / ClipColumns.VECTORS, mmap_mode="r")
        caption_vectors = np.load(tmp / CaptionColumns.VECTORS, mmap_mode="r")
        write_shard_stats(tmp, audio, caption_vectors, captions.get("text"), captions.get("lang"))
        for key, vectors in (("ann", audio), ("caption_ann", caption_vectors)):
            found = ann(tmp, vectors, key) if ann is not None and len(vectors) else None
            if found:
                entry[key] = found
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, folder / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entry


def write_folder(output: Path, clips: ClipColumns, captions: CaptionColumns, meta: dict, dtype: str = "float32",
                 ann=None, segments: SegmentColumns | None = None) -> None:
    """Write an index folder of one shard (no deleted rows); its manifest replaces the folder's previous one
    and the previous shards are removed."""
    if dtype not in DTYPES:
        raise MlatrError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    refuse_foreign_folder(output)
    output.mkdir(parents=True, exist_ok=True)
    try:
        old = read_manifest(output) if (output / MANIFEST).exists() else None
    except MlatrError:
        old = None  # replaced whole: a damaged previous manifest does not matter
    entry = write_shard(output, next_seq(old), dtype, clips, captions, ann, segments=segments)
    manifest = {"format": FORMAT, "dim": clips.dim, "dtype": dtype,
                "meta": {k: v for k, v in meta.items() if k not in ("format", "dim")}, "shards": [entry]}
    write_manifest(output, manifest)
    remove_unlisted(output, manifest)


def add_shard(output: Path, manifest: dict, clips: ClipColumns, captions: CaptionColumns, deleted: Sequence[int],
              source: str | None, ann=None, segments: SegmentColumns | None = None) -> None:
    """One more shard of ``clips`` in the folder ``output`` whose ``manifest`` was read under the writer lock
    (nothing written when ``clips`` is empty), the global rows ``deleted`` marked deleted (clips encoded
    again or gone) and ``source`` (the manifest file the rows came from) recorded; the manifest written last."""
    remove_unlisted(output, manifest)
    mark_deleted(manifest, deleted)
    if len(clips):
        manifest["shards"].append(write_shard(output, next_seq(manifest), manifest["dtype"], clips, captions, ann,
                                              segments=segments))
    manifest["meta"] = dict(manifest["meta"], manifest=source)
    write_manifest(output, manifest)


def next_seq(manifest: dict | None) -> int:
    """The sequence number of the next shard (one more than the manifest's highest)."""
    found = [int(e["name"].split("-")[1]) for e in (manifest or {}).get("shards", [])
             if e["name"].split("-")[1:2] and e["name"].split("-")[1].isdigit()]
    return 1 + max(found, default=-1)


def mark_deleted(manifest: dict, rows: Sequence[int]) -> None:
    """Record the global ``rows`` as deleted in the manifest entries of the shards that hold them."""
    first = 0
    for entry in manifest["shards"]:
        mine = [r - first for r in rows if first <= r < first + entry["rows"]]
        if mine:
            entry["deleted"] = sorted(set(entry.get("deleted", [])) | set(mine))
        first += entry["rows"]


def write_manifest(folder: Path, manifest: dict) -> None:
    """Replace ``index.json`` atomically (the last step of every write)."""
    atomic_write_json(folder / MANIFEST, manifest, indent=1)


def remove_unlisted(folder: Path, manifest: dict | None) -> list[str]:
    """Remove shard folders no manifest names (left by a killed or superseded writer); their names."""
    keep = {e["name"] for e in (manifest or {}).get("shards", [])}
    gone = []
    for p in folder.iterdir():
        is_shard = p.name.startswith("shard-") or (p.name.startswith(".shard-") and p.name.endswith(".tmp"))
        if p.is_dir() and is_shard and p.name not in keep:
            shutil.rmtree(p, ignore_errors=True)
            gone.append(p.name)
    return gone


def bytes_of(folder: Path) -> int:
    """Total size of the files under ``folder``."""
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


class FolderStorage(Storage):
    """An index folder (module docstring). :attr:`shards`: the shards as last read."""

    format = FORMAT
    splits_over_processes = True

    def __init__(self, where: str | os.PathLike):
        super().__init__(Path(where))
        self.shards: list[Shard] = []

    @classmethod
    def claims(cls, where: str | os.PathLike) -> bool:
        """Any local name the other storages do not claim (a folder, or a new name not ending in ``.npz``)."""
        return True

    @property
    def path(self) -> Path:
        return self.where

    def exists(self) -> bool:
        return (self.where / MANIFEST).is_file()

    def signature(self) -> tuple | None:
        return file_signature(self.where / MANIFEST)  # replaced last by every write

    def size(self) -> int:
        return bytes_of(self.where) if self.where.is_dir() else 0

    # ---- reading ------------------------------------------------------------------------------------------
    def read(self) -> Tables:
        if not self.where.is_dir():
            raise MissingFileError(self.where, "an index: the folder or .npz file mlatr index build writes")
        manifest, self.shards = read_folder(self.where)
        dim, counts = manifest["dim"], [len(s.clips) for s in self.shards]
        starts = np.cumsum([0, *counts])
        deleted = [np.zeros(0, np.int64)] + [starts[i] + np.asarray(s.entry.get("deleted", []), np.int64)
                                             for i, s in enumerate(self.shards)]
        return Tables(ClipColumns.stack([s.clips for s in self.shards], dim),
                      CaptionColumns.stack([s.captions for s in self.shards], counts, dim),
                      dict(manifest["meta"], dim=dim, dtype=manifest["dtype"]), np.concatenate(deleted),
                      SegmentColumns.stack([s.segments for s in self.shards], counts, dim))

    def describe(self, tables: Tables) -> str:
        kinds = sorted({(s.entry.get("ann") or {}).get("kind", "exact") for s in self.shards})
        return f"{len(self.shards)} shard{'s' * (len(self.shards) != 1)}, {'/'.join(kinds)}"

    def summary(self, tables: Tables) -> dict:
        shards = [{"name": s.entry["name"], "rows": s.entry["rows"], "deleted": len(s.entry.get("deleted", [])),
                   **{key: s.entry[key] for key in ("ann", "caption_ann") if s.entry.get(key)}} for s in self.shards]
        return {"format": self.format, "bytes": self.size(), "shards": shards}

    # ---- searching ----------------------------------------------------------------------------------------
    def searcher(self, tables: Tables, which: str, backend: str):
        """One searcher per shard: its approximate structure with backend ``auto`` where it has one, else exact."""
        check_backend(backend)
        parts, first = [], 0
        key = "ann" if which == "audio" else "caption_ann"
        for shard in self.shards:
            emb = shard.clips.embeddings if which == "audio" else shard.captions.embeddings
            if backend == "auto" and shard.entry.get(key):
                searcher = AnnSearcher.open(shard.folder, emb, shard.entry[key])
            else:
                searcher = make_backend(backend, emb)
            parts.append((first, emb.shape[0], searcher))
            first += emb.shape[0]
        return ShardedSearcher(parts, deleted_of(tables, which))

    def moments(self, tables: Tables, backend: str):
        """The segments of the folder's shards, searched shard by shard (exactly)."""
        exact = "numpy" if backend == "auto" else backend
        parts, first = [], 0
        for shard in self.shards:
            emb = shard.segments.embeddings
            parts.append((first, emb.shape[0], make_backend(exact, emb)))
            first += emb.shape[0]
        return local_segments(tables.segments, len(tables.clips), tables.deleted, parts)

    def fusion_window(self, tables: Tables, backend: str) -> int | None:
        """The window the folder's build recorded (or :data:`~mlatr.search.fused_recall.DEFAULT_WINDOW`) where a
        shard has an approximate structure and the backend is ``auto``; else None (exact)."""
        if backend != "auto" or not any(s.entry.get("ann") or s.entry.get("caption_ann") for s in self.shards):
            return None
        return int(tables.meta.get("fusion", {}).get("window", DEFAULT_WINDOW))

    def library(self, tables: Tables) -> tuple:
        """The keyword index and library statistics of the live rows, combined from what each shard stores
        (:mod:`mlatr.search.shard_stats`)."""
        gone = np.zeros(len(tables.clips), bool)
        gone[tables.deleted] = True
        caption_gone = gone[np.asarray(tables.captions.clip)]
        return (shard_stats.keyword_index(self.shards, ~caption_gone),
                shard_stats.library_stats(self.shards, gone, caption_gone))

    # ---- writing ------------------------------------------------------------------------------------------
    def check_output(self) -> None:
        check_output_path(self.where, "output", folder=None)
        refuse_foreign_folder(self.where)  # the folder is made when the first rows are written

    def write(self, part: Tables, *, add: bool, drop: dict[str, int], dtype: str, ann, check: CheckMeta | None
              ) -> int:
        """A new folder (replacing the previous one's shards), or one more shard (``add``), under the writer lock;
        the text ranking's window measured for a new folder."""
        refuse_foreign_folder(self.where)
        # a new folder is made by the lock, and removed with it when the write fails before anything is in it
        with writer_lock(self.where, "index", wait=True, folder=True), \
                disk_full_named(self.where, "the index is as it was before this write"):
            before = bytes_of(self.where)
            current = self.read() if add and self.exists() else None
            if current is not None and check is not None:
                check(current.meta)
            if current is None:
                remove_unlisted(self.where, None)
                self.replace(part, dtype, ann)
            else:
                add_shard(self.where, read_manifest(self.where), part.clips, part.captions,
                          current.renewed_rows(drop, part.clips.ids), part.meta.get("manifest"), ann or AnnBuild(),
                          part.segments)
            return max(0, bytes_of(self.where) - before)

    def replace(self, tables: Tables, dtype: str = "float32", ann=None) -> None:
        """A folder of one shard of the live rows, its text ranking's window measured (the caller holds the writer
        lock where another process could write it)."""
        live = tables.live()
        check_vectors(live.clips, live.captions, f"{self.where}: ", unit_captions=False, segments=live.segments)
        meta = {k: v for k, v in live.meta.items() if k != "fusion"}  # measured again for the new folder
        write_folder(self.where, live.clips, live.captions, meta, dtype, ann or AnnBuild(), live.segments)
        self.measure_fusion()

    def measure_fusion(self) -> None:
        """Choose and record the windowed text ranking's window of the folder as written
        (:func:`~mlatr.search.fused_recall.measure_fused_recall`), where its ranking is windowed."""
        tables = self.read()
        if self.fusion_window(tables, "auto") is None:
            return
        segments = self.moments(tables, "auto")
        searchers = (sound_searcher(self.searcher(tables, "audio", "auto"), segments),
                     self.searcher(tables, "captions", "auto"))
        record = measure_fused_recall(tables, lambda w: self.text_ranker(tables, "auto", w, searchers, segments))
        if record is not None:
            manifest = read_manifest(self.where)
            manifest["meta"]["fusion"] = record
            write_manifest(self.where, manifest)

    def record_meta(self, key: str, value) -> None:
        """The manifest's meta ``key``, under the writer lock."""
        with writer_lock(self.where, "index", wait=True):
            manifest = read_manifest(self.where)
            manifest["meta"][key] = value
            write_manifest(self.where, manifest)

    def delete(self, ids) -> int:
        """Tombstones in the manifest, under the writer lock."""
        with writer_lock(self.where, "index", wait=True):
            tables = self.read()
            gone = sorted(set(unknown_ids(tables, ids, str(self.where)).values()))
            manifest = read_manifest(self.where)
            mark_deleted(manifest, gone)
            write_manifest(self.where, manifest)
        return len(gone)

    # ---- a build split over processes (mlatr.search.rank_build) --------------------------------------------
    def write_part(self, name: str, part: Tables, dtype: str, ann) -> dict:
        """One process's part of a split build as the shard folder ``name`` (complete or absent); its entry."""
        self.where.mkdir(parents=True, exist_ok=True)
        return write_shard(self.where, 0, dtype, part.clips, part.captions, ann, name=name, segments=part.segments)

    def merge_parts(self, entries: Sequence[dict], drop: dict[str, int], meta: dict, dim: int, dtype: str) -> int:
        """Append the parts ``entries`` (written by :meth:`write_part`, in rank order) to the folder under its
        writer lock: the rows of ``drop``'s ids and of the ids the parts write again are marked deleted (but rows
        of the parts themselves, when a resumed merge finds them listed already), the manifest written last;
        a new folder's text ranking window measured as a one-process build's is. Returns the parts' bytes."""
        names = {e["name"] for e in entries}
        with writer_lock(self.where, "index", wait=True):
            there = self.exists()
            manifest = read_manifest(self.where) if there else {
                "format": FORMAT, "dim": dim, "dtype": dtype,
                "meta": {k: v for k, v in meta.items() if k not in ("format", "dim")}, "shards": []}
            listed = {e["name"] for e in manifest["shards"]}
            if there:
                current = self.read()
                new_ids = [i for e in entries for i in ClipColumns.load(self.where / e["name"], dim).ids]
                owner = np.repeat([s.folder.name for s in self.shards], [len(s.clips) for s in self.shards])
                mark_deleted(manifest, [row for row in current.renewed_rows(drop, new_ids) if owner[row] not in names])
            manifest["shards"] += [e for e in entries if e["name"] not in listed]
            manifest["meta"] = dict(manifest["meta"], manifest=meta.get("manifest"))
            write_manifest(self.where, manifest)
            if not there:
                self.measure_fusion()
        return sum(bytes_of(self.where / e["name"]) for e in entries)
