"""Reciprocal-rank fusion of the three text-search sources: sound, caption meaning, caption keywords.

The sources score on scales that do not compare: a cosine between a query and a clip's audio embedding
(ATRI eq. 1; cross-modal cosines of a contrastive model sit in a narrow band), a cosine between the query
and a caption (text-to-text, much wider), a BM25 score (unbounded). A weighted sum of raw scores lets the
widest scale decide, and a fixed mix of cosines does worse than either alone (issue 22). Reciprocal-rank
fusion (Cormack, Clarke & Büttcher 2009, "Reciprocal rank fusion outperforms Condorcet and individual rank
learning methods") uses only each source's ranks:

    fused(c) = sum over sources s that rank c of  w_s / (k + rank_s(c))

with weight ``w_s = caption_weight`` for the caption and keyword sources and 1 for sound (weighted RRF).

A caption or keyword source ranks only the clips it has evidence for: a caption whose cosine with the
query reaches ``caption_gate``, a caption sharing a token with the query (BM25 > 0). The sound source
ranks every clip. So a library whose names say nothing (``ZOOM0001.wav``) gives no caption evidence and
the fused order is exactly the audio order, and a clip without caption is still ranked by its sound.
``caption_gate``, ``k`` and ``caption_weight`` are calibrated on libraries never trained on (``mlatr
experiment unseen-library``, nested: each held-out library's setting is picked on the other libraries,
among the settings that keep recorder-style names from lowering the audio ranking there; see
docs/hybrid-search.md).

Every function takes ``[..., N]`` arrays (one query, or ``[Q, N]`` for a batch of queries).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: The rankings a text search can use: the model's audio embeddings only, the clips' captions only
#: (their embeddings), or the fusion of sound, caption embeddings and caption keywords.
RANKS = ("audio", "captions", "hybrid")


@dataclass(frozen=True)
class FusionSettings:
    """``caption_gate``: the least query-caption cosine that counts as caption evidence; ``rrf_k``: the
    constant ``k`` of reciprocal-rank fusion (larger: ranks further down still count); ``caption_weight``:
    the weight of the caption and keyword sources against sound's 1."""

    caption_gate: float = 0.5
    rrf_k: float = 60.0
    caption_weight: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


#: The shipped setting: of the settings that kept meaningless names within 0.5 point of audio-only on the
#: training libraries of every leave-one-library-out fold, the one with the best mean names R@10 there
#: (``mlatr experiment unseen-library``, USE / near-identity heads; docs/hybrid-search.md).
DEFAULT_FUSION = FusionSettings(caption_gate=0.4, rrf_k=5.0, caption_weight=1.0)

#: The grid the calibration searches.
FUSION_GRID = tuple(FusionSettings(g, k, w) for g in (0.3, 0.4, 0.5, 0.6, 0.7) for k in (5.0, 20.0, 60.0)
                    for w in (1.0, 2.0))


def ranks_among(scores: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """``[..., N]`` 1-based rank of each eligible item by descending score (ties: lower index first),
    0 for an item that is not eligible."""
    if scores.ndim == 1:  # one query: sort only the eligible items (often few: the caption and keyword sources)
        rows = np.flatnonzero(eligible)
        ranks = np.zeros(scores.shape, np.int64)
        ranks[rows[np.argsort(-scores[rows], kind="stable")]] = np.arange(1, len(rows) + 1)
        return ranks
    masked = np.where(eligible, scores, -np.inf)
    order = np.argsort(-masked, axis=-1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(1, scores.shape[-1] + 1), order.shape), axis=-1)
    return np.where(eligible, ranks, 0)


def source_ranks(audio: np.ndarray, caption: np.ndarray, keyword: np.ndarray,
                 settings: FusionSettings = DEFAULT_FUSION) -> dict[str, np.ndarray]:
    """The rank of each clip in each source (0 = no evidence from that source): ``audio [..., N]`` cosines,
    ``caption [..., N]`` best caption cosine (``-inf``: no caption), ``keyword [..., N]`` best BM25."""
    return {"sound": ranks_among(audio, np.isfinite(audio)),
            "caption": ranks_among(caption, caption >= settings.caption_gate),
            "keyword": ranks_among(keyword, keyword > 0)}


def reciprocal_rank_fusion(ranks: dict[str, np.ndarray], rrf_k: float,
                           weights: dict[str, float] | None = None) -> np.ndarray:
    """``sum_s w_s / (rrf_k + rank_s)`` over the sources that rank a clip (rank 0 = not ranked; ``weights``
    default to 1): ``[..., N]``."""
    total = None
    for name, r in ranks.items():
        w = 1.0 if weights is None else weights.get(name, 1.0)
        part = np.where(r > 0, w / (rrf_k + np.maximum(r, 1)), 0.0)
        total = part if total is None else total + part
    return total


def fused_scores(audio: np.ndarray, caption: np.ndarray, keyword: np.ndarray, rank: str = "hybrid",
                 settings: FusionSettings = DEFAULT_FUSION, ranks: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """``[..., N]`` scores whose descending order is the ranking ``rank`` (one of :data:`RANKS`): the audio
    cosine, the best caption cosine (``-inf`` for a clip without caption), or the reciprocal-rank fusion
    (``ranks``: :func:`source_ranks` of the same arguments, when the caller has them already)."""
    if rank == "audio":
        return audio
    if rank == "captions":
        return caption
    w = settings.caption_weight
    ranks = source_ranks(audio, caption, keyword, settings) if ranks is None else ranks
    return reciprocal_rank_fusion(ranks, settings.rrf_k,
                                  {"caption": w, "keyword": w})
