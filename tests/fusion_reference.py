"""The fused text ranking computed by brute force, apart from mlatr's ranking code (issue 45, item 4).

Every live clip is scored directly from the raw vectors and caption texts, with the formulas the docs state
(docs/hybrid-search.md, mlatr.search.relevance's and mlatr.search.lexical's docstrings), in plain loops: the sound
cosine; each clip's best caption cosine (a Python loop over its captions); BM25 (Lucene variant, k1 1.5, b 0.75,
a caption without terms one term long) over the live captions, each analysed in its own language; the query's
mean and spread over the library as the mixture of the library's rows and PRIOR_COUNT prior draws, computed from
the rows themselves; the idf mass; the rare cutoff by sorting. Only the tokenizer (mlatr.search.analysis.terms)
and the fitted model's score function are mlatr's: the candidate gathering, the per-clip maxima, the library
statistics and the features are not. The windowed and the Milvus rankings are checked against it.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from mlatr.search.analysis import terms as analysed
from mlatr.search.relevance import PRIOR_COUNT, RARE_SHARE


def _moments_of(rows: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """The query's mean and spread over ``rows`` pooled with PRIOR_COUNT unit draws (mean 0, variance |q|^2 / d)."""
    scores = rows.astype(np.float64) @ q.astype(np.float64)
    n, d = len(rows), len(q)
    prior = float(q.astype(np.float64) @ q.astype(np.float64)) / d
    mean = n * scores.mean() / (n + PRIOR_COUNT) if n else 0.0
    second = ((scores ** 2).sum() + PRIOR_COUNT * prior) / (n + PRIOR_COUNT)
    return mean, math.sqrt(max(second - mean * mean, 0.0))


def brute_force(audio: np.ndarray, caption_emb: np.ndarray, caption_clip, caption_text, caption_lang,
                deleted, q: np.ndarray, text: str, lang: str | None, model) -> list[tuple[int, float]]:
    """``[(row, fused score)]`` of every live clip, best first (ties: lower row first)."""
    rows, feats = brute_features(audio, caption_emb, caption_clip, caption_text, caption_lang, deleted, q, text, lang)
    return ranked(rows, model.score(feats))


def ranked(rows: list[int], scores: np.ndarray) -> list[tuple[int, float]]:
    """``[(row, score)]`` best first (ties: lower row first)."""
    order = sorted(range(len(rows)), key=lambda k: (-scores[k], rows[k]))
    return [(rows[k], float(scores[k])) for k in order]


def brute_features(audio: np.ndarray, caption_emb: np.ndarray, caption_clip, caption_text, caption_lang,
                   deleted, q: np.ndarray, text: str, lang: str | None) -> tuple[list[int], np.ndarray]:
    """``(live rows, [n, 6] features)``: sound, sound_z, caption, caption_z, keyword share, caption_rare."""
    n = len(audio)
    live = [i for i in range(n) if i not in set(int(x) for x in deleted)]
    caps = [j for j in range(len(caption_clip)) if int(caption_clip[j]) in set(live)]
    # BM25 over the live captions
    docs = {j: Counter(analysed(caption_text[j], caption_lang[j])) for j in caps}
    n_docs = len(caps)
    lengths = {j: max(sum(c.values()), 1) for j, c in docs.items()}
    avgdl = sum(lengths.values()) / max(n_docs, 1)
    query_terms = list(dict.fromkeys(analysed(text, lang)))

    def idf(t):
        df = sum(1 for c in docs.values() if t in c)
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))

    def bm25(j):
        c = docs[j]
        return sum(idf(t) * c[t] / (c[t] + 1.5 * (1 - 0.75 + 0.75 * lengths[j] / avgdl)) for t in query_terms if t in c)

    idf_mass = sum(idf(t) for t in query_terms)
    # the library's statistics, from its live rows
    s_mean, s_std = _moments_of(audio[live], q)
    c_mean, c_std = _moments_of(caption_emb[caps], q) if caps else (0.0, 0.0)
    best_cap, best_kw = {}, {}
    for j in caps:
        i = int(caption_clip[j])
        best_cap[i] = max(best_cap.get(i, -math.inf), float(caption_emb[j].astype(np.float64) @ q))
        best_kw[i] = max(best_kw.get(i, 0.0), bm25(j))
    captioned = sorted(best_cap.values(), reverse=True)
    m = int(RARE_SHARE * len(captioned))
    cutoff = captioned[m] if m > 0 else math.inf
    rows, feats = [], []
    for i in live:
        sound = float(audio[i].astype(np.float64) @ q)
        has = i in best_cap
        cap = best_cap[i] if has else c_mean
        feats.append([sound, (sound - s_mean) / max(s_std, 1e-3), cap,
                      (cap - c_mean) / max(c_std, 1e-3) if has else 0.0,
                      best_kw.get(i, 0.0) / idf_mass if idf_mass > 0 else 0.0,
                      1.0 if has and best_cap[i] > cutoff else 0.0])
        rows.append(i)
    return rows, np.asarray(feats)
