"""Ranking embedded queries against an index's parts: text queries by its text ranker or its sound searcher,
sound queries by its sound searcher, the captions nearest to a sound, the relevance of a sound's hits.

The index (:class:`~mlatr.search.index.Index`) encodes a query with its model and hands these functions the parts
they need (its text ranker: :mod:`mlatr.search.hybrid`; a searcher over its clips' or captions' vectors: its
:class:`~mlatr.search.storage.Storage`'s; its columns); they never call back into it. A query is embedded by the
index's own model (projected, unit norm, ATRI sec. 3.1) and ranked by inner product = cosine (ATRI eq. 1).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlatr.errors import MlatrError
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.eligibility import Allowed
from mlatr.search.evidence import Evidence
from mlatr.search.hybrid import Ranked, Ranking
from mlatr.search.query import TextQuery
from mlatr.search.query_syntax import parse_query
from mlatr.search.query_translation import QueryTranslation
from mlatr.search.relevance import ANSWER_DEPTH, LibraryStats, QueryStats, RelevanceModel, pair_features
from mlatr.search.results import CaptionHit

#: The cosine from which a sound hit is compared sample by sample with the query (:meth:`Index.mark_same_audio
#: <mlatr.search.index.Index.mark_same_audio>`).
SAME_AUDIO_COSINE = 0.999


def nearest_rows(searcher, dim: int, queries: np.ndarray, ks: Sequence[int], allowed: Allowed | None = None
                 ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(cosines [k_i], rows [k_i])`` of the clips nearest to each of ``queries [Q, d]`` (``ks[i]`` >= 1 of them
    for query ``i``) by ``searcher`` (top-k over ``dim``-d vectors), one call (fewer where it holds fewer);
    ``allowed``: among the clips a filter allows (:mod:`mlatr.search.eligibility`)."""
    if queries.ndim != 2 or queries.shape[1] != dim:
        raise MlatrError(f"query embedding has shape {queries.shape[1:]}, the index holds {dim}-d vectors")
    if not np.isfinite(queries).all():
        raise MlatrError("the model gave a non-finite query embedding (NaN or inf); no result can be ranked")
    extra = {} if allowed is None else {"allowed": allowed}
    scores, rows = searcher.top_k(queries.astype(np.float32), max(ks), **extra)
    return [(scores[i, :k][rows[i, :k] >= 0], rows[i, :k][rows[i, :k] >= 0]) for i, k in enumerate(ks)]


def rank_text_queries(ranker, sound_searcher, dim: int, vecs: np.ndarray, queries: Sequence[TextQuery],
                      live_captions: bool, allowed: Sequence[Allowed | None] | None = None,
                      translations: Sequence[QueryTranslation | None] | None = None) -> list[Ranking]:
    """The :class:`~mlatr.search.hybrid.Ranking` of each checked text query embedded in ``vecs [B, d]``: the
    queries ranked by sound (``audio``, and ``hybrid`` on a library without any live caption, where the fused
    score orders as the sound) are searched through ``sound_searcher`` (approximate at scale), one batch per
    filter, and described by ``ranker`` (relevance, evidence); the others are ranked by ``ranker`` together
    (:meth:`~mlatr.search.hybrid.TextRanker.rank_many`: one product of the batch with the clips' audio and
    caption embeddings). ``allowed``: per query, the clips it may return (None: every live clip); each query's
    syntax (:mod:`mlatr.search.query_syntax`) reaches the ranker parsed."""
    texts, langs = [parse_query(q.text) for q in queries], [q.lang for q in queries]
    ks, ranks = [q.k for q in queries], [q.rank for q in queries]
    allowed = list(allowed) if allowed is not None else [None] * len(queries)
    translations = list(translations) if translations is not None else [None] * len(queries)
    out: list[Ranking] = [Ranking() for _ in queries]
    sound_only = {"audio"} if live_captions else {"audio", "hybrid"}
    by_sound = [j for j, rank in enumerate(ranks) if rank in sound_only]
    groups: dict[int, list[int]] = {}
    for j in by_sound:
        groups.setdefault(id(allowed[j]), []).append(j)
    for group in groups.values():  # at least ANSWER_DEPTH found: the answer reads what the full ranking's reads
        found = nearest_rows(sound_searcher, dim, vecs[group], [max(ks[j], ANSWER_DEPTH) for j in group],
                             allowed[group[0]])
        for j, (scores, rows) in zip(group, found, strict=True):
            out[j] = ranker.describe(vecs[j], texts[j], langs[j], rows, scores, ranks[j], k=ks[j],
                                     allowed=allowed[j], translation=translations[j])
    fused = [j for j, rank in enumerate(ranks) if rank not in sound_only]
    if fused:
        ranked = ranker.rank_many(vecs[fused], [texts[j] for j in fused], [langs[j] for j in fused],
                                  [ks[j] for j in fused], [ranks[j] for j in fused], [allowed[j] for j in fused],
                                  [translations[j] for j in fused])
        for j, one in zip(fused, ranked, strict=True):
            out[j] = one
    return out


def sound_ranking(stats: LibraryStats, vec: np.ndarray, scores: np.ndarray, rows: np.ndarray,
                  model: RelevanceModel) -> Ranking:
    """The clips ``rows`` a sound query's audio embedding ``vec [d]`` found, best first (``scores``: their
    cosines), with the sound-query relevance ``model``'s relevance (:mod:`mlatr.search.relevance`: the cosine and
    its z-score among the library's clips) and sound evidence."""
    ranked = Ranking()
    if len(rows):
        query = QueryStats.of(stats, vec, 0.0)
        sound = np.asarray(scores, np.float64)
        x = pair_features(sound, np.full(len(rows), -np.inf), np.zeros(len(rows)), query)[:, :2]  # sound, sound_z
        relevance = model.relevance(model.score(x))
        for r, (row, score, rel) in enumerate(zip(rows.tolist(), scores.tolist(), relevance.tolist(), strict=True)):
            ranked.append(Ranked(row, float(score), rel, [Evidence("sound", float(score), r + 1)]))
    return ranked


def nearest_captions(searcher, captions: CaptionColumns, clips: ClipColumns, vec: np.ndarray, k: int,
                     allowed: Allowed | None = None) -> list[CaptionHit]:
    """The ``k`` (>= 1) indexed captions nearest to an audio embedding ``vec [d]`` (sound-to-caption), found by
    ``searcher`` over the captions' vectors; ``allowed``: of the clips a filter allows."""
    hits: list[CaptionHit] = []
    if len(captions):
        extra = {} if allowed is None else {"allowed": allowed.of_rows(captions.clip)}
        scores, rows = searcher.top_k(vec[None].astype(np.float32), k, **extra)
        for r, (s, i) in enumerate(zip(scores[0].tolist(), rows[0].tolist(), strict=True)):
            if i < 0:
                continue
            clip = int(captions.clip[i])
            hits.append(CaptionHit(rank=r + 1, score=float(s), text=captions["text"][i], lang=captions["lang"][i],
                                   id=clips.ids[clip], path=clips["path"][clip]))
    return hits
