"""A text query, checked once where it enters.

A query enters through the command line (``mlatr search``), the Python API (:meth:`Index.search_text
<mlatr.search.index.Index.search_text>`) or the server (``GET /search``). Each entry makes it a :class:`TextQuery`
with :func:`text_query`, the one check: the text is not empty, the language is normalised (ISO 639-1 aliases to
639-3) and one the index's text encoder takes, ``k`` is at least 1, the ranking is one of
:data:`~mlatr.search.fusion.RANKS`, ``min_relevance`` (when given) a probability, the query's syntax readable
(``-word``, ``"phrase"``, ``OR``: :mod:`mlatr.search.query_syntax`) and its filter (``where``:
:mod:`mlatr.search.filters`) parsed and checked. What comes after (the server's batcher, the query embedding, the
rankings) takes the checked query and checks nothing again. A sound query enters through :meth:`Index.search_audio
<mlatr.search.index.Index.search_audio>`, which checks its ``k``, ``min_relevance`` and ``where`` with the same
:func:`check_k`, :func:`check_min_relevance` and :func:`~mlatr.search.filters.parse_filter`.

Which languages a query may be in, and whether the model needs to be told which one: a query's language
changes its embedding only for text encoders that read it (the SONAR tokenizer puts a language code before
the text; a small transformer trained with a language embedding adds a vector per language). The frozen
multilingual encoders (USE, e5-small), the other Hugging Face encoders and a small transformer without a
language embedding embed the text alone: for them a language is only checked (USE has no Catalan), and a
query without one gets the same embedding as with any. So a query may leave its language out exactly when
the encoder does not read it, and leaving it out is the default at every entry (``--lang``, ``lang=None``,
no ``?lang=``): such a query embeds as with any language, and its keyword terms are found with the stop
words and stemmers of every default language (:func:`mlatr.search.analysis.analyzer` of ``None``), where a
default of English would stem a French query as English; an encoder that reads the language refuses it.
Guessing it instead was measured and rejected: offline identifiers get about 1 short query in 20 wrong among
the languages mlatr knows (``benchmarks/bench_langid.py``, README), and for the encoders that read the language
a wrong guess silently changes the results. Each text encoder says so
itself (:meth:`mlatr.models.protocols.TextEncoder.query_languages`, checked by
:meth:`~mlatr.models.protocols.QueryLanguages.code`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlatr import api_args
from mlatr.errors import MlatrError
from mlatr.models.protocols import QueryLanguages
from mlatr.search.filters import Filter, parse_filter
from mlatr.search.fusion import RANKS
from mlatr.search.query_syntax import parse_query
from mlatr.search.query_translation import TRANSLATE


@dataclass(frozen=True)
class TextQuery:
    """A checked text query (:func:`text_query`): ``text`` not empty; ``lang`` ISO 639-3, or None where the
    text encoder does not read it; ``k`` >= 1 clips; ``rank``: one of :data:`~mlatr.search.fusion.RANKS`;
    ``min_relevance``: the answer's relevance below which it says nothing relevant (a probability; None: the
    answer model's threshold, :mod:`mlatr.search.relevance`); ``where``: the clips' facets it is limited to
    (:mod:`mlatr.search.filters`; None: any); ``include_silent``: silent clips may be returned (a text query
    leaves them out otherwise, unless ``where`` tests ``silent``: :mod:`mlatr.search.eligibility`); ``translate``:
    the query may be translated into the captions' language (:mod:`mlatr.search.query_translation`)."""

    text: str
    lang: str | None
    k: int = 10
    rank: str = "hybrid"
    min_relevance: float | None = None
    where: Filter | None = None
    include_silent: bool = False
    translate: bool = True


def text_query(text: str, lang: str | None, k: int, rank: str, languages: QueryLanguages,
               lang_field: str = "lang", min_relevance: float | None = None, where: str | Filter | None = None,
               include_silent: bool = False, translate: str | bool = "auto") -> TextQuery:
    """The one check of a text query where it enters: :class:`MlatrError` for an empty text, an unknown
    language or one the encoder does not take (``languages``: its :class:`QueryLanguages`; ``lang_field``
    names the option in the message), a missing language the encoder needs, ``k < 1``, an unknown ranking,
    a ``min_relevance`` outside [0, 1], a query whose syntax cannot be read
    (:class:`~mlatr.search.query_syntax.QuerySyntaxError`), a filter that cannot
    (:class:`~mlatr.search.filters.FilterError`) or a ``translate`` not in :data:`TRANSLATE`; a text, language,
    ``k``, ``min_relevance`` or ``include_silent`` of the wrong type is :class:`~mlatr.api_args.ArgumentTypeError`."""
    if not api_args.text("query", text, empty=True).strip():
        raise api_args.ArgumentError("empty text query")
    if lang is not None:
        lang = api_args.text(lang_field, lang)
    parse_query(text)
    return TextQuery(text, languages.code(lang, lang_field), check_k(k), check_rank(rank),
                     check_min_relevance(min_relevance), parse_filter(where),
                     api_args.flag("include_silent", include_silent), check_translate(translate))


def check_translate(value: str | bool) -> bool:
    """Whether a query with ``translate`` = ``value`` may be translated: ``"auto"`` / True yes, ``"off"`` / False
    no; anything else an :class:`~mlatr.api_args.ArgumentError` naming :data:`TRANSLATE`."""
    if isinstance(value, bool):
        return value
    return api_args.choice("translate", value, TRANSLATE) == "auto"


def check_rank(rank: str) -> str:
    """``rank`` if it is one of :data:`RANKS`, else an :class:`MlatrError` naming them."""
    if rank not in RANKS:
        raise MlatrError(f"unknown ranking {rank!r} (choose from {', '.join(RANKS)})")
    return rank


def check_k(k: int) -> int:
    """``k`` as an int if it is an integer of at least 1, else an :class:`~mlatr.api_args.ArgumentError`."""
    return api_args.integer("k", k)


def check_min_relevance(value: float | None) -> float | None:
    """``value`` as a float if it is a probability (None stays None: the relevance model's threshold), else an
    :class:`~mlatr.api_args.ArgumentError` (:class:`~mlatr.api_args.ArgumentTypeError`: not a number)."""
    return api_args.probability("min_relevance", value)
