"""A text query translated, offline, into the language of the library's captions (issue 45).

A library's captions are mostly in one language (file names: English), and a query in another language
matches them less well: its words are not theirs (no keyword evidence at all), and a multilingual encoder puts a
translation less close than the same words. The standard cross-language remedy is to translate the query into
the documents' language (Nie 2010, *Cross-Language Information Retrieval*, ch. 2): the caption and keyword
evidence read the translation as well as the query (each clip keeps the better of the two), while the sound
evidence keeps the query's own embedding (the sound side was trained on every language).

The translator is Apertium, offline, where a pair is installed (Debian: ``apertium-eng-spa``,
``apertium-eng-cat`` give Spanish and Catalan queries an English translation); a query in a language without an
installed pair is ranked as it is. Translations are cached in memory (a query asked again costs nothing), and
on disk when a cache file is given (:class:`QueryCache`: the append-only, fsynced log of
:class:`~mlatr.translation.cache.TranslationCache`, a line cut short by a crash skipped when read; an index keeps
one beside its files, :meth:`Index.translation_cache <mlatr.search.index.Index.translation_cache>`, so a query
asked again from the command line costs no Apertium run).

**What a search translates** (:meth:`Index.search_text <mlatr.search.index.Index.search_text>`, ``translate``):
a query whose language is given and differs from the captions' (:func:`caption_language`: English, the
language of file names, unless the index records captions in other languages only), with ``translate`` on
(the default: whenever a pair is installed). Only the query's positive part is translated
(:attr:`~mlatr.search.query_syntax.ParsedQuery.embedded`: its words and phrases without ``-word`` / ``NOT``,
quote marks and ``OR``), and the translation is read as a plain query. The excluded words and required phrases
are each translated by themselves too (:meth:`Index.term_translations
<mlatr.search.index.Index.term_translations>`, in the same translator call as the query) and a clip is tested for
holding either the word as typed (in the query's language) or its translation (in the captions'):
``perro -gallo`` ranks by ``perro`` and its translation ``dog`` and leaves out the clips whose captions hold
``gallo`` or ``rooster``; ``"puerta" ladra`` keeps the clips holding ``puerta`` or ``door``
(:mod:`mlatr.search.eligibility`). A translation reaches a ranking as a :class:`QueryTranslation` (its text and
embedding), and each candidate's caption-side features take the better of the query's and the translation's
(:func:`mlatr.search.fusion.features`, :data:`~mlatr.search.fusion.TRANSLATED`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlatr.errors import MlatrError
from mlatr.translation import ApertiumBackend, TranslationCache, Translator

#: The ``translate`` settings of a text query: ``auto`` (translated into the captions' language when a pair is
#: installed; ``True`` says the same) and ``off`` (never; ``False``).
TRANSLATE = ("auto", "off")

#: The language a query is translated into when the index records no caption language, or English among them.
DEFAULT_CAPTION_LANGUAGE = "eng"


@dataclass(frozen=True)
class QueryTranslation:
    """A query's translation as a ranking reads it: ``text`` (a plain query: the positive part translated),
    ``lang`` (the captions' language it is in) and ``vec [d]``, its embedding by the index's model in ``lang``."""

    text: str
    lang: str
    vec: np.ndarray


def caption_language(recorded: Sequence[str] | None) -> str:
    """The language of an index's captions, queries are translated into: English where the index records none
    or English among its caption languages (file names, most sound libraries' metadata), else the first it
    records."""
    recorded = [lang for lang in (recorded or ()) if isinstance(lang, str) and lang]
    return DEFAULT_CAPTION_LANGUAGE if not recorded or DEFAULT_CAPTION_LANGUAGE in recorded else recorded[0]


class QueryCache(TranslationCache):
    """A :class:`~mlatr.translation.cache.TranslationCache` whose file only saves work: one that cannot be read
    (skipped) or written (a read-only index, a full disk) leaves the translations in memory; a search never fails
    for it."""

    def __init__(self, path: str | Path | None = None):
        try:
            super().__init__(path)
        except MlatrError:
            super().__init__(None)

    def put_many(self, items) -> None:
        try:
            super().put_many(items)  # stores in memory first, then appends to the file
        except OSError:
            self.path = None


class QueryTranslator:
    """Apertium's installed pairs (or ``backend``) behind a cache (module docstring; ``cache_path``: its file)."""

    def __init__(self, backend=None, cache_path: str | Path | None = None):
        self.backend = backend if backend is not None else ApertiumBackend()
        self.translator = Translator(self.backend, QueryCache(cache_path))

    def available(self, source: str | None, target: str) -> bool:
        """Whether a query in ``source`` can be translated into ``target`` here (never into its own language)."""
        if source is None or source == target:
            return False
        try:
            self.backend.check_pair(source, target)
        except MlatrError:
            return False
        return True

    def translate(self, texts: Sequence[str], source: str | None, target: str) -> list[str | None]:
        """Each of ``texts`` (in ``source``) in ``target``; None where no pair is installed, the translation failed
        or it equals the text (nothing to add)."""
        if not self.available(source, target):
            return [None] * len(texts)
        done = self.translator.translate(texts, source, target)
        out = []
        for text in texts:
            translated = done[text].translation
            out.append(translated if translated and translated.strip().lower() != text.strip().lower() else None)
        return out


def installed_translator(cache_path: str | Path | None = None) -> QueryTranslator | None:
    """A :class:`QueryTranslator` when Apertium is installed, else None (queries are ranked as they are)."""
    try:
        return QueryTranslator(cache_path=cache_path)
    except MlatrError:
        return None
