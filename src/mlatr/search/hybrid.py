"""Text search over a library's sound and what it says: audio embeddings, caption embeddings, keywords.

:class:`TextRanker` holds what the captions of an index need for a query (their keyword index, their
clip rows) and the library's statistics (:class:`~mlatr.search.relevance.LibraryStats`), and ranks the
live clips for a query embedding and text by ``rank`` (:data:`~mlatr.search.fusion.RANKS`):

- ``hybrid`` (default): the fused score of sound, caption cosine and BM25 keywords
  (:func:`mlatr.search.fusion.fuse`, :mod:`mlatr.search.relevance`, :mod:`mlatr.search.lexical`);
- ``audio``: cosine of the query with the clips' audio embeddings (ATRI eq. 1);
- ``captions``: the best cosine of the query with any of the clip's captions, in any language the index
  holds (file names, sidecar texts, manifest captions, embedded by the same model's text side).

Every hit carries its relevance (the same whatever the ranking) and its evidence: ``{"source": "caption",
"text", "lang", "score", "rank"}`` for the clip's best caption where the fused score counts it
(:func:`~mlatr.search.fusion.caption_counts`: it stands out of the library's captions for this query, is
rare among them, or is close to the query in itself) or where it ranked the clip (``rank="captions"``),
``{"source": "keyword", "text", "lang", "terms", "score", "rank"}`` for the best keyword match,
``{"source": "sound", "score", "rank"}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from mlatr.search.analysis import surface_words
from mlatr.search.columns import RowStack
from mlatr.search.fusion import Candidates, caption_counts, fuse, order_by
from mlatr.search.lexical import KeywordIndex
from mlatr.search.relevance import (
    LibraryStats,
    Moments,
    QueryStats,
    RelevanceModel,
    answer_features,
    answer_relevance,
    rare_cutoff,
    shipped,
)


class Ranked(NamedTuple):
    """One ranked clip: its ``row``, the ``score`` of the ranking used, its ``relevance`` and ``evidence``."""

    row: int
    score: float
    relevance: float
    evidence: list[dict]


class Ranking(list):
    """The :class:`Ranked` clips of one query, best first, and ``relevance``: the probability that the library
    holds a clip relevant to the query (:func:`~mlatr.search.relevance.answer_relevance` of the fused ranking
    of every candidate, whichever order the hits are in)."""

    def __init__(self, hits=(), relevance: float | None = None):
        super().__init__(hits)
        self.relevance = relevance


class TextRanker:
    """Ranks the live clips of one index for text queries (module docstring).

    ``deleted``: tombstoned clip rows (``mlatr index delete``). They are not part of the library: no
    source ranks them, their captions and audio are left out of the keyword and library statistics, and
    they never take a result slot, so the ranking equals that of the index without them
    (:meth:`~mlatr.search.index.Index.live`). ``model``, ``answer``: the relevance model of a hit and of a
    whole answer (default: the shipped ones).

    ``keywords``, ``stats``: the keyword index and library statistics when the clips given are a window of a
    larger library (default: those of the clips given).

    A query costs one product with the audio embeddings and one with the caption embeddings, a per-clip
    maximum over the captions (one ``maximum.at``) and the fused score of every live clip."""

    def __init__(self, audio: np.ndarray, caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                 caption_text: Sequence[str], caption_lang: Sequence[str], deleted: Sequence[int] | np.ndarray = (),
                 model: RelevanceModel | None = None, answer: RelevanceModel | None = None,
                 keywords: KeywordIndex | None = None, stats: LibraryStats | None = None):
        self.audio = RowParts(audio)  # [N, d]
        self.captions = RowParts(caption_embeddings)  # [M, d]
        self.caption_clip = np.asarray(caption_clip, np.int64)  # [M]
        self.caption_text = list(caption_text)
        self.caption_lang = list(caption_lang)
        self.model = model if model is not None else shipped().text
        self.answer = answer if answer is not None else shipped().answer
        self.live = np.ones(len(self.audio), bool)  # [N]
        self.live[np.asarray(deleted, np.int64)] = False
        self._live_rows = np.flatnonzero(self.live)  # [N_live]
        self._caption_live = self.live[self.caption_clip]  # [M]
        # BM25 over the live clips' captions only (document j is caption row _keyword_rows[j])
        self._keyword_rows = np.flatnonzero(self._caption_live)
        self.keywords = keywords if keywords is not None else KeywordIndex(
            [self.caption_text[r] for r in self._keyword_rows], [self.caption_lang[r] for r in self._keyword_rows])
        self.stats = stats if stats is not None else LibraryStats(Moments.of(self.audio.parts, self.live),
                                                                  Moments.of(self.captions.parts, self._caption_live))
        # captions grouped by clip, once: the rows of a hit's captions, for its evidence
        self._by_clip = np.argsort(self.caption_clip, kind="stable")  # [M]
        grouped = self.caption_clip[self._by_clip]
        self._starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(grouped) else grouped
        self._block_clip = grouped[self._starts]  # the clip of each block
        self._ends = np.r_[self._starts[1:], len(grouped)].astype(np.int64)
        self._block_of = np.full(len(self.audio), -1, np.int64)  # clip -> its block (-1: no caption)
        self._block_of[self._block_clip] = np.arange(len(self._starts))

    @classmethod
    def of(cls, index, model: RelevanceModel | None = None) -> TextRanker:
        """The ranker of an :class:`~mlatr.search.index.Index` (its tombstones included)."""
        return cls(index.embeddings, index.caption_embeddings, index.caption_clip, index.caption_text,
                   index.caption_lang, index.deleted_rows, model)

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

    def clip_vector(self, row: int) -> np.ndarray:
        """``[d]`` clip ``row``'s audio embedding ("more like this")."""
        for part in self.audio.parts:
            if row < len(part):
                return part[row]
            row -= len(part)
        raise IndexError(row)

    def caption_cutoff(self, caption: np.ndarray) -> float:
        """The cosine above which a clip's best caption is rare for the query whose best caption cosines are
        ``caption [N]`` (:func:`~mlatr.search.relevance.rare_cutoff` of the live clips'; a ranker over a window
        of a larger library reads it from the library: :class:`mlatr.search.milvus.MilvusRanker`)."""
        return rare_cutoff(caption[self.live])

    def rank(self, query_vec: np.ndarray, query: str, lang: str | None, k: int,
             rank: str = "hybrid") -> Ranking:
        """The ``k`` best live clips for the embedded query ``query_vec [d]`` (text ``query`` in ``lang``)."""
        return self.rank_many(np.asarray(query_vec)[None], [query], [lang], [k], [rank])[0]

    def rank_many(self, query_vecs: np.ndarray, queries: Sequence[str], langs: Sequence[str | None],
                  ks: Sequence[int], ranks: Sequence[str]) -> list[Ranking]:
        """:meth:`rank` of several embedded queries ``query_vecs [B, d]``: the products with the audio and
        caption embeddings are taken for the whole batch at once (one pass over each matrix, which a single
        query's product spends its time reading), then each query is ranked on its own row."""
        vecs = np.asarray(query_vecs, np.float32)  # [B, d]
        audio = self.audio.scores(vecs)  # [B, N]
        captions = self.captions.scores(vecs)  # [B, M]
        return [self.ranked(vecs[b], audio[b], captions[b], query, lang, k, rank)
                for b, (query, lang, k, rank) in enumerate(zip(queries, langs, ks, ranks, strict=True))]

    def ranked(self, vec: np.ndarray, audio: np.ndarray, caption_scores: np.ndarray, query: str, lang: str | None,
               k: int, rank: str = "hybrid", rows: np.ndarray | None = None) -> Ranking:
        """The ``k`` best live clips by ``rank``, best first (ties: lower row first), for a query ``vec [d]``
        (checked where it entered: :func:`mlatr.search.query.text_query`) whose scores against the clips' audio
        (``audio [N]``) and their captions (``caption_scores [M]``) are given, and the answer's relevance.
        ``rows``: rank only these clips (a sound ranking found by the index's searcher: they keep its order, and
        the answer's relevance is read from them alone), else every live clip."""
        terms = self.keywords.terms(query, lang)
        keyword_scores = np.zeros(len(self.captions), np.float32)  # [M]
        keyword_scores[self._keyword_rows] = self.keywords.scores_of(terms)
        caption, keyword = self._best(caption_scores), self._best(keyword_scores)  # [N] each
        keyword = np.where(np.isfinite(keyword), keyword, 0.0)
        stats = QueryStats.of(self.stats, vec, self.keywords.idf_mass(terms), self.caption_cutoff(caption))
        cand_rows = self._live_rows if rows is None else np.asarray(rows, np.int64)
        cands = Candidates(cand_rows, audio[cand_rows], caption[cand_rows], keyword[cand_rows])
        fused = fuse(cands, stats, self.model)
        pos = order_by(cands, fused, rank, k) if rows is None else np.arange(len(cand_rows))[:k]
        sources = {"sound": _Source(audio, self.live), "caption": _Source(caption, self.live & np.isfinite(caption)),
                   "keyword": _Source(keyword, self.live & (keyword > 0))}
        hit_rows = cand_rows[pos]
        ranks = {name: src.ranks(hit_rows) for name, src in sources.items()}
        shown = {"hybrid": fused.score, "audio": cands.sound, "captions": cands.caption}[rank]
        counted = caption_counts(self.model, fused.features[pos], stats)
        out = []
        for j, p in enumerate(pos.tolist()):
            i = int(cand_rows[p])
            evidence = []
            if ranks["caption"][j] and (counted[j] or rank == "captions"):
                row = self._best_row(caption_scores, i)
                evidence.append({"source": "caption", "text": self.caption_text[row], "lang": self.caption_lang[row],
                                 "score": float(caption[i]), "rank": int(ranks["caption"][j])})
            if ranks["keyword"][j]:
                row = self._best_row(keyword_scores, i)
                doc = int(np.searchsorted(self._keyword_rows, row))
                matched = self.keywords.matched_terms(terms, doc)
                evidence.append({"source": "keyword", "text": self.caption_text[row], "lang": self.caption_lang[row],
                                 "terms": surface_words(query, lang, matched), "score": float(keyword[i]),
                                 "rank": int(ranks["keyword"][j])})
            evidence.append({"source": "sound", "score": float(audio[i]), "rank": int(ranks["sound"][j])})
            out.append(Ranked(i, float(shown[p]), float(fused.relevance[p]), evidence))
        answer = answer_relevance(self.answer, answer_features(fused.score, fused.relevance, fused.features))
        return Ranking(out, answer)

    def describe(self, vec: np.ndarray, query: str, lang: str | None, rows: np.ndarray,
                 sound: np.ndarray, rank: str = "audio") -> Ranking:
        """Relevance and evidence of clips a sound ranking found through the index's searcher (``rows``, best
        first, ``sound``: their cosines), in that order: the audio product is taken only for them. ``rank``:
        which score the hits show (``hybrid``: the fused score, on a library where it orders as the sound)."""
        vec = np.asarray(vec, np.float32)
        audio = np.full(len(self.audio), -np.inf, np.float32)
        audio[np.asarray(rows, np.int64)] = sound
        captions = self.captions.scores(vec[None])[0]
        hits = self.ranked(vec, audio, captions, query, lang, len(rows), rank, rows=rows)
        return Ranking([h._replace(evidence=[e if e["source"] != "sound" else {**e, "rank": r + 1}
                                             for e in h.evidence]) for r, h in enumerate(hits)], hits.relevance)


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
