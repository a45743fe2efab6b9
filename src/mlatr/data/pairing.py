"""Pairing schemes: which captions of each clip enter a training batch.

A batch row holds, for one clip, the captions of one source caption ``j`` in every language
(``row[k]`` translates ``row[0]``; ``None`` where a translation is missing). A scheme turns the rows into
the flat list of texts to encode and an index ``[N, S]`` that places them back, so the text encoder
runs once per batch on exactly the texts the scheme needs (what makes ML-CLAP and CACL cheaper than KCL,
ATRI Table 4).

- :class:`MLCLAPPairing` (ATRI §3, eq. 1; Yan et al. 2024): one language drawn uniformly per clip among
  those present, redrawn every epoch. ``S = 1``.
- :class:`KCLPairing` (ATRI §4.1, eq. 9-11): all K languages. ``S = K``, missing translations masked.
- :class:`CACLPairing` (ATRI §4.2, eq. 12-13): English plus one language ``q_i`` drawn uniformly from the
  other languages present. ``S = 2`` (column 0 English, column 1 the other language).

Randomness comes only from the ``torch.Generator`` passed to :meth:`select`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mlatr.errors import MlatrError


@dataclass
class Selection:
    """Texts chosen for one batch.

    Attributes:
        texts: the captions to encode, flat.
        langs: their language codes.
        index: ``[N, S]`` long, position in ``texts`` of clip i's caption in slot s, or -1 if absent.
        slot_langs: ``[N, S]`` language of each slot (``None`` where absent).
    """

    texts: list[str]
    langs: list[str]
    index: torch.Tensor
    slot_langs: list[list[str | None]]

    @property
    def mask(self) -> torch.Tensor:
        """``[N, S]`` bool, True where a caption fills the slot."""
        return self.index >= 0

    def gather(self, text_emb: torch.Tensor) -> torch.Tensor:
        """Place encoded texts ``[len(texts), d]`` into ``[N, S, d]`` (zeros where absent)."""
        n, s = self.index.shape
        out = text_emb.new_zeros(n, s, text_emb.shape[-1])
        m = self.mask.to(text_emb.device)
        out[m] = text_emb[self.index.to(text_emb.device)[m]]
        return out


class PairingScheme:
    """Base class: ``select(rows, languages, generator) -> Selection``."""

    name = "base"

    def select(
        self, rows: Sequence[Sequence[str | None]], languages: Sequence[str], generator: torch.Generator
    ) -> Selection:
        raise NotImplementedError

    @staticmethod
    def _build(columns: list[list[tuple[str, str] | None]]) -> Selection:
        texts: list[str] = []
        langs: list[str] = []
        n = len(columns)
        s = len(columns[0]) if columns else 0
        index = torch.full((n, s), -1, dtype=torch.long)
        slot_langs: list[list[str | None]] = []
        for i, row in enumerate(columns):
            slot_langs.append([])
            for k, item in enumerate(row):
                if item is None:
                    slot_langs[i].append(None)
                    continue
                text, lang = item
                index[i, k] = len(texts)
                texts.append(text)
                langs.append(lang)
                slot_langs[i].append(lang)
        return Selection(texts, langs, index, slot_langs)


def _present(row: Sequence[str | None]) -> list[int]:
    return [k for k, t in enumerate(row) if t is not None]


def _draw(options: list[int], generator: torch.Generator) -> int:
    return options[int(torch.randint(len(options), (1,), generator=generator))]


class MLCLAPPairing(PairingScheme):
    """One random language per clip (the ML-CLAP baseline)."""

    name = "mlclap"

    def select(self, rows, languages, generator):
        cols = []
        for i, row in enumerate(rows):
            present = _present(row)
            if not present:
                raise MlatrError(f"batch row {i} has no caption in any language")
            k = _draw(present, generator)
            cols.append([(row[k], languages[k])])
        return self._build(cols)


class KCLPairing(PairingScheme):
    """All K languages of each clip (1-to-K contrastive learning)."""

    name = "kcl"

    def select(self, rows, languages, generator):
        cols = [
            [(t, languages[k]) if t is not None else None for k, t in enumerate(row)] for row in rows
        ]
        return self._build(cols)


class CACLPairing(PairingScheme):
    """English plus one other random language (audio-English co-anchor contrastive learning)."""

    name = "cacl"

    def select(self, rows, languages, generator):
        if languages[0] != "eng":
            raise MlatrError("CACL needs English as the first language")
        cols = []
        for i, row in enumerate(rows):
            if row[0] is None:
                raise MlatrError(f"batch row {i} has no English caption (CACL anchors on English)")
            others = [k for k in _present(row) if k != 0]
            other = None
            if others:
                k = _draw(others, generator)
                other = (row[k], languages[k])
            cols.append([(row[0], "eng"), other])
        return self._build(cols)


SCHEMES: dict[str, type[PairingScheme]] = {
    "mlclap": MLCLAPPairing,
    "kcl": KCLPairing,
    "cacl": CACLPairing,
}


def build_pairing(name: str) -> PairingScheme:
    if name not in SCHEMES:
        raise MlatrError(f"unknown pairing scheme {name!r}; available: {', '.join(SCHEMES)}")
    return SCHEMES[name]()
