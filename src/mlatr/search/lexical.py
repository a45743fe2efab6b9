"""Keywords: BM25 over the captions of a library (file names, sidecar texts, manifest captions).

Scoring is done by ``bm25s`` (Lù 2024, "BM25S: orders of magnitude faster lexical search via eager sparse
scoring"): it keeps the library's term-document scores in a sparse matrix computed once, so a query costs
one sparse row gather per term, and it is maintained and released regularly. ``rank-bm25`` scores every
document in Python per query (and has had no release since 2022); ``tantivy`` is a full search engine with
an on-disk index of its own, more than a list of captions needs. BM25 itself is Robertson & Zaragoza 2009
(the Lucene variant with ``k1 = 1.5``, ``b = 0.75``, bm25s' defaults).

Terms come from :mod:`mlatr.search.analysis`: each caption analysed in its own language, the query in the
query's (stop words out, Snowball stems, CJK character n-grams), so a grammar word is never a match.

Besides the scores, the index keeps each term's document frequency, for the query's *idf mass*
(:meth:`KeywordIndex.idf_mass`: the sum of its terms' inverse document frequencies, a term the library does
not hold counting as the rarest), by which :mod:`mlatr.search.relevance` divides a BM25 score: the share of
what the query could match that a caption matched, comparable between queries and libraries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import bm25s
import numpy as np

from mlatr.search.analysis import terms as analysed_terms


def idf(doc_freq: np.ndarray | int, n_docs: int) -> np.ndarray:
    """BM25's (Lucene) inverse document frequency ``log(1 + (N - df + 0.5) / (df + 0.5))``, as bm25s scores."""
    df = np.asarray(doc_freq, np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


class KeywordIndex:
    """BM25 scores of a query against each of ``texts`` (one document per caption, ``langs[i]`` its language;
    ``None`` or a missing list: analysed as a text of unknown language). ``analyse(text, lang)``: the terms
    of a text (default :func:`mlatr.search.analysis.terms`)."""

    def __init__(self, texts: Sequence[str], langs: Sequence[str | None] | None = None,
                 analyse: Callable[[str, str | None], list[str]] = analysed_terms):
        self.n = len(texts)
        self._analyse = analyse
        langs = [None] * self.n if langs is None else list(langs)
        self._tokens = [analyse(t, lang) for t, lang in zip(texts, langs, strict=True)]
        self.doc_freq = Counter(t for toks in self._tokens for t in set(toks))
        self._bm25 = None
        if self.n and any(self._tokens):
            self._bm25 = bm25s.BM25()
            self._bm25.index([t or [""] for t in self._tokens], show_progress=False)
            self._vocab = set(self._bm25.vocab_dict)

    def terms(self, query: str, lang: str | None) -> list[str]:
        """The query's distinct terms in its language ``lang``, in order (analysed once per query:
        :meth:`scores_of`, :meth:`idf_mass` and :meth:`matched_terms` take them)."""
        return list(dict.fromkeys(self._analyse(query, lang)))

    def scores_of(self, terms: list[str]) -> np.ndarray:
        """``[len(texts)]`` BM25 score of every text for the query terms ``terms`` (0 where none occurs)."""
        known = [t for t in terms if self._bm25 is not None and t in self._vocab]
        if not known:
            return np.zeros(self.n, np.float32)
        return np.asarray(self._bm25.get_scores(known), np.float32)

    def scores(self, query: str, lang: str | None) -> np.ndarray:
        """``[len(texts)]`` BM25 score of every text for ``query`` in ``lang`` (0 where no term occurs)."""
        return self.scores_of(self.terms(query, lang))

    def idf_mass(self, terms: list[str]) -> float:
        """Sum of the idf of ``terms`` in this library (a term no text holds: document frequency 0)."""
        if not terms:
            return 0.0
        return float(idf(np.array([self.doc_freq.get(t, 0) for t in terms]), self.n).sum())

    def matched_terms(self, terms: list[str], row: int) -> list[str]:
        """The query ``terms`` that occur in text ``row`` (the evidence shown for a keyword match)."""
        have = set(self._tokens[row])
        return [t for t in terms if t in have]
