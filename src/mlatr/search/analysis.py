"""Keyword analysis per language: the terms of a query or caption that can be keyword evidence (issue 33).

A text becomes terms in three steps:

1. tokens: lower-cased runs of letters and digits; a run of CJK characters (written without spaces)
   becomes its characters and their bigrams, so "狗叫" matches "一只狗在叫";
2. grammar words out: a token on the language's stop-word list is dropped, and so is a CJK bigram whose
   characters are each on it (``てい``, ``在了``), so an article, a particle or a preposition alone is never
   keyword evidence (``une``, ``der``, ``the``, ``de``, ``的``, ``の``);
3. stems: a word of a language Snowball has a stemmer for is reduced to its stem (``barking`` -> ``bark``,
   ``aboie`` / ``aboyer`` -> ``aboi``), so inflected forms match; CJK n-grams are kept as they are.

Stop words come from maintained packages, never typed here: the Snowball project's lists as ``bm25s`` ships
them (through NLTK: English, French, German, Spanish, Dutch; and its Chinese list) where bm25s has the
language, else ``stopwordsiso`` (Catalan, Japanese and the other languages it has). The long English lists
of ``stopwordsiso`` and ``stop-words`` hold nouns and verbs a sound library needs (``fire``, ``ring``,
``man``, ``click``, ``close``), which is why Snowball's is used where it exists. Stemmers are Snowball's
through ``PyStemmer`` (English, French, German, Spanish, Dutch, Catalan and the other languages it has).

A caption is analysed in its own language, a query in the query's. A query whose language is not given
(``lang=None``, for a text encoder that does not read it) drops the grammar words of every default
language and keeps each word's stems in all of their stemmers.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from importlib.metadata import version

import bm25s.stopwords as bm25s_stopwords
import Stemmer
import stopwordsiso

from mlatr.languages import DEFAULT_LANGUAGES

#: What the terms of a text depend on besides this module: a keyword index stored with a shard records it, and
#: one made with another analysis (other stop-word lists or stemmers) is analysed again when loaded.
ANALYSIS = (f"mlatr-analysis-1 bm25s-{version('bm25s')} PyStemmer-{version('PyStemmer')} "
            f"stopwordsiso-{version('stopwordsiso')}")

_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")

#: ISO 639-3 -> the name of bm25s's Snowball-derived stop-word list (``bm25s.stopwords.STOPWORDS_<NAME>``).
BM25S_LISTS = {"eng": "EN_PLUS", "fra": "FRENCH", "deu": "GERMAN", "spa": "SPANISH", "nld": "DUTCH", "zho": "CHINESE",
               "por": "PORTUGUESE", "ita": "ITALIAN", "rus": "RUSSIAN", "swe": "SWEDISH", "tur": "TURKISH",
               "kor": "KOREAN"}

#: ISO 639-3 -> ISO 639-1, the codes stopwordsiso takes.
ISO_639_1 = {"eng": "en", "fra": "fr", "deu": "de", "spa": "es", "nld": "nl", "cat": "ca", "jpn": "ja", "zho": "zh",
             "ita": "it", "por": "pt", "rus": "ru", "kor": "ko", "ara": "ar", "hin": "hi", "pol": "pl", "tur": "tr",
             "swe": "sv", "fin": "fi", "ces": "cs", "ell": "el"}

#: ISO 639-3 -> Snowball algorithm name (PyStemmer), for the languages mlatr knows that Snowball has.
SNOWBALL = {"eng": "english", "fra": "french", "deu": "german", "spa": "spanish", "nld": "dutch", "cat": "catalan",
            "ita": "italian", "por": "portuguese", "rus": "russian", "swe": "swedish", "fin": "finnish",
            "tur": "turkish", "ell": "greek", "ara": "arabic", "hin": "hindi"}


def tokens(text: str) -> list[str]:
    """Lower-case word tokens of ``text``; CJK runs as characters plus character bigrams."""
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        pos = 0
        for run in _CJK.finditer(word):
            if run.start() > pos:
                out.append(word[pos:run.start()])
            chars = run.group()
            out += list(chars) + [chars[i:i + 2] for i in range(len(chars) - 1)]
            pos = run.end()
        if pos < len(word):
            out.append(word[pos:])
    return out


@cache
def stop_words(lang: str | None) -> frozenset[str]:
    """The grammar words of ``lang`` (module docstring); ``None``: those of every default language."""
    if lang is None:
        return frozenset().union(*(stop_words(code) for code in DEFAULT_LANGUAGES))
    if lang in BM25S_LISTS:
        return frozenset(w.lower() for w in getattr(bm25s_stopwords, f"STOPWORDS_{BM25S_LISTS[lang]}"))
    iso = ISO_639_1.get(lang)
    if not iso or not stopwordsiso.has_lang(iso):
        return frozenset()
    return frozenset(w.lower() for w in stopwordsiso.stopwords(iso))


@cache
def _stemmer(lang: str):
    return Stemmer.Stemmer(SNOWBALL[lang]) if lang in SNOWBALL else None


def _is_cjk(token: str) -> bool:
    return bool(_CJK.fullmatch(token))


class Analyzer:
    """A language's keyword analysis (module docstring): :meth:`terms` of a text."""

    def __init__(self, lang: str | None):
        self.lang = lang
        self.stop = stop_words(lang)
        codes = [lang] if lang is not None else list(DEFAULT_LANGUAGES)
        self.stemmers = [s for s in (_stemmer(code) for code in codes) if s is not None]

    def is_grammar(self, token: str) -> bool:
        """Whether ``token`` is a grammar word: on the list, or a CJK n-gram of listed characters."""
        return token in self.stop or (len(token) > 1 and _is_cjk(token) and all(ch in self.stop for ch in token))

    def terms(self, text: str) -> list[str]:
        """The terms of ``text``: tokens, grammar words dropped, words stemmed (in order, repeats kept)."""
        out: list[str] = []
        for tok in tokens(text):
            if self.is_grammar(tok):
                continue
            if _is_cjk(tok) or not self.stemmers:
                out.append(tok)
            else:
                out += list(dict.fromkeys(s.stemWord(tok) for s in self.stemmers))
        return out


@lru_cache(maxsize=64)
def analyzer(lang: str | None) -> Analyzer:
    """The (shared) :class:`Analyzer` of ``lang``."""
    return Analyzer(lang)


def terms(text: str, lang: str | None) -> list[str]:
    """:meth:`Analyzer.terms` of ``text`` in ``lang``."""
    return analyzer(lang).terms(text)


def surface_words(text: str, lang: str | None, matched: list[str]) -> list[str]:
    """The tokens of ``text`` whose terms are among ``matched`` (what a user reads as the words that
    matched: ``aboie`` rather than its stem ``aboi``), in order, each once."""
    a, wanted, out = analyzer(lang), set(matched), []
    for tok in tokens(text):
        if a.is_grammar(tok):
            continue
        stems = [tok] if _is_cjk(tok) or not a.stemmers else [s.stemWord(tok) for s in a.stemmers]
        if wanted.intersection(stems) and tok not in out:
            out.append(tok)
    return out
