"""Retrieval with a hand-written multilingual query set whose relevance comes from keywords.

A sound library captioned by its file names has no caption per language; what can be asked in every
language is a fixed set of queries (``src/mlatr/data/queries_multilingual.json``: one description per
query, translated into the eight ATRI languages, with English keywords). A clip is relevant to a
query when a word of its English caption is one of the query's keywords (:func:`keyword_relevance`).

:func:`multilingual_query_eval` measures, per language,

- text-to-audio: the rank of a query's best-ranked relevant clip (ATRI eq. 13's R@k with "any relevant
  clip" as the hit);
- audio-to-text: for a clip relevant to at least one query, the rank among that language's queries of
  its best-ranked relevant query;
- consistency (ATRI eq. 14-16): gap and dis on the query embeddings, MRV on the text-to-audio ranks;
- chance: the recall of a random ranking, :func:`chance_recall` (the same in every language).

Ties are counted pessimistically here (1 + the items scoring strictly above, plus the non-relevant ones
tied with the best relevant item), so constant scores sit at chance, not at 100 %.
"""

from __future__ import annotations

import re
from math import comb

import numpy as np

from mlatr.evaluation.consistency import embedding_gap_and_distance, mean_rank_variance

#: The recall cut-offs reported.
KS = (1, 5, 10)


def keyword_relevance(queries: list[dict], captions: list[str]) -> np.ndarray:
    """``[Q, N]`` bool: clip n is relevant to query q when a word of its English caption (lower case,
    split on non-alphanumerics) equals one of the query's English keywords."""
    words = [set(re.findall(r"[a-z0-9]+", c.lower())) for c in captions]
    return np.array([[bool(set(q["keywords"]) & w) for w in words] for q in queries], dtype=bool).reshape(
        len(queries), len(captions))


def chance_recall(n_relevant, n_total: int, k: int) -> np.ndarray:
    """Probability (per item) that a uniformly random ranking of ``n_total`` candidates puts one of the
    item's ``n_relevant`` relevant candidates within the first ``k``: ``1 - C(n-r, k) / C(n, k)``."""
    r = np.atleast_1d(np.asarray(n_relevant, dtype=np.int64))
    return np.array([1.0 - comb(n_total - int(x), k) / comb(n_total, k) if k < n_total else float(x > 0)
                     for x in r])


def pessimistic_ranks(scores: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """``[R]`` 1-based rank of each row's best-scoring relevant column: 1 + the columns scoring strictly
    above it + the non-relevant columns tied with it (rows need at least one relevant column)."""
    best = np.where(relevant, scores, -np.inf).max(axis=1)
    above = (scores > best[:, None]).sum(axis=1)
    tied = ((scores == best[:, None]) & ~relevant).sum(axis=1)
    return (1 + above + tied).astype(np.int64)


def _recall(ranks: np.ndarray) -> dict[str, float]:
    out = {f"R{k}": 100 * float(np.mean(ranks <= k)) if ranks.size else float("nan") for k in KS}
    out["medR"] = float(np.median(ranks)) if ranks.size else float("nan")
    return out


def multilingual_query_eval(query_emb, query_lang: list[str], query_group, audio_emb, relevant,
                            languages: list[str], pivot: str = "eng", scores: np.ndarray | None = None) -> dict:
    """Retrieval and consistency of a multilingual query set with keyword relevance (module docstring).

    ``query_emb [Nq, d]`` unit rows (query ``i`` in ``query_lang[i]``, translation group
    ``query_group[i]``), ``audio_emb [Na, d]`` unit rows, ``relevant [G, Na]`` bool per group. Groups
    without a relevant clip, or missing a language, are left out. Returns ``{"t2a": {lang: {R1, R5, R10,
    medR}, "avg": ...}, "a2t": {...}, "chance": {"t2a": {R1, R5, R10}, "a2t": {...}}, "n_queries",
    "n_clips" (clips relevant to a kept query), "consistency": {"gap", "dis", "mrv"}}``; recall in percent.
    ``scores [Nq, Na]``: the ranking scores when they are not the cosines ``query_emb @ audio_emb.T`` (a
    fused text search, :mod:`mlatr.search.fusion`); the gap and dis stay those of ``query_emb``.
    """
    query_group = np.asarray(query_group)
    scores = query_emb @ audio_emb.T if scores is None else scores  # [Nq, Na]
    lang_idx = {lang: k for k, lang in enumerate(languages)}
    where = np.full((relevant.shape[0], len(languages)), -1, np.int64)
    for i, (lang, g) in enumerate(zip(query_lang, query_group, strict=True)):
        where[g, lang_idx[lang]] = i
    keep = np.flatnonzero(relevant.any(axis=1) & np.all(where >= 0, axis=1))
    groups = where[keep]  # [G', K] query rows
    rel = relevant[keep]  # [G', Na]
    t2a_ranks = np.zeros(scores.shape[0], np.int64)
    clips = np.flatnonzero(rel.any(axis=0))
    t2a, a2t = {}, {}
    for lang in languages:
        rows = groups[:, lang_idx[lang]]
        if rows.size:
            t2a_ranks[rows] = pessimistic_ranks(scores[rows], rel)
        t2a[lang] = _recall(t2a_ranks[rows])
        a2t[lang] = _recall(pessimistic_ranks(scores[rows][:, clips].T, rel[:, clips].T) if clips.size
                            else np.zeros(0, np.int64))
    for table in (t2a, a2t):
        table["avg"] = {m: float(np.mean([table[lang][m] for lang in languages])) for m in ("R1", "R5", "R10", "medR")}
    n_audio, n_groups = relevant.shape[1], len(keep)
    chance = {"t2a": {f"R{k}": 100 * float(np.mean(chance_recall(rel.sum(axis=1), n_audio, k))) if n_groups
                      else float("nan") for k in KS},
              "a2t": {f"R{k}": 100 * float(np.mean(chance_recall(rel[:, clips].sum(axis=0), n_groups, k)))
                      if clips.size else float("nan") for k in KS}}
    gap, dis = embedding_gap_and_distance(query_emb, groups, languages, pivot)
    return {"t2a": t2a, "a2t": a2t, "chance": chance, "n_queries": int(n_groups), "n_clips": int(clips.size),
            "consistency": {"gap": gap, "dis": dis, "mrv": mean_rank_variance(t2a_ranks, groups)}}


def caption_chance(text_audio, n_audio: int) -> dict[str, dict[str, float]]:
    """Chance recall (percent) of :func:`~mlatr.evaluation.evaluate_embeddings` on captions whose own clip
    is the one relevant item: t2a ``k / n_audio``; a2t from each clip's number of captions among all."""
    text_audio = np.asarray(text_audio)
    per_clip = np.bincount(text_audio, minlength=n_audio)
    per_clip = per_clip[per_clip > 0]
    return {"t2a": {f"R{k}": 100 * float(chance_recall(1, n_audio, k)[0]) for k in KS},
            "a2t": {f"R{k}": 100 * float(np.mean(chance_recall(per_clip, len(text_audio), k))) for k in KS}}
