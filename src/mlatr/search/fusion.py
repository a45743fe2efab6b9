"""The fused ranking of a text search and the relevance of every hit, from per-source scores (issue 33).

A text query has three sources of evidence about each clip: its sound (the query's cosine with the
clip's audio embedding, ATRI eq. 1), its captions' meaning (the best cosine of the query with one of
the clip's captions) and its captions' words (the best BM25 score, :mod:`mlatr.search.lexical`).
:func:`fuse` turns them into one *fused score* per candidate clip and its *relevance*, the calibrated
probability that the clip answers the query, with the fitted :class:`~mlatr.search.relevance.RelevanceModel`
(:mod:`mlatr.search.relevance` says what the features are and why they transfer across libraries).

It takes only what it needs, so any candidate set can be ranked (:func:`mlatr.search.hybrid.rank_candidates`):
every live clip of a library, or the union of each source's top window found by approximate search at
scale or in Milvus. Per candidate: the sound, caption and keyword scores (:class:`Candidates`); per query,
its :class:`~mlatr.search.relevance.QueryStats` (the mean and spread of its sound and caption cosines over
the library, from :class:`~mlatr.search.relevance.LibraryStats`, its idf mass and its rare cutoff).

:data:`RANKS` are the orders a search can return: ``hybrid`` (the fused score, the default), ``audio``
(the sound cosine) or ``captions`` (the best caption cosine; a clip without caption last). Whichever order,
every hit carries the same relevance: it says how probable the clip is to answer, not why it ranked.

**A translated query** (:mod:`mlatr.search.query_translation`): the query's translation into the captions'
language scores the same candidates on the caption side (its own caption cosines and BM25, against its own
:class:`~mlatr.search.relevance.QueryStats`), and each candidate's :data:`TRANSLATED` features are the better
of the query's and the translation's (:func:`features`); the sound features stay the query's own (the sound
side reads every language). The cross-language remedy of Nie 2010 (*Cross-Language Information Retrieval*,
ch. 2), taken feature by feature so that a z-score or a keyword share is read against the statistics of the
text that produced it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlatr.search.relevance import FEATURES, QueryStats, RelevanceModel, pair_features

#: The rankings a text search can use: the fusion of every source (default), sound only, captions only.
RANKS = ("audio", "captions", "hybrid")

#: The caption-side features a query's translation can raise (:func:`features`).
TRANSLATED = ("caption", "caption_z", "keyword", "caption_rare")


@dataclass
class Candidates:
    """One query's candidate clips: ``rows [n]`` (the library's clip rows) and each source's score of them,
    ``sound [n]`` (cosine), ``caption [n]`` (best caption cosine, ``-inf`` for a clip without caption),
    ``keyword [n]`` (best BM25, 0 where no term matches), and the caption rows that have them,
    ``caption_row [n]`` and ``keyword_row [n]`` (the first in row order; -1: none), which a hit's evidence
    shows."""

    rows: np.ndarray
    sound: np.ndarray
    caption: np.ndarray
    keyword: np.ndarray
    caption_row: np.ndarray
    keyword_row: np.ndarray

    def take(self, pos: np.ndarray) -> Candidates:
        """The candidates at positions ``pos``, in that order."""
        return Candidates(*(np.asarray(v)[pos] for v in (self.rows, self.sound, self.caption, self.keyword,
                                                          self.caption_row, self.keyword_row)))


@dataclass
class Fused:
    """:func:`fuse`'s answer for each candidate: ``score [n]`` (the fused score), ``relevance [n]`` and the
    ``features [n, F]`` they came from (``caption_z`` says whether a caption stands out)."""

    score: np.ndarray
    relevance: np.ndarray
    features: np.ndarray


def features(cands: Candidates, stats: QueryStats,
             translation: tuple[Candidates, QueryStats] | None = None) -> np.ndarray:
    """``[n, F]`` the features of the candidates (:func:`~mlatr.search.relevance.pair_features`); with the
    query's ``translation`` (its caption and keyword scores of the same candidates and its statistics), each
    :data:`TRANSLATED` feature is the better of the query's and the translation's (module docstring)."""
    x = pair_features(cands.sound, cands.caption, cands.keyword, stats)
    if translation is not None:
        other, other_stats = translation
        xt = pair_features(cands.sound, other.caption, other.keyword, other_stats)
        cols = [FEATURES.index(c) for c in TRANSLATED]
        x[:, cols] = np.maximum(x[:, cols], xt[:, cols])
    return x


def fuse(cands: Candidates, stats: QueryStats, model: RelevanceModel,
         translation: tuple[Candidates, QueryStats] | None = None) -> Fused:
    """The fused score and relevance of every candidate (module docstring; ``translation`` as :func:`features`)."""
    x = features(cands, stats, translation)
    score = model.score(x)
    return Fused(score, model.relevance(score), x)


def caption_counts(model: RelevanceModel, x: np.ndarray, stats: QueryStats,
                   translated: QueryStats | None = None) -> np.ndarray:
    """``[n]`` bool: whether the fused score of each of the feature rows ``x [n, F]`` counts its caption,
    that is, differs from the score the clip would have without a caption (the caption columns as
    :func:`~mlatr.search.relevance.pair_features` gives a clip without one; with the statistics of the query's
    translation, ``translated``, as :func:`features` gives it: the higher of the two caption means). What a hit
    shows as caption evidence in a fused or sound ranking."""
    x = np.asarray(x, np.float64)
    bare = x.copy()
    bare[:, FEATURES.index("caption")] = stats.caption_mean if translated is None else \
        max(stats.caption_mean, translated.caption_mean)
    bare[:, [FEATURES.index("caption_z"), FEATURES.index("caption_rare")]] = 0.0
    return np.abs(model.score(x) - model.score(bare)) > 1e-9


def order_by(cands: Candidates, fused: Fused, rank: str, k: int) -> np.ndarray:
    """Positions (into the candidates) of the ``k`` best by ``rank`` (one of :data:`RANKS`, checked where the
    query entered), best first; ties: lower row first."""
    key = {"hybrid": fused.score, "audio": cands.sound, "captions": cands.caption}[rank]
    return np.lexsort((cands.rows, -np.asarray(key, np.float64)))[:k]
