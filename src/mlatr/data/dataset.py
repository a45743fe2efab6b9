"""Clips of a manifest split as training / evaluation batches.

Training (:class:`TrainBatches`): each epoch shuffles the clips with a generator derived from
``(seed, epoch)``; for each clip it draws one source caption index ``j`` (the same ``j`` in every
language, so the row holds translations of one caption) and a random crop. The pairing scheme
(:mod:`mlatr.losses.schemes`) then decides which languages of the row are encoded. Because every random
choice of epoch ``e`` comes from generators seeded by ``(seed, e)``, a run resumed at an epoch boundary
replays exactly what an uninterrupted run would have done.

Evaluation (:func:`iter_eval_audio`): every clip in order, deterministic centre crop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mlatr.audio.io import collate_waveforms, crop_or_pad, load_audio
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from a tuple (stable across runs and Python versions, unlike ``hash``)."""

    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class AudioSource:
    """Loads a manifest's audio at one sample rate, optionally keeping decoded clips in memory.

    With ``skip_bad`` an unreadable clip is recorded in :attr:`bad` (id -> message) and reported as
    ``None`` instead of raising; the caller counts and drops it.
    """

    def __init__(self, manifest: Manifest, sample_rate: int = 16000, cache: bool = False,
                 skip_bad: bool = False):
        self.manifest = manifest
        self.sample_rate = sample_rate
        self.cache = cache
        self.skip_bad = skip_bad
        self.bad: dict[str, str] = {}
        self._decoded: dict[int, np.ndarray] = {}

    def load(self, index: int) -> np.ndarray | None:
        if index in self._decoded:
            return self._decoded[index]
        clip = self.manifest[index]
        if clip.id in self.bad:
            return None
        try:
            wave = load_audio(clip.audio_path(self.manifest.root), self.sample_rate)
        except MlatrError as exc:
            if not self.skip_bad:
                raise MlatrError(f"clip {clip.id!r}: {exc}") from exc
            self.bad[clip.id] = str(exc)
            return None
        if self.cache:
            self._decoded[index] = wave
        return wave


@dataclass
class TrainBatch:
    waveform: torch.Tensor  # [B, T]
    lengths: torch.Tensor  # [B]
    clip_index: list[int]
    rows: list[list[str | None]]  # [B][K] captions of one source caption j, by language


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
    """Epoch iterator of training batches (see the module docstring for the randomness contract)."""

    def __init__(self, manifest: Manifest, languages: Sequence[str], batch_size: int, max_seconds: float,
                 seed: int, sample_rate: int = 16000, cache_audio: bool = True, skip_bad: bool = False,
                 need_first_language: bool = False):
        self.manifest = manifest
        self.languages = list(languages)
        self.batch_size = batch_size
        self.num_samples = int(round(max_seconds * sample_rate))
        self.seed = seed
        self.source = AudioSource(manifest, sample_rate, cache=cache_audio, skip_bad=skip_bad)
        self.options = [usable_caption_indices(c, self.languages, need_first_language) for c in manifest]
        self.clips = [i for i, opts in enumerate(self.options) if opts]
        self.skipped_no_caption = len(manifest) - len(self.clips)
        if not self.clips:
            need = f"an {self.languages[0]} caption" if need_first_language else "a caption"
            raise MlatrError(f"no training clip has {need} in languages {self.languages}")

    def __len__(self) -> int:
        """Batches per epoch (the last, smaller batch is dropped: contrastive losses need negatives)."""
        return max(1, len(self.clips) // self.batch_size)

    def epoch(self, epoch: int) -> Iterator[TrainBatch]:
        g = torch.Generator().manual_seed(derive_seed(self.seed, epoch, "order"))
        crop = np.random.default_rng(derive_seed(self.seed, epoch, "crop"))
        order = [self.clips[i] for i in torch.randperm(len(self.clips), generator=g).tolist()]
        for b in range(len(self)):
            chosen = order[b * self.batch_size:(b + 1) * self.batch_size]
            waves, lengths, rows, kept = [], [], [], []
            for idx in chosen:
                opts = self.options[idx]
                j = opts[int(crop.integers(len(opts)))]
                wave = self.source.load(idx)
                if wave is None:
                    continue
                if wave.shape[0] > self.num_samples:
                    wave, _ = crop_or_pad(wave, self.num_samples, mode="random", generator=crop)
                waves.append(wave)  # shorter clips are padded only to the longest of the batch
                lengths.append(wave.shape[0])
                rows.append(caption_row(self.manifest[idx], j, self.languages))
                kept.append(idx)
            if len(kept) < 2:
                continue
            w, lens = collate_waveforms(waves, lengths)
            yield TrainBatch(w, lens, kept, rows)


def iter_eval_audio(source: AudioSource, batch_size: int, max_seconds: float
                    ) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Every clip of ``source.manifest`` in order, centre-cropped to at most ``max_seconds``.

    Yields ``(clip indices, waveform [B, T], lengths [B])``; clips that fail to load under
    ``skip_bad`` are left out (their ids are in ``source.bad``).
    """
    limit = int(round(max_seconds * source.sample_rate))
    batch: list[tuple[int, np.ndarray]] = []
    for i in range(len(source.manifest)):
        wave = source.load(i)
        if wave is None:
            continue
        if wave.shape[0] > limit:
            wave, _ = crop_or_pad(wave, limit, mode="center")
        batch.append((i, wave))
        if len(batch) == batch_size:
            yield _collate_eval(batch)
            batch = []
    if batch:
        yield _collate_eval(batch)


def _collate_eval(batch: list[tuple[int, np.ndarray]]):
    idx = [i for i, _ in batch]
    w, lens = collate_waveforms([w for _, w in batch])
    return idx, w, lens
