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
        *.offsets.npy             byte offset of each line of the two ``.jsonl`` files (a row is one seek)
        ann.faiss, ann.json       optional approximate-search structure of the shard (:mod:`mlatr.search.ann`)

A writer (under :func:`mlatr.writer_lock.writer_lock` on the folder) writes a new shard into a temporary
folder, renames it into place, then replaces ``index.json`` atomically: a reader sees the old manifest or
the new one, never a shard half written, and adding clips writes only the new shard and the small manifest.
A shard folder that no manifest names (a killed writer's) is removed by the next writer. Deleting a clip
records its row in its shard entry's ``deleted`` list (a tombstone): searches skip it; ``mlatr index
compact`` rewrites the live rows into one shard and drops the tombstones.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.errors import InputError, MlatrError
from mlatr.io_utils import atomic_write_json
from mlatr.json_input import expect_field, json_type, parse_json, read_format_json, read_json_file
from mlatr.stored_config import check_model_config

FORMAT = "mlatr-index-2"
MANIFEST = "index.json"
DTYPES = ("float32", "float16")


def is_index_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` is (or, not existing yet, will be) a sharded index folder: anything but ``.npz``."""
    path = Path(path)
    return path.is_dir() or (not path.exists() and path.suffix.lower() != ".npz")


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
    if "model_config" in meta:  # the model's config, copied for what the index reports (its text encoder)
        check_model_config(file, meta["model_config"], f"{where}.model_config".lstrip("."))
    if "caption_languages" in meta:
        expect_field(file, meta, "caption_languages", list, "a list of language codes", where=where,
                     test=lambda v: all(isinstance(x, str) for x in v), must="a list of strings")
    return meta


@dataclass
class Shard:
    """One shard as read: its arrays (memory-mapped) and lazy per-row metadata."""

    folder: Path
    embeddings: np.ndarray  # [n, d] memmap, float32 | float16
    caption_embeddings: np.ndarray  # [m, d]
    caption_clip: np.ndarray  # [m] int64, row within the shard
    ids: list[str]
    clips: JsonlColumn
    captions: JsonlColumn


#: Parsed rows a :class:`JsonlColumn` keeps: showing one search hit reads its clip's row for the path, the
#: captions and the recorded state, and a server shows the same clips again and again. Cleared when full.
ROW_MEMO = 4096


class JsonlColumn(Sequence):
    """Row ``i`` of a ``.jsonl`` file read on demand (one seek, one line parsed) through its offsets; the
    last :data:`ROW_MEMO` rows read are kept parsed (a shard's files never change), so a row is shared by
    its readers: do not change it."""

    def __init__(self, path: Path, offsets: np.ndarray):
        self.path, self.offsets = path, offsets  # offsets [n + 1] uint64
        self._memo: dict[int, object] = {}
        try:  # opened now: a compaction may remove the file while this reader still answers from it
            self._fh = open(path, "rb")  # noqa: SIM115 (kept open for the column's life)
        except OSError as exc:
            raise InputError(f"unreadable ({exc.strerror})", file=str(path)) from exc

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if isinstance(i, (int, np.integer)) and 0 <= i:
            row = self._memo.get(int(i))
            if row is None:
                row = self._read(i)
                if len(self._memo) >= ROW_MEMO:  # clear-when-full: no order to keep, safe for concurrent readers
                    self._memo.clear()
                self._memo[int(i)] = row
            return row
        return self._read(i)

    def _read(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        line = os.pread(self._fh.fileno(), end - start, start)
        return parse_json(line, str(self.path), line=i + 1, field=f"row {i}")


def _load_array(path: Path, ndim: int, dim: int | None = None) -> np.ndarray:
    if not path.is_file():
        raise InputError("missing: the shard is incomplete (rebuild the index, or restore the file)", file=str(path))
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as exc:  # ValueError / OSError / EOFError from a truncated or foreign file
        raise InputError(f"not a readable .npy array ({exc})", file=str(path)) from exc
    if arr.ndim != ndim or (dim is not None and arr.shape[1] != dim):
        want = f"[n, {dim}]" if ndim == 2 else "[n]"
        raise InputError(f"shape {list(arr.shape)}, expected {want}", file=str(path))
    kind = np.floating if ndim == 2 else np.integer
    if not np.issubdtype(arr.dtype, kind):
        raise InputError(f"{arr.dtype} values, expected {'floats' if ndim == 2 else 'integers'}", file=str(path))
    return arr


def read_shard(folder: Path, dim: int, entry: dict) -> Shard:
    """The shard in ``folder`` as the manifest ``entry`` describes it, checked against the manifest."""
    emb = _load_array(folder / "embeddings.npy", 2, dim)
    cap = _load_array(folder / "caption_embeddings.npy", 2, dim)
    cap_clip = _load_array(folder / "caption_clip.npy", 1)
    ids = read_json_file(folder / "ids.json")
    if not isinstance(ids, list) or not set(map(type, ids)) <= {str}:
        raise InputError("expected a JSON list of id strings", file=str(folder / "ids.json"))
    n, m = len(ids), cap.shape[0]
    if emb.shape[0] != n or entry.get("rows") != n:
        raise InputError(f"{emb.shape[0]} embeddings for {n} ids (the manifest says {entry.get('rows')})",
                         file=str(folder / "embeddings.npy"))
    if cap_clip.shape[0] != m or (m and (cap_clip.min() < 0 or cap_clip.max() >= n)):
        raise InputError(f"{cap_clip.shape[0]} rows for {m} caption embeddings, or a row outside 0..{n - 1}",
                         file=str(folder / "caption_clip.npy"))
    clip_off = _load_array(folder / "clips.offsets.npy", 1)
    cap_off = _load_array(folder / "captions.offsets.npy", 1)
    if len(clip_off) != n + 1 or len(cap_off) != m + 1:
        raise InputError(f"{len(clip_off) - 1} clip rows for {n} ids", file=str(folder / "clips.offsets.npy"))
    return Shard(folder=folder, embeddings=emb, caption_embeddings=cap, caption_clip=np.asarray(cap_clip, np.int64),
                 ids=ids, clips=JsonlColumn(folder / "clips.jsonl", clip_off),
                 captions=JsonlColumn(folder / "captions.jsonl", cap_off))


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
    for i, entry in enumerate(shards):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or "/" in entry["name"] \
                or entry["name"].startswith(".") or not isinstance(entry.get("rows"), int):
            raise _field_error(file, f"shards[{i}]", "expected an object with a name and a row count")
        deleted = entry.get("deleted", [])
        if not isinstance(deleted, list) or not all(isinstance(r, int) and 0 <= r < entry["rows"] for r in deleted):
            raise _field_error(file, f"shards[{i}].deleted", f"expected a list of rows in 0..{entry['rows'] - 1}")
        if "ann" in entry and not (isinstance(entry["ann"], dict) and isinstance(entry["ann"].get("params"), dict)
                                   and entry["ann"].get("kind") in ("hnsw", "ivfpq")):
            raise _field_error(file, f"shards[{i}].ann", "expected an object with kind (hnsw | ivfpq) and params")
    return manifest


# ---- writing (the caller holds the writer lock) -------------------------------------------------------
def _write_jsonl_with_offsets(path: Path, rows: Sequence[Any]) -> None:
    offsets = np.zeros(len(rows) + 1, np.uint64)
    with open(path, "wb") as fh:
        for i, row in enumerate(rows):
            fh.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
            offsets[i + 1] = fh.tell()
    np.save(path.with_suffix(".offsets.npy"), offsets)


def write_shard(folder: Path, seq: int, dtype: str, embeddings: np.ndarray, ids: Sequence[str],
                clip_rows: Sequence[dict], caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                caption_rows: Sequence[dict], ann=None, name: str | None = None) -> dict:
    """Write one shard into ``folder`` (a temporary name, renamed when complete); its manifest entry.

    ``ann`` (a callable ``(shard_folder, embeddings) -> dict``) builds the shard's approximate-search
    structure inside the temporary folder and returns what the manifest records of it. ``name``: the
    shard's folder name (default ``shard-SEQ-RANDOM``).
    """
    name = name or f"shard-{seq:06d}-{uuid.uuid4().hex[:6]}"
    tmp = folder / f".{name}.tmp"
    tmp.mkdir(parents=True)
    try:
        np.save(tmp / "embeddings.npy", np.ascontiguousarray(embeddings, dtype))
        np.save(tmp / "caption_embeddings.npy", np.ascontiguousarray(caption_embeddings, dtype))
        np.save(tmp / "caption_clip.npy", np.asarray(caption_clip, np.int64))
        (tmp / "ids.json").write_text(json.dumps(list(ids), ensure_ascii=False), encoding="utf-8")
        _write_jsonl_with_offsets(tmp / "clips.jsonl", clip_rows)
        _write_jsonl_with_offsets(tmp / "captions.jsonl", caption_rows)
        entry: dict[str, Any] = {"name": name, "rows": len(ids), "captions": int(len(caption_clip))}
        if ann is not None and len(ids):
            found = ann(tmp, np.load(tmp / "embeddings.npy", mmap_mode="r"))
            if found:
                entry["ann"] = found
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, folder / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return entry


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


class RowStack:
    """Several ``[n_i, d]`` arrays read as one ``[sum n_i, d]`` without copying them (``np.asarray`` copies)."""

    def __init__(self, parts: Sequence[np.ndarray], dim: int, dtype=np.float32):
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [p.shape[0] for p in self.parts])
        self.shape = (int(self.starts[-1]), dim)
        self.dtype = np.dtype(self.parts[0].dtype if self.parts else dtype)
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = np.concatenate(self.parts) if self.parts else np.zeros(self.shape, self.dtype)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            key = int(key) + (self.shape[0] if key < 0 else 0)
            p = int(np.searchsorted(self.starts, key, side="right")) - 1
            return self.parts[p][key - self.starts[p]]
        return np.asarray(self)[key]


class ShardColumn(Sequence):
    """One field of every shard's rows (``path``, ``captions``, ``lang``, ...) as one read-on-demand list."""

    def __init__(self, columns: Sequence[JsonlColumn], key: str):
        self.columns, self.key = list(columns), key
        self.starts = np.cumsum([0] + [len(c) for c in self.columns])
        self._starts = [int(x) for x in self.starts]  # plain ints: bisect per row read, no numpy scalar work

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = self._starts[-1]
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        p = bisect.bisect_right(self._starts, i) - 1
        local = i - self._starts[p]
        row = self.columns[p][local]
        if not isinstance(row, dict) or self.key not in row:
            raise InputError(f"row {local} has no {self.key!r}", file=str(self.columns[p].path))
        return row[self.key]
