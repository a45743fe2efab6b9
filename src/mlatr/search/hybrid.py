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
from mlatr.search.fusion import DEFAULT_FUSION, RANKS, FusionSettings, fused_scores, source_ranks
from mlatr.search.lexical import KeywordIndex


def check_rank(rank: str) -> str:
    """``rank`` if it is one of :data:`RANKS`, else an :class:`MlatrError` naming them."""
    if rank not in RANKS:
        raise MlatrError(f"unknown ranking {rank!r} (choose from {', '.join(RANKS)})")
    return rank


class TextRanker:
    """Ranks the clips of one index for text queries (module docstring)."""

    def __init__(self, audio: np.ndarray, caption_embeddings: np.ndarray, caption_clip: np.ndarray,
                 caption_text: Sequence[str], caption_lang: Sequence[str],
                 settings: FusionSettings = DEFAULT_FUSION):
        self.audio = np.ascontiguousarray(audio, np.float32)  # [N, d]
        self.captions = np.ascontiguousarray(caption_embeddings, np.float32)  # [M, d]
        self.caption_clip = np.asarray(caption_clip, np.int64)  # [M]
        self.caption_text = list(caption_text)
        self.caption_lang = list(caption_lang)
        self.keywords = KeywordIndex(self.caption_text)
        self.settings = settings
        # captions grouped by clip, once: a clip's best caption is then one maximum.reduceat per query
        self._by_clip = np.argsort(self.caption_clip, kind="stable")  # [M]
        grouped = self.caption_clip[self._by_clip]
        self._starts = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if len(grouped) else grouped
        self._block_clip = grouped[self._starts]  # the clip of each block

    @classmethod
    def of(cls, index, settings: FusionSettings = DEFAULT_FUSION) -> TextRanker:
        """The ranker of an :class:`~mlatr.search.index.Index`."""
        return cls(index.embeddings, index.caption_embeddings, index.caption_clip, index.caption_text,
                   index.caption_lang, settings)

    def _best(self, scores: np.ndarray) -> np.ndarray:
        """``[N]`` each clip's best of ``scores [M]`` over its captions (``-inf``: no caption), in one pass."""
        best = np.full(len(self.audio), -np.inf, np.float32)
        if len(scores):
            best[self._block_clip] = np.maximum.reduceat(scores[self._by_clip], self._starts)
        return best

    def _best_row(self, scores: np.ndarray, clip: int) -> int:
        """The caption row of ``clip`` with the highest of ``scores [M]``."""
        rows = np.flatnonzero(self.caption_clip == clip)
        return int(rows[np.argmax(scores[rows])])

    def source_scores(self, query_vec: np.ndarray, query: str) -> dict[str, np.ndarray]:
        """``audio [N]`` cosine per clip, ``caption [N]`` best caption cosine, ``keyword [N]`` best BM25, and
        the per-caption ``caption_scores [M]`` / ``keyword_scores [M]`` they come from."""
        caption_scores = self.captions @ query_vec  # [M]
        keyword_scores = self.keywords.scores(query)  # [M]
        keyword = self._best(keyword_scores)
        return {"audio": self.audio @ query_vec, "caption": self._best(caption_scores),
                "keyword": np.where(np.isfinite(keyword), keyword, 0.0), "caption_scores": caption_scores,
                "keyword_scores": keyword_scores}

    def rank(self, query_vec: np.ndarray, query: str, k: int, rank: str = "hybrid") -> list[tuple[int, float, list]]:
        """The ``k`` best clips as ``(row, score, evidence)``, best first (ties: lower row first)."""
        check_rank(rank)
        s = self.source_scores(query_vec, query)
        ranks = source_ranks(s["audio"], s["caption"], s["keyword"], self.settings)
        scores = fused_scores(s["audio"], s["caption"], s["keyword"], rank, self.settings, ranks)  # [N]
        return [(int(i), float(scores[i]), self.evidence(s, ranks, int(i), query)) for i in top_rows(scores, k)]

    def evidence(self, s: dict[str, np.ndarray], ranks: dict[str, np.ndarray], i: int, query: str) -> list[dict]:
        """What ranked clip ``i``: its caption match, keyword match and sound (module docstring)."""
        out = []
        if ranks["caption"][i]:
            row = self._best_row(s["caption_scores"], i)
            out.append({"source": "caption", "text": self.caption_text[row], "lang": self.caption_lang[row],
                        "score": float(s["caption"][i]), "rank": int(ranks["caption"][i])})
        if ranks["keyword"][i]:
            row = self._best_row(s["keyword_scores"], i)
            out.append({"source": "keyword", "text": self.caption_text[row], "lang": self.caption_lang[row],
                        "terms": self.keywords.matched_terms(query, row), "score": float(s["keyword"][i]),
                        "rank": int(ranks["keyword"][i])})
        out.append({"source": "sound", "score": float(s["audio"][i]), "rank": int(ranks["sound"][i])})
        return out


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
