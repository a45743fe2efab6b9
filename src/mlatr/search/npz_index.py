"""The single-file index (``mlatr-index-1``, an output ending in ``.npz``), rewritten whole on every change.

Arrays: ``embeddings [N, d]`` float32 unit norm (the clips' ``DualEncoder.encode_audio(...).pooled``, ATRI
sec. 3.1: projected and L2-normalised, so inner product = cosine, eq. 1), ``caption_embeddings [M, d]`` and
``caption_clip [M]`` (the row of the clip a caption describes), the segments of the long clips
(``segment_embeddings [S, d]``, ``segment_clip [S]``, ``segment_times [S, 2]`` seconds: :mod:`mlatr.search.segments`;
absent in a file written before them: no segment), and ``meta``: one JSON string with
``format``, ``dim``, ``ids`` and one list per column of the two tables (:mod:`mlatr.search.columns`:
``paths``, ``captions``, ``states``; ``caption_lang``, ``caption_text``) beside the index's meta (the model's
``checkpoint`` path and SHA-256, ``model_config``, ``sample_rate``, ``max_seconds``, ``window_seconds``,
``caption_languages``, ``manifest``). A path inside the index's folder is stored relative to it (the two move
together). Written atomically (``mlatr.io_utils.atomic_write_with``): a failed write leaves the previous
file, or nothing, never a partial one.

:func:`read_npz` checks every array and meta field and names the file and the field of the first problem.
:class:`NpzStorage` is this format as a :class:`~mlatr.search.storage.Storage`: searched exactly in memory,
rewritten whole (under the file's writer lock) by every add and delete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.errors import InputError, MissingFileError, MlatrError
from mlatr.file_kinds import unreadable
from mlatr.file_state import file_signature
from mlatr.io_utils import atomic_write_with, disk_full_named, remove_orphan_temps
from mlatr.json_input import check_format, parse_json
from mlatr.output_paths import check_output_path
from mlatr.search.columns import REQUIRED, CaptionColumns, ClipColumns, Column, SegmentColumns, check_vectors
from mlatr.search.shards import check_meta
from mlatr.search.storage import CheckMeta, Storage, Tables, unknown_ids
from mlatr.writer_lock import writer_lock

FORMAT = "mlatr-index-1"
_WHAT = "an mlatr index (written by mlatr index build)"
_ARRAYS = ("meta", "embeddings", "caption_embeddings", "caption_clip")
#: The segment arrays: all three or none (a file written before segments existed).
_SEGMENT_ARRAYS = ("segment_embeddings", "segment_clip", "segment_times")


def write_npz(path: Path, clips: ClipColumns, captions: CaptionColumns, meta: dict[str, Any],
              segments: SegmentColumns | None = None) -> None:
    """Write the three tables and ``meta`` to ``path`` atomically (the rows are checked by the caller)."""
    values = {c.npz: list(clips[c.key]) for c in ClipColumns.columns}
    values["paths"] = [portable_path(p, path.parent) for p in clips["path"]]
    values.update({c.npz: list(captions[c.key]) for c in CaptionColumns.columns})
    stored = dict(meta, format=FORMAT, dim=clips.dim, ids=list(clips.ids), **values)
    arrays = {"embeddings": np.ascontiguousarray(clips.embeddings, np.float32),
              "caption_embeddings": np.ascontiguousarray(captions.embeddings, np.float32),
              "caption_clip": np.asarray(captions.clip, np.int64),
              "meta": np.asarray(json.dumps(stored, ensure_ascii=False))}
    if segments is not None and len(segments):
        arrays.update(segment_embeddings=np.ascontiguousarray(segments.embeddings, np.float32),
                      segment_clip=segments.clip, segment_times=segments.times)
    atomic_write_with(path, lambda fh: np.savez(fh, **arrays))


def read_npz(path: Path) -> tuple[ClipColumns, CaptionColumns, dict[str, Any], SegmentColumns]:
    """The tables and the meta (without the per-row lists) of the ``.npz`` index at ``path``, every field
    checked (``FILE: FIELD: message``); relative paths resolved against the index's folder."""
    arrays = _arrays(path)
    emb, cap_emb, cap_clip = arrays["embeddings"], arrays["caption_embeddings"], arrays["caption_clip"]
    if arrays["meta"].ndim != 0 or arrays["meta"].dtype.kind != "U":
        raise InputError(f"expected one JSON string, found {arrays['meta'].dtype} of shape "
                         f"{list(arrays['meta'].shape)}", file=str(path), field="meta")
    meta = check_format(path, parse_json(str(arrays["meta"]), str(path), field="meta"), FORMAT, _WHAT)
    check_meta(path, meta)
    ids = _listed(path, meta, Column("id", "ids", (str,), "a list of strings"), None)
    n = len(ids)
    clip_values = {c.key: _listed(path, meta, c, n) for c in ClipColumns.columns}
    cap_values = {c.key: _listed(path, meta, c, None) for c in CaptionColumns.columns}
    for name, arr, ndim in (("embeddings", emb, 2), ("caption_embeddings", cap_emb, 2), ("caption_clip", cap_clip, 1)):
        if arr.ndim != ndim or (ndim == 2 and arr.shape[1] != emb.shape[-1]) or not (
                np.issubdtype(arr.dtype, np.floating) if ndim == 2 else np.issubdtype(arr.dtype, np.integer)):
            raise InputError(f"shape {list(arr.shape)} of {arr.dtype}: expected "
                             + ("[n, d] floats" if ndim == 2 else "[m] integers"), file=str(path), field=name)
    if isinstance(meta.get("dim"), int) and emb.shape[1] != meta["dim"]:
        raise InputError(f"vectors of dim {emb.shape[1]}, the meta says dim {meta['dim']}", file=str(path),
                         field="embeddings")
    if emb.shape[0] != n:
        raise InputError(f"{emb.shape[0]} embeddings for {n} ids", file=str(path), field="embeddings")
    m = len(cap_clip)
    if cap_emb.shape[0] != m:
        raise InputError(f"{cap_emb.shape[0]} caption embeddings for {m} caption rows", file=str(path),
                         field="caption_embeddings")
    for columns, values, count, of in ((ClipColumns.columns, clip_values, n, "ids"),
                                       (CaptionColumns.columns, cap_values, m, "caption rows")):
        for c in columns:
            if len(values[c.key]) != count:
                raise InputError(f"{len(values[c.key])} values for {count} {of}", file=str(path), field=c.npz)
    if m and (cap_clip.min() < 0 or cap_clip.max() >= n):
        raise InputError(f"a caption points to a clip row outside 0..{n - 1}", file=str(path), field="caption_clip")
    clip_values["path"] = [p if os.path.isabs(p) else os.path.normpath(path.parent.resolve() / p)  # relative: to
                           for p in clip_values["path"]]  # the index's folder
    clips = ClipColumns(emb.astype(np.float32, copy=False), list(ids), clip_values)
    captions = CaptionColumns(cap_emb.astype(np.float32, copy=False), cap_clip.astype(np.int64), cap_values)
    segments = SegmentColumns.empty(clips.dim)
    if "segment_embeddings" in arrays:
        seg = arrays["segment_embeddings"]
        if seg.ndim != 2 or seg.shape[1] != clips.dim or not np.issubdtype(seg.dtype, np.floating) \
                or arrays["segment_clip"].ndim != 1 or not np.issubdtype(arrays["segment_clip"].dtype, np.integer) \
                or arrays["segment_times"].ndim != 2 or arrays["segment_times"].shape[1:] != (2,):
            raise InputError(f"segment arrays of shapes {list(seg.shape)}, {list(arrays['segment_clip'].shape)}, "
                             f"{list(arrays['segment_times'].shape)}: expected [s, {clips.dim}], [s], [s, 2]",
                             file=str(path), field="segment_embeddings")
        segments = SegmentColumns.checked(seg.astype(np.float32, copy=False), arrays["segment_clip"],
                                          arrays["segment_times"], n, str(path))
    check_vectors(clips, captions, f"{path}: ", segments=segments)
    listed = {"ids", *(c.npz for c in ClipColumns.columns), *(c.npz for c in CaptionColumns.columns)}
    return clips, captions, {k: v for k, v in meta.items() if k not in listed}, segments


