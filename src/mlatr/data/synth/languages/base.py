"""What a caption says about one event, shared by every language's grammar.

A :class:`Mention` is an event as a caption mentions it: the attributes the caption leaves out are
``None`` (people omit them), ``show_count`` says whether a count above one is spelled out ("three
knocks") or only implied by a plural ("knocks"), and ``synonym`` picks among the nouns a language has
for the kind (``index % len(nouns)``), the same index in every language so that captions stay aligned.

Every language module has ``CODE``, ``NOUNS`` (kind -> list of noun entries), ``SPACED`` (words are
separated by spaces) and ``realise(fg, bg, variant) -> str`` for a foreground sequence ``fg`` (1-3
mentions, in temporal order), an optional background ``bg`` and a template ``variant`` in
``range(N_VARIANTS)``; variant ``v`` means the same construction in every language.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

#: Paraphrase templates per structure (single / sequence / with background), in every language.
N_VARIANTS = 3

T = TypeVar("T")


@dataclass(frozen=True)
class Mention:
    kind: str
    pitch: str | None
    loudness: str | None
    count: int | None
    show_count: bool = True
    synonym: int = 0

    @property
    def plural(self) -> bool:
        return self.count is not None and self.count > 1

    @property
    def numeral(self) -> int | None:
        """The number to spell out: the count when above one and shown, else ``None``."""
        return self.count if self.plural and self.show_count else None


def pick(options: Sequence[T], index: int) -> T:
    return options[index % len(options)]


def capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]
