"""Texts to embeddings in batches: the text side of a model in use (captions of an index, queries, prompts).

:func:`encode_texts` is the one text path, as :mod:`mlatr.inference.audio` is the audio one: ``mlatr encode`` /
``eval`` (:func:`mlatr.inference.encoded_split.encode_manifest`), an index's captions, text queries and
zero-shot prompts (:class:`mlatr.inference.LoadedModel`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm import tqdm

from mlatr.errors import MlatrError
from mlatr.models.outputs import at_least_float32


@torch.no_grad()
def encode_texts(model, texts: Sequence[str], langs: Sequence[str] | None, batch_size: int,
                 progress: bool = False, desc: str = "text", frames_sink: list | None = None) -> np.ndarray:
    """Pooled caption embeddings ``[N, d]``, ``batch_size`` texts per call (``langs=None``: the encoder is
    not told the language, see :mod:`mlatr.search.query`); ``frames_sink`` (a list) receives
    each batch's ``(frames, mask)`` on the CPU (see :func:`pad_frames`)."""

    chunks = []
    for start in tqdm(range(0, len(texts), batch_size), desc=desc, unit="batch", disable=not progress,
                      leave=False):
        batch_langs = None if langs is None else list(langs[start:start + batch_size])
        out = model.encode_text(list(texts[start:start + batch_size]), batch_langs)
        chunks.append(at_least_float32(out.pooled).cpu().numpy())  # [b, d]
        if frames_sink is not None:
            if out.frames is None:
                raise MlatrError("this encoder gives no token features, which the model's matching head needs")
            frames_sink.append((out.frames.float().cpu(), None if out.mask is None else out.mask.cpu()))
    return np.concatenate(chunks) if chunks else np.zeros((0, 0), np.float32)
