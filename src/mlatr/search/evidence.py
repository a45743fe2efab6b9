"""Evidence: why a search hit matched, one typed object per source (issue 37).

A hit's evidence (:mod:`mlatr.search.hybrid` for text queries, :func:`mlatr.search.search.sound_results` for
sound queries) is a list of :class:`Evidence`, best source first: the clip's best ``caption`` where the
fused score counts it or it ranked the clip, its best ``keyword`` match (with the query's ``terms`` found
in it) and its ``sound``. ``to_dict()`` gives the JSON object of the CLI's ``--json`` and the HTTP API:
``{"source", "score", "rank"}`` and, for a caption or keyword, ``"text"``, ``"lang"`` (and ``"terms"``; and
``"origin"`` where known; ``"translation": true`` where the query's translation matched it, not the query as
typed: :mod:`mlatr.search.query_translation`).

A caption's ``origin`` says where the library got it (issue 46: every source shown in the hit's evidence): a
BWF ``bext`` description, ``ixml``, an ``id3`` / ``vorbis`` / ``flac`` / ``mp4`` tag, a ``sidecar`` text, a ``ucs``
file name, the file's ``name`` or its ``folder`` (:data:`mlatr.data.file_metadata.CAPTION_SOURCES`); None where
the index does not record it (a manifest written by hand, an index built before sources were kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

#: The sources of evidence, in the order a hit lists them.
SOURCES = ("caption", "keyword", "sound")


@dataclass(frozen=True)
class Evidence:
    """One source's reason for a hit: ``source`` (caption | keyword | sound), its ``score`` (caption and
    sound: a cosine, ATRI eq. 1; keyword: BM25, :mod:`mlatr.search.lexical`), the clip's 1-based ``rank``
    in that source; a caption or keyword match's ``text`` and ``lang`` (ISO 639-3); a keyword match's
    ``terms`` (the query's words found in it, as the query spelt them; the translation's words where
    ``translation``: the query's translation into the captions' language matched it, not the query itself)."""

    source: Literal["caption", "keyword", "sound"]
    score: float
    rank: int
    text: str | None = None
    lang: str | None = None
    terms: tuple[str, ...] | None = None
    origin: str | None = None
    translation: bool = False

    def to_dict(self) -> dict:
        """The JSON object: the fields that apply to the source; a score that is not finite is ``None``."""
        out: dict = {"source": self.source}
        if self.source != "sound":
            out.update(text=self.text, lang=self.lang)
            if self.origin is not None:
                out["origin"] = self.origin
        if self.source == "keyword":
            out["terms"] = list(self.terms or ())
        if self.translation:
            out["translation"] = True
        score = float(self.score)
        out.update(score=score if math.isfinite(score) else None, rank=self.rank)
        return out

    def describe(self) -> str:
        """A few words for a terminal: ``caption "un chien qui aboie" [fra] 0.93 (#1)``."""
        where = f"{self.lang}, {self.origin}" if self.origin else self.lang
        by = ", by the translation" if self.translation else ""
        if self.source == "caption":
            return f"caption \"{self.text}\" [{where}] {self.score:.2f} (#{self.rank}{by})"
        if self.source == "keyword":
            return f"keyword {', '.join(self.terms or ())} in \"{self.text}\" [{where}] (#{self.rank}{by})"
        return f"sound {self.score:.2f} (#{self.rank})"


def describe_evidence(evidence: list[Evidence]) -> str:
    """One line saying why a hit matched: ``caption "un chien qui aboie" [fra] 0.93 (#1); keyword chien,
    aboie in "…" [fra] (#1); sound 0.12 (#40)``."""
    return "; ".join(e.describe() for e in evidence)