def _arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        z = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError / OSError / EOFError / BadZipFile
        raise unreadable(path, _WHAT, exc, ("npz",)) from exc
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise unreadable(path, _WHAT)
    arrays = {}
    try:
        with z:
            if "meta" not in z.files:  # another kind of zip / npz (a checkpoint, someone's arrays)
                raise unreadable(path, _WHAT, "no array 'meta'", ("npz",))
            _refuse_expanding_members(path, z.zip)
            segmented = any(name in z.files for name in _SEGMENT_ARRAYS)
            for name in _ARRAYS + (_SEGMENT_ARRAYS if segmented else ()):
                if name not in z.files:
                    raise InputError("missing array (a damaged or foreign index: rebuild it with mlatr index "
                                     "build)", file=str(path), field=name)
                arrays[name] = z[name]
    except MlatrError:
        raise
    except Exception as exc:  # a damaged member: BadZipFile, zlib.error, ValueError, EOFError
        raise unreadable(path, _WHAT, exc, ("npz",)) from exc
    return arrays


#: How many times its stored size a member of an index may expand: mlatr writes members uncompressed
#: (``np.savez``), and a compressor gains little on embeddings; far more is a member built to fill memory.
MAX_EXPANSION = 20


def _refuse_expanding_members(path: Path, archive) -> None:
    """Refuse, from the zip directory and before anything is decompressed, a member declaring more bytes than
    :data:`MAX_EXPANSION` times what it stores (1 MiB allowed regardless)."""
    for info in archive.infolist():
        if info.file_size > MAX_EXPANSION * info.compress_size + 2**20:
            raise InputError(f"member {info.filename!r} would expand from {info.compress_size:,} to "
                             f"{info.file_size:,} bytes: not an index mlatr wrote (a zip bomb?)", file=str(path))


