"""Which languages a text query may be in, and whether the model needs to be told which one.

A query's language changes its embedding only for text encoders that read it: the SONAR tokenizer puts
a language code before the text, and a small transformer trained with a language embedding adds a
vector per language. The frozen multilingual encoders (USE, e5-small), the other Hugging Face encoders
and a small transformer without a language embedding embed the text alone: for them a language is only
checked (USE has no Catalan), and a query without one gets the same embedding as with any.

So a query may leave its language out exactly when the encoder does not read it. Guessing it instead
was measured and rejected: offline identifiers get about 1 short query in 20 wrong among the languages
mlatr knows (``benchmarks/bench_langid.py``, README), and for the encoders that read the language a
wrong guess silently changes the results.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlatr.languages import LANGUAGE_NAMES
from mlatr.models.frozen_text import FrozenTextEncoder
from mlatr.models.hf_text import HFTextEncoder
from mlatr.models.small_text import SmallTextEncoder


@dataclass(frozen=True)
class QueryLanguages:
    """``required``: the encoder reads the language (a query must name it); ``known``: the ISO 639-3
    codes it accepts, in mlatr's order (``None``: any code mlatr knows)."""

    required: bool
    known: tuple[str, ...] | None

    def choices(self) -> tuple[str, ...]:
        """The codes a query may use: ``known``, or every language mlatr knows."""
        return self.known if self.known is not None else tuple(LANGUAGE_NAMES)


def _ordered(codes) -> tuple[str, ...]:
    return tuple(c for c in LANGUAGE_NAMES if c in set(codes))


def query_languages(text_encoder) -> QueryLanguages:
    """What :func:`mlatr.search.search.encode_query_text` needs from a query's language with this encoder."""
    if isinstance(text_encoder, SmallTextEncoder):
        langs = text_encoder.languages
        return QueryLanguages(required=bool(langs), known=tuple(langs) if langs else None)
    if isinstance(text_encoder, HFTextEncoder):
        if text_encoder.spec.language_codes:
            return QueryLanguages(required=True, known=_ordered(text_encoder.lang_codes))
        return QueryLanguages(required=False, known=None)
    if isinstance(text_encoder, FrozenTextEncoder):
        if text_encoder.allow_unsupported_languages:
            return QueryLanguages(required=False, known=None)
        return QueryLanguages(required=False, known=_ordered(text_encoder.languages))
    return QueryLanguages(required=False, known=None)
