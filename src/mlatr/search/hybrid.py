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

from mlatr.errors import MlatrError
from mlatr.search.fusion import DEFAULT_FUSION, RANKS, FusionSettings, reciprocal_rank_fusion
from mlatr.search.lexical import KeywordIndex


def check_rank(rank: str) -> str:
    """``rank`` if it is one of :data:`RANKS`, else an :class:`MlatrError` naming them."""
    if rank not in RANKS:
        raise MlatrError(f"unknown ranking {rank!r} (choose from {', '.join(RANKS)})")
    return rank


class TextRanker:
    """Ranks the live clips of one index for text queries (module docstring).

    ``deleted``: tombstoned clip rows (``mlatr index delete``). They are not part of the library: no
    source ranks them, their captions are left out of the keyword statistics, and they never take a result
    slot, so the ranking equals that of the index without them (:meth:`~mlatr.search.index.Index.live`).

    A query costs one product with the audio embeddings and one with the caption embeddings; the rest
    works on the few clips near the top (:meth:`rank`)."""

    def __init__(self, audio: np.ndarray, caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                 caption_text: Sequence[str], caption_lang: Sequence[str],
                 settings: FusionSettings = DEFAULT_FUSION, deleted: Sequence[int] | np.ndarray = ()):
        self.audio = np.ascontiguousarray(audio, np.float32)  # [N, d]
        self.captions = np.ascontiguousarray(caption_embeddings, np.float32)  # [M, d]
        self.caption_clip = np.asarray(caption_clip, np.int64)  # [M]
        self.caption_text = list(caption_text)
        self.caption_lang = list(caption_lang)
        self.settings = settings
        self.live = np.ones(len(self.audio), bool)  # [N]
        self.live[np.asarray(deleted, np.int64)] = False
        self._all_live = bool(self.live.all())
        self._live_rows = np.flatnonzero(self.live)  # [N_live]
        self._caption_live = self.live[self.caption_clip]  # [M]
        # BM25 over the live clips' captions only (document j is caption row _keyword_rows[j])
        self._keyword_rows = np.flatnonzero(self._caption_live)
        self.keywords = KeywordIndex([self.caption_text[r] for r in self._keyword_rows])
        # captions grouped by clip, once: a clip's best caption is then one maximum.reduceat per query
        self._by_clip = np.argsort(self.caption_clip, kind="stable")  # [M]
        grouped = self.caption_clip[self._by_clip]
        self._starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(grouped) else grouped
        self._block_clip = grouped[self._starts]  # the clip of each block

    @classmethod
    def of(cls, index, settings: FusionSettings = DEFAULT_FUSION) -> TextRanker:
        """The ranker of an :class:`~mlatr.search.index.Index` (its tombstones included)."""
        return cls(index.embeddings, index.caption_embeddings, index.caption_clip, index.caption_text,
                   index.caption_lang, settings, index.deleted_rows)

    def _best(self, scores: np.ndarray) -> np.ndarray:
        """``[N]`` each clip's best of ``scores [M]`` over its captions (``-inf``: no caption), in one pass."""
        best = np.full(len(self.audio), -np.inf, np.float32)
        if len(scores):
            best[self._block_clip] = np.maximum.reduceat(scores[self._by_clip], self._starts)
        return best

    def _best_of_rows(self, scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Among caption ``rows`` (ascending), each clip's best of ``scores [M]``: ``(clips, best, row)``,
        clips ascending, ``row`` the first caption row (in row order) holding the best."""
        clips = self.caption_clip[rows]
        order = np.lexsort((rows, -scores[rows], clips))  # by clip, best first, then lower row
        clips, rows = clips[order], rows[order]
        first = np.r_[True, clips[1:] != clips[:-1]] if len(clips) else np.zeros(0, bool)
        return clips[first], scores[rows[first]], rows[first]

    def _sound_ranks(self, audio: np.ndarray, rows: np.ndarray, top: np.ndarray) -> np.ndarray:
        """``[len(rows)]`` 1-based rank of each live clip of ``rows`` by ``audio [N]`` among the live clips
        (ties: lower row first); ``top``: the live clips of the sound's top, best first (their ranks are
        their positions, the others are counted)."""
        by_row = np.argsort(top)
        pos = np.minimum(np.searchsorted(top[by_row], rows), max(len(top) - 1, 0))
        in_top = top[by_row[pos]] == rows if len(top) else np.zeros(len(rows), bool)
        ranks = np.where(in_top, by_row[pos] + 1, 0) if len(top) else np.zeros(len(rows), np.int64)
        rest = np.flatnonzero(~in_top)
        if len(rest):
            ordered = np.sort(audio if self._all_live else audio[self._live_rows])  # [N_live]
            s = audio[rows[rest]]
            right = np.searchsorted(ordered, s, side="right")
            ranks[rest] = len(ordered) - right + 1
            for j in rest[right - np.searchsorted(ordered, s, side="left") > 1]:  # ties: the lower rows come first
                live = self._live_rows[self._live_rows < rows[j]]
                ranks[j] += int(np.count_nonzero(audio[live] == audio[rows[j]]))
        return ranks

    def rank(self, query_vec: np.ndarray, query: str, k: int, rank: str = "hybrid") -> list[tuple[int, float, list]]:
        """The ``k`` best live clips as ``(row, score, evidence)``, best first (ties: lower row first): the
        same as sorting every clip by :func:`~mlatr.search.fusion.fused_scores` of the full score arrays.

        Only the clips near the top are fused: a clip with neither caption nor keyword evidence scores
        ``1 / (rrf_k + its sound rank)``, below each of the sound's top ``k``, so the ``k`` best lie among the
        sound's top ``k`` and the clips with caption or keyword evidence; those get their exact source ranks
        (the sound's by counting the live clips above them) and are fused and sorted alone."""
        check_rank(rank)
        terms = self.keywords.terms(query)
        audio = self.audio @ query_vec  # [N]
        caption_scores = self.captions @ query_vec  # [M]
        keyword_scores = np.zeros(len(self.captions), np.float32)  # [M]
        keyword_scores[self._keyword_rows] = self.keywords.scores_of(terms)
        gated = np.flatnonzero((caption_scores >= self.settings.caption_gate) & self._caption_live)
        cap = self._best_of_rows(caption_scores, gated)
        kw = self._best_of_rows(keyword_scores, np.flatnonzero(keyword_scores > 0))
        masked = audio if self._all_live else np.where(self.live, audio, -np.inf)  # [N]
        top = top_rows(masked, k)
        top = top if self._all_live else top[self.live[top]]
        if rank == "captions":
            best = self._best(caption_scores)[self._live_rows]  # [N_live]
            rows = self._live_rows[top_rows(best, k)]
        else:
            rows = np.unique(np.concatenate([top, cap[0], kw[0]])) if rank == "hybrid" else top
        ranks = {"sound": self._sound_ranks(audio, rows, top), "caption": _ranks_of(rows, cap),
                 "keyword": _ranks_of(rows, kw)}
        if rank == "hybrid":
            w = self.settings.caption_weight
            scores = reciprocal_rank_fusion(ranks, self.settings.rrf_k, {"caption": w, "keyword": w})
        else:
            scores = best[np.searchsorted(self._live_rows, rows)] if rank == "captions" else audio[rows]
        order = np.lexsort((rows, -scores))[:k]
        return [(int(rows[j]), float(scores[j]), self._evidence(int(rows[j]), {n: int(r[j]) for n, r in ranks.items()},
                                                                 float(audio[rows[j]]), cap, kw, terms))
                for j in order]

    def _evidence(self, i: int, ranks: dict[str, int], sound: float, cap: tuple, kw: tuple,
                  terms: list[str]) -> list[dict]:
        """What ranked clip ``i``: its caption match, keyword match and sound (module docstring)."""
        out = []
        if ranks["caption"]:
            j = int(np.searchsorted(cap[0], i))
            row = int(cap[2][j])
            out.append({"source": "caption", "text": self.caption_text[row], "lang": self.caption_lang[row],
                        "score": float(cap[1][j]), "rank": ranks["caption"]})
        if ranks["keyword"]:
            j = int(np.searchsorted(kw[0], i))
            row = int(kw[2][j])
            doc = int(np.searchsorted(self._keyword_rows, row))
            out.append({"source": "keyword", "text": self.caption_text[row], "lang": self.caption_lang[row],
                        "terms": self.keywords.matched_terms(terms, doc), "score": float(kw[1][j]),
                        "rank": ranks["keyword"]})
        out.append({"source": "sound", "score": sound, "rank": ranks["sound"]})
        return out


def _ranks_of(rows: np.ndarray, evidence: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """``[len(rows)]`` each row's 1-based rank among the clips of one source's ``evidence`` (``(clips
    ascending, best score, caption row)``: best score first, ties lower clip first); 0 without evidence."""
    clips, best = evidence[0], evidence[1]
    rank_of = np.empty(len(clips), np.int64)
    rank_of[np.lexsort((clips, -best))] = np.arange(1, len(clips) + 1)
    pos = np.minimum(np.searchsorted(clips, rows), max(len(clips) - 1, 0))
    has = (pos < len(clips)) & (clips[pos] == rows) if len(clips) else np.zeros(len(rows), bool)
    return np.where(has, rank_of[pos] if len(clips) else 0, 0)


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
