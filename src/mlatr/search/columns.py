"""An index's rows as two tables of columns: the clips, and the captions that describe them.

A :class:`ClipColumns` holds one row per clip: its embedding (``embeddings [N, d]``), its ``id`` and one
value per column of :data:`CLIP_COLUMNS` (the audio's path, the clip's captions, the audio file's state
when it was encoded, the file's facets and where each caption came from). A :class:`CaptionColumns` holds
one row per caption: its embedding, the row of its clip (``clip [M]``) and one value per column of
:data:`CAPTION_COLUMNS` (language, text). Both tables have the same four operations, and every format of an
index goes through them:

- ``take(rows)``: the rows asked for, in memory (an index without its deleted rows);
- ``concat(parts)``: one table of several, in memory (an ``--add`` rewriting an ``.npz``), and ``stack(parts)``
  the same without reading anything (an index folder's shards, memory-mapped and read row by row);
- ``save(folder, dtype)`` / ``load(folder, dim)``: the table's files in one shard folder
  (:mod:`mlatr.search.shards`): the vectors as ``.npy``, the column values as a JSON-lines file with a
  byte offset per row (:class:`JsonlRows`: a row is one seek).

The single-file index (:mod:`mlatr.search.npz_index`) keeps each column as one list in its meta (the
column's ``npz`` name), Milvus (:mod:`mlatr.search.milvus`) in its rows. Adding a per-clip column is one
:class:`Column` in :data:`CLIP_COLUMNS` (its name in each format, the JSON types it holds, its value for
rows written before it existed, and its value for a manifest clip): every format then writes and reads
it (``tests/test_index_columns.py`` adds one).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mlatr.data.manifest import Clip
from mlatr.errors import InputError, MlatrError
from mlatr.file_state import file_sha256, file_state
from mlatr.json_input import parse_json, read_json_file

#: A column's ``default`` when every row must hold it (a row without it is damaged).
REQUIRED = object()
#: Largest deviation of a stored embedding's norm from 1 (float16 storage keeps norms within about 1e-3).
NORM_TOLERANCE = 1e-2


@dataclass(frozen=True)
class Column:
    """One per-row value of a table, stored as JSON.

    ``key``: its name in the table (``table[key]``), in a shard's rows file and in a Milvus row; ``npz``:
    its list in a single-file index's meta; ``kinds`` the JSON types a value may have and ``fits`` what else it
    must be (``expected`` says both in an error); ``default``: what a row written before the column existed
    holds (:data:`REQUIRED`: such a row is damaged); ``of_clip(clip, root)``: its value for a manifest clip
    (audio relative to ``root``) when a table is made from clips.
    """

    key: str
    npz: str
    kinds: tuple[type, ...]
    expected: str
    default: Any = REQUIRED
    of_clip: Callable[[Clip, Path], Any] | None = None
    fits: Callable[[Any], bool] = lambda value: True

    def missing(self, n: int) -> list:
        """``n`` rows of the column's default."""
        return [self.default] * n

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is one the column holds (a hand-edited or damaged row is not)."""
        return isinstance(value, self.kinds) and self.fits(value)


def _captions_fit(value: dict) -> bool:
    """``{language: [caption or null, ...]}``."""
    return all(isinstance(k, str) and isinstance(v, list) and all(isinstance(t, str | None) for t in v)
               for k, v in value.items())


def _state_fits(value: dict | None) -> bool:
    """None, or ``{"size": int, "mtime_ns": int}`` (:func:`mlatr.file_state.file_state`)."""
    return value is None or all(type(value.get(k)) is int for k in ("size", "mtime_ns"))


def _sha256(path: Path) -> str | None:
    """The SHA-256 of the file at ``path``'s bytes (None when it cannot be read)."""
    try:
        return file_sha256(path)
    except OSError:
        return None


def _object(value):
    """``value`` when it is a JSON object, else None (a manifest's extra key of another shape is not a column)."""
    return value if isinstance(value, dict) else None


