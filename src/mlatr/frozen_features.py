"""Features of a frozen audio backbone, computed once per clip and kept on disk.

A frozen encoder (aisfx in ``mlatr demo-real``) gives every clip the same pooled vector in every epoch,
so a run that trains only projection heads (ATRI sec. 3.1's ``g(f(x))`` with ``f`` fixed) computes
``f(x)`` once: :func:`audio_features` fills an :class:`AudioFeatureCache` with the clips it does not
hold yet and returns the ``[N, D]`` matrix in manifest order.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from mlatr.audio.io import SAMPLE_RATE
from mlatr.data.manifest import Manifest
from mlatr.inference.audio import Embedded, SoundFiles, Windowing, embed
from mlatr.io_utils import atomic_write_with

#: Clips computed between two saves of the cache (what a killed run loses at most).
SAVE_EVERY = 80


class AudioFeatureCache:
    """Pooled features of a frozen audio encoder per clip, in one ``.npz`` (written atomically).

    Key: ``(clip id, file size, file mtime_ns)``; the whole cache is tied to the encoder's config (a
    different encoder or crop length starts empty). Owned by the run that creates it (no global state).
    """

    def __init__(self, path: str | Path, encoder_key: str):
        self.path, self.encoder_key = Path(path), encoder_key
        self.vectors: dict[tuple[str, int, int], np.ndarray] = {}
        if self.path.is_file():
            with np.load(self.path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                if meta["encoder"] == encoder_key:
                    for key, vec in zip(meta["keys"], z["vectors"], strict=True):
                        self.vectors[tuple(key)] = vec

    @staticmethod
    def file_key(clip_id: str, path: Path) -> tuple[str, int, int]:
        st = path.stat()
        return (clip_id, int(st.st_size), int(st.st_mtime_ns))

    def save(self) -> None:
        keys = list(self.vectors)
        vectors = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)
        meta = np.asarray(json.dumps({"encoder": self.encoder_key, "keys": [list(k) for k in keys]}))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_with(self.path, lambda fh: np.savez(fh, vectors=vectors, meta=meta))


def audio_features(encoder, manifest: Manifest, cache: AudioFeatureCache, max_seconds: float,
                   batch_size: int = 8, progress: bool = True) -> np.ndarray:
    """``[N, D]`` pooled features of every clip (frozen ``encoder``), computing only those not cached.

    Clips longer than ``max_seconds`` are centre-cropped and encoded whole, ``batch_size`` per call, through
    the one audio path (:func:`mlatr.inference.audio.embed`); the cache is saved every :data:`SAVE_EVERY` clips
    and at the end.
    """
    keys = [cache.file_key(c.id, c.audio_path(manifest.root)) for c in manifest.clips]
    todo = [i for i, k in enumerate(keys) if k not in cache.vectors]
    device = next((p.device for p in encoder.parameters()), torch.device("cpu"))
    clips = SoundFiles([str(manifest.clips[i].audio_path(manifest.root)) for i in todo], SAMPLE_RATE, max_seconds)
    unsaved = 0

    def keep(part: Embedded) -> None:
        nonlocal unsaved
        for k, vec in zip(part.rows, part.vectors, strict=True):
            cache.vectors[keys[todo[k]]] = vec
        unsaved += len(part.rows)
        if unsaved >= SAVE_EVERY:
            cache.save()
            unsaved = 0

    encoder.eval()
    # the whole crop is one window per clip
    embed(encoder, clips, Windowing.of(max_seconds, batch_size, SAMPLE_RATE), device, progress=progress and bool(todo),
          desc="audio features", on_chunk=keep)
    cache.save()
    return np.stack([cache.vectors[k] for k in keys]).astype(np.float32)
