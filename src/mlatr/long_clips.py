"""Long clips encoded as windows, in batches of bounded size.

Encoding a whole 300 s crop at once makes the audio encoder's activations grow with the crop, and a
batch of 16 such crops took gigabytes. With a window length ``W`` (by default the model's own evaluation
crop, ``data.eval_max_seconds``), a clip of ``T > W`` samples is cut into ``n = ceil(T / W)`` consecutive
windows of equal length (``T / n`` samples, none longer than ``W``, no short tail), the windows of
consecutive clips are encoded ``batch_size`` at a time, and the clip's embedding is the length-weighted
mean of its windows' unit embeddings, normalised again. The encoder therefore never sees more than
``batch_size x W`` samples at once, whatever the crop or the size of the library; a clip no longer than
``W`` is one window and encodes exactly as without windows.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import collate_waveforms
from mlatr.data.pipeline.batches import iter_eval_audio
from mlatr.data.pipeline.file_source import AudioSource


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


def _encode(model, waves: list[np.ndarray], device: torch.device) -> np.ndarray:
    w, lens = collate_waveforms(waves)
    return model.encode_audio(w.to(device), lens.to(device)).pooled.float().cpu().numpy()


@torch.no_grad()
def encode_waveform(model, wave: np.ndarray, window: int, batch_size: int, device: torch.device) -> np.ndarray:
    """Unit embedding ``[d]`` of one (already cropped) waveform, window by window (see the module docstring)."""
    bounds = window_bounds(wave.shape[0], window)
    parts = [_encode(model, [wave[a:b] for a, b in bounds[i:i + batch_size]], device)
             for i in range(0, len(bounds), batch_size)]
    emb = np.concatenate(parts)
    return emb[0] if len(bounds) == 1 else pool_windows(emb, [b - a for a, b in bounds])


def _windows(source: AudioSource, max_seconds: float, window: int
             ) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(clip index, window count of that clip, window waveform)`` for every readable clip, in order,
    centre-cropped to ``max_seconds`` as evaluation crops (:func:`mlatr.data.dataset.iter_eval_audio`)."""
    for (i,), wave, length in iter_eval_audio(source, 1, max_seconds):
        clip = wave[0, : int(length[0])].numpy()
        bounds = window_bounds(clip.shape[0], window)
        for a, b in bounds:
            yield i, len(bounds), clip[a:b]


@torch.no_grad()
def encode_audio_windows(model, source: AudioSource, batch_size: int, max_seconds: float, window_seconds: float,
                         device: torch.device, progress: bool = False, desc: str = "audio"
                         ) -> tuple[list[int], np.ndarray]:
    """Pooled embeddings of every readable clip of ``source`` (``(clip indices, [N, d])``), each
    centre-cropped to ``max_seconds`` and encoded as windows of ``window_seconds``, ``batch_size`` windows
    per encoder call."""
    window = int(round(window_seconds * source.sample_rate))
    rows: list[int] = []
    out: list[np.ndarray] = []
    pending: list[tuple[int, int, np.ndarray]] = []
    by_clip: dict[int, tuple[list[np.ndarray], list[int]]] = {}
    bar = tqdm(total=len(source.manifest), desc=desc, unit="clip", disable=not progress, leave=False)

    def flush() -> None:
        emb = _encode(model, [w for _, _, w in pending], device)
        for (clip, count, wave), e in zip(pending, emb, strict=True):
            embs, lengths = by_clip.setdefault(clip, ([], []))
            embs.append(e)
            lengths.append(wave.shape[0])
            if len(embs) == count:
                del by_clip[clip]
                rows.append(clip)
                out.append(embs[0] if count == 1 else pool_windows(np.stack(embs), lengths))
                bar.update(1)
        pending.clear()

    for item in _windows(source, max_seconds, window):
        pending.append(item)
        if len(pending) == batch_size:
            flush()
    if pending:
        flush()
    bar.close()
    dim = out[0].shape[0] if out else 0
    return rows, (np.stack(out) if out else np.zeros((0, dim), np.float32))