#: The per-clip columns (beside the embedding and the id).
CLIP_COLUMNS: tuple[Column, ...] = (
    Column("path", "paths", (str,), "a list of strings",
           of_clip=lambda clip, root: str(clip.audio_path(root).resolve())),
    Column("captions", "captions", (dict,), "a list of {language: [captions]} objects",
           of_clip=lambda clip, root: clip.captions, fits=_captions_fit),
    # the size and mtime of the clip's audio when it was encoded (None: not recorded), default: now
    Column("state", "states", (dict, type(None)), "a list of file states (objects or null)", default=None,
           of_clip=lambda clip, root: file_state(str(clip.audio_path(root).resolve())), fits=_state_fits),
    # what the file says about itself (mlatr.data.file_metadata): duration, sample rate, loudness, folder, UCS
    # category, keywords ...; None: not recorded (a manifest without them, an index written before)
    Column("facets", "facets", (dict, type(None)), "a list of facet objects (or null)", default=None,
           of_clip=lambda clip, root: _object(clip.extra.get("facets"))),
    # where each caption came from, {language: [source]} aligned with the captions; None: not recorded
    Column("caption_sources", "caption_sources", (dict, type(None)), "a list of caption source objects (or null)",
           default=None, of_clip=lambda clip, root: _object(clip.extra.get("caption_sources"))),
    # the SHA-256 of the audio file's bytes when it was encoded (a moved or renamed file is found by it: mlatr
    # index sync); None: not recorded (a shard member, a row written before)
    Column("sha256", "sha256s", (str, type(None)), "a list of SHA-256 strings (or null)", default=None,
           of_clip=lambda clip, root: _sha256(clip.audio_path(root))),
)
#: The per-caption columns (beside the embedding and the clip row).
CAPTION_COLUMNS: tuple[Column, ...] = (
    Column("lang", "caption_lang", (str,), "a list of strings"),
    Column("text", "caption_text", (str,), "a list of strings"),
)


