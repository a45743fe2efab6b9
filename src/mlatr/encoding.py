"""Encode a manifest split with a trained model into the evaluation contract's arrays.

``encode_manifest`` returns audio embeddings ``[Na, D]`` and text embeddings ``[Nt, D]`` with
``text_audio``, ``text_lang`` and ``text_group`` (see docs/architecture.md), which
:func:`mlatr.evaluation.evaluate_embeddings` consumes and ``mlatr encode`` writes as an NPZ.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mlatr.data.dataset import AudioSource, iter_eval_audio
from mlatr.data.manifest import Manifest
from mlatr.io_utils import atomic_write_with


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

    def arrays(self) -> dict[str, np.ndarray]:
        """The five arrays of the evaluation contract."""
        return {"audio": self.audio, "text": self.text, "text_audio": self.text_audio,
                "text_lang": self.text_lang, "text_group": self.text_group}

    def save_npz(self, path: str | os.PathLike) -> None:
        arrays = dict(self.arrays(), clip_ids=np.asarray(self.clip_ids, dtype=str),
                      texts=np.asarray(self.texts, dtype=str))
        atomic_write_with(path, lambda fh: np.savez(fh, **arrays))


@torch.no_grad()
def encode_audio(model, source: AudioSource, batch_size: int, max_seconds: float, device: torch.device,
                 progress: bool = False, desc: str = "audio") -> tuple[list[int], np.ndarray]:
    from tqdm import tqdm

    rows: list[int] = []
    chunks: list[np.ndarray] = []
    bar = tqdm(total=len(source.manifest), desc=desc, unit="clip", disable=not progress, leave=False)
    for idx, wave, lens in iter_eval_audio(source, batch_size, max_seconds):
        out = model.encode_audio(wave.to(device), lens.to(device))
        chunks.append(out.pooled.float().cpu().numpy())
        rows.extend(idx)
        bar.update(len(idx))
    bar.close()
    dim = chunks[0].shape[1] if chunks else 0
    return rows, (np.concatenate(chunks) if chunks else np.zeros((0, dim), np.float32))


@torch.no_grad()
def encode_texts(model, texts: Sequence[str], langs: Sequence[str], batch_size: int,
                 progress: bool = False, desc: str = "text") -> np.ndarray:
    from tqdm import tqdm

    chunks = []
    for start in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch", disable=not progress,
                      leave=False):
        out = model.encode_text(list(texts[start:start + batch_size]), list(langs[start:start + batch_size]))
        chunks.append(out.pooled.float().cpu().numpy())
    return np.concatenate(chunks) if chunks else np.zeros((0, 0), np.float32)


def encode_manifest(model, manifest: Manifest, languages: Sequence[str] | None = None, batch_size: int = 64,
                    max_seconds: float = 10.0, sample_rate: int = 16000, skip_bad: bool = False,
                    source: AudioSource | None = None, progress: bool = False) -> EncodedSplit:
    """Encode every clip and every caption (in ``languages``) of ``manifest``.

    ``source`` lets a caller reuse an :class:`AudioSource` (and its decoded-audio cache) across calls,
    e.g. the trainer's validation every epoch.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    source = source or AudioSource(manifest, sample_rate, cache=False, skip_bad=skip_bad)
    rows, audio = encode_audio(model, source, batch_size, max_seconds, device, progress)
    kept = Manifest(clips=[manifest[i] for i in rows], root=manifest.root, path=manifest.path)
    arrays = kept.caption_arrays(languages)
    text = encode_texts(model, arrays["texts"], list(arrays["text_lang"]), batch_size, progress)
    model.train(was_training)
    return EncodedSplit(
        audio=audio, text=text, text_audio=arrays["text_audio"], text_lang=arrays["text_lang"],
        text_group=arrays["text_group"], clip_ids=[c.id for c in kept], texts=arrays["texts"],
        skipped=dict(source.bad), clip_rows=rows,
    )
