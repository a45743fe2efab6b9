"""Text search over a library's sound and what it says: audio embeddings, caption embeddings, keywords.

:class:`TextRanker` holds what the captions of an index need for a query (their keyword index, their
clip rows) and ranks the clips for a query embedding and text by ``rank`` (:data:`~mlatr.search.fusion.RANKS`):

- ``audio``: cosine of the query with the clips' audio embeddings (ATRI eq. 1), as before issue 22;
- ``captions``: the best cosine of the query with any of the clip's captions, in any language the index
  holds (file names, sidecar texts, manifest captions, embedded by the same model's text side);
- ``hybrid`` (default): reciprocal-rank fusion of sound, caption cosine and BM25 keywords
  (:mod:`mlatr.search.fusion`, :mod:`mlatr.search.lexical`).

Every hit carries its evidence, whatever the ranking: ``{"source": "caption", "text", "lang", "score",
"rank"}`` for the best-matching caption when it passes the caption gate, ``{"source": "keyword", "text",
"lang", "terms", "score", "rank"}`` for the best keyword match, ``{"source": "sound", "score", "rank"}``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlatr.search.columns import RowStack
from mlatr.search.fusion import DEFAULT_FUSION, FusionSettings, reciprocal_rank_fusion
from mlatr.search.lexical import KeywordIndex


class TextRanker:
    """Ranks the live clips of one index for text queries (module docstring).

    ``deleted``: tombstoned clip rows (``mlatr index delete``). They are not part of the library: no
    source ranks them, their captions are left out of the keyword statistics, and they never take a result
    slot, so the ranking equals that of the index without them (:meth:`~mlatr.search.index.Index.live`).

    A query costs one product with the audio embeddings and one with the caption embeddings, a per-clip
    maximum over the captions (one ``maximum.at``); ranks and fusion work on the clips near the top
    (:meth:`rank`)."""

    def __init__(self, audio: np.ndarray, caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                 caption_text: Sequence[str], caption_lang: Sequence[str],
                 settings: FusionSettings = DEFAULT_FUSION, deleted: Sequence[int] | np.ndarray = ()):
        self.audio = RowParts(audio)  # [N, d]
        self.captions = RowParts(caption_embeddings)  # [M, d]
        self.caption_clip = np.asarray(caption_clip, np.int64)  # [M]
        self.caption_text = list(caption_text)
        self.caption_lang = list(caption_lang)
        self.settings = settings
        self.live = np.ones(len(self.audio), bool)  # [N]
        self.live[np.asarray(deleted, np.int64)] = False
        self._live_rows = np.flatnonzero(self.live)  # [N_live]
        self._caption_live = self.live[self.caption_clip]  # [M]
        # BM25 over the live clips' captions only (document j is caption row _keyword_rows[j])
        self._keyword_rows = np.flatnonzero(self._caption_live)
        self.keywords = KeywordIndex([self.caption_text[r] for r in self._keyword_rows])
        # captions grouped by clip, once: the rows of a hit's captions, for its evidence
        self._by_clip = np.argsort(self.caption_clip, kind="stable")  # [M]
        grouped = self.caption_clip[self._by_clip]
        self._starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(grouped) else grouped
        self._block_clip = grouped[self._starts]  # the clip of each block
        self._ends = np.r_[self._starts[1:], len(grouped)].astype(np.int64)
        self._block_of = np.full(len(self.audio), -1, np.int64)  # clip -> its block (-1: no caption)
        self._block_of[self._block_clip] = np.arange(len(self._starts))

    @classmethod
    def of(cls, index, settings: FusionSettings = DEFAULT_FUSION) -> TextRanker:
        """The ranker of an :class:`~mlatr.search.index.Index` (its tombstones included)."""
        return cls(index.embeddings, index.caption_embeddings, index.caption_clip, index.caption_text,
                   index.caption_lang, settings, index.deleted_rows)

    def _best(self, scores: np.ndarray) -> np.ndarray:
        """``[N]`` each clip's best of ``scores [M]`` over its captions (``-inf``: no caption), in one pass
        (``maximum.at``: a clip's few captions make ``maximum.reduceat``'s many short segments slower)."""
        best = np.full(len(self.audio), -np.inf, np.float32)
        np.maximum.at(best, self.caption_clip, scores)
        return best

    def _best_row(self, scores: np.ndarray, clip: int) -> int:
        """The caption row of ``clip`` with the highest of ``scores [M]`` (the first in row order)."""
        block = self._block_of[clip]
        rows = self._by_clip[self._starts[block]:self._ends[block]]  # ascending
        return int(rows[np.argmax(scores[rows])])

    def rank(self, query_vec: np.ndarray, query: str, k: int, rank: str = "hybrid") -> list[tuple[int, float, list]]:
        """The ``k`` best live clips as ``(row, score, evidence)`` for the embedded query ``query_vec [d]``
        (:meth:`ranked`)."""
        vec = np.asarray(query_vec, np.float32)[None]  # [1, d]
        return self.ranked(self.audio.scores(vec)[0], self.captions.scores(vec)[0], query, k, rank)

    def rank_many(self, query_vecs: np.ndarray, queries: Sequence[str], ks: Sequence[int],
                  ranks: Sequence[str]) -> list[list[tuple[int, float, list]]]:
        """:meth:`rank` of several embedded queries ``query_vecs [B, d]``: the products with the audio and
        caption embeddings are taken for the whole batch at once (one pass over each matrix, which a single
        query's product spends its time reading), then each query is ranked on its own row."""
        vecs = np.asarray(query_vecs, np.float32)  # [B, d]
        audio = self.audio.scores(vecs)  # [B, N]
        captions = self.captions.scores(vecs)  # [B, M]
        return [self.ranked(audio[b], captions[b], query, k, rank)
                for b, (query, k, rank) in enumerate(zip(queries, ks, ranks, strict=True))]

    def ranked(self, audio: np.ndarray, caption_scores: np.ndarray, query: str, k: int,
               rank: str = "hybrid") -> list[tuple[int, float, list]]:
        """The ``k`` best live clips as ``(row, score, evidence)``, best first (ties: lower row first), for a
        query (checked where it entered: :func:`mlatr.search.query.text_query`) whose scores against the
        clips' audio (``audio [N]``) and their captions (``caption_scores [M]``) are given: the same as sorting
        every clip by :func:`~mlatr.search.fusion.fused_scores` of the full score arrays.

        Only the clips near the top are fused (Fagin's threshold algorithm): the union of each source's top
        ``K`` gets its exact ranks (counted among the clips each source ranks) and fused scores. Every other
        clip ranks below ``K`` in every source, so it scores at most ``sum_s w_s / (rrf_k + K + 1)``; when the
        ``k``-th best candidate scores more, the ``k`` best are found, else ``K`` doubles."""
        terms = self.keywords.terms(query)
        keyword_scores = np.zeros(len(self.captions), np.float32)  # [M]
        keyword_scores[self._keyword_rows] = self.keywords.scores_of(terms)
        caption, keyword = self._best(caption_scores), self._best(keyword_scores)  # [N] each
        keyword = np.where(np.isfinite(keyword), keyword, 0.0)
        sources = {"sound": _Source(audio, self.live),
                   "caption": _Source(caption, self.live & (caption >= self.settings.caption_gate)),
                   "keyword": _Source(keyword, self.live & (keyword > 0))}
        w = self.settings.caption_weight
        weights = {"caption": w, "keyword": w}
        if rank == "hybrid":
            depth = k
            while True:
                rows = np.unique(np.concatenate([src.top(depth) for src in sources.values()]))
                ranks = {name: src.ranks(rows) for name, src in sources.items()}
                scores = reciprocal_rank_fusion(ranks, self.settings.rrf_k, weights)  # [len(rows)]
                order = np.lexsort((rows, -scores))[:k]
                below = reciprocal_rank_fusion({n: np.array([depth + 1]) for n in sources}, self.settings.rrf_k,
                                               weights)[0]  # the most a clip outside every top-depth scores
                if (len(order) == k and scores[order[-1]] > below) or all(depth >= src.size for src in
                                                                          sources.values()):
                    break
                depth *= 2
        else:
            live = self._live_rows  # a clip without caption still takes a place in the captions ranking (-inf)
            rows = sources["sound"].top(k) if rank == "audio" else live[top_rows(caption[live], k)]
            ranks = {name: src.ranks(rows) for name, src in sources.items()}
            scores = audio[rows] if rank == "audio" else caption[rows]
            order = np.arange(len(rows))
        out = []
        for j in order.tolist():
            i, r = int(rows[j]), {name: int(v[j]) for name, v in ranks.items()}
            evidence = []
            if r["caption"]:
                row = self._best_row(caption_scores, i)
                evidence.append({"source": "caption", "text": self.caption_text[row], "lang": self.caption_lang[row],
                                 "score": float(caption[i]), "rank": r["caption"]})
            if r["keyword"]:
                row = self._best_row(keyword_scores, i)
                doc = int(np.searchsorted(self._keyword_rows, row))
                evidence.append({"source": "keyword", "text": self.caption_text[row], "lang": self.caption_lang[row],
                                 "terms": self.keywords.matched_terms(terms, doc), "score": float(keyword[i]),
                                 "rank": r["keyword"]})
            evidence.append({"source": "sound", "score": float(audio[i]), "rank": r["sound"]})
            out.append((i, float(scores[j]), evidence))
        return out


class RowParts:
    """A ``[N, d]`` matrix kept as the parts it came in (an index folder's shards, memory-mapped: a
    :class:`~mlatr.search.columns.RowStack`), never copied into one array; float16 parts are widened once."""

    def __init__(self, matrix):
        parts = matrix.parts if isinstance(matrix, RowStack) else [matrix]
        self.parts = [p if p.dtype == np.float32 else np.asarray(p, np.float32) for p in parts]

    def __len__(self) -> int:
        return sum(p.shape[0] for p in self.parts)

    def scores(self, vecs: np.ndarray) -> np.ndarray:
        """``[B, N]`` the products of ``vecs [B, d]`` with every row, part after part."""
        if not self.parts:  # an index folder without shards
            return np.zeros((len(vecs), 0), np.float32)
        out = [vecs @ p.T for p in self.parts]  # [B, n_i] each
        return out[0] if len(out) == 1 else np.concatenate(out, axis=1)


class _Source:
    """One source's ranking of the clips: ``scores [N]`` over the ``eligible [N]`` clips (1-based ranks by
    descending score, ties: lower row first; 0 for a clip it does not rank)."""

    def __init__(self, scores: np.ndarray, eligible: np.ndarray):
        self.scores = scores
        self.rows = np.flatnonzero(eligible)  # ascending
        self.values = scores[self.rows]
        self.size = len(self.rows)
        self._sorted = None

    def top(self, depth: int) -> np.ndarray:
        """The rows of the ``depth`` best eligible clips."""
        return self.rows[top_rows(self.values, depth)] if self.size else self.rows

    def ranks(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows)]`` the rank of each of ``rows``, counted: the eligible clips scoring more, plus those
        scoring the same at a lower row."""
        if self._sorted is None:
            self._sorted = np.sort(self.values)
        pos = np.minimum(np.searchsorted(self.rows, rows), max(self.size - 1, 0))
        eligible = (self.rows[pos] == rows) if self.size else np.zeros(len(rows), bool)
        s = self.scores[rows]
        right = np.searchsorted(self._sorted, s, side="right")
        ranks = np.where(eligible, self.size - right + 1, 0)
        tied = eligible & (right - np.searchsorted(self._sorted, s, side="left") > 1)
        for j in np.flatnonzero(tied):  # equal scores: the lower rows come first
            ranks[j] += int(np.count_nonzero(self.values[:pos[j]] == s[j]))
        return ranks


def top_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` rows of the highest ``scores [N]``, best first, ties: lower row first (a partial sort)."""
    if k < len(scores):
        kth = np.partition(-scores, k - 1)[k - 1]
        cand = np.flatnonzero(-scores <= kth)  # every row tied with the k-th too
    else:
        cand = np.arange(len(scores))
    return cand[np.lexsort((cand, -scores[cand]))][:k]


def describe_evidence(evidence: Sequence[dict]) -> str:
    """One line saying why a hit matched: ``caption "un chien qui aboie" [fra] 0.93 (#1); keyword chien,
    aboie (#1); sound 0.12 (#40)``."""
    parts = []
    for e in evidence:
        if e["source"] == "caption":
            parts.append(f"caption \"{e['text']}\" [{e['lang']}] {e['score']:.2f} (#{e['rank']})")
        elif e["source"] == "keyword":
            parts.append(f"keyword {', '.join(e['terms'])} in \"{e['text']}\" [{e['lang']}] (#{e['rank']})")
        else:
            parts.append(f"sound {e['score']:.2f} (#{e['rank']})")
    return "; ".join(parts)
