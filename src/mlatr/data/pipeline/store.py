"""The decoded-audio store: every clip decoded and resampled once, read back without a codec.

``mlatr data prepare MANIFEST -o STORE`` decodes each clip of a manifest, resamples it to the model rate
(16 kHz by default) and appends it to the current shard; the training loader then reads each clip's
crop window directly from the shards (``data.store: STORE``). A folder::

    STORE/index.json        {"format": "mlatr-audio-store-1", "sample_rate": 16000, "dtype": "int16",
                             "shards": ["shard-00000.npy", ...],
                             "clips": {id: {"audio": path, "shard": k, "offset": o, "length": n, "scale": s,
                                            "state": {"size": bytes, "mtime_ns": t}}},
                             "bad": {id: {"audio": path, "error": message, "state": {...}}}}
    STORE/shard-00000.npy   the clips of shard 0 back to back, a 1-D int16 (or float16) .npy array

``audio`` is the clip's path as the manifest writes it (a clip whose path changed is prepared again);
``state`` is its file's size and mtime when it was read (:mod:`mlatr.file_state`): a file rewritten since is
prepared again by the next ``mlatr data prepare``, and a reader of the store refuses to serve the old samples,
naming the clip and what changed (a source file deleted since is no change: the store is the copy). Stores
written before ``state`` was recorded are read without this check;
``scale`` restores int16 samples: ``x = q * scale / 32767`` with ``scale = max(1, peak)``, so resampling
overshoot above full scale is kept rather than clipped. float16 shards hold the samples themselves.

Shards are ordinary ``.npy`` files (``numpy.load(path, mmap_mode="r")`` maps one). The loader reads a
window with one positional read (``os.pread``) instead of mapping the shard, so the training processes'
memory stays flat whatever the data set size; the operating system's page cache keeps hot shards in RAM.

Preparing resumes: after every shard the index is rewritten atomically, so an interrupted run keeps every
finished shard (and the clips decoded so far are written as a last shard on the way out), and a rerun
(also with a manifest that gained clips) prepares only what is missing.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.pipeline.source import window_begin
from mlatr.data.pipeline.workers import decode_all
from mlatr.errors import InputError, MlatrError
from mlatr.file_state import file_state, state_change
from mlatr.io_utils import atomic_write_json, atomic_write_with
from mlatr.json_input import expect_field, json_type, read_format_json

FORMAT = "mlatr-audio-store-1"
INDEX = "index.json"
DTYPES = ("int16", "float16")
INT16_MAX = 32767


def read_index(store: str | os.PathLike) -> dict[str, Any]:
    """The index of store folder ``store`` (MlatrError if it is not one)."""
    path = Path(store) / INDEX
    if not path.is_file():
        raise MlatrError(f"{store}: not a decoded-audio store (no {INDEX}); make one with "
                         f"`mlatr data prepare MANIFEST -o {store}`")
    index = read_format_json(path, FORMAT, "a decoded-audio store's index (written by mlatr data prepare)")
    redo = f"a damaged store: prepare it again with mlatr data prepare MANIFEST -o {store}"
    expect_field(path, index, "sample_rate", int, "an integer (Hz)", test=lambda v: v > 0, must="> 0", hint=redo)
    expect_field(path, index, "dtype", str, "a string", test=lambda v: v in DTYPES, must=" or ".join(DTYPES),
                 hint=redo)
    shards = expect_field(path, index, "shards", list, "a list of shard file names", hint=redo)
    for i, name in enumerate(shards):
        if not isinstance(name, str) or "/" in name or "\\" in name or name.startswith("."):
            raise InputError("expected a shard file name inside the store", str(path), field=f"shards[{i}]")
    for clip_id, entry in expect_field(path, index, "clips", dict, "an object {id: clip}", hint=redo).items():
        if _clip_entry_ok(entry, len(shards)):  # the fast path: a store may list millions of clips
            continue
        where = f"clips.{clip_id}"
        if not isinstance(entry, dict):
            raise InputError(f"expected an object, found {json_type(entry)}", str(path), field=where)
        expect_field(path, entry, "audio", str, "a path", where=where)
        expect_field(path, entry, "shard", int, "a shard number", where=where,
                     test=lambda v: 0 <= v < len(shards), must=f"a shard number in 0..{len(shards) - 1}")
        for key in ("offset", "length"):
            expect_field(path, entry, key, int, "an integer", where=where, test=lambda v: v >= 0, must=">= 0")
        expect_field(path, entry, "scale", (int, float), "a number", where=where, test=lambda v: v > 0, must="> 0")
        if not _state_ok(entry.get("state")):
            raise InputError("expected null or an object {size, mtime_ns} of integers in [0, 2**63)", str(path),
                             field=f"{where}.state")
    for clip_id, entry in expect_field(path, index, "bad", dict, "an object {id: problem}", hint=redo).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("audio"), str) or not _state_ok(entry.get("state")):
            raise InputError("expected an object with audio and error", str(path), field=f"bad.{clip_id}")
    return index


def _clip_entry_ok(entry: Any, n_shards: int) -> bool:
    get = entry.get if type(entry) is dict else {}.get
    shard, offset, length, scale = get("shard"), get("offset"), get("length"), get("scale")
    return (type(get("audio")) is str and type(shard) is int and 0 <= shard < n_shards and type(offset) is int
            and offset >= 0 and type(length) is int and length >= 0 and type(scale) in (int, float)
            and 0 < scale < math.inf and _state_ok(get("state")))


def _state_ok(state: Any) -> bool:
    """Whether a recorded :func:`~mlatr.file_state.file_state` is absent or well formed."""
    return state is None or (type(state) is dict and all(type(state.get(k)) is int and 0 <= state[k] < 2**63
                                                         for k in ("size", "mtime_ns")))


def encode_samples(wave: np.ndarray, dtype: str) -> tuple[np.ndarray, float]:
    """``(stored samples, scale)`` of a float32 waveform (see the module docstring)."""
    if dtype == "float16":
        return wave.astype(np.float16), 1.0
    scale = max(1.0, float(np.max(np.abs(wave))) if wave.size else 1.0)
    q = np.rint(wave * (INT16_MAX / scale)).clip(-INT16_MAX, INT16_MAX).astype(np.int16)
    return q, scale


def decode_samples(stored: np.ndarray, scale: float) -> np.ndarray:
    """float32 samples of stored ones (inverse of :func:`encode_samples` up to the quantisation)."""
    if stored.dtype == np.int16:
        return stored.astype(np.float32) * np.float32(scale / INT16_MAX)
    return stored.astype(np.float32)


@dataclass
class PrepareReport:
    """What :func:`prepare_store` did: clips ``stored`` now, ``already`` there, ``bad`` (skipped), shards."""

    stored: int
    already: int
    bad: int
    shards: int
    store: Path
    #: ids of the clips prepared again because their file changed since they were stored
    changed: list[str] = field(default_factory=list)


class _ShardWriter:
    """Collects clips into the next shard and writes it (then the index) when it reaches its size."""

    def __init__(self, root: Path, index: dict[str, Any], shard_bytes: int):
        self.root, self.index, self.shard_bytes = root, index, shard_bytes
        self.parts: list[np.ndarray] = []
        self.entries: dict[str, dict[str, Any]] = {}
        self.size = 0
        self.written = 0

    def add(self, clip_id: str, audio: str, wave: np.ndarray, state: dict | None) -> None:
        samples, scale = encode_samples(wave, self.index["dtype"])
        offset = sum(p.shape[0] for p in self.parts)
        self.entries[clip_id] = {"audio": audio, "shard": len(self.index["shards"]), "offset": offset,
                                 "length": int(samples.shape[0]), "scale": scale, "state": state}
        self.parts.append(samples)
        self.size += samples.nbytes
        if self.size >= self.shard_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the collected clips as the next shard, then the index (both atomically)."""
        if not self.parts:
            return
        name = f"shard-{len(self.index['shards']):05d}.npy"
        data = np.concatenate(self.parts)
        atomic_write_with(self.root / name, lambda fh: np.save(fh, data))
        self.index["shards"].append(name)
        self.index["clips"].update(self.entries)
        write_index(self.root, self.index)
        self.written += len(self.entries)
        self.parts, self.entries, self.size = [], {}, 0


