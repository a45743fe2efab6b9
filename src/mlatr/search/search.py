"""Queries against an :class:`~mlatr.search.index.Index`: text-to-audio, audio-to-audio, audio-to-caption.

A query is encoded by the index's own model (:class:`~mlatr.inference.LoadedModel`'s ``embed_checked`` /
``embed_audio``: projected, unit norm, ATRI sec. 3.1) and ranked by inner product = cosine (ATRI eq. 1) with
the backend. A text query is checked once, where it enters (:func:`search_text` here, ``mlatr search``,
``GET /search``: :func:`mlatr.search.query.text_query`), and goes on as a :class:`~mlatr.search.query.TextQuery`;
its language (ISO 639-3) goes to the text encoder with the text (which encoders read it:
:mod:`mlatr.search.query`). The functions take any index with what :class:`~mlatr.search.query.SearchIndex`
lists (:class:`~mlatr.search.index.Index` is one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from mlatr import api_args
from mlatr.audio.bounded import load_query_audio
from mlatr.errors import MlatrError
from mlatr.models.protocols import query_languages
from mlatr.search.evidence import Evidence
from mlatr.search.hybrid import Ranked
from mlatr.search.query import SearchIndex, TextQuery, check_k, check_min_relevance, text_query
from mlatr.search.relevance import QueryStats, pair_features, shipped

#: Windows of one sound query encoded per call.
QUERY_WINDOW_BATCH = 16


@dataclass(repr=False)
class Hit:
    """One ranked clip: 1-based ``rank``, ``score`` (a cosine; for a hybrid text search the fused score of
    :mod:`mlatr.search.fusion`), ``id``, absolute ``path``, English captions, the ``evidence`` that ranked it
    (:class:`~mlatr.search.evidence.Evidence`, :mod:`mlatr.search.hybrid`); ``relevance``: the calibrated
    probability that the clip answers the query (:mod:`mlatr.search.relevance`); ``stale``: ``"deleted"`` /
    ``"changed"`` when the clip's audio is gone or differs from when it was indexed (its embedding describes a
    file that is not there any more); ``same_audio``: for a sound query, True when the clip's audio is the
    query's own (the same samples over the part a query reads: :func:`mark_same_audio`), so its score of 1.000
    says nothing about similarity. ``print(hit)``: ``Hit(rank=1, id='dogs/bark', score=0.812, relevance=0.93)``."""

    rank: int
    score: float
    id: str
    path: str
    captions: list[str]
    evidence: list[Evidence] = field(default_factory=list)
    stale: str | None = None
    relevance: float | None = None
    same_audio: bool = False

    def __repr__(self) -> str:
        relevance = "None" if self.relevance is None else f"{self.relevance:.2f}"
        extra = (", same_audio=True" if self.same_audio else "") + (f", stale={self.stale!r}" if self.stale else "")
        return f"Hit(rank={self.rank}, id={self.id!r}, score={self.score:.3f}, relevance={relevance}{extra})"

    def to_dict(self) -> dict:
        """The hit as JSON can hold it: a score that is not finite is ``None`` (JSON has no ``-Infinity``)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out.update(captions=list(self.captions), score=finite_or_none(self.score),
                   evidence=[e.to_dict() for e in self.evidence])
        return out


