"""What a search answers: its hits, best first, and whether the library seems to hold anything relevant.

A text query (:meth:`Index.search_text <mlatr.search.index.Index.search_text>`) and a sound query
(:meth:`Index.search_audio <mlatr.search.index.Index.search_audio>`) answer the same :class:`Results`, a list of
:class:`Hit`; a sound query's also carries the indexed captions nearest to it (:class:`CaptionHit`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from mlatr.search.evidence import Evidence


@dataclass(repr=False)
class Hit:
    """One ranked clip: 1-based ``rank``, ``score`` (a cosine; for a hybrid text search the fused score of
    :mod:`mlatr.search.fusion`), ``id``, absolute ``path``, English captions, the ``evidence`` that ranked it
    (:class:`~mlatr.search.evidence.Evidence`, :mod:`mlatr.search.hybrid`); ``relevance``: the calibrated
    probability that the clip answers the query (:mod:`mlatr.search.relevance`); ``stale``: ``"deleted"`` /
    ``"changed"`` when the clip's audio is gone or differs from when it was indexed (its embedding describes a
    file that is not there any more); ``same_audio``: for a sound query, True when the clip's audio is the
    query's own (the same samples over the part a query reads: :func:`mark_same_audio`), so its score of 1.000
    says nothing about similarity; ``segment``: for a clip indexed as segments (a long recording,
    :mod:`mlatr.search.segments`), ``(start, end)`` in seconds of its segment nearest to the query, where it
    matched (JSON: ``"start"``, ``"end"``; ``null`` for a clip without segments).
    ``print(hit)``: ``Hit(rank=1, id='dogs/bark', score=0.812, relevance=0.93, at=1:40-1:50)``."""

    rank: int
    score: float
    id: str
    path: str
    captions: list[str]
    evidence: list[Evidence] = field(default_factory=list)
    stale: str | None = None
    relevance: float | None = None
    same_audio: bool = False
    segment: tuple[float, float] | None = None

    def __repr__(self) -> str:
        relevance = "None" if self.relevance is None else f"{self.relevance:.2f}"
        extra = (", same_audio=True" if self.same_audio else "") + (f", stale={self.stale!r}" if self.stale else "") \
            + (f", at={self.at()}" if self.segment else "")
        return f"Hit(rank={self.rank}, id={self.id!r}, score={self.score:.3f}, relevance={relevance}{extra})"

    def to_dict(self) -> dict:
        """The hit as JSON can hold it: a score that is not finite is ``None`` (JSON has no ``-Infinity``)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "segment"}
        out.update(captions=list(self.captions), score=finite_or_none(self.score),
                   evidence=[e.to_dict() for e in self.evidence],
                   start=self.segment[0] if self.segment else None, end=self.segment[1] if self.segment else None)
        return out

    def at(self) -> str | None:
        """Where in the file the hit matched, ``1:40-1:50`` (None for a clip without segments)."""
        return None if self.segment is None else f"{clock(self.segment[0])}-{clock(self.segment[1])}"


