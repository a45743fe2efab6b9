"""A manifest split encoded by a model into the evaluation contract's arrays (:class:`EncodedSplit`).

``encode_manifest`` returns audio embeddings ``[Na, D]`` and text embeddings ``[Nt, D]`` with ``text_audio``,
``text_lang`` and ``text_group`` (see docs/architecture.md), which :func:`mlatr.evaluation.evaluate_embeddings`
consumes and ``mlatr encode`` writes as an NPZ (or Parquet: :mod:`mlatr.inference.tables`). The audio goes
through :mod:`mlatr.inference.audio`, the text through :mod:`mlatr.inference.text`; :func:`project` gives the
same arrays from a backbone's cached features.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.pipeline.source import Source
from mlatr.inference.audio import SourceClips, Windowing, model_vectors
from mlatr.inference.text import encode_texts
from mlatr.io_utils import atomic_write_with
from mlatr.models.outputs import EncoderOutput


@dataclass
class EncodedSplit:
    audio: np.ndarray  # [Na, D] float32, unit norm
    text: np.ndarray  # [Nt, D]
    text_audio: np.ndarray  # [Nt] int64 index into audio
    text_lang: np.ndarray  # [Nt] str
    text_group: np.ndarray  # [Nt] int64
    clip_ids: list[str]
    texts: list[str]
    #: ids of clips skipped because their audio could not be read (``skip_bad``)
    skipped: dict[str, str] = field(default_factory=dict)
    #: clips of the manifest kept, in the order of ``audio`` rows
    clip_rows: list[int] = field(default_factory=list)
    #: their audio files (absolute paths)
    clip_paths: list[str] = field(default_factory=list)
    #: Frame/token features for fine-grained heads (only with ``encode_manifest(frames=True)``):
    #: ``audio_frames [Na, La, D]`` float32 torch tensors zero-padded to the longest clip, ``audio_mask
    #: [Na, La]`` bool (True = valid); ``text_frames [Nt, Lt, D]``, ``text_mask [Nt, Lt]`` likewise.
    audio_frames: torch.Tensor | None = None
    audio_mask: torch.Tensor | None = None
    text_frames: torch.Tensor | None = None
    text_mask: torch.Tensor | None = None

    def audio_side(self) -> EncoderOutput:
        """The clips (pooled + frames + mask) as one side of a match for a matching head."""
        return EncoderOutput(torch.from_numpy(self.audio), self.audio_frames, self.audio_mask)

    def text_side(self) -> EncoderOutput:
        """The captions as one side of a match."""
        return EncoderOutput(torch.from_numpy(self.text), self.text_frames, self.text_mask)

    def arrays(self) -> dict[str, np.ndarray]:
        """The five arrays of the evaluation contract."""
        return {"audio": self.audio, "text": self.text, "text_audio": self.text_audio,
                "text_lang": self.text_lang, "text_group": self.text_group}

    def save_npz(self, path: str | os.PathLike) -> None:
        arrays = dict(self.arrays(), clip_ids=np.asarray(self.clip_ids, dtype=str),
                      texts=np.asarray(self.texts, dtype=str))
        atomic_write_with(path, lambda fh: np.savez(fh, **arrays))


def pad_frames(parts: list[tuple[torch.Tensor, torch.Tensor | None]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack per-batch ``(frames [B, L_b, D], mask [B, L_b] | None)`` into ``[N, L, D]`` float32 and a
    bool mask ``[N, L]`` (L = the longest batch); padded positions are zero and masked out."""
    n = sum(f.shape[0] for f, _ in parts)
    length = max((f.shape[1] for f, _ in parts), default=0)
    dim = parts[0][0].shape[2] if parts else 0
    frames = torch.zeros(n, length, dim, dtype=torch.float32)
    mask = torch.zeros(n, length, dtype=torch.bool)
    r = 0
    for f, m in parts:
        b, lb = f.shape[:2]
        frames[r:r + b, :lb] = f.float().cpu()
        mask[r:r + b, :lb] = True if m is None else m.cpu()
        r += b
    return frames, mask


def encode_manifest(model, manifest: Manifest, languages: Sequence[str] | None = None, batch_size: int = 64,
                    max_seconds: float = 10.0, sample_rate: int = 16000, skip_bad: bool = False,
                    source: Source | None = None, progress: bool = False, frames: bool = False,
                    workers: int = 0) -> EncodedSplit:
    """Encode every clip (centre-cropped to ``max_seconds``, whole: one window) and every caption (in
    ``languages``) of ``manifest``; ``workers`` processes read (and, on a CPU, encode) the audio
    (:func:`~mlatr.inference.audio.model_vectors`).

    ``frames=True`` also keeps the frame/token features and masks (padded, float32, on the CPU) that a
    fine-grained matching head scores (:mod:`mlatr.matching`); they are dropped otherwise.

    ``source`` lets a caller reuse a :class:`~mlatr.data.pipeline.source.Source` (and its decoded-audio cache)
    across calls, e.g. the trainer's validation every epoch: a caching source is filled by ``workers``
    processes first, then read from memory here.
    """
    source = source or AudioSource(manifest, sample_rate, cache=False, skip_bad=skip_bad)
    if source.cache:
        source.fill(range(len(source.manifest)), workers)
        workers = 1
    found = model_vectors(model, SourceClips(source, max_seconds), Windowing.of(max_seconds, batch_size, sample_rate),
                          workers=max(1, workers), progress=progress, frames=frames)
    was_training = model.training
    model.eval()
    text_parts: list | None = [] if frames else None
    try:
        kept = Manifest(clips=[manifest[i] for i in found.rows], root=manifest.root, path=manifest.path)
        arrays = kept.caption_arrays(languages)
        text = encode_texts(model, arrays["texts"], list(arrays["text_lang"]), batch_size, progress,
                            frames_sink=text_parts)
    finally:
        model.train(was_training)
    enc = EncodedSplit(
        audio=found.vectors, text=text, text_audio=arrays["text_audio"], text_lang=arrays["text_lang"],
        text_group=arrays["text_group"], clip_ids=[c.id for c in kept], texts=arrays["texts"],
        skipped=dict(source.bad), clip_rows=found.rows,
        clip_paths=[str(c.audio_path(manifest.root).resolve()) for c in kept],
    )
    if frames:
        enc.audio_frames, enc.audio_mask = pad_frames(found.frames)
        enc.text_frames, enc.text_mask = pad_frames(text_parts)
    return enc


def project(model, audio_feats: np.ndarray, text_feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Projected unit-norm embeddings of precomputed backbone features (the DualEncoder's heads), computed in the
    heads' dtype (cached features are float32; a model made in float64 widens them)."""
    param = next(model.audio_projection.parameters(), torch.empty(0))  # the heads may sit on a GPU
    with torch.no_grad():
        a = model.audio_projection(torch.from_numpy(audio_feats).to(param.device, param.dtype)).cpu()
        t = model.text_projection(torch.from_numpy(text_feats).to(param.device, param.dtype)).cpu()
    return _unit(a.numpy()), _unit(t.numpy())


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