class Results(list):
    """The hits of a search, best first (a ``list`` of :class:`Hit`), and whether the library seems to hold
    anything relevant. ``relevance``: the probability that it does (for a text query the answer model's,
    :func:`~mlatr.search.relevance.answer_relevance`; given none, the best hit's relevance; ``None`` where
    hit has a relevance). ``nothing_relevant`` is True when it is below
    ``min_relevance`` (the relevance model's threshold unless the caller gave one), or when there is no hit;
    the hits are there all the same, for whoever wants the closest ones. ``caption_hits``: for a sound query
    (:func:`search_audio`, :func:`search_similar`), the indexed captions nearest to it
    (:class:`CaptionHit`, sound-to-caption); ``None`` for a text query."""

    def __init__(self, hits=(), min_relevance: float | None = None, relevance: float | None = None,
                 caption_hits: list[CaptionHit] | None = None):
        super().__init__(hits)
        self.min_relevance = min_relevance
        if relevance is None:
            known = [h.relevance for h in self if h.relevance is not None]
            relevance = max(known) if known else None
        self.relevance = relevance
        self.caption_hits = caption_hits

    def __repr__(self) -> str:
        relevance = "None" if self.relevance is None else f"{self.relevance:.2f}"
        captions = "" if self.caption_hits is None else f", {len(self.caption_hits)} caption hits"
        return (f"Results({list.__repr__(self)}, relevance={relevance}, "
                f"nothing_relevant={self.nothing_relevant}{captions})")

    @property
    def nothing_relevant(self) -> bool:
        if not self:
            return True
        if self.min_relevance is None or self.relevance is None:
            return False
        return self.relevance < self.min_relevance

    def answer(self) -> dict:
        """What the answer says as a whole: ``{"nothing_relevant", "min_relevance", "relevance"}``."""
        return {"nothing_relevant": self.nothing_relevant, "min_relevance": self.min_relevance,
                "relevance": self.relevance}

    def to_dict(self) -> dict:
        """:meth:`answer`, ``"results": [hit, ...]`` and, for a sound query, ``"captions": [caption hit, ...]``."""
        out = {**self.answer(), "results": [h.to_dict() for h in self]}
        if self.caption_hits is not None:
            out["captions"] = [c.to_dict() for c in self.caption_hits]
        return out


@dataclass
class CaptionHit:
    """One ranked caption of an indexed clip (sound-to-caption search)."""

    rank: int
    score: float
    text: str
    lang: str
    id: str
    path: str

    def to_dict(self) -> dict:
        return {**asdict(self), "score": finite_or_none(self.score)}


def finite_or_none(x: float | None) -> float | None:
    """``x`` as a float, or ``None`` when it is missing, NaN or infinite (strict JSON)."""
    return None if x is None or not math.isfinite(float(x)) else float(x)


def clip_hits(index: SearchIndex, scores: np.ndarray, rows: np.ndarray) -> list[Hit]:
    """Ranked :class:`Hit` list from one query's ``scores [k]`` and ``rows [k]``."""
    return [Hit(rank=r + 1, score=float(s), id=index.ids[i], path=index.paths[i],
                captions=[c for c in index.captions[i].get("eng", []) if c], stale=index.stale(i))
            for r, (s, i) in enumerate(zip(scores.tolist(), rows.tolist(), strict=True)) if i >= 0]


def encode_query_texts(index: SearchIndex, queries: Sequence[TextQuery]) -> np.ndarray:
    """``[Q, d]`` unit-norm embeddings of checked queries by the index's model, one encoder call per kind of
    language argument (all given, or none)."""
    loaded = index.model()
    out = np.zeros((len(queries), index.dim), np.float32)
    for has_lang in (True, False):
        rows = [i for i, q in enumerate(queries) if (q.lang is not None) == has_lang]
        if rows:
            out[rows] = loaded.embed_checked([queries[i].text for i in rows],
                                             [queries[i].lang for i in rows] if has_lang else None)  # [len(rows), d]
    return out


def query_waveform(index: SearchIndex, path: str | os.PathLike) -> np.ndarray:
    """``[T]`` the part of the sound file at ``path`` a query uses: its centre ``max_seconds`` at the index's
    rate, decoded alone (:func:`mlatr.audio.bounded.load_query_audio`: the file's length is bounded from
    its header before any decoding). No model is called: a server decodes outside its model lock."""
    return load_query_audio(path, float(index.meta["max_seconds"]), int(index.meta["sample_rate"]))


def encode_query_audio(index: SearchIndex, query: str | os.PathLike | np.ndarray) -> np.ndarray:
    """``[d]`` unit-norm embedding of a sound query (a file's path, or :func:`query_waveform`'s ``[T]``),
    centre-cropped to the index's length and encoded as the index's clips were (windows of
    ``window_seconds``: :mod:`mlatr.inference.audio`)."""
    sr, max_seconds = int(index.meta["sample_rate"]), float(index.meta["max_seconds"])
    wave = query if isinstance(query, np.ndarray) else query_waveform(index, api_args.path("query", query))
    window = float(index.meta.get("window_seconds") or max_seconds)
    return index.model().embed_audio([wave], sample_rate=sr, batch_size=QUERY_WINDOW_BATCH, max_seconds=max_seconds,
                                     window_seconds=window)[0]


