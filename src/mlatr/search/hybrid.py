"""Text search over a library's sound and what it says: audio embeddings, caption embeddings, keywords.

:class:`TextRanker` holds what the captions of an index need for a query (their keyword index, their
clip rows) and the library's statistics (:class:`~mlatr.search.relevance.LibraryStats`), and ranks the
live clips for a query embedding and text by ``rank`` (:data:`~mlatr.search.fusion.RANKS`):

- ``hybrid`` (default): the fused score of sound, caption cosine and BM25 keywords
  (:func:`mlatr.search.fusion.fuse`, :mod:`mlatr.search.relevance`, :mod:`mlatr.search.lexical`);
- ``audio``: cosine of the query with the clips' audio embeddings (ATRI eq. 1);
- ``captions``: the best cosine of the query with any of the clip's captions, in any language the index
  holds (file names, sidecar texts, manifest captions, embedded by the same model's text side).

Every hit carries its relevance (the same whatever the ranking) and its evidence
(:class:`~mlatr.search.evidence.Evidence`): the clip's best caption where the fused score counts it
(:func:`~mlatr.search.fusion.caption_counts`: it stands out of the library's captions for this query, is
rare among them, or is close to the query in itself) or where it ranked the clip (``rank="captions"``),
its best keyword match (with the query's terms found in it), its sound.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from mlatr.search.analysis import surface_words
from mlatr.search.columns import RowStack
from mlatr.search.evidence import Evidence
from mlatr.search.fusion import Candidates, caption_counts, fuse, order_by
from mlatr.search.lexical import KeywordIndex, Postings
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

#: Captioned clips whose best caption cosine gives a windowed ranking the query's rare cutoff.
RARE_SAMPLE = 4096


class Ranked(NamedTuple):
    """One ranked clip: its ``row``, the ``score`` of the ranking used, its ``relevance`` and ``evidence``."""

    row: int
    score: float
    relevance: float
    evidence: list[Evidence]


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
    whole answer (default: the shipped ones). ``keywords``, ``stats``: the library's keyword index over
    the live captions (global caption rows) and statistics, where stored (an index folder's shards:
    :mod:`mlatr.search.shard_stats`) or when the clips given are a window of a larger library
    (:class:`mlatr.search.milvus.MilvusRanker`), else computed here from the captions and the vectors.

    **Exact** (``window`` None): a query costs one product with the audio embeddings and one with the
    caption embeddings, a per-clip maximum over the captions (one ``maximum.at``) and the fused score of
    every live clip.

    **Windowed** (``window`` W, with ``searchers``: the index's top-k searchers over the clips' audio and
    over the captions, approximate at scale: :mod:`mlatr.search.ann`): each source gives its own top window,
    the W clips nearest in sound, the clips of the W captions nearest in meaning, the W clips of the best
    keyword matches (BM25 posting lists: :mod:`mlatr.search.lexical`); the union of the windows is scored
    exactly (each candidate's audio cosine, its best caption cosine over all its captions, its best BM25)
    and fused (:func:`~mlatr.search.fusion.fuse`) with the library's stored statistics. The share of the
    library whose best caption is as close as the query's rare cutoff (:func:`rare_cutoff`) is read on a
    fixed sample of :data:`RARE_SAMPLE` captioned clips (all of them in a smaller library). The ranks an
    evidence shows are counted among the candidates. With windows that cover the library the answer is the
    exact one (``tests/test_windowed_fusion.py``); at scale its top 10's recall against the exact fusion is
    measured at build (:func:`~mlatr.search.fused_recall.measure_fused_recall`) and recorded."""

    def __init__(self, audio: np.ndarray, caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                 caption_text: Sequence[str], caption_lang: Sequence[str], deleted: Sequence[int] | np.ndarray = (),
                 model: RelevanceModel | None = None, answer: RelevanceModel | None = None,
                 keywords: KeywordIndex | None = None, stats: LibraryStats | None = None,
                 window: int | None = None, searchers: tuple | None = None):
        self.audio = RowParts(audio)  # [N, d]
        self.captions = RowParts(caption_embeddings)  # [M, d]
        self.caption_clip = np.asarray(caption_clip, np.int64)  # [M]
        self.caption_text = caption_text  # read per row (an index folder's: on demand)
        self.caption_lang = caption_lang
        self.model = model if model is not None else shipped().text
        self.answer = answer if answer is not None else shipped().answer
        self.live = np.ones(len(self.audio), bool)  # [N]
        self.live[np.asarray(deleted, np.int64)] = False
        self._live_rows = np.flatnonzero(self.live)  # [N_live]
        self.caption_live = self.live[self.caption_clip]  # [M]
        # BM25 over the live clips' captions only (document j is caption row j)
        self.keywords = keywords if keywords is not None else KeywordIndex.of_parts(
            [Postings.of_texts(list(caption_text), list(caption_lang))], [self.caption_live])
        self.stats = stats if stats is not None else LibraryStats(Moments.of(self.audio.parts, self.live),
                                                                  Moments.of(self.captions.parts, self.caption_live))
        self.window, self.searchers = window, searchers
        # captions grouped by clip, once: the rows of a clip's captions (a folder's are already in clip order)
        ordered = len(self.caption_clip) < 2 or bool(np.all(np.diff(self.caption_clip) >= 0))
        self._by_clip = np.arange(len(self.caption_clip)) if ordered else np.argsort(self.caption_clip, kind="stable")
        grouped = self.caption_clip[self._by_clip]
        self._block_start = np.searchsorted(grouped, np.arange(len(self.audio)), side="left")  # [N]
        self._block_end = np.searchsorted(grouped, np.arange(len(self.audio)), side="right")  # [N]
        self._rare = None

    @classmethod
    def of(cls, index, model: RelevanceModel | None = None) -> TextRanker:
        """The ranker of an :class:`~mlatr.search.index.Index` (its tombstones included; exact)."""
        return cls(index.embeddings, index.caption_embeddings, index.caption_clip, index.caption_text,
                   index.caption_lang, index.deleted_rows, model)

    def _best(self, scores: np.ndarray) -> np.ndarray:
        """``[N]`` each clip's best of ``scores [M]`` over its captions (``-inf``: no caption), in one pass
        (``maximum.at``: a clip's few captions make ``maximum.reduceat``'s many short segments slower)."""
        best = np.full(len(self.audio), -np.inf, np.float32)
        np.maximum.at(best, self.caption_clip, scores)
        return best

    def _caption_rows(self, clip: int) -> np.ndarray:
        """The caption rows of ``clip`` (ascending)."""
        return self._by_clip[self._block_start[clip]:self._block_end[clip]]

    def _best_row(self, scores: np.ndarray, clip: int) -> int:
        """The caption row of ``clip`` with the highest of ``scores [M]`` (the first in row order)."""
        rows = self._caption_rows(clip)
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
        """:meth:`rank` of several embedded queries ``query_vecs [B, d]``. Exact: the products with the audio
        and caption embeddings are taken for the whole batch at once (one pass over each matrix, which a
        single query's product spends its time reading), then each query is ranked on its own row.
        Windowed: each source's window is searched for the whole batch at once."""
        vecs = np.asarray(query_vecs, np.float32)  # [B, d]
        jobs = list(zip(queries, langs, ks, ranks, strict=True))
        if self.window is not None:
            audio_search, caption_search = self.searchers
            w = int(self.window)
            # each window re-scored exactly as found (rerank 1): the window's recall is measured as a whole
            sound_rows = audio_search.top_k(vecs, w, rerank=1)[1]  # [B, <= w]
            caption_rows = caption_search.top_k(vecs, w, rerank=1)[1] if len(self.caption_clip) else None
            out = []
            for b, (query, lang, k, rank) in enumerate(jobs):
                found = [sound_rows[b]] + ([self.caption_clip[caption_rows[b][caption_rows[b] >= 0]]]
                                           if caption_rows is not None else [])
                out.append(self.windowed(vecs[b], found, query, lang, k, rank))
            return out
        audio = self.audio.scores(vecs)  # [B, N]
        captions = self.captions.scores(vecs)  # [B, M]
        return [self.ranked(vecs[b], audio[b], captions[b], query, lang, k, rank)
                for b, (query, lang, k, rank) in enumerate(jobs)]

    def ranked(self, vec: np.ndarray, audio: np.ndarray, caption_scores: np.ndarray, query: str, lang: str | None,
               k: int, rank: str = "hybrid", rows: np.ndarray | None = None) -> Ranking:
        """The ``k`` best live clips by ``rank``, best first (ties: lower row first), for a query ``vec [d]``
        (checked where it entered: :func:`mlatr.search.query.text_query`) whose scores against the clips' audio
        (``audio [N]``) and their captions (``caption_scores [M]``) are given, and the answer's relevance.
        ``rows``: rank only these clips (a sound ranking found by the index's searcher: they keep its order, and
        the answer's relevance is read from them alone), else every live clip."""
        terms = self.keywords.terms(query, lang)
        keyword_scores = self.keywords.scores_of(terms)  # [M]
        caption, keyword = self._best(caption_scores), self._best(keyword_scores)  # [N] each
        keyword = np.where(np.isfinite(keyword), keyword, 0.0)
        stats = QueryStats.of(self.stats, vec, self.keywords.idf_mass(terms), self.caption_cutoff(caption))
        cand_rows = self._live_rows if rows is None else np.asarray(rows, np.int64)
        cands = Candidates(cand_rows, audio[cand_rows], caption[cand_rows], keyword[cand_rows])
        sources = {"sound": _Source(audio, self.live), "caption": _Source(caption, self.live & np.isfinite(caption)),
                   "keyword": _Source(keyword, self.live & (keyword > 0))}

        def ranks_of(pos: np.ndarray) -> dict[str, np.ndarray]:
            return {name: src.ranks(cand_rows[pos]) for name, src in sources.items()}

        return self._answer(cands, stats, terms, query, lang, k, rank, rows is not None, ranks_of,
                            lambda i: self._best_row(caption_scores, i), lambda i: self._best_row(keyword_scores, i))

    def windowed(self, vec: np.ndarray, found: Sequence[np.ndarray], query: str, lang: str | None, k: int,
                 rank: str = "hybrid", rows: np.ndarray | None = None) -> Ranking:
        """The windowed ranking (class docstring) of the query ``vec [d]``: ``found``, the clip rows of the
        sound and caption windows (the keyword window is added here); ``rows``: rank only these clips, in
        their order (as :meth:`ranked`)."""
        vec = np.asarray(vec, np.float32)
        terms = self.keywords.terms(query, lang)
        kw_caption_rows, kw_caption_scores = self.keywords.sparse_scores(terms)  # live captions only
        kw_clips, kw_best, kw_best_row = _best_per_clip(self.caption_clip[kw_caption_rows], kw_caption_scores,
                                                        kw_caption_rows)
        if rows is None:
            kw_window = kw_clips[top_rows(kw_best, int(self.window))] if len(kw_clips) else kw_clips
            cand_rows = np.unique(np.concatenate([np.asarray(f, np.int64) for f in found] + [kw_window]))
            cand_rows = cand_rows[(cand_rows >= 0) & self.live[np.maximum(cand_rows, 0)]]
        else:
            cand_rows = np.asarray(rows, np.int64)
        sound = self.audio.take(cand_rows) @ vec  # [n]
        caption, caption_row = self._best_captions(vec, cand_rows)  # [n] each
        keyword, keyword_row = _lookup(kw_clips, cand_rows, (kw_best, 0.0), (kw_best_row, -1))  # [n] each
        keyword = keyword.astype(np.float32)
        stats = QueryStats.of(self.stats, vec, self.keywords.idf_mass(terms), self._rare_cutoff(vec))
        cands = Candidates(cand_rows, sound, caption, keyword)
        by_row = np.argsort(cand_rows, kind="stable")  # the candidates in row order (ties: lower row first)
        sorted_rows = cand_rows[by_row]
        sources = {"sound": _Source(sound[by_row], np.ones(len(cand_rows), bool)),
                   "caption": _Source(caption[by_row], np.isfinite(caption[by_row])),
                   "keyword": _Source(keyword[by_row], keyword[by_row] > 0)}

        def ranks_of(pos: np.ndarray) -> dict[str, np.ndarray]:
            at_sorted = np.searchsorted(sorted_rows, cand_rows[pos])
            return {name: src.ranks(at_sorted) for name, src in sources.items()}

        where = {int(r): j for j, r in enumerate(cand_rows.tolist())}
        return self._answer(cands, stats, terms, query, lang, k, rank, rows is not None, ranks_of,
                            lambda i: int(caption_row[where[i]]), lambda i: int(keyword_row[where[i]]))

    def _captions_of(self, clips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows [c], counts [n])``: the caption rows of ``clips [n]``, clip after clip (each clip's ascending),
        and how many each clip has."""
        counts = self._block_end[clips] - self._block_start[clips]  # [n]
        first = np.repeat(self._block_start[clips] - np.cumsum(counts) + counts, counts)  # [c]
        return self._by_clip[first + np.arange(int(counts.sum()))], counts

    def _best_captions(self, vec: np.ndarray, clips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(best [n], row [n])``: each of ``clips``' best caption cosine with ``vec [d]`` (``-inf``: no
        caption) and the caption row that has it (the first in row order; -1: none)."""
        caption_rows, counts = self._captions_of(clips)  # [c], [n]
        owner = np.repeat(np.arange(len(clips)), counts)  # [c]
        scores = self.captions.take(caption_rows) @ vec  # [c]
        best = np.full(len(clips), -np.inf, np.float32)
        np.maximum.at(best, owner, scores)
        row = np.full(len(clips), -1, np.int64)
        hit = scores == best[owner]
        row[owner[hit][::-1]] = caption_rows[hit][::-1]  # the first caption row reaching the best
        return best, row

    def _rare_cutoff(self, vec: np.ndarray) -> float:
        """:func:`rare_cutoff` of the best caption cosines of a fixed sample of at most :data:`RARE_SAMPLE` live
        captioned clips (every one in a library of fewer: the exact cutoff)."""
        if self._rare is None:
            captioned = np.unique(self.caption_clip[self.caption_live])
            if len(captioned) > RARE_SAMPLE:
                captioned = np.sort(np.random.default_rng(0).choice(captioned, RARE_SAMPLE, replace=False))
            rows, counts = self._captions_of(captioned)
            self._rare = (self.captions.take(rows), np.cumsum(counts) - counts)  # [c, d], each clip's first
        emb, starts = self._rare
        if not len(starts):
            return float("inf")
        return rare_cutoff(np.maximum.reduceat(emb @ vec, starts))  # each sampled clip's best caption

    def _answer(self, cands: Candidates, stats: QueryStats, terms: list[str], query: str, lang: str | None, k: int,
                rank: str, keep_order: bool, ranks_of, caption_row_of, keyword_row_of) -> Ranking:
        """Fuse ``cands`` and describe the ``k`` best by ``rank`` (``keep_order``: the first ``k`` candidates as
        they come): ``ranks_of(positions)`` gives each source's rank of candidates, ``caption_row_of(clip)`` /
        ``keyword_row_of(clip)`` the caption row of a clip's best caption / keyword match."""
        fused = fuse(cands, stats, self.model)
        pos = np.arange(len(cands.rows))[:k] if keep_order else order_by(cands, fused, rank, k)
        ranks = ranks_of(pos)
        shown = {"hybrid": fused.score, "audio": cands.sound, "captions": cands.caption}[rank]
        counted = caption_counts(self.model, fused.features[pos], stats)
        out = []
        for j, p in enumerate(pos.tolist()):
            i = int(cands.rows[p])
            evidence = []
            if ranks["caption"][j] and (counted[j] or rank == "captions"):
                row = caption_row_of(i)
                evidence.append(Evidence("caption", float(cands.caption[p]), int(ranks["caption"][j]),
                                         self.caption_text[row], self.caption_lang[row]))
            if ranks["keyword"][j]:
                row = keyword_row_of(i)
                matched = self.keywords.matched_terms(terms, row)
                evidence.append(Evidence("keyword", float(cands.keyword[p]), int(ranks["keyword"][j]),
                                         self.caption_text[row], self.caption_lang[row],
                                         tuple(surface_words(query, lang, matched))))
            evidence.append(Evidence("sound", float(cands.sound[p]), int(ranks["sound"][j])))
            out.append(Ranked(i, float(shown[p]), float(fused.relevance[p]), evidence))
        answer = answer_relevance(self.answer, answer_features(fused.score, fused.relevance, fused.features))
        return Ranking(out, answer)

    def describe(self, vec: np.ndarray, query: str, lang: str | None, rows: np.ndarray,
                 sound: np.ndarray, rank: str = "audio") -> Ranking:
        """Relevance and evidence of clips a sound ranking found through the index's searcher (``rows``, best
        first, ``sound``: their cosines), in that order: the audio product is taken only for them (windowed:
        the caption product too). ``rank``: which score the hits show (``hybrid``: the fused score, on a
        library where it orders as the sound)."""
        vec = np.asarray(vec, np.float32)
        if self.window is not None:
            hits = self.windowed(vec, [], query, lang, len(rows), rank, rows=np.asarray(rows, np.int64))
        else:
            audio = np.full(len(self.audio), -np.inf, np.float32)
            audio[np.asarray(rows, np.int64)] = sound
            captions = self.captions.scores(vec[None])[0]
            hits = self.ranked(vec, audio, captions, query, lang, len(rows), rank, rows=rows)
        return Ranking([h._replace(evidence=[e if e.source != "sound" else e.reranked(r + 1) for e in h.evidence])
                        for r, h in enumerate(hits)], hits.relevance)


def _lookup(keys: np.ndarray, wanted: np.ndarray, *columns: tuple[np.ndarray, float]) -> list[np.ndarray]:
    """For each of ``wanted``, each column's value at its place in the ascending ``keys`` (``columns``: pairs
    of values ``[len(keys)]`` and the default where a wanted key is absent)."""
    at = np.minimum(np.searchsorted(keys, wanted), max(len(keys) - 1, 0))
    found = keys[at] == wanted if len(keys) else np.zeros(len(wanted), bool)
    return [np.where(found, values[at], default) if len(keys) else np.full(len(wanted), default)
            for values, default in columns]


def _best_per_clip(clips: np.ndarray, scores: np.ndarray, caption_rows: np.ndarray):
    """``(clips [u] ascending, best [u], row [u])``: each clip's best of the ``scores`` of its caption rows
    ``caption_rows`` (``clips``: their clips), and the first caption row reaching it."""
    if not len(clips):
        return clips, scores, caption_rows
    order = np.lexsort((caption_rows, -scores, clips))
    first = np.r_[True, clips[order][1:] != clips[order][:-1]]
    pick = order[first]
    return clips[pick], scores[pick], caption_rows[pick]


class RowParts:
    """A ``[N, d]`` matrix kept as the parts it came in (an index folder's shards, memory-mapped: a
    :class:`~mlatr.search.columns.RowStack`), never copied into one array; float16 parts are widened the
    first time every row is multiplied (an exact ranking), never for a windowed one."""

    def __init__(self, matrix):
        parts = matrix.parts if isinstance(matrix, RowStack) else [matrix]
        self.parts = [np.asarray(p) for p in parts]  # a memory map's plain view: no wrapper per gathered slice
        self.starts = np.cumsum([0] + [p.shape[0] for p in self.parts])
        self._wide = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def scores(self, vecs: np.ndarray) -> np.ndarray:
        """``[B, N]`` the products of ``vecs [B, d]`` with every row, part after part."""
        if not self.parts:  # an index folder without shards
            return np.zeros((len(vecs), 0), np.float32)
        if self._wide is None:
            self._wide = [p if p.dtype == np.float32 else np.asarray(p, np.float32) for p in self.parts]
        out = [vecs @ p.T for p in self._wide]  # [B, n_i] each
        return out[0] if len(out) == 1 else np.concatenate(out, axis=1)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows), d]`` float32: the rows ``rows`` (in that order), gathered part by part."""
        rows = np.asarray(rows, np.int64)
        d = self.parts[0].shape[1] if self.parts else 0
        out = np.empty((len(rows), d), np.float32)
        part = np.searchsorted(self.starts, rows, side="right") - 1
        for i in np.unique(part).tolist():
            sel = np.flatnonzero(part == i)
            local = rows[sel] - self.starts[i]
            order = np.argsort(local, kind="stable")  # ascending reads of a memory-mapped part
            out[sel[order]] = self.parts[i][local[order]]
        return out


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