def _listed(path: Path, meta: dict, column: Column, n: int | None) -> list:
    """The meta's list of ``column``, its values' types checked; a missing list of a column with a default:
    ``n`` defaults (an index written before the column existed)."""
    value = meta.get(column.npz)
    if not value and column.default is not REQUIRED and n is not None:
        return column.missing(n)
    if column.npz not in meta:
        raise InputError("missing (a damaged index: rebuild it with mlatr index build)", file=str(path),
                         field=column.npz)
    if not isinstance(value, list):
        raise InputError(f"expected a list, found {type(value).__name__}", file=str(path), field=column.npz)
    if not all(column.holds(x) for x in value):
        raise InputError(f"expected {column.expected}", file=str(path), field=column.npz)
    return value


def portable_path(audio: str, folder: Path) -> str:
    """``audio`` relative to the index's ``folder`` when it lies inside it (the two move together), else as is.

    Only a path in the form ``index build`` records (absolute, normal) is rewritten, lexically: an edited
    one (``lib/../x``) is kept as it is, so a reader still sees that it was edited (:mod:`mlatr.serve.clip_files`).
    """
    if not (os.path.isabs(audio) and os.path.normpath(audio) == audio):
        return audio
    try:
        return Path(audio).relative_to(folder.resolve()).as_posix()
    except ValueError:
        return audio


class NpzStorage(Storage):
    """An index in one ``.npz`` file (module docstring)."""

    format = FORMAT

    def __init__(self, where: str | os.PathLike):
        super().__init__(Path(where))

    @classmethod
    def claims(cls, where: str | os.PathLike) -> bool:
        """A file, or a name ending in ``.npz`` that is not a folder."""
        path = Path(where)
        return path.is_file() or (path.suffix.lower() == ".npz" and not path.is_dir())

    @property
    def path(self) -> Path:
        return self.where

    @property
    def single_file(self) -> bool:
        return True

    def exists(self) -> bool:
        return self.where.is_file()

    def signature(self) -> tuple | None:
        return file_signature(self.where)

    def size(self) -> int:
        return self.where.stat().st_size if self.where.is_file() else 0

    def read(self) -> Tables:
        if not self.where.is_file():
            raise MissingFileError(self.where, "an index: the folder or .npz file mlatr index build writes")
        clips, captions, meta, segments = read_npz(self.where)
        return Tables(clips, captions, meta, segments=segments)

    def describe(self, tables: Tables) -> str:
        return "one file"

    def _part_name(self) -> str:
        return self.where.name

    def check_output(self) -> None:
        check_output_path(self.where, "output", folder=None)
        remove_orphan_temps(self.where.parent, [self.where.name])  # what a killed build left beside the index

    def write(self, part: Tables, *, add: bool, drop: dict[str, int], dtype: str, ann, check: CheckMeta | None
              ) -> int:
        with writer_lock(self.where, "index", wait=True), \
                disk_full_named(self.where, "the index is as it was before this write"):
            current = self.read() if add and self.exists() else None
            if current is not None and check is not None:
                check(current.meta)
            self.replace(part if current is None else current.merged(part, drop))
        return self.size()

    def replace(self, tables: Tables, dtype: str = "float32", ann=None) -> None:
        live = tables.live()
        check_vectors(live.clips, live.captions, f"{self.where}: ", unit_captions=False, segments=live.segments)
        write_npz(self.where, live.clips, live.captions, live.meta, live.segments)

    def record_meta(self, key: str, value) -> None:
        """The file rewritten with its meta's ``key`` (one file holds all), under the writer lock."""
        with writer_lock(self.where, "index", wait=True):
            tables = self.read()
            tables.meta = {**tables.meta, key: value}
            write_npz(self.where, tables.clips, tables.captions, tables.meta)

    def delete(self, ids) -> int:
        with writer_lock(self.where, "index", wait=True):
            tables = self.read()
            gone = sorted(set(unknown_ids(tables, ids, str(self.where)).values()))
            tables.deleted = np.asarray(gone, np.int64)
            self.replace(tables)
        return len(gone)