def write_index(root: Path, index: dict[str, Any]) -> None:
    atomic_write_json(root / INDEX, index)


def prepare_store(manifest: Manifest, out: str | os.PathLike, sample_rate: int = 16000, dtype: str = "int16",
                  shard_mb: float = 512.0, workers: int = 0, skip_bad: bool = False,
                  splits: Sequence[str] | None = None, progress: bool = False) -> PrepareReport:
    """Decode every clip of ``manifest`` (of ``splits``, all when None) into the store folder ``out``.

    Clips already in the store with the same audio path and file state (size, mtime) are kept, a clip whose
    file changed since is prepared again (listed in the report's ``changed``); unreadable clips stop the run with a
    clear error (what was decoded before it is written first), or with ``skip_bad`` are recorded in the
    index's ``bad`` table, which training reports as it would the file's own error."""
    if dtype not in DTYPES:
        raise MlatrError(f"store dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if shard_mb <= 0:
        raise MlatrError(f"shard size must be positive, got {shard_mb} MB")
    root = Path(out)
    if (root / INDEX).is_file():
        index = read_index(root)
        if index["sample_rate"] != sample_rate or index["dtype"] != dtype:
            raise MlatrError(f"{root}: holds {index['sample_rate']} Hz {index['dtype']} audio; prepare "
                             f"{sample_rate} Hz {dtype} into another folder")
    else:
        root.mkdir(parents=True, exist_ok=True)
        index = {"format": FORMAT, "sample_rate": sample_rate, "dtype": dtype, "shards": [], "clips": {}, "bad": {}}
    wanted = [i for i, c in enumerate(manifest) if splits is None or c.split in splits]
    if splits is not None and not wanted:
        raise MlatrError(f"{manifest.path}: no clip in split(s) {', '.join(splits)}")

    changed: list[str] = []

    def done(i: int) -> bool:
        c = manifest[i]
        entry = index["clips"].get(c.id) or index["bad"].get(c.id)
        if entry is None or entry["audio"] != c.audio:
            return False
        if source_change(entry, c.audio_path(manifest.root)):
            changed.append(c.id)
            return False
        return True

    todo = [i for i in wanted if not done(i)]
    # the state before reading: a file changed while it is decoded shows as changed next time
    states = {i: file_state(manifest[i].audio_path(manifest.root)) for i in todo}
    for i in todo:  # prepared again: the old record goes (its samples stay unreferenced in their shard)
        index["clips"].pop(manifest[i].id, None)
        index["bad"].pop(manifest[i].id, None)
    source = AudioSource(manifest, sample_rate, cache=False, skip_bad=True)
    writer = _ShardWriter(root, index, int(shard_mb * 2**20))
    bad = 0
    try:
        for i, wave in decode_all(source, todo, workers, progress=progress, desc="preparing audio"):
            clip = manifest[i]
            if wave is None:
                if not skip_bad:
                    raise MlatrError(f"clip {clip.id!r}: {source.bad[clip.id]} (the clips before it are stored; "
                                     "fix it and rerun, or pass --skip-bad)")
                index["bad"][clip.id] = {"audio": clip.audio, "error": source.bad[clip.id], "state": states[i]}
                bad += 1
                continue
            writer.add(clip.id, clip.audio, wave, states[i])
    finally:
        writer.flush()
        if bad or not (root / INDEX).is_file():
            write_index(root, index)
    return PrepareReport(stored=writer.written, already=len(wanted) - len(todo), bad=bad,
                         shards=len(index["shards"]), store=root, changed=changed)


def source_change(entry: dict[str, Any], path: Path) -> str | None:
    """What changed in the file of a store entry since it was read (:func:`mlatr.file_state.state_change`);
    None when nothing did, nothing was recorded, or the file is gone (the store keeps its copy)."""
    change = state_change(entry.get("state"), file_state(path))
    return None if change == "deleted" else change


class StoreSource(AudioSource):
    """A :class:`~mlatr.data.pipeline.source.Source` that reads a prepared store instead of decoding files (the
    bookkeeping of :class:`~mlatr.data.pipeline.file_source.AudioSource`: cache, ``skip_bad``, with the
    store's reads in place of the files').

    Every clip of ``manifest`` must be in the store (prepared, or recorded as unreadable) with the same
    audio path and an unchanged file (:func:`source_change`), and the store's sample rate must be
    ``sample_rate``; otherwise MlatrError says which clips to prepare, and what changed. Clips recorded as
    unreadable behave as the unreadable files did (error, or a counted skip with ``skip_bad``)."""

    def __init__(self, store: str | os.PathLike, manifest: Manifest, sample_rate: int = 16000, cache: bool = False,
                 skip_bad: bool = False):
        super().__init__(manifest, sample_rate, cache=cache, skip_bad=skip_bad)
        self.store = Path(store)
        index = read_index(self.store)
        if index["sample_rate"] != sample_rate:
            raise MlatrError(f"{self.store}: prepared at {index['sample_rate']} Hz, the model reads {sample_rate} Hz "
                             f"(data.sample_rate); prepare it again with --sample-rate {sample_rate}")
        self._shards = [self.store / name for name in index["shards"]]
        self._entries: list[tuple[int, int, int, float] | None] = []
        self._bad_in_store: dict[int, str] = {}
        missing, changed = [], []
        for i, clip in enumerate(manifest):
            entry, bad = index["clips"].get(clip.id), index["bad"].get(clip.id)
            recorded = entry if entry is not None and entry["audio"] == clip.audio else bad
            if recorded is not None and recorded["audio"] == clip.audio:
                change = source_change(recorded, clip.audio_path(manifest.root))
                if change:
                    changed.append(f"{clip.id!r} ({clip.audio}: {change})")
            if entry is not None and entry["audio"] == clip.audio:
                self._entries.append((entry["shard"], entry["offset"], entry["length"], entry["scale"]))
            elif bad is not None and bad["audio"] == clip.audio:
                self._entries.append(None)
                self._bad_in_store[i] = bad["error"]
            else:
                self._entries.append(None)
                missing.append(clip.id)
        where = manifest.path or "the manifest"
        if changed:
            raise MlatrError(f"{self.store}: {len(changed)} clip(s) of {where} changed since `mlatr data prepare` "
                             f"stored them (first: {'; '.join(changed[:3])}); the store would serve the old "
                             f"audio: run `mlatr data prepare {where} -o {self.store}` again (it prepares the "
                             f"changed clips again)")
        if missing:
            raise MlatrError(f"{self.store}: {len(missing)} clip(s) of {where} are not in the store (first: "
                             f"{', '.join(repr(m) for m in missing[:3])}); run `mlatr data prepare {where} -o "
                             f"{self.store}` (it adds what is missing)")
        self._files: dict[int, tuple[int, int, np.dtype]] = {}

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_files"] = {}  # each process opens the shards itself
        return state

    def _shard(self, k: int) -> tuple[int, int, np.dtype]:
        """``(file descriptor, data offset, dtype)`` of shard ``k``, opened once per process."""
        if k not in self._files:
            path = self._shards[k]
            try:
                with open(path, "rb") as fh:
                    version = np.lib.format.read_magic(fh)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    _, _, dtype = read_header(fh)
                    start = fh.tell()
                fd = os.open(path, os.O_RDONLY)
            except (OSError, ValueError) as exc:
                raise MlatrError(f"{path}: unreadable store shard ({exc})") from exc
            self._files[k] = (fd, start, np.dtype(dtype))
        return self._files[k]

    def close(self) -> None:
        """Close the shards this process opened."""
        for fd, _, _ in self._files.values():
            os.close(fd)
        self._files = {}

    def __del__(self) -> None:
        try:
            self.close()
        except (OSError, AttributeError):
            pass

    def _entry(self, index: int) -> tuple[int, int, int, float]:
        entry = self._entries[index]
        if entry is None:
            clip = self.manifest[index]
            raise MlatrError(f"{clip.audio}: {self._bad_in_store[index]} (recorded by mlatr data prepare)")
        return entry

    def _read(self, index: int, start: int, count: int) -> np.ndarray:
        shard, offset, _, scale = self._entry(index)
        fd, data_start, dtype = self._shard(shard)
        nbytes = count * dtype.itemsize
        raw = os.pread(fd, nbytes, data_start + (offset + start) * dtype.itemsize)
        if len(raw) != nbytes:
            raise MlatrError(f"{self._shards[shard]}: truncated store shard (clip {self.manifest[index].id!r})")
        return decode_samples(np.frombuffer(raw, dtype=dtype), scale)

    def _decode(self, index: int) -> np.ndarray:
        return self._read(index, 0, self._entry(index)[2])

    def _probe(self, index: int) -> int:
        return self._entry(index)[2]

    def crop(self, index: int, count: int, start: int | None = None) -> np.ndarray | None:
        """As :meth:`AudioSource.crop`, reading only the window from its shard."""
        if index in self._decoded or self.cache:
            return super().crop(index, count, start)
        clip = self.manifest[index]
        if clip.id in self.bad:
            return None
        try:
            length = self._probe(index)
            if length <= count:
                return self._read(index, 0, length)
            return self._read(index, window_begin(length, count, start), count)
        except MlatrError as exc:
            return self._failed(clip, exc)

    def lengths(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> dict[int, int | None]:
        if self.cache:
            return super().lengths(indices, workers, progress)
        return {i: self.length(i) for i in indices}
