"""Evaluate an encoded split with a model's own matching head (cosine, LGMM or a Table 2 mode).

Fine-grained paper ("Fine-grained audio-text retrieval: local-to-global multiscale matching and cross-modal
similarity consistency") Section 2.1: retrieval ranks by ``S_g``, which for LGMM is asymmetric, so the two
tasks use two matrices: text-to-audio ``[Nt, Na]`` = ``head.scores(text, audio)`` (caption tokens
aggregated) and audio-to-text ``[Na, Nt]`` = ``head.scores(audio, text)`` (audio frames aggregated), each
computed block by block under a memory budget (:func:`mlatr.matching.chunked_scores`) and handed to
:func:`mlatr.evaluation.evaluate_scores` (``a2t_scores``). The pooled cosine head goes through
:func:`evaluate_embeddings` unchanged. Same JSON shape either way; gap/dis use the pooled text embeddings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from mlatr.evaluation.evaluate import (
    DEFAULT_MEMORY_BUDGET_MB,
    Evaluation,
    evaluate_embeddings_with_ranks,
    evaluate_scores_with_ranks,
)
from mlatr.evaluation.zero_shot import zero_shot_from_scores
from mlatr.matching import chunked_scores

#: Working-memory budget of the head's block-wise scoring (the score matrices are not counted).
HEAD_MEMORY_BUDGET_MB = 1024.0


def head_score_matrices(head, enc, memory_budget_mb: float = HEAD_MEMORY_BUDGET_MB,
                        progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(t2a [Nt, Na], a2t [Na, Nt])`` float32 scores of an :class:`~mlatr.inference.encoded_split.EncodedSplit`
    (encoded with ``frames=True`` for frame-based heads)."""
    audio, text = enc.audio_side(), enc.text_side()
    out = []
    for name, query, context in (("t2a", text, audio), ("a2t", audio, text)):
        bar = tqdm(desc=f"{head.name} {name} scores", unit="block", disable=not progress, leave=False)

        def tick(done: int, total: int, bar=bar) -> None:
            bar.total = total
            bar.update(done - bar.n)

        with torch.no_grad():
            out.append(chunked_scores(head, query, context, memory_budget_mb, on_block=tick).float().numpy())
        bar.close()
    return out[0], out[1]


def evaluate_with_head_with_ranks(head, enc, pivot: str = "eng",
                                  memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB,
                                  head_memory_mb: float = HEAD_MEMORY_BUDGET_MB,
                                  progress: bool = False) -> Evaluation:
    """Metrics (and ranks) of ``enc`` ranked by ``head``: the evaluation contract's dict."""
    if head is None or head.name == "cosine":
        return evaluate_embeddings_with_ranks(**enc.arrays(), pivot=pivot, memory_budget_mb=memory_budget_mb,
                                              progress=progress)
    t2a, a2t = head_score_matrices(head, enc, head_memory_mb, progress)
    return evaluate_scores_with_ranks(t2a, enc.text_audio, enc.text_lang, enc.text_group, text=enc.text,
                                      pivot=pivot, memory_budget_mb=memory_budget_mb, progress=progress,
                                      a2t_scores=a2t)


def evaluate_with_head(head, enc, pivot: str = "eng", **options: Any) -> dict:
    """:func:`evaluate_with_head_with_ranks`' metrics only."""
    return evaluate_with_head_with_ranks(head, enc, pivot, **options).metrics


def zero_shot_with_head(head, audio, prompts, targets, memory_budget_mb: float = HEAD_MEMORY_BUDGET_MB
                        ) -> dict[str, float]:
    """Zero-shot top-1 / top-5 (percent) ranking the class prompts with ``head``: scores are
    ``head.scores(audio, prompts)`` ``[N, C]`` (audio as the query, the audio-to-text direction: for LGMM
    the clip's frames are aggregated, eq. 5), computed block by block. ``audio`` and ``prompts`` are
    :class:`~mlatr.models.outputs.EncoderOutput` s (frames and masks for frame-level heads); with the
    cosine head this is :func:`~mlatr.evaluation.zero_shot` on the pooled vectors."""
    with torch.no_grad():
        scores = chunked_scores(head, audio, prompts, memory_budget_mb)
    return zero_shot_from_scores(scores.float().numpy(), targets)


def needs_frames(head) -> bool:
    """Whether ``head`` scores frame/token features (so the split must be encoded with ``frames=True``)."""
    return head is not None and bool(head.needs_frames)
