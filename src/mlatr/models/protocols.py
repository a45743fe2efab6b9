"""What an encoder is to the rest of mlatr: what it embeds and which query languages it needs.

The inference layer (:mod:`mlatr.inference`), search and serve talk to encoders through these two
Protocols instead of ``isinstance`` checks against concrete classes, so a new encoder (registered in
:mod:`mlatr.models.registry`) works everywhere once it has these members:

- an audio encoder embeds a batch of mono waveforms at the model's sample rate (``[B, T]`` with valid
  ``lengths [B]``) into an :class:`~mlatr.models.outputs.EncoderOutput` of ``output_dim`` features;
- a text encoder embeds texts with their ISO 639-3 languages, and says through :meth:`query_languages`
  whether it reads the language (a query must then name one) and which codes it accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from mlatr.errors import MlatrError
from mlatr.languages import LANGUAGE_NAMES, normalize
from mlatr.models.outputs import EncoderOutput


@dataclass(frozen=True)
class QueryLanguages:
    """``required``: the encoder reads the language (a query must name it); ``known``: the ISO 639-3
    codes it accepts, in mlatr's order (``None``: any code mlatr knows)."""

    required: bool
    known: tuple[str, ...] | None

    def choices(self) -> tuple[str, ...]:
        """The codes a query may use: ``known``, or every language mlatr knows."""
        return self.known if self.known is not None else tuple(LANGUAGE_NAMES)

    def code(self, lang: str | None, field: str = "lang") -> str | None:
        """The one check of a query's language: ``lang`` as ISO 639-3 (aliases normalised) when the encoder
        takes it, ``None`` when it is left out and the encoder does not read it; else :class:`MlatrError`
        (an unknown code, a code the encoder does not take, a missing one it needs), naming ``field``."""
        if lang is None:
            if self.required:
                raise MlatrError(f"{field}: this text encoder reads the query's language: give one of "
                                 + ", ".join(self.choices()))
            return None
        code = normalize(lang, field)
        if self.known is not None and code not in self.known:
            raise MlatrError(f"{field}: this text encoder does not take {code!r} (it takes {', '.join(self.known)})")
        return code


#: What an encoder that does not say otherwise accepts: any language, none required.
ANY_LANGUAGE = QueryLanguages(required=False, known=None)


def ordered_languages(codes) -> tuple[str, ...]:
    """``codes`` in mlatr's language order (:data:`mlatr.languages.LANGUAGE_NAMES`), unknown ones dropped."""
    wanted = set(codes)
    return tuple(c for c in LANGUAGE_NAMES if c in wanted)


@runtime_checkable
class AudioEncoder(Protocol):
    """Embeds waveforms: ``encoder(waveform [B, T], lengths [B]) -> EncoderOutput`` (``output_dim`` features)."""

    output_dim: int

    def __call__(self, waveform: torch.Tensor, lengths: torch.Tensor | None = None) -> EncoderOutput: ...

    def config(self) -> dict[str, Any]: ...


@runtime_checkable
class TextEncoder(Protocol):
    """Embeds texts: ``encoder(texts, langs) -> EncoderOutput``; :meth:`query_languages` says what a query needs."""

    output_dim: int

    def __call__(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> EncoderOutput: ...

    def config(self) -> dict[str, Any]: ...

    def query_languages(self) -> QueryLanguages: ...


def query_languages(text_encoder) -> QueryLanguages:
    """What a query needs from its language with ``text_encoder``: its :meth:`TextEncoder.query_languages`
    (an encoder without one, e.g. a third party's, reads no language: :data:`ANY_LANGUAGE`)."""
    method = getattr(text_encoder, "query_languages", None)
    return method() if callable(method) else ANY_LANGUAGE
