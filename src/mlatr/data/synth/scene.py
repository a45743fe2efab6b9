"""Scene descriptions: what a synthetic clip contains, sampled from a ``numpy.random.Generator``.

A scene is a foreground *sequence* of 1-3 events played one after the other ("A followed by B") and
optionally a continuous *background* event under the whole clip ("A while B"); 3 events at most in all.
Each event has a kind (:mod:`.events`), a pitch (low/high), a loudness (quiet/loud), a count for
countable kinds, and its onset and length in seconds. Everything the captions say is in the scene, and
the renderer makes all of it audible.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from mlatr.data.synth.events import CONTINUOUS, KINDS, LOUDNESSES, PITCHES, SAMPLE_RATE

MIN_DURATION = 2.0
MAX_DURATION = 6.0


@dataclass(frozen=True)
class Event:
    kind: str
    pitch: str
    loudness: str
    count: int | None
    onset: float
    length: float


@dataclass(frozen=True)
class Scene:
    duration: float
    sequence: tuple[Event, ...]
    background: Event | None = None

    @property
    def events(self) -> tuple[Event, ...]:
        """Foreground events in order, then the background event if any."""
        return self.sequence + ((self.background,) if self.background else ())

    @property
    def relation(self) -> str:
        """``"single"``, ``"followed by"`` (a sequence) or ``"while"`` (a background under the rest)."""
        if self.background is not None:
            return "while"
        return "followed by" if len(self.sequence) > 1 else "single"

    @property
    def labels(self) -> list[str]:
        """Event kinds, first appearance order, without repeats (the manifest's ``labels``)."""
        return list(dict.fromkeys(e.kind for e in self.events))

    @property
    def num_samples(self) -> int:
        return int(round(self.duration * SAMPLE_RATE))

    def to_json(self) -> dict:
        return {"duration": self.duration, "relation": self.relation,
                "sequence": [asdict(e) for e in self.sequence],
                "background": asdict(self.background) if self.background else None}


def _attrs(rng: np.random.Generator, kind: str) -> tuple[str, str, int | None]:
    pitch = PITCHES[int(rng.integers(2))]
    loud = LOUDNESSES[int(rng.integers(2))]
    count = int(rng.choice([1, 2, 3], p=[0.4, 0.35, 0.25])) if KINDS[kind].countable else None
    return pitch, loud, count


def sample_scene(rng: np.random.Generator) -> Scene:
    """Draw one scene: 1 event (30%), 2 (40%) or 3 (30%); with 2+ events a background 40% of the time."""
    n = int(rng.choice([1, 2, 3], p=[0.3, 0.4, 0.3]))
    overlap = n >= 2 and rng.random() < 0.4
    names = list(KINDS)
    if overlap:
        bg_kind = CONTINUOUS[int(rng.integers(len(CONTINUOUS)))]
        others = [k for k in names if k != bg_kind]
        fg_kinds = [others[i] for i in rng.choice(len(others), size=n - 1, replace=False)]
    else:
        bg_kind = None
        fg_kinds = [names[i] for i in rng.choice(len(names), size=n, replace=False)]

    fg_attrs = [_attrs(rng, k) for k in fg_kinds]
    lengths = []
    for kind, (_, _, count) in zip(fg_kinds, fg_attrs, strict=True):
        spec = KINDS[kind]
        if spec.countable:
            lengths.append(count * spec.period * rng.uniform(0.9, 1.2))
        else:
            lengths.append(rng.uniform(0.8, 1.8))
    gaps = [rng.uniform(0.1, 0.4) for _ in range(n - 1 if not overlap else n - 2)]
    lead = rng.uniform(0.1, 0.4) + (0.4 if overlap else 0.0)
    tail = rng.uniform(0.1, 0.4) + (0.3 if overlap else 0.0)
    room = MAX_DURATION - lead - tail - sum(gaps)
    if sum(lengths) > room:
        lengths = [x * room / sum(lengths) for x in lengths]
    total = lead + sum(lengths) + sum(gaps) + tail
    if total < MIN_DURATION:  # centre the content in a 2 s clip
        extra = MIN_DURATION - total
        lead, tail = lead + extra / 2, tail + extra / 2
        total = MIN_DURATION
    n_samples = int(round(total * SAMPLE_RATE))
    duration = n_samples / SAMPLE_RATE

    seq, t = [], lead
    for i, (kind, (pitch, loud, count), length) in enumerate(zip(fg_kinds, fg_attrs, lengths, strict=True)):
        seq.append(Event(kind, pitch, loud, count, round(t, 4), round(length, 4)))
        t += length + (gaps[i] if i < len(gaps) else 0.0)
    background = None
    if bg_kind is not None:
        pitch, loud, _ = _attrs(rng, bg_kind)
        onset = rng.uniform(0.0, 0.15)
        background = Event(bg_kind, pitch, loud, None, round(onset, 4),
                           round(duration - onset - rng.uniform(0.0, 0.15), 4))
    return Scene(duration=duration, sequence=tuple(seq), background=background)