def search_vector(index: SearchIndex, query: np.ndarray, k: int = 10) -> list[Hit]:
    """Clips nearest to an embedding ``query [d]`` (already in the index's space)."""
    return _nearest(index, query[None] if query.ndim == 1 else query, [check_k(k)])[0]


def _nearest(index: SearchIndex, queries: np.ndarray, ks: Sequence[int]) -> list[list[Hit]]:
    """Clips nearest to each of ``queries [Q, d]`` (``ks[i]`` >= 1 of them for query ``i``), one backend call."""
    return [clip_hits(index, scores, rows) for scores, rows in _nearest_rows(index, queries, ks)]


def _nearest_rows(index: SearchIndex, queries: np.ndarray, ks: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(cosines [k_i], rows [k_i])`` of the clips nearest to each of ``queries [Q, d]`` (``ks[i]`` >= 1 of
    them for query ``i``) by the index's searcher, one backend call (fewer where the index holds fewer)."""
    if queries.ndim != 2 or queries.shape[1] != index.dim:
        raise MlatrError(f"query embedding has shape {queries.shape[1:]}, the index holds {index.dim}-d vectors")
    if not np.isfinite(queries).all():
        raise MlatrError("the model gave a non-finite query embedding (NaN or inf); no result can be ranked")
    scores, rows = index.searcher("audio").top_k(queries.astype(np.float32), max(ks))
    return [(scores[i, :k][rows[i, :k] >= 0], rows[i, :k][rows[i, :k] >= 0]) for i, k in enumerate(ks)]


def search_text(index: SearchIndex, query: str, lang: str | None = None, k: int = 10, rank: str = "hybrid",
                min_relevance: float | None = None) -> Results:
    """Text-to-audio: the ``k`` best clips for ``query`` in ``lang`` (``None`` where the model's text encoder
    does not read it: :mod:`mlatr.search.query`) by ``rank``: ``hybrid`` (the fused score of every source,
    :mod:`mlatr.search.fusion`), ``audio`` (the clips' audio embeddings nearest to the query's, through the
    index's backend) or ``captions``. Each hit carries its relevance and evidence; the list says how probable
    it is that the library holds a relevant clip (``relevance``) and ``nothing_relevant`` when that is below
    ``min_relevance`` (default: the answer model's threshold). The query is checked here
    (:func:`~mlatr.search.query.text_query`)."""
    languages = query_languages(index.model().model.text_encoder)
    return search_query(index, text_query(query, lang, k, rank, languages, min_relevance=min_relevance))


def search_query(index: SearchIndex, query: TextQuery) -> Results:
    """:func:`search_text` of a query already checked where it entered; ranking by captions an index whose
    live clips have none is refused (every score would be -inf)."""
    if query.rank == "captions" and not has_live_captions(index):
        raise api_args.ArgumentError("rank: captions ranks clips by their captions, and this index holds none (of a "
                                     "clip not deleted): rank by audio or hybrid")
    return rank_text(index, encode_query_texts(index, [query])[0], query)


def rank_text(index: SearchIndex, vec: np.ndarray, query: TextQuery) -> Results:
    """:func:`search_text`'s ranking of a checked text query already embedded (``vec [d]``: its
    :func:`encode_query_texts`)."""
    return rank_texts(index, vec[None], [query])[0]


def rank_texts(index: SearchIndex, vecs: np.ndarray, queries: Sequence[TextQuery]) -> list[Results]:
    """:func:`rank_text` of several text queries embedded together (``vecs [B, d]``), as the batching server
    has them: the queries ranked by sound (``audio``, and ``hybrid`` on a library without any live caption)
    are searched as one batch through the index's searcher (approximate at scale) and described by the text
    ranker (relevance, evidence); the others share one product of the batch with the clips' audio and caption embeddings
    (:meth:`~mlatr.search.hybrid.TextRanker.rank_many`)."""
    texts, langs = [q.text for q in queries], [q.lang for q in queries]
    ks, ranks = [q.k for q in queries], [q.rank for q in queries]
    threshold = shipped().answer.threshold
    mins = [threshold if q.min_relevance is None else q.min_relevance for q in queries]
    out: list[Results] = [Results() for _ in queries]
    sound_only = {"audio", "hybrid"} if "hybrid" in ranks and not has_live_captions(index) else {"audio"}
    by_sound = [j for j, rank in enumerate(ranks) if rank in sound_only]
    if by_sound:
        found = _nearest_rows(index, vecs[by_sound], [ks[j] for j in by_sound])
        for j, (scores, rows) in zip(by_sound, found, strict=True):
            described = index.text_ranker().describe(vecs[j], texts[j], langs[j], rows, scores, ranks[j])
            out[j] = Results(_ranked_hits(index, described), mins[j], described.relevance)
    fused = [j for j, rank in enumerate(ranks) if rank not in sound_only]
    if fused:
        ranked = index.text_ranker().rank_many(vecs[fused], [texts[j] for j in fused], [langs[j] for j in fused],
                                  [ks[j] for j in fused], [ranks[j] for j in fused])
        for j, one in zip(fused, ranked, strict=True):
            out[j] = Results(_ranked_hits(index, one), mins[j], one.relevance)
    return out


def has_live_captions(index: SearchIndex) -> bool:
    """Whether any clip not deleted has a caption. Without one, the fused score orders the clips as their
    sound does (no caption or keyword evidence: :mod:`mlatr.search.relevance`), so a hybrid query is found
    by the index's searcher (approximate at scale) and described, as a sound-ranked one."""
    if not len(index.caption_clip):
        return False
    if not len(index.deleted_rows):
        return True
    if index.backend != "milvus":  # the ranker knows, once (a pass over a million captions is not per query)
        return bool(index.text_ranker().caption_live.any())
    return not np.isin(np.asarray(index.caption_clip), index.deleted_rows).all()


def _ranked_hits(index: SearchIndex, ranked: list[Ranked]) -> list[Hit]:
    hits = clip_hits(index, np.asarray([r.score for r in ranked]), np.asarray([r.row for r in ranked], np.int64))
    for h, r in zip(hits, ranked, strict=True):
        h.evidence, h.relevance = r.evidence, r.relevance
    return hits


def search_audio(index: SearchIndex, query: str | os.PathLike | np.ndarray, k: int = 10,
                 min_relevance: float | None = None) -> Results:
    """Sound-to-sound and sound-to-caption for a sound query (a file's path, or :func:`query_waveform`'s
    ``[T]``): the clips nearest to it as :class:`Results`, the same list as :func:`search_text`'s, with the
    indexed captions nearest to it in ``caption_hits``. Each clip hit carries its relevance (the sound-query
    model of :mod:`mlatr.search.relevance`: the audio cosine and its z-score among the library's clips), sound
    evidence and ``same_audio`` where the clip is the query's own sound (:func:`mark_same_audio`); the list
    says ``nothing_relevant`` as :func:`search_text`'s does. A sound query enters here: ``k`` and
    ``min_relevance`` are checked here (:mod:`mlatr.search.query`)."""
    k, min_relevance = check_k(k), check_min_relevance(min_relevance)
    wave = query if isinstance(query, np.ndarray) else query_waveform(index, api_args.path("query", query))
    return search_encoded_audio(index, wave, encode_query_audio(index, wave), k, min_relevance)


def search_encoded_audio(index: SearchIndex, wave: np.ndarray, vec: np.ndarray, k: int,
                         min_relevance: float | None) -> Results:
    """:func:`search_audio` once the sound ``wave [T]`` is encoded as ``vec [d]`` (``k`` and ``min_relevance``
    checked): a server encodes under its model lock and ranks (and reads the files of hits that may be the
    query's own sound, :func:`mark_same_audio`) outside it."""
    hits = mark_same_audio(index, wave, _nearest(index, vec[None], [k])[0])
    return sound_results(index, vec, hits, min_relevance, nearest_captions(index, vec, k))


#: The cosine from which a sound hit is compared sample by sample with the query (:func:`mark_same_audio`).
SAME_AUDIO_COSINE = 0.999


def mark_same_audio(index: SearchIndex, wave: np.ndarray, hits: list[Hit]) -> list[Hit]:
    """``hits`` with ``same_audio`` set on those whose clip is the sound ``wave [T]`` itself: a hit at cosine
    >= :data:`SAME_AUDIO_COSINE` whose file, read as a query is (:func:`query_waveform`), gives the same
    samples (within 1e-4). The embedding alone cannot tell the query's own clip from a near-copy; the
    samples can, and only the few hits at that cosine are decoded. A clip that cannot be read is not marked."""
    for h in hits:
        if h.score < SAME_AUDIO_COSINE or h.stale:
            continue
        try:
            clip = query_waveform(index, h.path)
        except (MlatrError, OSError):
            continue
        h.same_audio = clip.shape == wave.shape and bool(np.allclose(clip, wave, rtol=0.0, atol=1e-4))
    return hits


def sound_results(index: SearchIndex, vec: np.ndarray, hits: list[Hit], min_relevance: float | None = None,
                  caption_hits: list[CaptionHit] | None = None) -> Results:
    """``hits`` of the audio embedding ``vec [d]`` with the sound-query relevance and evidence, as
    :class:`Results`; ``min_relevance``: checked (None: the sound-query model's threshold); ``caption_hits``:
    the captions nearest to ``vec``."""
    model = shipped().sound
    threshold = model.threshold if min_relevance is None else min_relevance
    if hits:
        stats = QueryStats.of(index.text_ranker().stats, vec, 0.0)
        sound = np.asarray([h.score for h in hits], np.float64)
        x = pair_features(sound, np.full(len(hits), -np.inf), np.zeros(len(hits)), stats)[:, :2]  # sound, sound_z
        rel = model.relevance(model.score(x))
        for h, r in zip(hits, rel.tolist(), strict=True):
            h.relevance = r
    for h in hits:
        h.evidence = [Evidence("sound", h.score, h.rank)]
    return Results(hits, threshold, caption_hits=caption_hits)


def nearest_captions(index: SearchIndex, query: np.ndarray, k: int) -> list[CaptionHit]:
    """The ``k`` (>= 1) indexed captions nearest to an audio embedding ``query [d]`` (sound-to-caption)."""
    captions: list[CaptionHit] = []
    if len(index.caption_text):
        scores, rows = index.searcher("captions").top_k(query[None].astype(np.float32), k)
        for r, (s, i) in enumerate(zip(scores[0].tolist(), rows[0].tolist(), strict=True)):
            clip = int(index.caption_clip[i])
            captions.append(CaptionHit(rank=r + 1, score=float(s), text=index.caption_text[i],
                                       lang=index.caption_lang[i], id=index.ids[clip], path=index.paths[clip]))
    return captions


def search_similar(index: SearchIndex, row: int, k: int = 10) -> Results:
    """"More like this": the ``k`` clips nearest to indexed clip ``row``'s stored audio embedding (itself
    left out), with their sound-query relevance (:func:`sound_results`), the captions nearest to it in
    ``caption_hits``, and ``same_audio`` on a copy of the clip's sound (:func:`mark_same_audio`)."""
    k = check_k(k)
    q = np.asarray(index.text_ranker().clip_vector(row), np.float32)
    hits = [h for h in _nearest(index, q[None], [k + 1])[0] if h.id != index.ids[row]][:k]
    for r, h in enumerate(hits):
        h.rank = r + 1
    if any(h.score >= SAME_AUDIO_COSINE for h in hits) and not index.stale(row):
        try:
            hits = mark_same_audio(index, query_waveform(index, index.paths[row]), hits)
        except (MlatrError, OSError):  # the clip's file cannot be read: no copy can be told apart
            pass
    return sound_results(index, q, hits, caption_hits=nearest_captions(index, q, k))
