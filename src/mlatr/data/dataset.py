"""Clips of a manifest split as training / evaluation batches.

Training (:class:`TrainBatches`): each epoch shuffles the clips with a generator derived from
``(seed, epoch)``; for each clip it draws one source caption index ``j`` (the same ``j`` in every
language, so the row holds translations of one caption) and a random crop. The pairing scheme
(:mod:`mlatr.losses.schemes`) then decides which languages of the row are encoded. Because every random
choice of epoch ``e`` comes from generators seeded by ``(seed, e)``, a run resumed at an epoch boundary
replays exactly what an uninterrupted run would have done. The draws are made up front for the whole
epoch (:func:`mlatr.data.loader.plan_epoch`) and the audio is read by worker processes
(``data.workers``), so neither the number of workers nor the number of training processes changes them.

Evaluation (:func:`iter_eval_audio`): every clip in order, deterministic centre crop.

Audio comes from an :class:`AudioSource`: the manifest's files, decoded and resampled when read
(optionally kept in memory), or a decoded-audio store (:class:`mlatr.data.store.StoreSource`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import probe_length
from mlatr.data.clip_audio import load_clip_audio
from mlatr.data.loader import ClipWindows, PlannedClip, decode_all, eval_items, plan_epoch, stream, training_items
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import InputError, MlatrError


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from a tuple (stable across runs and Python versions, unlike ``hash``)."""

    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class AudioSource:
    """Loads a manifest's audio at one sample rate, optionally keeping decoded clips in memory.

    With ``skip_bad`` an unreadable clip is recorded in :attr:`bad` (id -> message) and reported as
    ``None`` instead of raising; the caller counts and drops it. A source is sent to worker processes
    without its in-memory clips (:meth:`__getstate__`).
    """

    def __init__(self, manifest: Manifest, sample_rate: int = 16000, cache: bool = False,
                 skip_bad: bool = False):
        self.manifest = manifest
        self.sample_rate = sample_rate
        self.cache = cache
        self.skip_bad = skip_bad
        self.bad: dict[str, str] = {}
        self._decoded: dict[int, np.ndarray] = {}
        self._probed: dict[int, int] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_decoded"] = {}
        return state

    def _failed(self, clip: Clip, exc: MlatrError) -> None:
        """Record ``clip`` as unreadable under ``skip_bad``, else raise: an :class:`InputError` as it is (it
        names the manifest's file, line and field already), any other error with the clip's id."""
        if not self.skip_bad:
            if isinstance(exc, InputError):
                raise exc
            raise MlatrError(f"clip {clip.id!r}: {exc}") from exc
        self.bad[clip.id] = str(exc)
        return None

    def _decode(self, index: int) -> np.ndarray:
        """Clip ``index`` decoded whole; refused when truncated or far from its stated duration."""
        return load_clip_audio(self.manifest[index], self.manifest.root, self.sample_rate, self.manifest.path)

    def _probe(self, index: int) -> int:
        clip = self.manifest[index]
        return probe_length(clip.audio_path(self.manifest.root), self.sample_rate)

    def load(self, index: int) -> np.ndarray | None:
        """Clip ``index`` whole at the source's sample rate (None if unreadable under ``skip_bad``)."""
        if index in self._decoded:
            return self._decoded[index]
        clip = self.manifest[index]
        if clip.id in self.bad:
            return None
        try:
            wave = self._decode(index)
        except MlatrError as exc:
            return self._failed(clip, exc)
        if self.cache:
            self._decoded[index] = wave
        return wave

    def crop(self, index: int, count: int, start: int | None = None) -> np.ndarray | None:
        """Samples ``[start, start + count)`` of clip ``index`` (``start=None``: the centred window; a start
        past the end is moved back inside), or the whole clip when it has at most ``count`` samples."""
        wave = self.load(index)
        if wave is None:
            return None
        return _window(wave, count, start)

    def length(self, index: int) -> int | None:
        """The decoded length of clip ``index`` (from the cache, else the file's header), None if unreadable."""
        if index in self._decoded:
            return int(self._decoded[index].shape[0])
        if index in self._probed:
            return self._probed[index]
        clip = self.manifest[index]
        if clip.id in self.bad:
            return None
        try:
            self._probed[index] = self._probe(index)
        except MlatrError as exc:
            return self._failed(clip, exc)
        return self._probed[index]

    def lengths(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> dict[int, int | None]:
        """:meth:`length` of every clip of ``indices``; a caching source decodes them all first (by
        ``workers`` processes), so every length is the decoded one."""
        if self.cache:
            self.fill(indices, workers, progress)
            return {i: (int(self._decoded[i].shape[0]) if i in self._decoded else None) for i in indices}
        bar = tqdm(indices, desc="reading audio headers", unit="clip", disable=not progress or len(indices) < 1000,
                   leave=False)
        return {i: self.length(i) for i in bar}

    def fill(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> None:
        """Decode every clip of ``indices`` not in memory yet into the cache (by ``workers`` processes)."""
        todo = [i for i in indices if i not in self._decoded and self.manifest[i].id not in self.bad]
        for i, wave in decode_all(self, todo, workers, progress=progress, desc="decoding audio into memory"):
            if wave is not None:
                self._decoded[i] = wave

    @property
    def decoded_bytes(self) -> int:
        """Bytes of decoded audio held in memory."""
        return sum(w.nbytes for w in self._decoded.values())


def window_begin(length: int, count: int, start: int | None) -> int:
    """Where the ``count``-sample window of a clip of ``length > count`` samples begins: centred for
    ``start=None``, else ``start`` moved back inside the clip."""
    return (length - count) // 2 if start is None else min(int(start), length - count)


def _window(wave: np.ndarray, count: int, start: int | None) -> np.ndarray:
    n = wave.shape[0]
    if n <= count:
        return wave
    begin = window_begin(n, count, start)
    return np.asarray(wave[begin:begin + count], dtype=np.float32).copy()


@dataclass
class TrainBatch:
    waveform: torch.Tensor | None  # [B, T] (None: this process's shard kept no clip)
    lengths: torch.Tensor | None  # [B]
    clip_index: list[int]
    rows: list[list[str | None]]  # [B][K] captions of one source caption j, by language
    #: Positions of these clips in the planned global batch, and that batch's plan (every process's clips).
    position: list[int] = field(default_factory=list)
    planned: list[PlannedClip] = field(default_factory=list)


def caption_row(clip: Clip, j: int, languages: Sequence[str]) -> list[str | None]:
    """The captions of source caption ``j`` of ``clip`` in each language (None where missing)."""
    row: list[str | None] = []
    for lang in languages:
        caps = clip.captions.get(lang, [])
        row.append(caps[j] if j < len(caps) else None)
    return row


def usable_caption_indices(clip: Clip, languages: Sequence[str], need_first: bool) -> list[int]:
    """Indices ``j`` with a caption in some language (in the first language if ``need_first``)."""
    longest = max((len(clip.captions.get(lang, [])) for lang in languages), default=0)
    out = []
    for j in range(longest):
        row = caption_row(clip, j, languages)
        if (row[0] is not None) if need_first else any(t is not None for t in row):
            out.append(j)
    return out


class TrainBatches:
    """Epoch iterator of training batches (see the module docstring for the randomness contract).

    ``workers`` processes read and collate the batches, ``prefetch`` batches ahead each (0 = inline);
    ``shard=(rank, world_size)`` yields only this process's contiguous part of every global batch (see
    :func:`~mlatr.data.loader.shard_range`); a sharded iterator yields every planned batch, also one whose
    shard kept no clip, so all processes step together. ``source`` replaces the manifest's files (e.g. a
    :class:`~mlatr.data.store.StoreSource`); ``cache_audio`` and ``skip_bad`` then belong to it.
    """

    def __init__(self, manifest: Manifest, languages: Sequence[str], batch_size: int, max_seconds: float,
                 seed: int, sample_rate: int = 16000, cache_audio: bool = True, skip_bad: bool = False,
                 need_first_language: bool = False, *, source: AudioSource | None = None, workers: int = 0,
                 prefetch: int = 2, shard: tuple[int, int] = (0, 1), progress: bool = False):
        self.manifest = manifest
        self.languages = list(languages)
        self.batch_size = batch_size
        self.num_samples = int(round(max_seconds * sample_rate))
        self.seed = seed
        self.source = source or AudioSource(manifest, sample_rate, cache=cache_audio, skip_bad=skip_bad)
        self.workers, self.prefetch = workers, prefetch
        self.rank, self.world_size = shard
        self.progress = progress
        self.options = [usable_caption_indices(c, self.languages, need_first_language) for c in manifest]
        self.clips = [i for i, opts in enumerate(self.options) if opts]
        self.skipped_no_caption = len(manifest) - len(self.clips)
        self._lengths: dict[int, int | None] | None = None
        if not self.clips:
            need = f"an {self.languages[0]} caption" if need_first_language else "a caption"
            raise MlatrError(f"no training clip has {need} in languages {self.languages}")

    def __len__(self) -> int:
        """Batches per epoch (the last, smaller batch is dropped: contrastive losses need negatives)."""
        return max(1, len(self.clips) // self.batch_size)

    @property
    def lengths(self) -> dict[int, int | None]:
        """Every training clip's decoded length (None = unreadable), read once (headers, store or cache)."""
        if self._lengths is None:
            self._lengths = self.source.lengths(self.clips, self.workers, self.progress)
        return self._lengths

    def plan(self, epoch: int) -> list[list[PlannedClip]]:
        """The planned global batches of ``epoch`` (:func:`~mlatr.data.loader.plan_epoch`)."""
        return plan_epoch(self.clips, self.options, self.lengths, self.batch_size, self.num_samples, self.seed,
                          epoch)

    def rows(self, planned: Sequence[PlannedClip]) -> list[list[str | None]]:
        """The caption rows of planned clips."""
        return [caption_row(self.manifest[c.index], c.caption, self.languages) for c in planned]

    def epoch(self, epoch: int) -> Iterator[TrainBatch]:
        plan = self.plan(epoch)
        items = training_items(plan, self.rank, self.world_size)
        workers = 0 if self.source.cache else self.workers  # a cached epoch is read from memory
        for planned, loaded in zip(plan, stream(ClipWindows(self.source, items, self.num_samples), workers,
                                                self.prefetch), strict=True):
            if self.world_size == 1 and len(loaded.clip_index) < 2:
                continue
            kept = [planned[p] for p in loaded.position]
            yield TrainBatch(loaded.waveform, loaded.lengths, loaded.clip_index, self.rows(kept),
                             loaded.position, planned)


def iter_eval_audio(source: AudioSource, batch_size: int, max_seconds: float, workers: int = 0,
                    prefetch: int = 2) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Every clip of ``source.manifest`` in order, centre-cropped to at most ``max_seconds``.

    Yields ``(clip indices, waveform [B, T], lengths [B])``; clips that fail to load under
    ``skip_bad`` are left out (their ids are in ``source.bad``). ``workers`` processes read ahead
    (a caching source is decoded into memory by them first, then read from there).
    """
    limit = int(round(max_seconds * source.sample_rate))
    indices = list(range(len(source.manifest)))
    if source.cache and workers > 0:
        source.fill(indices, workers)
        workers = 0
    for loaded in stream(ClipWindows(source, eval_items(indices, batch_size), limit), workers, prefetch):
        if loaded.waveform is not None:
            yield loaded.clip_index, loaded.waveform, loaded.lengths
