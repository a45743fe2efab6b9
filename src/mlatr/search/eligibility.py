"""Which clips a query may return: its filter over the facets, silence, its excluded words and required phrases.

A search ranks only the clips its :class:`Allowed` lets through, *inside* the ranking: the candidate set is
restricted before the top-k cut on every path (the exact ranking's candidates, the windows an approximate or a
Milvus search finds, the sound ranking of the index's searcher), so a filter never leaves a page short when
allowed clips remain. What a filter does not change: the library's statistics (its sound and caption moments, the
keyword index's corpus statistics, the rare cutoff) stay the whole library's, so a clip's fused score and
relevance are the same with or without a filter (a filter narrows the results, not the meaning of a z-score);
the answer's relevance ("nothing relevant") is read from the allowed candidates.

:func:`allowed_clips` puts together, for one query:

- the filter (:mod:`mlatr.search.filters`), and for a text query ``not silent`` unless silence is asked for
  (``include_silent``, or a filter that tests ``silent`` itself: :func:`~mlatr.search.filters.without_silence`);
- the query's excluded words and phrases, and its required phrases (:mod:`mlatr.search.query_syntax`), and, for a
  query read through a translation (:mod:`mlatr.search.query_translation`), each one's own translation, looked
  for in the captions (the text ranker's :class:`~mlatr.search.query_syntax.Documents`) and in the keywords facet
  (:meth:`keyword_documents`).

None where every clip is allowed: the search is then the one without a filter, number for number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from mlatr.search.analysis import terms as analysed_terms
from mlatr.search.filters import FacetTable, Filter, filter_mask
from mlatr.search.lexical import KeywordIndex
from mlatr.search.query_syntax import Documents, ParsedQuery, clips_holding


class Allowed:
    """The clip rows a query may return: ``mask [N]`` bool over the index's rows; ``where`` the facet filter
    behind ``facet_mask`` (``mask`` is within it: a query's words can only remove more), which a storage that
    filters in its own engine translates (``facets``: the library's :class:`FacetTable`)."""

    def __init__(self, mask: np.ndarray, where: Filter | None = None, facet_mask: np.ndarray | None = None,
                 facets: FacetTable | None = None):
        self.mask = np.asarray(mask, bool)
        self.where, self.facets = where, facets
        self.facet_mask = self.mask if facet_mask is None else np.asarray(facet_mask, bool)
        self.memo: dict = {}  # what a storage derives from it once (its engine's expression)

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.mask))

    def rows(self) -> np.ndarray:
        return np.flatnonzero(self.mask)

    def of_rows(self, owner: np.ndarray) -> Allowed:
        """The rows of another table whose clip (``owner [M]``: each row's clip row) is allowed (a library's
        captions), without a facet filter of their own."""
        owner = np.asarray(owner, np.int64)
        mask = self.mask[owner] if len(owner) else np.zeros(0, bool)
        return Allowed(mask, None, np.ones(len(owner), bool))


def allowed_clips(n: int, facets: FacetTable, where: Filter | None, parsed: ParsedQuery | None = None,
                  lang: str | None = None, documents: Sequence[Documents] = (),
                  live: np.ndarray | None = None, translated: Mapping[str, str] | None = None,
                  translated_lang: str | None = None) -> Allowed | None:
    """What a query may return among ``n`` clip rows (module docstring): ``where`` over ``facets`` (already with
    ``not silent`` where a text query needs it), and ``parsed``'s excluded and required words and phrases in
    ``lang``, held by a clip when one of its ``documents`` holds them, or holds the word's translation
    (``translated``: word or phrase -> its translation in ``translated_lang``): an excluded word leaves out the
    clips holding it or its translation, a required phrase keeps those holding either. None where every ``live``
    row (default: every row) is allowed."""
    facet_mask = filter_mask(where, facets) if where is not None else np.ones(n, bool)
    mask = facet_mask.copy()
    translated = translated or {}

    def readings(text: str) -> list[tuple[str, str | None]]:
        return [(text, lang)] + ([(translated[text], translated_lang)] if text in translated else [])

    for text in (parsed.excluded if parsed is not None else ()):
        for said, said_lang in readings(text):
            for held in _held(documents, said, said_lang):
                mask[held] = False
    for either in (parsed.required if parsed is not None else ()):
        found = [h for text in either for said, said_lang in readings(text)
                 for h in _held(documents, said, said_lang, none_for_all=True)]
        if any(h is None for h in found):
            continue  # a phrase of grammar words only: every clip holds it
        keep = np.zeros(n, bool)
        for held in found:
            keep[held] = True
        mask &= keep
    considered = mask if live is None else mask[live]
    if considered.all():
        return None
    return Allowed(mask, where, facet_mask, facets)


def _held(documents: Sequence[Documents], text: str, lang: str | None, none_for_all: bool = False) -> list:
    """The clip rows each of ``documents`` finds holding ``text`` (None where ``text`` is grammar words only and
    ``none_for_all``; else left out)."""
    out = []
    for docs in documents:
        rows = clips_holding(docs, text, lang)
        if rows is not None or none_for_all:
            out.append(rows)
    return out


class KeywordDocuments:
    """The keywords facet of a library's clips as :class:`~mlatr.search.query_syntax.Documents`: each keyword a
    document of its clip, analysed with every stemmer (its language is not recorded)."""

    def __init__(self, facets: FacetTable):
        pairs = facets.lists("keywords")
        self.clip = np.asarray([row for row, _ in pairs], np.int64)
        self.texts = [text for _, text in pairs]
        self.index = KeywordIndex(self.texts, None, analysed_terms)

    def rows_with(self, terms: list[str]) -> np.ndarray:
        return self.index.sparse_scores(list(terms))[0]

    def text(self, row: int) -> str:
        return self.texts[row]

    def lang(self, row: int) -> str | None:
        return None

    def clips(self, rows: np.ndarray) -> np.ndarray:
        return self.clip[np.asarray(rows, np.int64)]