class _Columns:
    """What both tables share: ``embeddings [n, d]`` and one sequence per column of :attr:`columns`."""

    columns: ClassVar[tuple[Column, ...]]
    _OWN: ClassVar[tuple[str, ...]] = ("embeddings", "ids", "clip")  # attributes, not columns
    #: file names in a shard folder
    VECTORS: ClassVar[str]
    ROWS: ClassVar[str]

    def __init__(self, embeddings, values: Mapping[str, Sequence], n: int):
        self.embeddings = embeddings  # [n, d] ndarray, memmap or RowStack
        self.values: dict[str, Sequence] = {}
        for col in self.columns:
            if col.key in values:
                self.values[col.key] = values[col.key]
            elif col.default is REQUIRED:
                raise MlatrError(f"{type(self).__name__}: no {col.key!r} column")
            else:
                self.values[col.key] = col.missing(n)
        for key, seq in self.values.items():
            if len(seq) != n:
                raise MlatrError(f"{type(self).__name__}: {len(seq)} {key!r} values for {n} rows")

    def __getitem__(self, key: str) -> Sequence:
        return self.values[key]

    def get(self, key: str):
        """A column's values, or the table's ``embeddings`` / ``ids`` / ``clip``."""
        return getattr(self, key) if key in self._OWN else self.values[key]

    def set(self, key: str, value) -> None:
        """Replace a column (or ``embeddings`` / ``ids`` / ``clip``) by as many values as the table has rows."""
        if key == "embeddings" and value.shape[0] != len(self) or key != "embeddings" and len(value) != len(self):
            raise MlatrError(f"{type(self).__name__}: {key}: {len(value)} values for {len(self)} rows")
        if key in self._OWN:
            setattr(self, key, value)
        else:
            self.values[key] = value

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i``'s column values (what a shard's rows file and a Milvus row hold)."""
        return {key: seq[i] for key, seq in self.values.items()}

    def _taken(self, rows: np.ndarray) -> tuple[np.ndarray, dict[str, list]]:
        emb = np.asarray(self.embeddings[rows]) if len(rows) else np.zeros((0, self.dim), np.float32)
        return emb, {key: [seq[i] for i in rows.tolist()] for key, seq in self.values.items()}

    @classmethod
    def _joined(cls, parts: Sequence[_Columns], dim: int, lazy: bool) -> tuple[Any, dict[str, Sequence]]:
        if lazy:
            emb = parts[0].embeddings if len(parts) == 1 else RowStack([p.embeddings for p in parts], dim)
            return emb, {c.key: parts[0][c.key] if len(parts) == 1 else Chain([p[c.key] for p in parts])
                         for c in cls.columns}
        emb = np.concatenate([np.asarray(p.embeddings, np.float32) for p in parts]) if parts \
            else np.zeros((0, dim), np.float32)
        return emb, {c.key: [v for p in parts for v in p[c.key]] for c in cls.columns}

    def _save_rows(self, folder: Path, dtype: str) -> None:
        np.save(folder / self.VECTORS, np.ascontiguousarray(self.embeddings, dtype))
        write_jsonl_with_offsets(folder / self.ROWS, [self.row(i) for i in range(len(self))])

    @classmethod
    def _load_rows(cls, folder: Path, dim: int, n: int) -> tuple[np.ndarray, dict[str, Sequence]]:
        emb = load_array(folder / cls.VECTORS, 2, dim)
        offsets = load_array((folder / cls.ROWS).with_suffix(".offsets.npy"), 1)
        if emb.shape[0] != n or len(offsets) != n + 1:
            raise InputError(f"{emb.shape[0]} vectors and {len(offsets) - 1} rows for {n} {cls.ROWS[:-6]}",
                             file=str(folder / cls.VECTORS))
        rows = JsonlRows(folder / cls.ROWS, offsets)
        return emb, {c.key: RowField(rows, c) for c in cls.columns}

    def __len__(self) -> int:
        raise NotImplementedError


class ClipColumns(_Columns):
    """One row per clip: ``embeddings [N, d]`` (unit norm), ``ids [N]`` and the :data:`CLIP_COLUMNS`."""

    columns = CLIP_COLUMNS
    VECTORS, ROWS = "embeddings.npy", "clips.jsonl"

    def __init__(self, embeddings, ids: Sequence[str], values: Mapping[str, Sequence] | None = None):
        self.ids = ids
        super().__init__(embeddings, values or {}, len(ids))

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def empty(cls, dim: int) -> ClipColumns:
        return cls(np.zeros((0, dim), np.float32), [], {c.key: [] for c in cls.columns})

    @classmethod
    def of_clips(cls, clips: Sequence[Clip], root: str | os.PathLike, embeddings: np.ndarray,
                 given: Mapping[str, Sequence] | None = None) -> ClipColumns:
        """The rows of manifest ``clips`` (audio relative to ``root``) with their ``embeddings [n, d]``; each
        column's values from ``given`` (e.g. ``state``, taken before the audio was read), else
        :attr:`Column.of_clip`."""
        given = given or {}
        root = Path(root)
        if len(embeddings) != len(clips):
            raise MlatrError(f"{len(embeddings)} embeddings for {len(clips)} clips")
        values = {c.key: list(given[c.key]) if c.key in given else [c.of_clip(clip, root) for clip in clips]
                  for c in cls.columns}
        return cls(np.asarray(embeddings, np.float32), [c.id for c in clips], values)

    def take(self, rows: Sequence[int] | np.ndarray) -> ClipColumns:
        """Rows ``rows`` (in that order), in memory."""
        emb, values = self._taken(np.asarray(rows, np.int64))
        return ClipColumns(emb, [self.ids[i] for i in np.asarray(rows, np.int64).tolist()], values)

    @classmethod
    def concat(cls, parts: Sequence[ClipColumns], dim: int) -> ClipColumns:
        """``parts`` one after the other, in memory."""
        emb, values = cls._joined(parts, dim, lazy=False)
        return cls(emb, [i for p in parts for i in p.ids], values)

    @classmethod
    def stack(cls, parts: Sequence[ClipColumns], dim: int) -> ClipColumns:
        """``parts`` one after the other without reading them (vectors: a :class:`RowStack`; columns: a
        :class:`Chain`)."""
        emb, values = cls._joined(parts, dim, lazy=True)
        return cls(emb, [i for p in parts for i in p.ids], values)

    def save(self, folder: Path, dtype: str) -> None:
        """The table's files in the shard folder ``folder``: ``embeddings.npy``, ``ids.json`` (the one column
        read whole: the id -> row map), ``clips.jsonl`` and its offsets."""
        self._save_rows(folder, dtype)
        (folder / "ids.json").write_text(json.dumps(list(self.ids), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, dim: int) -> ClipColumns:
        """The table of a shard folder: vectors memory-mapped, column values read per row on demand."""
        ids = read_json_file(folder / "ids.json")
        if not isinstance(ids, list) or not set(map(type, ids)) <= {str}:
            raise InputError("expected a JSON list of id strings", file=str(folder / "ids.json"))
        emb, values = cls._load_rows(folder, dim, len(ids))
        return cls(emb, ids, values)


class CaptionColumns(_Columns):
    """One row per caption: ``embeddings [M, d]``, ``clip [M]`` (the row of the clip it describes, int64)
    and the :data:`CAPTION_COLUMNS`."""

    columns = CAPTION_COLUMNS
    VECTORS, ROWS = "caption_embeddings.npy", "captions.jsonl"

    def __init__(self, embeddings, clip: np.ndarray, values: Mapping[str, Sequence] | None = None):
        self.clip = np.asarray(clip, np.int64)  # [M]
        super().__init__(embeddings, values or {}, len(self.clip))

    def __len__(self) -> int:
        return len(self.clip)

    @classmethod
    def empty(cls, dim: int) -> CaptionColumns:
        return cls(np.zeros((0, dim), np.float32), np.zeros(0, np.int64), {c.key: [] for c in cls.columns})

    @classmethod
    def of_arrays(cls, arrays: Mapping[str, Any], embeddings: np.ndarray) -> CaptionColumns:
        """The captions of :meth:`~mlatr.data.manifest.Manifest.caption_arrays` (``texts``, ``text_lang``,
        ``text_audio`` = the clip's row) with their ``embeddings [m, d]``."""
        return cls(np.asarray(embeddings, np.float32), np.asarray(arrays["text_audio"], np.int64),
                   {"lang": [str(x) for x in arrays["text_lang"]], "text": list(arrays["texts"])})

    def take(self, rows: Sequence[int] | np.ndarray, clip_row: np.ndarray | None = None) -> CaptionColumns:
        """Rows ``rows``, in memory; ``clip_row`` maps old clip rows to new ones (the clips were taken too)."""
        rows = np.asarray(rows, np.int64)
        emb, values = self._taken(rows)
        clip = self.clip[rows]
        return CaptionColumns(emb, clip if clip_row is None else clip_row[clip], values)

    @classmethod
    def concat(cls, parts: Sequence[CaptionColumns], clip_counts: Sequence[int], dim: int) -> CaptionColumns:
        """``parts`` one after the other, in memory; part ``i`` describes clips numbered after the
        ``clip_counts`` of the parts before it."""
        emb, values = cls._joined(parts, dim, lazy=False)
        return cls(emb, _shifted_links(parts, clip_counts), values)

    @classmethod
    def stack(cls, parts: Sequence[CaptionColumns], clip_counts: Sequence[int], dim: int) -> CaptionColumns:
        """:meth:`concat` without reading the parts (see :meth:`ClipColumns.stack`)."""
        emb, values = cls._joined(parts, dim, lazy=True)
        return cls(emb, _shifted_links(parts, clip_counts), values)

    def save(self, folder: Path, dtype: str) -> None:
        """``caption_embeddings.npy``, ``caption_clip.npy`` (rows within the shard), ``captions.jsonl``."""
        self._save_rows(folder, dtype)
        np.save(folder / "caption_clip.npy", self.clip)

    @classmethod
    def load(cls, folder: Path, dim: int, n_clips: int) -> CaptionColumns:
        """The captions of a shard folder of ``n_clips`` clips (each caption's clip row checked)."""
        clip = load_array(folder / "caption_clip.npy", 1)
        m = clip.shape[0]
        if m and (clip.min() < 0 or clip.max() >= n_clips):
            raise InputError(f"a caption points to a clip row outside 0..{n_clips - 1}",
                             file=str(folder / "caption_clip.npy"))
        emb, values = cls._load_rows(folder, dim, m)
        return cls(emb, np.asarray(clip, np.int64), values)


class SegmentColumns(_Columns):
    """One row per segment of a long clip (:mod:`mlatr.search.segments`): ``embeddings [S, d]`` (unit norm),
    ``clip [S]`` (the row of its clip, int64) and ``times [S, 2]`` (its start and end in the clip's file, in
    seconds, float64). A clip no longer than the segmenting threshold has none; an index written before segments
    existed has none. No JSON column: the table is three arrays (a shard's ``segment_embeddings.npy``,
    ``segment_clip.npy``, ``segment_times.npy``; absent files: no segment). A Milvus target's table holds no
    vectors (``embeddings [0, d]``): they stay in Milvus."""

    columns = ()
    VECTORS, CLIP, TIMES = "segment_embeddings.npy", "segment_clip.npy", "segment_times.npy"

    def __init__(self, embeddings, clip: np.ndarray, times: np.ndarray):
        self.clip = np.asarray(clip, np.int64)  # [S]
        self.times = np.asarray(times, np.float64).reshape(-1, 2)  # [S, 2]
        if len(self.times) != len(self.clip) or embeddings.shape[0] not in (0, len(self.clip)):
            raise MlatrError(f"SegmentColumns: {embeddings.shape[0]} vectors, {len(self.clip)} clip rows and "
                             f"{len(self.times)} times")
        super().__init__(embeddings, {}, len(self.clip))

    def __len__(self) -> int:
        return len(self.clip)

    @classmethod
    def empty(cls, dim: int) -> SegmentColumns:
        return cls(np.zeros((0, dim), np.float32), np.zeros(0, np.int64), np.zeros((0, 2)))

    def take(self, rows: Sequence[int] | np.ndarray, clip_row: np.ndarray | None = None) -> SegmentColumns:
        """Rows ``rows``, in memory; ``clip_row`` maps old clip rows to new ones (the clips were taken too)."""
        rows = np.asarray(rows, np.int64)
        emb, _ = self._taken(rows)
        clip = self.clip[rows]
        return SegmentColumns(emb, clip if clip_row is None else clip_row[clip], self.times[rows])

    def of_clips(self, clip_row: np.ndarray) -> SegmentColumns:
        """The segments of the clips that ``clip_row`` (old clip row -> new row, -1: not taken) keeps, renumbered."""
        rows = np.flatnonzero(np.asarray(clip_row)[self.clip] >= 0) if len(self.clip) else np.zeros(0, np.int64)
        return self.take(rows, np.asarray(clip_row))

    @classmethod
    def concat(cls, parts: Sequence[SegmentColumns], clip_counts: Sequence[int], dim: int) -> SegmentColumns:
        """``parts`` one after the other, in memory; part ``i`` belongs to clips numbered after the ``clip_counts``
        of the parts before it."""
        emb, _ = cls._joined(parts, dim, lazy=False)
        return cls(emb, _shifted_links(parts, clip_counts), _times(parts))

    @classmethod
    def stack(cls, parts: Sequence[SegmentColumns], clip_counts: Sequence[int], dim: int) -> SegmentColumns:
        """:meth:`concat` without reading the parts' vectors (a :class:`RowStack`)."""
        emb, _ = cls._joined(parts, dim, lazy=True) if parts else (np.zeros((0, dim), np.float32), {})
        return cls(emb, _shifted_links(parts, clip_counts), _times(parts))

    def save(self, folder: Path, dtype: str) -> None:
        """The three arrays in the shard folder ``folder`` (nothing when the shard has no segment)."""
        if len(self):
            np.save(folder / self.VECTORS, np.ascontiguousarray(self.embeddings, dtype))
            np.save(folder / self.CLIP, self.clip)
            np.save(folder / self.TIMES, self.times)

    @classmethod
    def load(cls, folder: Path, dim: int, n_clips: int) -> SegmentColumns:
        """The segments of a shard folder of ``n_clips`` clips (none when it has no segment file), checked: as
        many vectors, clip rows and times, clip rows in range, each start before its end."""
        if not (folder / cls.VECTORS).exists():
            return cls.empty(dim)
        emb = load_array(folder / cls.VECTORS, 2, dim)
        clip = load_array(folder / cls.CLIP, 1)
        times = load_array(folder / cls.TIMES, 2, 2)
        return cls.checked(emb, clip, times, n_clips, str(folder / cls.CLIP))

    @classmethod
    def checked(cls, emb, clip: np.ndarray, times: np.ndarray, n_clips: int, where: str) -> SegmentColumns:
        """The table of arrays read from a file (``where``), refused unless consistent."""
        if not (len(emb) == len(clip) == len(times)):
            raise InputError(f"{len(emb)} segment vectors, {len(clip)} clip rows and {len(times)} times", file=where)
        if len(clip) and (clip.min() < 0 or clip.max() >= n_clips):
            raise InputError(f"a segment points to a clip row outside 0..{n_clips - 1}", file=where)
        times = np.asarray(times, np.float64)
        if len(times) and not (np.isfinite(times).all() and (times[:, 0] >= 0).all()
                               and (times[:, 1] > times[:, 0]).all()):
            raise InputError("segment times must be finite, start >= 0 and end > start", file=where)
        return cls(emb, np.asarray(clip, np.int64), times)


def _times(parts: Sequence[SegmentColumns]) -> np.ndarray:
    return np.concatenate([np.zeros((0, 2))] + [p.times for p in parts])


def _shifted_links(parts: Sequence[CaptionColumns], clip_counts: Sequence[int]) -> np.ndarray:
    starts = np.cumsum([0, *clip_counts])
    return np.concatenate([np.zeros(0, np.int64)] + [starts[i] + p.clip for i, p in enumerate(parts)])


# ---- vectors ------------------------------------------------------------------------------------------
def check_finite_rows(embeddings: np.ndarray, ids: Sequence[str], what: str) -> None:
    """Refuse rows holding NaN or infinity (a search would rank them arbitrarily, FAISS would drop them),
    naming the clip ids they belong to."""
    if embeddings.size == 0 or np.isfinite(embeddings).all():
        return
    bad = np.flatnonzero(~np.isfinite(embeddings).all(axis=1))
    names = sorted({str(ids[i]) for i in bad})
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    raise MlatrError(f"{what}: non-finite values (NaN or inf) in {len(bad)} row(s), clip(s) {shown}; "
                     "the model gave no usable embedding for them (check the audio, or the checkpoint)")


def check_unit_rows(embeddings: np.ndarray, ids: Sequence[str], what: str) -> None:
    """Refuse rows whose norm is not 1 (within :data:`NORM_TOLERANCE`): their inner products are no
    cosines (ATRI eq. 1), and a search would rank them by length. Names the clips."""
    if embeddings.shape[0] == 0:
        return
    bad = []
    for start in range(0, embeddings.shape[0], 65_536):
        norms = np.linalg.norm(np.asarray(embeddings[start:start + 65_536], np.float32), axis=1)
        bad.extend((start + np.flatnonzero(np.abs(norms - 1) > NORM_TOLERANCE)).tolist())
        if bad and len(bad) > 5:
            break
    if not bad:
        return
    norm = float(np.linalg.norm(np.asarray(embeddings[bad[0]], np.float32)))
    names = sorted({str(ids[i]) for i in bad})
    raise MlatrError(f"{what}: {len(bad)}{'+' if len(bad) > 5 else ''} row(s) not of unit norm (clip {names[0]}: "
                     f"norm {norm:.4g}), e.g. clip(s) {', '.join(names[:5])}: scores would not be cosines; "
                     "the file was not written by mlatr index build, or was edited (rebuild the index)")


def check_vectors(clips: ClipColumns, captions: CaptionColumns, what: str, unit_captions: bool = True,
                  segments: SegmentColumns | None = None) -> None:
    """Every clip (and segment) vector finite and of unit norm, every caption vector finite (and of unit norm),
    naming the clips of bad rows."""
    check_finite_rows(clips.embeddings, clips.ids, f"{what}embeddings")
    check_unit_rows(clips.embeddings, clips.ids, f"{what}embeddings")
    if segments is not None and len(segments):
        owners = [clips.ids[int(c)] for c in segments.clip]
        check_finite_rows(segments.embeddings, owners, f"{what}segment_embeddings")
        check_unit_rows(segments.embeddings, owners, f"{what}segment_embeddings")
    owners = [clips.ids[int(c)] for c in captions.clip]
    check_finite_rows(captions.embeddings, owners, f"{what}caption_embeddings")
    if unit_captions:
        check_unit_rows(captions.embeddings, owners, f"{what}caption_embeddings")


# ---- storage: arrays and JSON lines ------------------------------------------------------------------
def load_array(path: Path, ndim: int, dim: int | None = None) -> np.ndarray:
    """A ``.npy`` file memory-mapped, checked: ``ndim`` dimensions (``[n, dim]`` floats or ``[n]`` integers)."""
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


def write_jsonl_with_offsets(path: Path, rows: Sequence[Any]) -> None:
    """One JSON line per row, and ``NAME.offsets.npy``: the byte offset of each line (and of the end)."""
    offsets = np.zeros(len(rows) + 1, np.uint64)
    with open(path, "wb") as fh:
        for i, row in enumerate(rows):
            fh.write(json.dumps(row, ensure_ascii=False).encode() + b"\n")
            offsets[i + 1] = fh.tell()
    np.save(path.with_suffix(".offsets.npy"), offsets)


#: Largest row a :class:`JsonlRows` reads (a clip's captions in every language stay far below it): offsets
#: further apart than this belong to a damaged or edited offsets file, not to a row.
MAX_ROW_BYTES = 64 * 2**20

#: Parsed rows a :class:`JsonlRows` keeps: showing one search hit reads its clip's row for the path, the
#: captions and the recorded state, and a server shows the same clips again and again. Cleared when full.
ROW_MEMO = 4096


class JsonlRows(Sequence):
    """Row ``i`` of a ``.jsonl`` file read on demand (one seek, one line parsed) through its offsets; the
    last :data:`ROW_MEMO` rows read are kept parsed (a shard's files never change), so a row is shared by
    its readers: do not change it."""

    def __init__(self, path: Path, offsets: np.ndarray):
        self.path, self.offsets = path, offsets  # offsets [n + 1] uint64
        self._memo: dict[int, object] = {}
        try:  # opened now: a compaction may remove the file while this reader still answers from it
            self._fh = open(path, "rb")  # noqa: SIM115 (kept open for the reader's life)
        except OSError as exc:
            raise InputError(f"unreadable ({exc.strerror})", file=str(path)) from exc
        self._size = os.fstat(self._fh.fileno()).st_size  # a shard's files are written once

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
        if not 0 <= start <= end <= self._size or end - start > MAX_ROW_BYTES:
            raise InputError(f"row {i}: bytes {start}..{end} do not fit {self.path.name} ({self._size:,} bytes): the "
                             "offsets were edited or damaged (rebuild the index)",
                             file=str(self.path.with_suffix(".offsets.npy")))
        line = os.pread(self._fh.fileno(), end - start, start)
        return parse_json(line, str(self.path), line=i + 1, field=f"row {i}")


    def rows_matching(self, pattern: re.Pattern[bytes]) -> np.ndarray:
        """The rows (ascending) whose line holds a match of ``pattern``: the file read once, no line parsed."""
        data = os.pread(self._fh.fileno(), int(self.offsets[-1]), 0)
        starts = np.fromiter((m.start() for m in pattern.finditer(data)), np.int64)
        return np.unique(np.searchsorted(self.offsets.astype(np.int64), starts, side="right") - 1)


#: Lines parsed by one ``json.loads`` when a whole rows file is read (:func:`every_value`).
PARSE_LINES = 50_000


def every_value(values: Sequence) -> Iterator:
    """The values of a column in row order, a shard's rows file read whole and parsed :data:`PARSE_LINES` lines at a
    time (one ``json.loads`` per block, not one per line) where the column is read from rows files."""
    if isinstance(values, Chain):
        for part in values.parts:
            yield from every_value(part)
    elif isinstance(values, RowField):
        rows = values.rows
        data = os.pread(rows._fh.fileno(), int(rows.offsets[-1]), 0)
        lines = data.split(b"\n")[:len(rows)]
        for start in range(0, len(lines), PARSE_LINES):
            try:
                parsed = json.loads(b"[" + b",".join(lines[start:start + PARSE_LINES]) + b"]")
            except ValueError:  # a damaged line: read row by row, which names it
                parsed = [rows[i] for i in range(start, min(start + PARSE_LINES, len(lines)))]
            for i, row in enumerate(parsed, start):
                if isinstance(row, dict) and (values.column.key in row or values.column.default is not REQUIRED):
                    yield row.get(values.column.key, values.column.default)
                else:
                    yield values[i]  # read as one row, whose error names it
    else:
        yield from values


def in_rows_files(values: Sequence) -> bool:
    """Whether a column is read from shard rows files (:func:`rows_matching` can search it)."""
    return isinstance(values, RowField) or (isinstance(values, Chain) and all(in_rows_files(p) for p in values.parts))


def rows_matching(values: Sequence, pattern: re.Pattern[bytes]) -> np.ndarray | None:
    """The rows of a column read from shard rows files (:class:`RowField` s, :class:`Chain` s of them) whose JSON
    line matches ``pattern``: a superset of the rows whose value matches, found without parsing a line (a whole
    library's search for a rare value); None for a column held in memory (read its values)."""
    if isinstance(values, RowField):
        return values.rows.rows_matching(pattern)
    if isinstance(values, Chain):
        found = [rows_matching(part, pattern) for part in values.parts]
        if any(f is None for f in found):
            return None
        return np.concatenate([f + start for f, start in zip(found, values._starts, strict=False)]
                              or [np.zeros(0, np.int64)])
    return None


class RowField(Sequence):
    """One column of a :class:`JsonlRows` file: row ``i``'s value of ``column`` (its default where a row
    written before the column existed lacks it)."""

    def __init__(self, rows: JsonlRows, column: Column):
        self.rows, self.column = rows, column

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = self.rows[i]
        if isinstance(row, dict) and self.column.key in row:
            value = row[self.column.key]
            if not self.column.holds(value):
                raise InputError(f"row {i}: {self.column.key}: a {type(value).__name__} this column does not hold "
                                 f"({self.column.expected}): the file was edited or damaged (rebuild the index)",
                                 file=str(self.rows.path))
            return value
        if isinstance(row, dict) and self.column.default is not REQUIRED:
            return self.column.default
        raise InputError(f"row {i} has no {self.column.key!r}", file=str(self.rows.path))


class Chain(Sequence):
    """Several sequences read as one, without copying them (an index folder's shards' columns)."""

    def __init__(self, parts: Sequence[Sequence]):
        self.parts = list(parts)
        self._starts = [0]
        for p in self.parts:
            self._starts.append(self._starts[-1] + len(p))  # plain ints: bisect per read, no numpy scalar work

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
        return self.parts[p][i - self._starts[p]]


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
