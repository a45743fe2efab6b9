"""Similarity heads: global cosine, LGMM (local-to-global multiscale matching) and its max/mean variants.

Direction convention: ``head.scores(audio, text)`` is audio-to-text ``[Na, Nt]`` (audio = query),
``head.scores(text, audio)`` is text-to-audio ``[Nt, Na]``; see :mod:`mlatr.matching.heads`.
"""

from mlatr.matching.chunked import chunked_scores, plan_chunks
from mlatr.matching.heads import (
    MATCHING_HEADS,
    CosineHead,
    HasFeatures,
    LGMMHead,
    MatchingHead,
    PoolingModeHead,
    a2t_t2a_scores,
    build_matching_head,
    build_matching_head_from_config,
    head_from_config,
)
from mlatr.matching.lgmm import lgmm_local_scores, lgmm_scores, lse_pool
from mlatr.matching.pooling_modes import POOLING_MODES, mode_local_scores, mode_scores

__all__ = [
    "MATCHING_HEADS", "POOLING_MODES", "CosineHead", "HasFeatures", "LGMMHead", "MatchingHead",
    "PoolingModeHead", "a2t_t2a_scores", "build_matching_head", "build_matching_head_from_config",
    "chunked_scores", "head_from_config", "lgmm_local_scores", "lgmm_scores", "lse_pool", "mode_local_scores",
    "mode_scores", "plan_chunks",
]

