"""Clips of a manifest split as training and evaluation batches.

Training (:class:`TrainBatches`): each epoch's plan (:func:`~mlatr.data.pipeline.epoch_plan.plan_epoch`: clip
order, one source caption index ``j`` per clip, the same ``j`` in every language, and a crop) is read by
the workers (:mod:`mlatr.data.pipeline.workers`) into :class:`TrainBatch` es carrying the caption rows;
the pairing scheme (:mod:`mlatr.losses.schemes`) then decides which languages of a row are encoded.

Evaluation (:func:`iter_eval_audio`): every clip in order, deterministic centre crop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.epoch_plan import (
    PlannedClip,
    caption_row,
    eval_items,
    plan_epoch,
    training_items,
    usable_caption_indices,
)
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.pipeline.source import Source
from mlatr.data.pipeline.workers import ClipWindows, stream
from mlatr.errors import MlatrError


@dataclass
class TrainBatch:
    waveform: torch.Tensor | None  # [B, T] (None: this process's shard kept no clip)
    lengths: torch.Tensor | None  # [B]
    clip_index: list[int]
    rows: list[list[str | None]]  # [B][K] captions of one source caption j, by language
    #: Positions of these clips in the planned global batch, and that batch's plan (every process's clips).
    position: list[int] = field(default_factory=list)
    planned: list[PlannedClip] = field(default_factory=list)


class TrainBatches:
    """Epoch iterator of training batches (see the module docstring for the randomness contract).

    ``workers`` processes read and collate the batches, ``prefetch`` batches ahead each (0 = inline);
    ``shard=(rank, world_size)`` yields only this process's contiguous part of every global batch (see
    :func:`~mlatr.data.pipeline.epoch_plan.shard_range`); a sharded iterator yields every planned batch, also one whose
    shard kept no clip, so all processes step together. ``source`` replaces the manifest's files (e.g. a
    :class:`~mlatr.data.pipeline.store.StoreSource`); ``cache_audio`` and ``skip_bad`` then belong to it.
    """

    def __init__(self, manifest: Manifest, languages: Sequence[str], batch_size: int, max_seconds: float,
                 seed: int, sample_rate: int = 16000, cache_audio: bool = True, skip_bad: bool = False,
                 need_first_language: bool = False, *, source: Source | None = None, workers: int = 0,
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
        """The planned global batches of ``epoch`` (:func:`~mlatr.data.pipeline.epoch_plan.plan_epoch`)."""
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


def iter_eval_audio(source: Source, batch_size: int, max_seconds: float, workers: int = 0,
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
