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
on disk when a cache file is given (:class:`~mlatr.translation.cache.TranslationCache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mlatr.errors import MlatrError
from mlatr.translation import ApertiumBackend, TranslationCache, Translator


class QueryTranslator:
    """Apertium's installed pairs behind a cache (module docstring)."""

    def __init__(self, backend=None, cache_path: str | Path | None = None):
        self.backend = backend if backend is not None else ApertiumBackend()
        self.translator = Translator(self.backend, TranslationCache(cache_path))

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
