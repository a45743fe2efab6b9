"""The one path from audio to embeddings: clips of any length, cut into windows, encoded in batches.

Every consumer of a model's audio side goes through :func:`embed_clips`: ``mlatr encode`` / ``eval``
(:func:`mlatr.inference.encoding.encode_manifest`), ``index build``, a sound query, the frozen-feature cache
(:mod:`mlatr.frozen_features`) and the Python API (:meth:`mlatr.inference.LoadedModel.embed_audio`).

Windows. Encoding a whole 300 s clip at once makes the audio encoder's activations grow with the clip, and
a batch of 16 such clips took gigabytes. With a window length ``W`` (by default the model's own evaluation
crop, ``data.eval_max_seconds``), a clip of ``T > W`` samples is cut into ``n = ceil(T / W)`` consecutive
windows of equal length (``T / n`` samples, none longer than ``W``, no short tail), the windows of
consecutive clips are encoded ``batch_size`` at a time, and the clip's embedding is the length-weighted
mean of its windows' unit embeddings, normalised again. The encoder therefore never sees more than
``batch_size x W`` samples at once; a clip no longer than ``W`` is one window and encodes exactly as
without windows (the same padded batches of consecutive clips).

Sources. A manifest's clips are read through :class:`~mlatr.data.pipeline.file_source.AudioSource` (centre-cropped to
``max_seconds``, decoded ahead by ``workers`` processes, unreadable clips skipped under ``skip_bad``); a
list of file paths becomes such a source (:func:`file_source`); in-memory waveforms are resampled to the
model's rate and encoded as they are.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import collate_waveforms, load_audio, resample
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.pipeline.batches import iter_eval_audio
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.errors import MlatrError
from mlatr.models.outputs import EncoderOutput, at_least_float32

#: ``max_seconds`` that crops nothing (an audio file of more than 30 years is not expected).
WHOLE_CLIP = 1e9

#: An audio encoder as the path calls it: ``waveform [B, T], lengths [B] -> EncoderOutput``.
EncodeFn = Callable[[torch.Tensor, torch.Tensor], EncoderOutput]


def window_bounds(n_samples: int, window: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` of ``ceil(n_samples / window)`` equal consecutive windows covering the clip."""
    if window <= 0:
        raise ValueError("window must be positive")
    n = max(1, math.ceil(n_samples / window))
    edges = np.linspace(0, n_samples, n + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def pool_windows(embeddings: np.ndarray, lengths: list[int]) -> np.ndarray:
    """The clip embedding ``[d]``: length-weighted mean of its windows' ``[n, d]`` embeddings, unit norm."""
    w = np.asarray(lengths, dtype=np.float64)
    mean = (embeddings.astype(np.float64) * (w / w.sum())[:, None]).sum(axis=0)
    norm = np.linalg.norm(mean)
    return (mean / norm if norm > 0 else mean).astype(np.float32)


@torch.no_grad()
def embed_clips(encode: EncodeFn, clips: Iterable[tuple[int, np.ndarray]], window: int, batch_size: int,
                device: torch.device | str, bar: tqdm | None = None, frames_sink: list | None = None
                ) -> tuple[list[int], np.ndarray]:
    """Embeddings of ``clips`` (``(key, mono waveform [T])`` in order): ``(keys, [N, d] float32)``.

    Each clip is cut into windows of at most ``window`` samples (:func:`window_bounds`); ``batch_size``
    windows (of consecutive clips) go to ``encode`` at a time; a clip of several windows gets
    :func:`pool_windows` of them. ``frames_sink`` (a list) receives each batch's ``(frames, mask)`` on the CPU
    (for the frame-scoring matching heads; every clip must then be one window). ``bar`` counts clips.
    """
    keys: list[int] = []
    out: list[np.ndarray] = []
    pending: list[tuple[int, int, np.ndarray]] = []  # (key, windows of that clip, window waveform)
    parts: dict[int, tuple[list[np.ndarray], list[int]]] = {}

    def flush() -> None:
        wave, lens = collate_waveforms([w for _, _, w in pending])  # [B, T_max], [B]
        encoded = encode(wave.to(device), lens.to(device))
        emb = at_least_float32(encoded.pooled).cpu().numpy()  # [B, d]
        if frames_sink is not None:
            if encoded.frames is None:
                raise MlatrError("this encoder gives no frame/token features, which the model's matching head needs")
            frames_sink.append((encoded.frames.float().cpu(), None if encoded.mask is None else encoded.mask.cpu()))
        for (key, count, w), e in zip(pending, emb, strict=True):
            embs, lengths = parts.setdefault(key, ([], []))
            embs.append(e)
            lengths.append(w.shape[0])
            if len(embs) == count:
                del parts[key]
                keys.append(key)
                out.append(embs[0] if count == 1 else pool_windows(np.stack(embs), lengths))
                if bar is not None:
                    bar.update(1)
        pending.clear()

    for key, wave in clips:
        bounds = window_bounds(wave.shape[0], window)
        if frames_sink is not None and len(bounds) > 1:
            raise MlatrError("frame features of a clip longer than one window cannot be kept: encode it whole "
                             "(a window as long as the crop)")
        for a, b in bounds:
            pending.append((key, len(bounds), wave[a:b]))
            if len(pending) == batch_size:
                flush()
    if pending:
        flush()
    dim = out[0].shape[0] if out else 0
    return keys, (np.stack(out) if out else np.zeros((0, dim), np.float32))


def source_clips(source: AudioSource, batch_size: int, max_seconds: float, workers: int = 0
                 ) -> Iterator[tuple[int, np.ndarray]]:
    """``(clip index, waveform [T])`` of every readable clip of ``source`` in order, centre-cropped to
    ``max_seconds`` (:func:`~mlatr.data.pipeline.batches.iter_eval_audio`; ``workers`` processes read ahead)."""
    for idx, wave, lens in iter_eval_audio(source, batch_size, max_seconds, workers=workers):
        for row, i in enumerate(idx):
            yield i, wave[row, : int(lens[row])].numpy()


def encode_source(encode: EncodeFn, source: AudioSource, batch_size: int, max_seconds: float,
                  device: torch.device | str, *, window_seconds: float | None = None, progress: bool = False,
                  desc: str = "audio", workers: int = 0, frames_sink: list | None = None
                  ) -> tuple[list[int], np.ndarray]:
    """Embeddings of every readable clip of ``source``: ``(clip indices, [N, d])``, each centre-cropped to
    ``max_seconds`` and encoded as windows of ``window_seconds`` (default: the whole crop, one window)."""
    window = int(round(min(window_seconds or max_seconds, max_seconds) * source.sample_rate))
    bar = tqdm(total=len(source.manifest), desc=desc, unit="clip", disable=not progress, leave=False)
    try:
        return embed_clips(encode, source_clips(source, batch_size, max_seconds, workers), window, batch_size,
                           device, bar, frames_sink)
    finally:
        bar.close()


class FileSource(AudioSource):
    """Audio files given by path (no manifest line, no stated duration): an :class:`AudioSource` whose
    clips are the files, read with :func:`~mlatr.audio.io.load_audio`; errors name the file."""

    def _decode(self, index: int) -> np.ndarray:
        return load_audio(self.manifest[index].audio, self.sample_rate)

    def _failed(self, clip: Clip, exc: MlatrError) -> None:
        if not self.skip_bad:
            raise exc
        self.bad[clip.id] = str(exc)
        return None


def file_source(paths: Sequence[str | os.PathLike], sample_rate: int, skip_bad: bool = False) -> FileSource:
    """A :class:`FileSource` of ``paths`` (clip id = the path as given, audio = the absolute path)."""
    clips = [Clip(id=os.fspath(p), audio=str(Path(p).resolve())) for p in paths]
    return FileSource(Manifest(clips=clips, root=Path("/")), sample_rate, cache=False, skip_bad=skip_bad)


def waveform_clips(waves: Sequence[np.ndarray], sample_rate: int, model_rate: int
                   ) -> Iterator[tuple[int, np.ndarray]]:
    """``(i, waveform at model_rate)`` of in-memory mono signals recorded at ``sample_rate``."""
    for i, w in enumerate(waves):
        a = np.asarray(w, dtype=np.float32)
        if a.ndim != 1 or a.shape[0] == 0:
            raise MlatrError(f"audio {i}: expected a non-empty 1-D waveform, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise MlatrError(f"audio {i}: the waveform holds NaN or infinite samples")
        yield i, resample(a, int(sample_rate), model_rate)