class Results(list):
    """The hits of a search, best first (a ``list`` of :class:`Hit`), and whether the library seems to hold
    anything relevant. ``relevance``: the probability that it does (for a text query the answer model's,
    :func:`~mlatr.search.relevance.answer_relevance`; given none, the best hit's relevance; ``None`` where
    no hit has a relevance). ``nothing_relevant`` is True when it is below
    ``min_relevance`` (the index's fitted threshold unless the caller gave one), or when there is no hit;
    the hits are there all the same, for whoever wants the closest ones. ``caption_hits``: for a sound query
    (:func:`search_audio`, :func:`search_similar`), the indexed captions nearest to it
    (:class:`CaptionHit`, sound-to-caption); ``None`` for a text query.

    ``calibrated`` is False when the index's model has no calibration of its own (``uncalibrated`` says why):
    the hits are ranked all the same, but no hit or answer carries a relevance and nothing is called
    irrelevant (another model's probabilities would mean nothing here).

    ``translated_query``: for a text query, its translation into the captions' language that the ranking read
    beside it (:mod:`mlatr.search.query_translation`); None where it was not translated."""

    def __init__(self, hits=(), min_relevance: float | None = None, relevance: float | None = None,
                 caption_hits: list[CaptionHit] | None = None, uncalibrated: str | None = None,
                 translated_query: str | None = None):
        super().__init__(hits)
        self.translated_query = translated_query
        self.uncalibrated = uncalibrated
        self.min_relevance = None if uncalibrated else min_relevance
        if relevance is None and not uncalibrated:
            known = [h.relevance for h in self if h.relevance is not None]
            relevance = max(known) if known else None
        self.relevance = None if uncalibrated else relevance
        self.caption_hits = caption_hits

    @property
    def calibrated(self) -> bool:
        """Whether the relevance comes from the model's own calibration (class docstring)."""
        return self.uncalibrated is None

    def __repr__(self) -> str:
        relevance = "None" if self.relevance is None else f"{self.relevance:.2f}"
        captions = "" if self.caption_hits is None else f", {len(self.caption_hits)} caption hits"
        translated = f", translated_query={self.translated_query!r}" if self.translated_query else ""
        return (f"Results({list.__repr__(self)}, relevance={relevance}, "
                f"nothing_relevant={self.nothing_relevant}{captions}{translated}" + ("" if self.calibrated else
                                                                                     ", calibrated=False") + ")")

    @property
    def nothing_relevant(self) -> bool:
        if not self:
            return True
        if self.min_relevance is None or self.relevance is None:
            return False
        return self.relevance < self.min_relevance

    def answer(self) -> dict:
        """What the answer says as a whole: ``{"calibrated", "uncalibrated", "nothing_relevant", "min_relevance",
        "relevance"}`` (``"uncalibrated"``: why not, ``None`` when calibrated; the HTTP schema's fields, always)."""
        return {"calibrated": self.calibrated, "uncalibrated": self.uncalibrated,
                "nothing_relevant": self.nothing_relevant, "min_relevance": self.min_relevance,
                "relevance": self.relevance}

    def to_dict(self) -> dict:
        """:meth:`answer`, ``"results": [hit, ...]`` and, for a sound query, ``"captions": [caption hit, ...]``, for a
        text query ``"translated_query"`` (null: not translated)."""
        out = {**self.answer(), "results": [h.to_dict() for h in self]}
        if self.caption_hits is not None:
            out["captions"] = [c.to_dict() for c in self.caption_hits]
        else:
            out["translated_query"] = self.translated_query
        return out


@dataclass
class CaptionHit:
    """One ranked caption of an indexed clip (sound-to-caption search)."""

    rank: int
    score: float
    text: str
    lang: str
    id: str
    path: str

    def to_dict(self) -> dict:
        return {**asdict(self), "score": finite_or_none(self.score)}


def below_words(value: float, level: float) -> str:
    """``"relevance 0.457, below 0.460"``: ``value`` and ``level`` printed with the fewest decimals (2 to 6) at
    which the printed value is below the printed level, so that what is read is true (never "0.46, below
    0.46"); past 6 decimals they are too close to tell apart, and it says so."""
    for digits in range(2, 7):
        shown, at = f"{value:.{digits}f}", f"{level:.{digits}f}"
        if float(shown) < float(at):
            return f"relevance {shown}, below {at}"
    return f"relevance {value:.6f}, just below {level:.6f}"


def clock(seconds: float) -> str:
    """``seconds`` as a clock, ``m:ss`` (``h:mm:ss`` from an hour; tenths where the time is not whole)."""
    tenths = int(round(seconds * 10))
    whole, tenth = divmod(tenths, 10)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
    return text + (f".{tenth}" if tenth else "")


def finite_or_none(x: float | None) -> float | None:
    """``x`` as a float, or ``None`` when it is missing, NaN or infinite (strict JSON)."""
    return None if x is None or not math.isfinite(float(x)) else float(x)
