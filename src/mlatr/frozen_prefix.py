"""The outputs of a frozen lower part of the audio backbone, per clip and per block, kept on disk.

Training the upper blocks of aiSFX (``train_last_blocks``, :class:`mlatr.models.aisfx.AisfxEncoder`) while
the lower ones stay frozen: the lower blocks give every clip the same output in every epoch (batch norm
in inference mode), so a run computes them once. :func:`prefix_features` fills a :class:`PrefixCache`
with the stage-``s`` blocks (the output of the first ``s`` conv blocks, one ``[C, T, F]`` map per ~2.3 s
block of the clip's centre crop) of the clips it does not hold yet, and returns a :class:`BlockFeatures`
view of them in manifest order; :func:`mlatr.models.aisfx.upper_blocks` takes it from there. Heads-only
training reads pooled vectors instead (:class:`PooledFeatures`, :mod:`mlatr.frozen_features`), and a run
with nothing cached the waveforms (:class:`Waveforms`): all are ``ClipFeatures``, what
:func:`mlatr.training.head_training.train_heads` reads a batch of clips from.

Layout of a cache folder: ``index.json`` (format ``mlatr-prefix-cache-1``: the encoder's config, the stage,
the stored dtype, the map shape ``[C, T, F]``, the chunk files and, per clip key ``[id, size, mtime_ns]``,
``[chunk, first row, blocks]``) and ``chunk-NNNNN.npy`` files ``[rows, C, T, F]`` written once each, read
memory-mapped. A chunk is written before the index that names it, both atomically, so a killed run keeps
every chunk the index names and computes the rest again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import SAMPLE_RATE, collate_waveforms
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.frozen_features import SAVE_EVERY, AudioFeatureCache
from mlatr.inference.audio import SoundFiles
from mlatr.io_utils import atomic_write_json, atomic_write_with
from mlatr.json_input import read_format_json
from mlatr.models.aisfx import upper_blocks

FORMAT = "mlatr-prefix-cache-1"
DTYPES = ("float32", "float16")


class ClipFeatures(Protocol):
    """What a run trains on: the frozen part's output for each clip, gathered by rows."""

    def __len__(self) -> int: ...

    def batch(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features, lengths [B])`` of the clips ``rows``, in that order."""
        ...


class PooledFeatures:
    """Pooled clip vectors ``[N, D]`` (the frozen backbone whole): ``batch(rows) -> ([B, D], [B] = D)``."""

    def __init__(self, vectors: np.ndarray):
        self.vectors = torch.from_numpy(np.ascontiguousarray(vectors, np.float32))

    def __len__(self) -> int:
        return self.vectors.shape[0]

    def batch(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = list(rows)
        return self.vectors[rows], torch.full((len(rows),), self.vectors.shape[1])


class Waveforms:
    """Clips' waveforms (nothing cached): ``batch(rows) -> ([B, T] zero-padded, lengths [B])``, for a run whose
    tail is the whole audio encoder (its frozen lower blocks then run in every step)."""

    def __init__(self, waves: Sequence[np.ndarray]):
        self.waves = list(waves)

    def __len__(self) -> int:
        return len(self.waves)

    def batch(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return collate_waveforms([self.waves[i] for i in rows])


class BlockFeatures:
    """Stage-``s`` blocks of clips: ``batch(rows) -> (x [sum n, C, T, F] float32, counts [B])``, the blocks of
    each clip consecutive (the input of :func:`mlatr.models.aisfx.upper_blocks`)."""

    def __init__(self, chunks: list[np.ndarray], locations: Sequence[tuple[int, int, int]], stage: int):
        self.chunks, self.locations, self.stage = chunks, list(locations), int(stage)

    def __len__(self) -> int:
        return len(self.locations)

    def subset(self, rows: Sequence[int]) -> BlockFeatures:
        return BlockFeatures(self.chunks, [self.locations[i] for i in rows], self.stage)

    def blocks(self, row: int) -> np.ndarray:
        chunk, first, count = self.locations[row]
        return self.chunks[chunk][first:first + count]

    def batch(self, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        parts = [self.blocks(i) for i in rows]
        x = torch.from_numpy(np.concatenate(parts).astype(np.float32, copy=False))
        return x, torch.tensor([p.shape[0] for p in parts], dtype=torch.long)


class PrefixCache:
    """Stage-``stage`` block maps of a frozen encoder per clip, in a folder (see the module docstring).

    Key: ``(clip id, file size, file mtime_ns)``, as :class:`~mlatr.frozen_features.AudioFeatureCache`; the
    whole folder is tied to the encoder's config, the stage and the dtype: a folder made with others is
    refused (remove it, or give another folder).
    """

    def __init__(self, folder: str | Path, encoder_key: str, stage: int, dtype: str = "float32"):
        if dtype not in DTYPES:
            raise MlatrError(f"prefix cache: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        self.folder, self.encoder_key, self.stage, self.dtype = Path(folder), encoder_key, int(stage), dtype
        self.chunk_names: list[str] = []
        self.clips: dict[str, tuple[int, int, int]] = {}
        self.shape: list[int] | None = None
        index = self.folder / "index.json"
        if index.is_file():
            meta = read_format_json(index, FORMAT, "prefix cache index")
            wanted = {"encoder": encoder_key, "stage": self.stage, "dtype": dtype}
            found = {k: meta.get(k) for k in wanted}
            if found != wanted:
                raise MlatrError(f"{index}: a prefix cache of {found}, not {wanted}: remove the folder or give "
                                 "another one")
            self.chunk_names, self.shape = list(meta["chunks"]), meta["shape"]
            self.clips = {k: tuple(v) for k, v in meta["clips"].items()}
        self._arrays: dict[int, np.ndarray] = {}

    @staticmethod
    def key(clip_id: str, path: Path) -> str:
        return json.dumps(list(AudioFeatureCache.file_key(clip_id, path)))

    def __contains__(self, key: str) -> bool:
        return key in self.clips

    def add(self, items: Sequence[tuple[str, np.ndarray]]) -> None:
        """Store ``(key, blocks [n, C, T, F])`` of some clips as one new chunk, then the index naming it."""
        if not items:
            return
        shape = list(items[0][1].shape[1:])
        if self.shape is None:
            self.shape = shape
        if any(list(a.shape[1:]) != self.shape for _, a in items):
            raise MlatrError(f"prefix cache {self.folder}: block maps of shape {self.shape} expected")
        number = len(self.chunk_names)
        name = f"chunk-{number:05d}.npy"
        rows = np.concatenate([a for _, a in items]).astype(self.dtype)
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_with(self.folder / name, lambda fh: np.save(fh, rows))
        first = 0
        for key, a in items:
            self.clips[key] = (number, first, a.shape[0])
            first += a.shape[0]
        self.chunk_names.append(name)
        atomic_write_json(self.folder / "index.json", {
            "format": FORMAT, "encoder": self.encoder_key, "stage": self.stage, "dtype": self.dtype,
            "shape": self.shape, "chunks": self.chunk_names, "clips": self.clips}, indent=None)

    def view(self, keys: Sequence[str]) -> BlockFeatures:
        """The blocks of the clips ``keys`` (all stored), memory-mapped."""
        missing = [k for k in keys if k not in self.clips]
        if missing:
            raise MlatrError(f"prefix cache {self.folder}: no blocks for {missing[0]}")
        arrays = [np.load(self.folder / name, mmap_mode="r") for name in self.chunk_names]
        return BlockFeatures(arrays, [self.clips[k] for k in keys], self.stage)


@torch.no_grad()
def prefix_features(encoder, manifest: Manifest, cache: PrefixCache, max_seconds: float, batch_size: int = 8,
                    progress: bool = True, pooled: AudioFeatureCache | None = None) -> BlockFeatures:
    """The stage-``cache.stage`` blocks of every clip of ``manifest`` (an aiSFX encoder's
    :meth:`~mlatr.models.aisfx.AisfxEncoder.stage_blocks` on the clip's centre crop of ``max_seconds``, the
    crop :func:`mlatr.frozen_features.audio_features` encodes), computing only the clips not cached.
    ``pooled``: an audio-feature cache of the same encoder filled on the way with each computed clip's
    pooled vector (the frozen upper blocks over the same maps), so one pass gives both.
    """
    keys = [cache.key(c.id, c.audio_path(manifest.root)) for c in manifest.clips]
    todo = [i for i, k in enumerate(keys) if k not in cache]
    encoder.eval()
    device = next((p.device for p in encoder.parameters()), torch.device("cpu"))
    bar = tqdm(total=len(todo), desc=f"stage-{cache.stage} blocks", unit="clip", disable=not progress or not todo)
    for start in range(0, len(todo), SAVE_EVERY):
        rows = todo[start:start + SAVE_EVERY]
        clips = SoundFiles([str(manifest.clips[i].audio_path(manifest.root)) for i in rows], SAMPLE_RATE, max_seconds)
        items: list[tuple[str, np.ndarray]] = []
        waves = [(k, clips.read(k)) for k in range(len(clips))]
        for first in range(0, len(waves), batch_size):
            part = waves[first:first + batch_size]
            wave, lengths = collate_waveforms([w for _, w in part])
            wave, lengths = wave.to(device), lengths.to(device)
            x, counts = encoder.stage_blocks(wave, lengths, cache.stage)
            split = torch.split(x, counts.tolist())
            if pooled is not None:
                vectors = upper_blocks(encoder.cnn, x, counts, cache.stage).pooled.cpu().numpy()
                for (k, _), vec in zip(part, vectors, strict=True):
                    file_key = AudioFeatureCache.file_key(manifest.clips[rows[k]].id,
                                                          manifest.clips[rows[k]].audio_path(manifest.root))
                    pooled.vectors[file_key] = vec
            items += [(keys[rows[k]], blocks.cpu().numpy()) for (k, _), blocks in zip(part, split, strict=True)]
            bar.update(len(part))
        cache.add(items)
        if pooled is not None:
            pooled.save()
    bar.close()
    return cache.view(keys)
