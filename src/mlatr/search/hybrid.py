"""Text search over a library's sound and what it says: audio embeddings, caption embeddings, keywords.

A text query is ranked by ``rank`` (:data:`~mlatr.search.fusion.RANKS`):

- ``hybrid`` (default): the fused score of sound, caption cosine and BM25 keywords
  (:func:`mlatr.search.fusion.fuse`, :mod:`mlatr.search.relevance`, :mod:`mlatr.search.lexical`);
- ``audio``: cosine of the query with the clips' audio embeddings (ATRI eq. 1);
- ``captions``: the best cosine of the query with any of the clip's captions, in any language the index
  holds (file names, sidecar texts, manifest captions, embedded by the same model's text side).

**One ranking, fed by a source.** :func:`rank_candidates` ranks what a source supplies of one query, its
:class:`QueryCandidates`: the candidate clips with, for each, its exact audio cosine, its best caption cosine
over all of its captions and its best BM25 score (and the caption rows that have them), and the query's view
of the whole library (:class:`~mlatr.search.relevance.QueryStats`: its sound and caption moments, its idf
mass, its rare cutoff). It fuses the candidates, orders them and describes the ``k`` best: every hit carries
its relevance (the same whatever the ranking) and its evidence (:class:`~mlatr.search.evidence.Evidence`):
the clip's best caption where the fused score counts it (:func:`~mlatr.search.fusion.caption_counts`: it
stands out of the library's captions for this query, is rare among them, or is close to the query in
itself) or where it ranked the clip (``rank="captions"``), its best keyword match (with the query's terms
found in it), its sound, each with its rank among the candidates (a sound ranking's hits described: the
sound's rank is the hit's place in it).

**The rare cutoff** (``caption_rare``, :mod:`mlatr.search.relevance`) is read on every captioned clip where
the ranking scores them all (the exact one), else on :class:`~mlatr.search.relevance.RareSample` (every
captioned clip in a library of at most :data:`~mlatr.search.relevance.RARE_SAMPLE`, a fixed sample beyond).

**Sources.** :class:`TextRanker` (an index in memory or an index folder) supplies every live clip (exact) or,
windowed, the union of three windows found in its own structures: the W clips nearest in sound (the audio
searcher, approximate at scale: :mod:`mlatr.search.ann`), the clips of the W captions nearest in meaning (the
caption searcher), the W clips of the best keyword matches (BM25 posting lists). A Milvus target's
:class:`~mlatr.search.milvus.MilvusRanker` supplies the union of Milvus's own windows (its vector searches
and its BM25 search), scored from the vectors and terms it fetches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

from mlatr.search.analysis import surface_words
from mlatr.search.columns import RowStack
from mlatr.search.eligibility import Allowed
from mlatr.search.evidence import Evidence
from mlatr.search.fusion import Candidates, caption_counts, fuse, order_by
from mlatr.search.lexical import KeywordIndex, Postings
from mlatr.search.query_syntax import (
    KeywordQuery,
    ParsedQuery,
    as_parsed,
    clause_mass,
    clause_scores,
    keyword_query,
)
from mlatr.search.query_translation import QueryTranslation
from mlatr.search.relevance import (
    Calibration,
    LibraryStats,
    Moments,
    QueryStats,
    RareSample,
    RelevanceModel,
    answer_features,
    answer_relevance,
    rare_cutoff,
    rare_sample,
)


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


@dataclass
class QueryCandidates:
    """What a source supplies of one text query to :func:`rank_candidates` (module docstring).

    ``cands``: the candidate clips, ``rows`` ascending and distinct, with each source's exact score and the
    caption rows of the best caption and keyword match (:class:`~mlatr.search.fusion.Candidates`); ``stats``:
    the query's view of the whole library (its sound and caption moments, its idf mass and its rare cutoff);
    ``query``, ``lang`` and ``terms`` (its keyword terms); ``matched(row)``: the query's terms caption
    ``row`` holds; ``caption_text``, ``caption_lang``: the library's captions by row (read for the hits);
    ``translation``: the same of the query's translation (:mod:`mlatr.search.query_translation`), over the same
    candidates in the same order (its sound unread: a candidate's sound is the query's), or None."""

    cands: Candidates
    stats: QueryStats
    query: str
    lang: str | None
    terms: list[str]
    matched: Callable[[int], list[str]]
    caption_text: Sequence[str]
    caption_lang: Sequence[str]
    translation: QueryCandidates | None = None

    def translated(self, pos: np.ndarray | None = None) -> tuple[Candidates, QueryStats] | None:
        """What :func:`~mlatr.search.fusion.fuse` reads of the translation (of the candidates at ``pos``)."""
        t = self.translation
        if t is None:
            return None
        return (t.cands if pos is None else t.cands.take(pos)), t.stats


def rank_candidates(qc: QueryCandidates, k: int, rank: str, model: RelevanceModel, answer: RelevanceModel,
                    shown: np.ndarray | None = None) -> Ranking:
    """The ``k`` best of ``qc``'s candidates by ``rank`` (ties: lower row first), fused by ``model``, described
    (module docstring), and the answer's relevance by ``answer`` from every candidate. ``shown``: positions of
    candidates found by a sound ranking, best first: the first ``k`` are described in that order (the sound's
    rank is their place) and the answer's relevance is read from all of them (given at least
    :data:`~mlatr.search.relevance.ANSWER_DEPTH`: what the full ranking reads where it orders as the sound)."""
    stats = qc.stats
    cands, via = _shown_sources(qc)
    if shown is None:
        fused = fuse(qc.cands, stats, model, qc.translated())
        pos = order_by(cands, fused, rank, k)
        at = pos  # each hit's place in ``fused``
    else:
        read = np.asarray(shown, np.int64)
        pos = read[:k]
        fused = fuse(qc.cands.take(read), stats, model, qc.translated(read))
        at = np.arange(len(pos))
    ranks = _ranks(cands, pos, by_sound=shown is None, keyword_key=via.keyword_key)
    score = {"hybrid": fused.score[at], "audio": cands.sound[pos], "captions": cands.caption[pos]}[rank]
    counted = caption_counts(model, fused.features[at], stats, None if qc.translation is None else
                             qc.translation.stats)
    out = []
    for j, p in enumerate(pos.tolist()):
        evidence = []
        if ranks["caption"][j] and (counted[j] or rank == "captions"):
            row = int(cands.caption_row[p])
            evidence.append(Evidence("caption", float(cands.caption[p]), int(ranks["caption"][j]),
                                     qc.caption_text[row], qc.caption_lang[row], translation=bool(via.caption[p])))
        if ranks["keyword"][j]:
            row = int(cands.keyword_row[p])
            words = qc.translation if via.keyword[p] else qc  # the text whose terms the caption holds
            evidence.append(Evidence("keyword", float(cands.keyword[p]), int(ranks["keyword"][j]),
                                     qc.caption_text[row], qc.caption_lang[row],
                                     tuple(surface_words(words.query, words.lang, words.matched(row))),
                                     translation=bool(via.keyword[p])))
        evidence.append(Evidence("sound", float(cands.sound[p]), int(ranks["sound"][j])))
        out.append(Ranked(int(cands.rows[p]), float(score[j]), float(fused.relevance[at[j]]), evidence))
    return Ranking(out, answer_relevance(answer, answer_features(fused.score, fused.relevance, fused.features)))


@dataclass
class _Via:
    """Which of a translated query's two texts each candidate's shown caption (``caption [n]`` bool) and keyword
    match (``keyword [n]``) come from (True: the translation), and ``keyword_key [n]``: the keyword share the
    candidates are ranked by (None: the query's own BM25, untranslated)."""

    caption: np.ndarray
    keyword: np.ndarray
    keyword_key: np.ndarray | None = None


def _shown_sources(qc: QueryCandidates) -> tuple[Candidates, _Via]:
    """The candidates as a hit shows them: untranslated, ``qc.cands``; translated, each candidate's better caption
    cosine of the query's and the translation's (the captions ranking orders by it) and the keyword match of the
    text whose keyword share (:func:`~mlatr.search.relevance.pair_features`) is higher, with where each came from."""
    c, t = qc.cands, qc.translation
    if t is None:
        none = np.zeros(len(c.rows), bool)
        return c, _Via(none, none)
    tc = t.cands
    if not np.array_equal(tc.rows, c.rows):
        raise ValueError("a query's translation must score the query's candidates, in their order")
    share, share_t = _share(c.keyword, qc.stats), _share(tc.keyword, t.stats)
    cap_t, kw_t = tc.caption > c.caption, share_t > share
    shown = Candidates(c.rows, c.sound, np.where(cap_t, tc.caption, c.caption), np.where(kw_t, tc.keyword, c.keyword),
                       np.where(cap_t, tc.caption_row, c.caption_row), np.where(kw_t, tc.keyword_row, c.keyword_row))
    return shown, _Via(cap_t, kw_t, np.maximum(share, share_t))


def _share(keyword: np.ndarray, stats: QueryStats) -> np.ndarray:
    """The keyword feature of :func:`~mlatr.search.relevance.pair_features`: BM25 over the query's idf mass."""
    keyword = np.asarray(keyword, np.float64)
    return keyword / stats.idf_mass if stats.idf_mass > 0 else np.zeros(len(keyword))


def _ranks(cands: Candidates, pos: np.ndarray, by_sound: bool, keyword_key: np.ndarray | None = None
           ) -> dict[str, np.ndarray]:
    """Each source's 1-based rank of the candidates at ``pos`` among the candidates it ranks (every one by sound,
    those with a caption by caption, those matching a term by keyword: by ``keyword_key`` where given, else their
    BM25; 0: not ranked), ties: lower row first. Not ``by_sound``: ``pos`` is a sound ranking's order, and its
    place their sound rank."""
    sound = _Source(cands.sound, np.ones(len(cands.rows), bool)).ranks(pos) if by_sound else \
        np.arange(1, len(pos) + 1)
    keyword = cands.keyword if keyword_key is None else keyword_key
    return {"sound": sound, "caption": _Source(cands.caption, np.isfinite(cands.caption)).ranks(pos),
            "keyword": _Source(keyword, keyword > 0).ranks(pos)}


def best_per_clip(owner: np.ndarray, scores: np.ndarray, caption_rows: np.ndarray | None,
                  n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(best [n], row [n])``: for each of ``n`` clips, the best of the ``scores [c]`` of its captions (``owner
    [c]``: each caption's clip, 0..n-1; ``caption_rows [c]``: its caption row, None: ``0..c-1``) and the first
    caption row reaching it (``-inf`` and -1 for a clip without any), in one pass (``maximum.at``: a clip's few
    captions make ``maximum.reduceat``'s many short segments slower)."""
    scores = np.asarray(scores, np.float32)  # compared with the best as stored
    best = np.full(n, -np.inf, np.float32)
    np.maximum.at(best, owner, scores)
    hit = np.flatnonzero(scores == best[owner])
    none = np.iinfo(np.int64).max
    row = np.full(n, none, np.int64)
    np.minimum.at(row, owner[hit], hit if caption_rows is None else np.asarray(caption_rows, np.int64)[hit])
    row[row == none] = -1
    return best, row


class TextRanker:
    """The text ranking of one index held in memory or in an index folder (module docstring): the source that
    supplies its :class:`QueryCandidates` from its own arrays, searchers and keyword index.

    ``deleted``: tombstoned clip rows (``mlatr index delete``). They are not part of the library: no
    source ranks them, their captions and audio are left out of the keyword and library statistics, and
    they never take a result slot, so the ranking equals that of the index without them
    (:meth:`~mlatr.search.index.Index.live`). ``model``, ``answer``: the relevance model of a hit and of a
    whole answer (default: the default ranking's, :meth:`~mlatr.search.relevance.Calibration.default`; the index
    sets its model's own). ``keywords``, ``stats``: the library's keyword index over the live captions (global
    caption rows) and statistics, where stored (an index folder's shards: :mod:`mlatr.search.shard_stats`), else
    computed here from the captions and the vectors.

    **Exact** (``window`` None): the candidates are every live clip; a query costs one product with the audio
    embeddings and one with the caption embeddings, a per-clip maximum over the captions (one ``maximum.at``)
    and the fused score of every live clip.

    **Windowed** (``window`` W, with ``searchers``: the index's top-k searchers over the clips' audio and
    over the captions, approximate at scale: :mod:`mlatr.search.ann`): the candidates are the union of each
    source's top window (module docstring), each scored exactly. With windows that cover the library the
    answer is the exact one (``tests/test_windowed_fusion.py``); at scale its top 10's recall against the exact
    fusion is measured at build (:func:`~mlatr.search.fused_recall.measure_fused_recall`) and recorded.

    ``segments`` (:class:`~mlatr.search.segments.Segments`, the index's long clips cut into segments): a clip's
    sound score is the higher of its pooled cosine and its best segment's, in both rankings (the windowed one
    finds its sound window through the index's :class:`~mlatr.search.segments.MomentSearcher`)."""

    def __init__(self, audio: np.ndarray, caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                 caption_text: Sequence[str], caption_lang: Sequence[str], deleted: Sequence[int] | np.ndarray = (),
                 model: RelevanceModel | None = None, answer: RelevanceModel | None = None,
                 keywords: KeywordIndex | None = None, stats: LibraryStats | None = None,
                 window: int | None = None, searchers: tuple | None = None, segments=None):
        self.audio = RowParts(audio)  # [N, d]
        self.captions = RowParts(caption_embeddings)  # [M, d]
        self.caption_clip = np.asarray(caption_clip, np.int64)  # [M]
        self.caption_text = caption_text  # read per row (an index folder's: on demand)
        self.caption_lang = caption_lang
        self.model = model if model is not None else Calibration.default().text
        self.answer = answer if answer is not None else Calibration.default().answer
        self.live = np.ones(len(self.audio), bool)  # [N]
        self.live[np.asarray(deleted, np.int64)] = False
        self._live_rows = np.flatnonzero(self.live)  # [N_live]
        self.caption_live = self.live[self.caption_clip]  # [M]
        # BM25 over the live clips' captions only (document j is caption row j)
        self.keywords = keywords if keywords is not None else KeywordIndex.of_parts(
            [Postings.of_texts(list(caption_text), list(caption_lang))], [self.caption_live])
        self.stats = stats if stats is not None else LibraryStats(Moments.of(self.audio.parts, self.live),
                                                                  Moments.of(self.captions.parts, self.caption_live))
        self.window, self.searchers, self.segments = window, searchers, segments
        # captions grouped by clip, once: the rows of a clip's captions (a folder's are already in clip order)
        ordered = len(self.caption_clip) < 2 or bool(np.all(np.diff(self.caption_clip) >= 0))
        self._by_clip = np.arange(len(self.caption_clip)) if ordered else np.argsort(self.caption_clip, kind="stable")
        grouped = self.caption_clip[self._by_clip]
        self._block_start = np.searchsorted(grouped, np.arange(len(self.audio)), side="left")  # [N]
        self._block_end = np.searchsorted(grouped, np.arange(len(self.audio)), side="right")  # [N]
        self._rare: RareSample | None = None

    def clip_vector(self, row: int) -> np.ndarray:
        """``[d]`` clip ``row``'s audio embedding ("more like this")."""
        for part in self.audio.parts:
            if row < len(part):
                return part[row]
            row -= len(part)
        raise IndexError(row)

    def clip_vectors(self, rows: np.ndarray) -> np.ndarray:
        """``[n, d]`` the audio embeddings of clips ``rows`` (duplicates: each clip's neighbours)."""
        return self.audio.take(np.asarray(rows, np.int64))

    def rank(self, query_vec: np.ndarray, query: str | ParsedQuery, lang: str | None, k: int,
             rank: str = "hybrid", allowed: Allowed | None = None,
             translation: QueryTranslation | None = None) -> Ranking:
        """The ``k`` best live clips for the embedded query ``query_vec [d]`` (text ``query`` in ``lang``)."""
        return self.rank_many(np.asarray(query_vec)[None], [query], [lang], [k], [rank], [allowed],
                              [translation])[0]

    def rank_many(self, query_vecs: np.ndarray, queries: Sequence[str | ParsedQuery], langs: Sequence[str | None],
                  ks: Sequence[int], ranks: Sequence[str], allowed: Sequence[Allowed | None] | None = None,
                  translations: Sequence[QueryTranslation | None] | None = None) -> list[Ranking]:
        """:meth:`rank` of several embedded queries ``query_vecs [B, d]`` (checked where they entered:
        :func:`mlatr.search.query.text_query`; a text is a plain query, a
        :class:`~mlatr.search.query_syntax.ParsedQuery` one with its syntax). Exact: the products with the audio
        and caption embeddings are taken for the whole batch at once (one pass over each matrix, which a single
        query's product spends its time reading), then each query is ranked on its own row. Windowed: each
        source's window is searched for the whole batch at once (for the queries of each filter together).
        ``allowed``: per query, the clips it may return (:mod:`mlatr.search.eligibility`; None: every live clip).
        ``translations``: per query, its translation into the captions' language (None: not translated), whose
        caption and keyword scores each candidate reads too (:func:`~mlatr.search.fusion.features`); windowed,
        its caption and keyword windows join the candidates."""
        vecs = np.asarray(query_vecs, np.float32)  # [B, d]
        allowed = list(allowed) if allowed is not None else [None] * len(vecs)
        translations = list(translations) if translations is not None else [None] * len(vecs)
        texts = list(zip(queries, langs, allowed, translations, strict=True))
        if self.window is not None:
            audio_search, caption_search = self.searchers
            w = int(self.window)
            found: list[list[np.ndarray]] = [[] for _ in range(len(vecs))]
            for rows in _by_allowed(allowed).values():
                a = allowed[rows[0]]
                of_captions = None if a is None else a.of_rows(self.caption_clip)
                # each window re-scored exactly as found (rerank 1): the window's recall is measured as a whole
                sound_rows = audio_search.top_k(vecs[rows], w, rerank=1, allowed=a)[1]  # [b, <= w]
                caption_rows = caption_search.top_k(vecs[rows], w, rerank=1, allowed=of_captions)[1] \
                    if len(self.caption_clip) else None
                for j, b in enumerate(rows):
                    found[b] = [sound_rows[j]] + ([self.caption_clip[caption_rows[j][caption_rows[j] >= 0]]]
                                                  if caption_rows is not None else [])
                told = [b for b in rows if translations[b] is not None]  # the translations' caption windows
                if told and len(self.caption_clip):
                    t_rows = caption_search.top_k(np.stack([translations[b].vec for b in told]).astype(np.float32),
                                                  w, rerank=1, allowed=of_captions)[1]
                    for j, b in enumerate(told):
                        found[b].append(self.caption_clip[t_rows[j][t_rows[j] >= 0]])
            qcs = []
            for b, (query, lang, a, t) in enumerate(texts):
                if t is not None:  # and the translation's keyword window
                    t_kq = self._keyword_query(as_parsed(t.text), t.lang)
                    found[b].append(self._keyword_window(self._keyword_matches(t_kq), a))
                qc = self._windowed(vecs[b], query, lang, found[b], allowed=a)
                if t is not None:
                    qc.translation = self._windowed(np.asarray(t.vec, np.float32), t.text, t.lang,
                                                    given=qc.cands.rows)
                qcs.append(qc)
        else:
            audio = self.audio.scores(vecs)  # [B, N]
            if self.segments is not None:  # a long clip's sound: its best segment where higher
                audio = self.segments.raise_scores(vecs, audio)
            told = [b for b, t in enumerate(translations) if t is not None]
            both = np.concatenate([vecs, np.asarray([translations[b].vec for b in told], np.float32).reshape(
                len(told), vecs.shape[1])])
            captions = self.captions.scores(both)  # [B + T, M]: the queries' and their translations'
            qcs = []
            for b, (query, lang, a, t) in enumerate(texts):
                qc = self._exact(vecs[b], audio[b], captions[b], query, lang, a)
                if t is not None:
                    qc.translation = self._exact(np.asarray(t.vec, np.float32), audio[b],
                                                 captions[len(vecs) + told.index(b)], t.text, t.lang, a)
                qcs.append(qc)
        return [rank_candidates(qc, k, rank, self.model, self.answer)
                for qc, k, rank in zip(qcs, ks, ranks, strict=True)]

    def describe(self, vec: np.ndarray, query: str | ParsedQuery, lang: str | None, rows: np.ndarray,
                 sound: np.ndarray, rank: str = "audio", allowed: Allowed | None = None,
                 k: int | None = None, translation: QueryTranslation | None = None) -> Ranking:
        """Relevance and evidence of live clips a sound ranking found through the index's searcher (``rows``, best
        first, ``sound``: their cosines), in that order (:func:`rank_candidates` with ``shown``): exact, the
        audio product is taken only for them (the other sources rank every live clip ``allowed`` lets through);
        windowed, the candidates are these clips. The first ``k`` (default: all) are the hits; the answer's
        relevance reads every row. ``rank``: which score the hits show (``hybrid``: the fused score, on a library
        where it orders as the sound); ``translation``: the query's, read as :meth:`rank_many` reads it."""
        vec = np.asarray(vec, np.float32)
        rows = np.asarray(rows, np.int64)
        t_vec = None if translation is None else np.asarray(translation.vec, np.float32)
        if self.window is not None:
            qc = self._windowed(vec, query, lang, given=rows)
            if translation is not None:
                qc.translation = self._windowed(t_vec, translation.text, translation.lang, given=rows)
        else:
            audio = np.full(len(self.audio), -np.inf, np.float32)
            audio[rows] = sound
            qc = self._exact(vec, audio, self.captions.scores(vec[None])[0], query, lang, allowed)
            if translation is not None:
                qc.translation = self._exact(t_vec, audio, self.captions.scores(t_vec[None])[0], translation.text,
                                             translation.lang, allowed)
        return rank_candidates(qc, len(rows) if k is None else k, rank, self.model, self.answer,
                               shown=np.searchsorted(qc.cands.rows, rows))

    def _exact(self, vec: np.ndarray, audio: np.ndarray, caption_scores: np.ndarray, query: str | ParsedQuery,
               lang: str | None, allowed: Allowed | None = None) -> QueryCandidates:
        """Every live clip ``allowed`` lets through as a candidate, for the query ``vec [d]`` whose cosines with
        the clips' audio (``audio [N]``) and their captions (``caption_scores [M]``) are given; the rare cutoff
        read on every live clip (a filter does not change it)."""
        parsed = as_parsed(query)
        kq = self._keyword_query(parsed, lang)
        rows = self._live_rows
        caption, caption_row = best_per_clip(self.caption_clip, caption_scores, None, len(self.audio))  # [N] each
        kw_rows, kw_scores = self._keyword_scores(kq)  # live captions only
        keyword, keyword_row = best_per_clip(self.caption_clip[kw_rows], kw_scores, kw_rows, len(self.audio))
        keyword = np.maximum(keyword, 0.0)  # [N] each: dense, no sort of the matches (the windowed form's)
        cutoff = rare_cutoff(caption[rows])
        if allowed is not None:
            rows = rows[allowed.mask[rows]]
        cands = Candidates(rows, audio[rows], caption[rows], keyword[rows], caption_row[rows], keyword_row[rows])
        return self._query(cands, vec, parsed, lang, kq, cutoff)

    def _keyword_window(self, matches: tuple[np.ndarray, np.ndarray, np.ndarray], allowed: Allowed | None = None
                        ) -> np.ndarray:
        """The clip rows of the window of a query's best keyword ``matches`` (:meth:`_keyword_matches`) among the
        ``allowed`` clips."""
        kw_clips, kw_best, _ = matches
        if allowed is not None and len(kw_clips):
            keep = allowed.mask[kw_clips]
            kw_clips, kw_best = kw_clips[keep], kw_best[keep]
        return kw_clips[top_rows(kw_best, int(self.window))] if len(kw_clips) else kw_clips

    def _windowed(self, vec: np.ndarray, query: str | ParsedQuery, lang: str | None, found: Sequence[np.ndarray] = (),
                  given: np.ndarray | None = None, allowed: Allowed | None = None) -> QueryCandidates:
        """The union of the windows as candidates (class docstring): ``found``, the clip rows of the sound and
        caption windows, found among the ``allowed`` clips (the keyword window is added here, among them too); or
        ``given`` clip rows alone."""
        parsed = as_parsed(query)
        kq = self._keyword_query(parsed, lang)
        kw_clips, kw_best, kw_row = self._keyword_matches(kq)
        if given is None:
            rows = np.unique(np.concatenate([np.asarray(f, np.int64) for f in found]
                                            + [self._keyword_window((kw_clips, kw_best, kw_row), allowed)]))
            rows = rows[(rows >= 0) & self.live[np.maximum(rows, 0)]]
            if allowed is not None:
                rows = rows[allowed.mask[rows]]
        else:
            rows = np.unique(np.asarray(given, np.int64))
        caption_rows, counts = self._captions_of(rows)  # [c], [n]
        owner = np.repeat(np.arange(len(rows)), counts)  # [c]
        caption, caption_row = best_per_clip(owner, self.captions.take(caption_rows) @ vec, caption_rows, len(rows))
        keyword, keyword_row = _keywords_of(rows, kw_clips, kw_best, kw_row)
        sound = self.audio.take(rows) @ vec
        if self.segments is not None:  # a long clip's sound: its best segment where higher
            sound = np.maximum(sound, self.segments.best_scores(vec, rows)[0])
        cands = Candidates(rows, sound, caption, keyword, caption_row, keyword_row)
        return self._query(cands, vec, parsed, lang, kq, self._rare_sample().cutoff(vec))

    def _query(self, cands: Candidates, vec: np.ndarray, parsed: ParsedQuery, lang: str | None, kq: KeywordQuery,
               cutoff: float) -> QueryCandidates:
        """``cands`` with the query's view of the library (its ``cutoff``) and its keyword terms."""
        mass = self.keywords.idf_mass(kq.terms) if kq.clauses is None else clause_mass(kq, self.keywords.idf_mass)
        stats = QueryStats.of(self.stats, vec, mass, cutoff)
        return QueryCandidates(cands, stats, parsed.embedded, lang, kq.terms,
                               partial(self.keywords.matched_terms, kq.terms), self.caption_text, self.caption_lang)

    def _keyword_query(self, parsed: ParsedQuery, lang: str | None) -> KeywordQuery:
        """The keyword side of a query (:func:`~mlatr.search.query_syntax.keyword_query`)."""
        return keyword_query(parsed, lang, self.keywords.terms)

    def _keyword_scores(self, kq: KeywordQuery) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, scores)``: the live captions matching ``kq`` and their BM25 score (its clauses' where it has
        ``OR``)."""
        if kq.clauses is None:
            return self.keywords.sparse_scores(kq.terms)
        return clause_scores(kq, lambda term: self.keywords.sparse_scores([term]))

    # ---- documents of the query syntax (mlatr.search.query_syntax.Documents): the live captions ----------------
    def rows_with(self, terms: list[str]) -> np.ndarray:
        """The live caption rows holding one of ``terms`` (the posting lists)."""
        return self.keywords.sparse_scores(list(terms))[0]

    def text(self, row: int) -> str:
        return self.caption_text[row]

    def lang(self, row: int) -> str | None:
        return self.caption_lang[row]

    def clips(self, rows: np.ndarray) -> np.ndarray:
        return self.caption_clip[np.asarray(rows, np.int64)]

    def _keyword_matches(self, kq: KeywordQuery) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(clips [u] ascending, best [u], row [u])``: the live clips with a caption matching ``kq``, each one's
        best BM25 and the caption row that has it (the posting lists: never a pass over the library)."""
        rows, scores = self._keyword_scores(kq)  # live captions only
        clips, owner = np.unique(self.caption_clip[rows], return_inverse=True)
        best, row = best_per_clip(owner.reshape(-1), scores, rows, len(clips))
        return clips, best, row

    def _captions_of(self, clips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows [c], counts [n])``: the caption rows of ``clips [n]``, clip after clip (each clip's ascending),
        and how many each clip has."""
        counts = self._block_end[clips] - self._block_start[clips]  # [n]
        first = np.repeat(self._block_start[clips] - np.cumsum(counts) + counts, counts)  # [c]
        return self._by_clip[first + np.arange(int(counts.sum()))], counts

    def _rare_sample(self) -> RareSample:
        """The :class:`~mlatr.search.relevance.RareSample` of the live captioned clips (gathered once)."""
        if self._rare is None:
            rows, counts = self._captions_of(rare_sample(self.caption_clip[self.caption_live]))
            self._rare = RareSample(self.captions.take(rows), np.cumsum(counts) - counts)
        return self._rare


def _by_allowed(allowed: Sequence) -> dict[int, list[int]]:
    """The positions of ``allowed`` grouped by the object at each (the queries of one filter searched together)."""
    groups: dict[int, list[int]] = {}
    for b, a in enumerate(allowed):
        groups.setdefault(id(a), []).append(b)
    return groups


def _keywords_of(rows: np.ndarray, clips: np.ndarray, best: np.ndarray, row: np.ndarray) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """``(keyword [n], keyword_row [n])`` of the clips ``rows [n]`` from the keyword matches ``clips [u]``
    (ascending), ``best [u]``, ``row [u]`` (0 and -1 for a clip without any)."""
    keyword, keyword_row = np.zeros(len(rows), np.float32), np.full(len(rows), -1, np.int64)
    if len(clips):
        at = np.minimum(np.searchsorted(clips, rows), len(clips) - 1)
        hit = clips[at] == rows
        keyword[hit], keyword_row[hit] = best[at[hit]], row[at[hit]]
    return keyword, keyword_row


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
    """One source's ranking of a query's candidates: ``scores [n]`` over the ``eligible [n]`` ones (1-based ranks
    by descending score, ties: the lower position first, which is the lower row; 0 for one it does not rank)."""

    def __init__(self, scores: np.ndarray, eligible: np.ndarray):
        self.scores = scores
        self.rows = np.flatnonzero(eligible)  # ascending
        self.values = scores[self.rows]
        self.size = len(self.rows)
        self._sorted = None

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
