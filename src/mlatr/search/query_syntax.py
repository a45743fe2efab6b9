"""The syntax of a text query, in every language: ``-word`` / ``NOT word``, ``"exact phrase"``, ``OR``.

:func:`parse_query` reads a query's text into a :class:`ParsedQuery`:

- ``-word``, ``-"a phrase"``, ``NOT word`` (``NOT`` in capitals; a ``-`` that starts a word): **excluded**. A clip
  whose captions or keywords (the ``keywords`` facet) hold the word or phrase is never returned;
- ``"a phrase"`` (also ``“…”``, ``„…“``, ``«…»``, ``「…」``, ``『…』``): **required**. Only clips with a caption or a
  keyword that holds the phrase are returned (a required match, not a boost);
- ``a OR b`` (``OR`` in capitals, between two words or phrases): either. A caption's keyword score for the group
  is that of its better alternative (``glass OR ceramic``: a caption holding ``ceramic`` alone scores as fully as
  one holding both; without ``OR`` the two words' scores add up);
- anything else is a word of the query, as before; lower-case ``not`` and ``or`` are words. A query with none
  of these marks is *plain* and ranks exactly as it did before the syntax existed.

**What the text encoder reads** (:attr:`ParsedQuery.embedded`): the query without its excluded words and
phrases, its ``NOT`` / ``OR`` and its quote marks: the remaining words and phrases in their order, one space
apart (``"door slam" -metal OR wood`` embeds ``door slam wood``); a plain query is embedded as typed. The
keyword side (BM25) reads the same words, analysed in the query's language; an ``OR`` group's alternatives are
analysed one by one (:func:`keyword_query`).

**Holding a word or phrase** (:func:`clips_holding`) is decided by the keyword analysis of
:mod:`mlatr.search.analysis`, the query's words in the query's language and each caption in its own (a keyword
with every stemmer), so inflections and Japanese and Chinese words match as keywords do:

- a word is held by a caption that holds one of its terms (its stems; for a word of several Han characters,
  the whole word, not its single characters: ``-公鸡`` does not exclude every clip with ``鸡``);
- a phrase of several words is held by a caption whose words (grammar words left out) hold them in order, one
  after the other (``"door slam"`` is held by "a door slams", not by "the slam of a door");
- a word or phrase written in Japanese or Chinese characters only is also held by a caption containing it as
  typed (spaces left out): ``狗叫`` by "狗叫声", which a segmenter may cut as 狗 / 叫声.

Errors (:class:`QuerySyntaxError`): ``NOT`` or ``-`` with nothing after, ``OR`` without a word or phrase on
each side, an empty phrase, and a query that only excludes.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from mlatr.errors import MlatrError
from mlatr.search.analysis import analyzer

#: Quote marks that open a phrase -> those that close it.
QUOTES = {'"': '"', "“": "”\"", "„": "“”\"", "«": "»", "「": "」", "『": "』", "”": "”\""}
#: A minus that starts an excluded word (ASCII, full-width, the minus sign).
MINUSES = "-－−"
_CJK = re.compile(r"[\u3005-\u3007\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_HAN = re.compile(r"[\u3005-\u3007\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


class QuerySyntaxError(MlatrError):
    """A query whose marks cannot be read: ``query: position N: message``."""

    def __init__(self, message: str, position: int):
        self.position = position
        super().__init__(f"query: position {position}: {message}")


@dataclass(frozen=True)
class ParsedQuery:
    """A query read by :func:`parse_query` (module docstring). ``words``: its positive parts in order (words and
    phrases, an ``OR`` group's alternatives included); ``groups``: each ``OR`` group as the indices of its
    alternatives in ``words``; ``required``: what a clip must hold, each a tuple of phrases of which it must hold
    one (a phrase alone, or an ``OR`` group of phrases only); ``excluded``: the words and phrases it must not
    hold; ``embedded``: what the text encoder reads."""

    text: str
    embedded: str
    words: tuple[str, ...] = ()
    groups: tuple[tuple[int, ...], ...] = ()
    required: tuple[tuple[str, ...], ...] = ()
    excluded: tuple[str, ...] = ()

    @property
    def plain(self) -> bool:
        """No mark: ranked as before the syntax existed."""
        return self.embedded == self.text and not (self.groups or self.required or self.excluded)


def syntax_terms(parsed: ParsedQuery) -> list[str]:
    """The words and phrases a clip is tested for holding (excluded, then every required alternative), each once,
    in order: what a translated query translates one by one (:meth:`Index.term_translations
    <mlatr.search.index.Index.term_translations>`)."""
    return list(dict.fromkeys([*parsed.excluded, *(text for either in parsed.required for text in either)]))


@dataclass
class _Item:
    text: str
    pos: int  # 1-based
    phrase: bool = False
    excluded: bool = False
    operator: bool = False  # an OR


@lru_cache(maxsize=1024)
def parse_query(text: str) -> ParsedQuery:
    """The :class:`ParsedQuery` of ``text`` (module docstring); :class:`QuerySyntaxError` naming the position."""
    items: list[_Item] = []
    marked = False
    i, n = 0, len(text)
    pending: _Item | None = None  # a NOT waiting for its word
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        start = i
        excluded = text[i] in MINUSES and i + 1 < n and not text[i + 1].isspace() and text[i + 1] not in MINUSES
        i += excluded
        if text[i] in QUOTES:
            close = QUOTES[text[i]]
            end = next((j for j in range(i + 1, n) if text[j] in close), n)
            inner = " ".join(text[i + 1:end].split())
            if not inner:
                raise QuerySyntaxError("an empty phrase: put words between the quotes", start + 1)
            item = _Item(inner, start + 1, phrase=True, excluded=excluded)
            i, marked = end + 1, True
        else:
            end = i
            while end < n and not text[end].isspace():
                end += 1
            item = _Item(text[i:end], start + 1, excluded=excluded)
            i = end
            if not excluded and item.text in ("NOT", "OR"):
                if pending is not None:
                    raise QuerySyntaxError(f"NOT needs a word or \"phrase\" after it, found {item.text}",
                                           pending.pos)
                marked = True
                if item.text == "NOT":
                    pending = item
                else:
                    item.operator = True
                    items.append(item)
                continue
            marked = marked or excluded
        if pending is not None:
            item.excluded, pending = True, None
        items.append(item)
    if pending is not None:
        raise QuerySyntaxError("NOT needs a word or \"phrase\" after it", pending.pos)
    if not marked:
        return ParsedQuery(text, text, (text,) if text.strip() else ())
    return _parsed(text, items)


def _parsed(text: str, items: list[_Item]) -> ParsedQuery:
    words: list[_Item] = []
    groups: list[list[int]] = []
    joined = False  # the next positive item joins the last group
    for j, item in enumerate(items):
        if item.operator:
            for side in (items[j - 1] if j else None, items[j + 1] if j + 1 < len(items) else None):
                if side is None or side.operator or side.excluded:
                    raise QuerySyntaxError("OR needs a word or \"phrase\" on each side (glass OR ceramic)", item.pos)
            if not groups or groups[-1][-1] != len(words) - 1:
                groups.append([len(words) - 1])
            joined = True
        elif not item.excluded:
            if joined:
                groups[-1].append(len(words))
                joined = False
            words.append(item)
    if not words:
        raise QuerySyntaxError("the query only excludes: say what to look for too (bird -rooster)", 1)
    grouped = {w for g in groups for w in g}
    required = [(w.text,) for k, w in enumerate(words) if w.phrase and k not in grouped]
    required += [tuple(words[k].text for k in g) for g in groups if all(words[k].phrase for k in g)]
    excluded = [item.text for item in items if item.excluded]
    return ParsedQuery(text, " ".join(w.text for w in words), tuple(w.text for w in words),
                       tuple(tuple(g) for g in groups), tuple(dict.fromkeys(required)),
                       tuple(dict.fromkeys(excluded)))


# ---- the keyword side -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeywordQuery:
    """What the keyword side (BM25) scores: ``terms``, the query's distinct terms in order; ``clauses``: None for
    a query without ``OR`` (a caption scores the sum over ``terms``), else the sum over the clauses of the best
    alternative's sum over its terms (a clause: a tuple of alternatives, each a tuple of terms)."""

    terms: list[str]
    clauses: tuple[tuple[tuple[str, ...], ...], ...] | None = None


def keyword_query(parsed: ParsedQuery, lang: str | None, analyse: Callable[[str, str | None], list[str]]
                  ) -> KeywordQuery:
    """The :class:`KeywordQuery` of ``parsed`` in ``lang`` (``analyse(text, lang)``: a text's distinct terms).
    Without ``OR``, the terms of :attr:`ParsedQuery.embedded`, as a plain query's; with it, each group's
    alternatives analysed one by one and the words between groups together."""
    if not parsed.groups:
        return KeywordQuery(analyse(parsed.embedded, lang))
    in_group = {w: g for g, group in enumerate(parsed.groups) for w in group}
    clauses: list[tuple[tuple[str, ...], ...]] = []
    seen: dict[str, None] = {}

    def fresh(terms: list[str]) -> tuple[str, ...]:
        return tuple(t for t in terms if t not in seen)

    run: list[str] = []
    done_groups: set[int] = set()
    for w, word in enumerate(parsed.words + ("",)):
        if w < len(parsed.words) and w not in in_group:
            run.append(word)
            continue
        if run:
            for t in fresh(analyse(" ".join(run), lang)):
                clauses.append(((t,),))
                seen[t] = None
            run = []
        g = in_group.get(w)
        if g is not None and g not in done_groups:
            done_groups.add(g)
            alternatives = [fresh(analyse(parsed.words[a], lang)) for a in parsed.groups[g]]
            alternatives = [a for a in dict.fromkeys(alternatives) if a]
            for alt in alternatives:
                seen.update(dict.fromkeys(alt))
            if alternatives:
                clauses.append(tuple(alternatives))
    return KeywordQuery(list(seen), tuple(clauses))


def clause_scores(kq: KeywordQuery, term_scores: Callable[[str], tuple[np.ndarray, np.ndarray]],
                  size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, scores)``: the documents scoring above 0 for ``kq``'s clauses (ascending rows) and their score,
    from each term's ``term_scores(term) -> (rows, scores)`` (:class:`KeywordQuery`)."""
    assert kq.clauses is not None
    rows_out, scores_out = [], []
    for clause in kq.clauses:
        alt_rows, alt_scores = [], []
        for alt in clause:
            found = [term_scores(t) for t in alt]
            found = [(np.asarray(r, np.int64), np.asarray(s, np.float64)) for r, s in found if len(r)]
            if not found:
                continue
            r, inverse = np.unique(np.concatenate([f[0] for f in found]), return_inverse=True)
            alt_rows.append(r)
            alt_scores.append(np.bincount(inverse.reshape(-1), weights=np.concatenate([f[1] for f in found]),
                                          minlength=len(r)))
        if not alt_rows:
            continue
        r, inverse = np.unique(np.concatenate(alt_rows), return_inverse=True)
        best = np.full(len(r), -np.inf)
        np.maximum.at(best, inverse.reshape(-1), np.concatenate(alt_scores))
        rows_out.append(r)
        scores_out.append(best)
    if not rows_out:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    r, inverse = np.unique(np.concatenate(rows_out), return_inverse=True)
    total = np.bincount(inverse.reshape(-1), weights=np.concatenate(scores_out), minlength=len(r))
    return r, total.astype(np.float32)


def clause_mass(kq: KeywordQuery, mass: Callable[[list[str]], float]) -> float:
    """The idf mass of ``kq``'s clauses: the sum over the clauses of the best alternative's mass (``mass(terms)``:
    the sum of their idf)."""
    assert kq.clauses is not None
    return float(sum(max(mass(list(alt)) for alt in clause) for clause in kq.clauses))


# ---- holding a word or a phrase -------------------------------------------------------------------------------
class Documents(Protocol):
    """Texts a word or phrase is looked for in (a library's captions, or its keywords): ``rows_with(terms)``, the
    rows of the documents holding one of ``terms`` (live ones only); ``text(row)``, ``lang(row)`` (the language
    it is analysed in); ``clips(rows)``, the clip row of each."""

    def rows_with(self, terms: list[str]) -> np.ndarray: ...

    def text(self, row: int) -> str: ...

    def lang(self, row: int) -> str | None: ...

    def clips(self, rows: np.ndarray) -> np.ndarray: ...


def _word_terms(terms: list[str]) -> list[str]:
    """The terms that stand for a word itself: a word of several Han characters is the whole word, not each
    character (:mod:`mlatr.search.analysis` gives both)."""
    if len(terms) > 1 and len(terms[0]) > 1 and _HAN.fullmatch(terms[0]):
        return terms[:1]
    return terms


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _cjk_only(text: str) -> str | None:
    """``text`` folded without spaces where all its other characters are Japanese or Chinese; else None."""
    squeezed = "".join(_folded(text).split())
    return squeezed if squeezed and all(_CJK.match(ch) for ch in squeezed) else None


def phrase_words(text: str, lang: str | None) -> list[tuple[list[str], list[str]]]:
    """``(word terms, all terms)`` of each word of ``text`` in ``lang``, grammar words left out."""
    return [(_word_terms(terms), terms) for _w, terms in analyzer(lang).words(text) if terms]


def holds(doc_words: Sequence[set[str]], words: Sequence[list[str]]) -> bool:
    """Whether a document whose words (grammar words left out) have the terms ``doc_words`` holds the phrase
    of ``words`` (each word's terms): word after word, each sharing a term."""
    m = len(words)
    return any(all(doc_words[i + j].intersection(words[j]) for j in range(m)) for i in range(len(doc_words) - m + 1))


def clips_holding(docs: Documents, text: str, lang: str | None) -> np.ndarray | None:
    """The clip rows (ascending, distinct) whose documents hold the word or phrase ``text`` of a query in
    ``lang`` (module docstring); None where ``text`` has no word a document could hold (grammar words only)."""
    words = phrase_words(text, lang)
    if not words:
        return None
    squeezed = _cjk_only(text)
    held = [np.asarray(docs.rows_with(words[0][0]), np.int64)] if len(words) == 1 else []  # no text to read
    if len(words) > 1 or squeezed is not None:
        candidates = np.asarray(docs.rows_with(words[0][1]), np.int64)
        for _word, every in words[1:]:
            candidates = np.intersect1d(candidates, np.asarray(docs.rows_with(every), np.int64))
        if held:
            candidates = np.setdiff1d(candidates, held[0])
        keep = []
        for row in candidates.tolist():
            doc = docs.text(row)
            if squeezed is not None and squeezed in "".join(_folded(doc).split()):
                keep.append(row)
            elif len(words) > 1:
                doc_words = [set(terms) for _w, terms in analyzer(docs.lang(row)).words(doc) if terms]
                if holds(doc_words, [w for w, _ in words]):
                    keep.append(row)
        held.append(np.asarray(keep, np.int64))
    rows = np.unique(np.concatenate(held))
    return np.unique(np.asarray(docs.clips(rows), np.int64)) if len(rows) else np.zeros(0, np.int64)


def as_parsed(query: str | ParsedQuery) -> ParsedQuery:
    """``query`` as a :class:`ParsedQuery`: a text is a plain query (its marks not read: a ranking called with a
    text ranks it as before the syntax existed), a parsed one itself."""
    return query if isinstance(query, ParsedQuery) else ParsedQuery(query, query, (query,))
