"""Keywords: BM25 over the captions of a library (file names, sidecar texts, manifest captions).

Scoring is done by ``bm25s`` (Lù 2024, "BM25S: orders of magnitude faster lexical search via eager sparse
scoring"): it keeps the library's term-document scores in a sparse matrix computed once, so a query costs
one sparse row gather per token, and it is maintained and released regularly. ``rank-bm25`` scores every
document in Python per query (and has had no release since 2022); ``tantivy`` is a full search engine with
an on-disk index of its own, more than a list of captions needs. BM25 itself is Robertson & Zaragoza 2009
(the Lucene variant with ``k1 = 1.5``, ``b = 0.75``, bm25s' defaults).

Tokens (:func:`tokenize`): lower-cased runs of letters and digits; a run of CJK characters (which has no
spaces between words) becomes its characters and their bigrams, so "狗叫" matches "一只狗在叫". No
stemming and no stop-word list: captions are short names in any language, and a per-language stemmer would
treat the same file name differently by its declared language.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import bm25s
import numpy as np

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens of ``text``; CJK runs as characters plus character bigrams (module docstring)."""
    tokens: list[str] = []
    for word in _WORD.findall(text.lower()):
        pos = 0
        for run in _CJK.finditer(word):
            if run.start() > pos:
                tokens.append(word[pos:run.start()])
            chars = run.group()
            tokens += list(chars) + [chars[i:i + 2] for i in range(len(chars) - 1)]
            pos = run.end()
        if pos < len(word):
            tokens.append(word[pos:])
    return tokens


class KeywordIndex:
    """BM25 scores of a query against each of ``texts`` (one document per caption)."""

    def __init__(self, texts: Sequence[str]):
        self.n = len(texts)
        self._tokens = [tokenize(t) for t in texts]
        self._bm25 = None
        if self.n and any(self._tokens):
            self._bm25 = bm25s.BM25()
            self._bm25.index([t or [""] for t in self._tokens], show_progress=False)
            self._vocab = set(self._bm25.vocab_dict)

    def terms(self, query: str) -> list[str]:
        """The query's distinct tokens, in order (tokenised once per query: :meth:`scores_of` and
        :meth:`matched_terms` take them)."""
        return list(dict.fromkeys(tokenize(query)))

    def scores_of(self, terms: list[str]) -> np.ndarray:
        """``[len(texts)]`` BM25 score of every text for the query tokens ``terms`` (0 where none occurs)."""
        known = [t for t in terms if self._bm25 is not None and t in self._vocab]
        if not known:
            return np.zeros(self.n, np.float32)
        return np.asarray(self._bm25.get_scores(known), np.float32)

    def scores(self, query: str) -> np.ndarray:
        """``[len(texts)]`` BM25 score of every text for ``query`` (0 where no query token occurs)."""
        return self.scores_of(self.terms(query))

    def matched_terms(self, query: str | list[str], row: int) -> list[str]:
        """The query's tokens (``query``, or its :meth:`terms`) that occur in text ``row`` (the evidence shown
        for a keyword match)."""
        have = set(self._tokens[row])
        return [t for t in (self.terms(query) if isinstance(query, str) else query) if t in have]
