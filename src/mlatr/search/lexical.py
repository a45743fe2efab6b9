"""Keywords: BM25 over the captions of a library (file names, sidecar texts, manifest captions), stored.

BM25 is Robertson & Zaragoza 2009, the Lucene variant (``k1 = 1.5``, ``b = 0.75``): a caption's score for
a query is the sum over the query's distinct terms ``t`` it holds of

    idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl)),   idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

with ``tf`` the term's count in the caption, ``dl`` the caption's length in terms, and the *corpus
statistics* ``N`` (captions), ``avgdl`` (their mean length) and ``df(t)`` (captions holding ``t``). The
scores equal those of ``bm25s`` (Lù 2024, the implementation this module used before, eager sparse
scoring; ``tests/test_keyword_index.py`` compares them, ``tests/test_hybrid_search.py`` checks the formula
computed apart), whose convention for a caption without any term
it keeps: such a caption counts as one term long, so the fitted relevance model reads the same keyword
scores.

What is stored (:class:`Postings`, one per part of a library: an index folder's shard, written once with
it) are the corpus's *counts*, not its scores: for each term the captions holding it and its count in
each (a compressed sparse column matrix), and each caption's length. Scores depend on the statistics of
the whole library, which change when a shard is added or a clip deleted; counts of a shard never do. So
:class:`KeywordIndex` combines the parts as they are now: ``N`` and ``avgdl`` over the live captions of
every part (those of deleted clips left out), ``df(t)`` summed over the parts' live postings, when the
query comes. The scores are then those a fresh build over the same live captions gives, after any
sequence of adds, deletions and compactions (``tests/test_keyword_index.py``). A query costs one
posting-list read per term and part (``O(df)``), never a pass over the library.

Terms come from :mod:`mlatr.search.analysis`: each caption analysed in its own language, the query in the
query's (stop words out, Snowball stems, Japanese and Chinese words), so a grammar word is never a match. A
stored part records the analysis it was made with (:data:`~mlatr.search.analysis.ANALYSIS`); a part made
with another is analysed again when loaded.

Besides the scores, the index gives each term's document frequency, for the query's *idf mass*
(:meth:`KeywordIndex.idf_mass`: the sum of its terms' inverse document frequencies, a term the library does
not hold counting as the rarest), by which :mod:`mlatr.search.relevance` divides a BM25 score: the share of
what the query could match that a caption matched, comparable between queries and libraries.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlatr.errors import InputError
from mlatr.json_input import read_json_file
from mlatr.search.analysis import ANALYSIS
from mlatr.search.analysis import terms as analysed_terms

#: BM25's term-frequency saturation and length normalisation (Lucene's and bm25s' defaults).
K1, B = 1.5, 0.75
#: A part's files in a shard folder.
FILES = ("keywords.json", "keywords.indptr.npy", "keywords.docs.npy", "keywords.tf.npy", "keywords.length.npy")


def idf(doc_freq: np.ndarray | int, n_docs: int) -> np.ndarray:
    """BM25's (Lucene) inverse document frequency ``log(1 + (N - df + 0.5) / (df + 0.5))``."""
    df = np.asarray(doc_freq, np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def saturation(tf: np.ndarray, length: np.ndarray, avgdl: float) -> np.ndarray:
    """BM25's term-frequency part ``tf / (tf + k1 * (1 - b + b * dl / avgdl))`` (a caption's score is the sum
    over the query's terms of this times the term's :func:`idf`)."""
    tf = np.asarray(tf, np.float64)
    return tf / (tf + K1 * (1 - B + B * np.asarray(length, np.float64) / avgdl))


@dataclass
class Postings:
    """The keyword counts of one part's captions: ``vocab`` (term -> column), ``indptr [V + 1]``, ``docs
    [nnz]`` (caption rows of the part, ascending within a term) and ``tf [nnz]`` (the term's count in that
    caption) as a compressed sparse column matrix, ``length [m]`` (each caption's terms; 1 for a caption
    without any, as bm25s counts it) and ``analysis`` (:data:`~mlatr.search.analysis.ANALYSIS`)."""

    vocab: dict[str, int]
    indptr: np.ndarray
    docs: np.ndarray
    tf: np.ndarray
    length: np.ndarray
    analysis: str = ANALYSIS

    def __len__(self) -> int:
        return len(self.length)

    @classmethod
    def of_terms(cls, docs_terms: Sequence[Sequence[str]], analysis: str = ANALYSIS) -> Postings:
        """The postings of captions already analysed (``docs_terms[i]``: caption ``i``'s terms, repeats kept)."""
        counts = [Counter(t) for t in docs_terms]
        vocab = {t: i for i, t in enumerate(sorted({t for c in counts for t in c}))}
        col = np.fromiter((vocab[t] for c in counts for t in c), np.int64)
        row = np.repeat(np.arange(len(counts), dtype=np.int64), [len(c) for c in counts])
        tf = np.fromiter((n for c in counts for n in c.values()), np.int64)
        order = np.lexsort((row, col))  # by term, then caption
        indptr = np.zeros(len(vocab) + 1, np.int64)
        np.cumsum(np.bincount(col, minlength=len(vocab)), out=indptr[1:])
        length = np.asarray([max(len(t), 1) for t in docs_terms], np.int32)
        return cls(vocab, indptr, row[order].astype(np.int32), np.minimum(tf[order], 65535).astype(np.uint16),
                   length, analysis)

    @classmethod
    def of_texts(cls, texts: Sequence[str], langs: Sequence[str | None] | None = None,
                 analyse: Callable[[str, str | None], list[str]] = analysed_terms) -> Postings:
        """The postings of ``texts`` (``langs[i]``: text ``i``'s language, None: unknown), analysed by ``analyse``."""
        langs = [None] * len(texts) if langs is None else list(langs)
        return cls.of_terms([analyse(t, lang) for t, lang in zip(texts, langs, strict=True)])

    def column(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """``(docs, tf)`` of ``term`` (empty where no caption of the part holds it)."""
        j = self.vocab.get(term)
        if j is None:
            return self.docs[:0], self.tf[:0]
        start, end = int(self.indptr[j]), int(self.indptr[j + 1])
        return self.docs[start:end], self.tf[start:end]

    def save(self, folder: Path) -> None:
        """The part's files in a shard folder (:data:`FILES`): the terms in column order as JSON, the arrays
        as ``.npy`` (memory-mapped when loaded)."""
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        (folder / FILES[0]).write_text(json.dumps({"analysis": self.analysis, "terms": terms}, ensure_ascii=False),
                                       encoding="utf-8")
        for name, arr in zip(FILES[1:], (self.indptr, self.docs, self.tf, self.length), strict=True):
            np.save(folder / name, arr)

    @classmethod
    def load(cls, folder: Path, n_docs: int) -> Postings | None:
        """A shard folder's postings of its ``n_docs`` captions, or None when the shard has none (written
        before they were stored) or they were made with another analysis than this mlatr's; refused with
        the file's name when they do not fit the shard."""
        head = folder / FILES[0]
        if not head.is_file():
            return None
        meta = read_json_file(head)
        if not isinstance(meta, dict) or not isinstance(meta.get("terms"), list):
            raise InputError("expected an object with the analysis and the terms", file=str(head))
        if meta.get("analysis") != ANALYSIS:
            return None
        arrays = []
        for name in FILES[1:]:
            try:
                arrays.append(np.load(folder / name, mmap_mode="r", allow_pickle=False))
            except Exception as exc:  # OSError, ValueError, EOFError: truncated, foreign or missing
                raise InputError(f"not a readable .npy array ({exc})", file=str(folder / name)) from exc
        indptr, docs, tf, length = (np.asarray(a) for a in arrays)  # plain views of the maps: no per-slice wrapper
        if (len(indptr) != len(meta["terms"]) + 1 or len(docs) != len(tf) or int(indptr[-1]) != len(docs)
                or len(length) != n_docs or (len(docs) and (int(docs.max()) >= n_docs or int(docs.min()) < 0))
                or int(indptr[0]) != 0 or (np.diff(indptr) < 0).any() or (len(tf) and int(tf.min()) < 1)
                or (len(length) and int(length.min()) < 0) or not all(isinstance(t, str) for t in meta["terms"])):
            raise InputError(f"keyword postings do not fit the shard's {n_docs} captions (rebuild the index with "
                             "mlatr index compact)", file=str(folder / FILES[1]))
        return cls({t: i for i, t in enumerate(meta["terms"])}, indptr, docs, tf, length, ANALYSIS)


class KeywordIndex:
    """BM25 scores of a query against the live captions of one or more :class:`Postings` parts, with the
    corpus statistics of all of them together (module docstring).

    ``KeywordIndex(texts, langs, analyse)`` indexes ``texts`` as one part; :meth:`of_parts` combines stored
    parts, ``live[i]`` (``[len(part)]`` bool) saying which captions of part ``i`` count (None: all). Caption
    rows are numbered across the parts in order."""

    def __init__(self, texts: Sequence[str] = (), langs: Sequence[str | None] | None = None,
                 analyse: Callable[[str, str | None], list[str]] = analysed_terms):
        self._analyse = analyse
        self._setup([Postings.of_texts(list(texts), langs, analyse)], [None])

    @classmethod
    def of_parts(cls, parts: Sequence[Postings], live: Sequence[np.ndarray | None],
                 analyse: Callable[[str, str | None], list[str]] = analysed_terms) -> KeywordIndex:
        out = cls.__new__(cls)
        out._analyse = analyse
        out._setup(list(parts), list(live))
        return out

    def _setup(self, parts: list[Postings], live: list[np.ndarray | None]) -> None:
        self.parts = parts
        self.live = [None if v is None or np.all(v) else np.asarray(v, bool) for v in live]
        self.starts = np.cumsum([0] + [len(p) for p in parts])
        self.n = int(self.starts[-1])
        #: the corpus statistics over the live captions of every part
        self.n_docs = sum(len(p) if v is None else int(v.sum()) for p, v in zip(parts, self.live, strict=True))
        total = sum(float(np.sum(p.length, dtype=np.int64)) if v is None else float(np.sum(p.length[v], dtype=np.int64))
                    for p, v in zip(parts, self.live, strict=True))
        self.avgdl = total / self.n_docs if self.n_docs else 1.0

    def terms(self, query: str, lang: str | None) -> list[str]:
        """The query's distinct terms in its language ``lang``, in order (analysed once per query:
        :meth:`scores_of`, :meth:`idf_mass` and :meth:`matched_terms` take them)."""
        return list(dict.fromkeys(self._analyse(query, lang)))

    def _live_column(self, i: int, term: str) -> tuple[np.ndarray, np.ndarray]:
        docs, tf = self.parts[i].column(term)
        if self.live[i] is not None and len(docs):
            keep = self.live[i][docs]
            docs, tf = docs[keep], tf[keep]
        return docs, tf

    def doc_freq(self, term: str) -> int:
        """Live captions holding ``term``, over every part."""
        return sum(len(self._live_column(i, term)[0]) for i in range(len(self.parts)))

    def sparse_scores(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(rows [r], scores [r])``: the live captions holding one of ``terms`` (ascending rows) and their BM25
        score; every other caption scores 0."""
        rows, scores = [], []
        for term in terms:
            cols = [self._live_column(i, term) for i in range(len(self.parts))]
            df = sum(len(d) for d, _ in cols)
            if not df:
                continue
            weight = float(idf(df, self.n_docs))
            for i, (docs, tf) in enumerate(cols):
                if len(docs):
                    rows.append(docs.astype(np.int64) + self.starts[i])
                    scores.append(weight * saturation(tf, self.parts[i].length[docs], self.avgdl))
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        rows_all = np.concatenate(rows)
        found, inverse = np.unique(rows_all, return_inverse=True)
        return found, np.bincount(inverse, weights=np.concatenate(scores), minlength=len(found)).astype(np.float32)

    def scores_of(self, terms: list[str]) -> np.ndarray:
        """``[n]`` BM25 score of every caption for the query terms ``terms`` (0 where none occurs or the
        caption is not live)."""
        out = np.zeros(self.n, np.float32)
        rows, scores = self.sparse_scores(terms)
        out[rows] = scores
        return out

    def scores(self, query: str, lang: str | None) -> np.ndarray:
        """``[n]`` BM25 score of every caption for ``query`` in ``lang`` (0 where no term occurs)."""
        return self.scores_of(self.terms(query, lang))

    def idf_mass(self, terms: list[str]) -> float:
        """Sum of the idf of ``terms`` in this library (a term no live caption holds: document frequency 0)."""
        if not terms:
            return 0.0
        return float(idf(np.array([self.doc_freq(t) for t in terms]), self.n_docs).sum())

    def matched_terms(self, terms: list[str], row: int) -> list[str]:
        """The query ``terms`` that occur in caption ``row`` (the evidence shown for a keyword match)."""
        i = int(np.searchsorted(self.starts, row, side="right")) - 1
        local = row - int(self.starts[i])
        out = []
        for t in terms:
            docs, _ = self.parts[i].column(t)
            j = int(np.searchsorted(docs, local))
            if j < len(docs) and docs[j] == local:
                out.append(t)
        return out
