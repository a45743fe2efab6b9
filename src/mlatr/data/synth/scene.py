"""Scene descriptions: what a synthetic clip contains, sampled from a ``numpy.random.Generator``.

A scene is a foreground *sequence* of 1-3 events played one after the other ("A followed by B") and
optionally a continuous *background* event under the whole clip ("A while B"); 3 events at most in all.
Each event has a kind (:mod:`.events`), a pitch (low/high), a loudness (quiet/loud), a count for
countable kinds, and its onset and length in seconds. :func:`vary_content` makes hard negatives: the
same kinds with other attributes or another order, so that kinds alone do not identify a clip.
Everything the captions say is in the scene, and the renderer makes all of it audible.
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


@dataclass(frozen=True)
class Sound:
    """What an event is, without where it is: kind, pitch, loudness, count (``None`` if continuous)."""

    kind: str
    pitch: str
    loudness: str
    count: int | None


@dataclass(frozen=True)
class Content:
    """What a scene holds: foreground sounds in order, and a continuous background sound or ``None``."""

    sequence: tuple[Sound, ...]
    background: Sound | None = None


def _sound(rng: np.random.Generator, kind: str) -> Sound:
    pitch = PITCHES[int(rng.integers(2))]
    loud = LOUDNESSES[int(rng.integers(2))]
    count = int(rng.choice([1, 2, 3], p=[0.4, 0.35, 0.25])) if KINDS[kind].countable else None
    return Sound(kind, pitch, loud, count)


def sample_content(rng: np.random.Generator) -> Content:
    """1 event (30%), 2 (40%) or 3 (30%) of distinct kinds; with 2+, a continuous background 40% of times."""
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
    sequence = tuple(_sound(rng, k) for k in fg_kinds)
    return Content(sequence, _sound(rng, bg_kind) if bg_kind else None)


def vary_content(content: Content, rng: np.random.Generator) -> Content:
    """A hard negative of ``content``: the same kinds, with at least one audible difference.

    Each foreground sound flips its pitch (p = 0.4), its loudness (0.3) and changes its count (0.4);
    a sequence of two or more swaps its first two sounds (0.4); the background flips its pitch (0.3).
    If nothing changed, one random foreground attribute flips.
    """
    flip = {"low": "high", "high": "low", "quiet": "loud", "loud": "quiet"}
    seq = []
    for s in content.sequence:
        pitch = flip[s.pitch] if rng.random() < 0.4 else s.pitch
        loud = flip[s.loudness] if rng.random() < 0.3 else s.loudness
        count = s.count
        if count is not None and rng.random() < 0.4:
            count = int(rng.choice([c for c in (1, 2, 3) if c != count]))
        seq.append(Sound(s.kind, pitch, loud, count))
    if len(seq) >= 2 and rng.random() < 0.4:
        seq[0], seq[1] = seq[1], seq[0]
    bg = content.background
    if bg is not None and rng.random() < 0.3:
        bg = Sound(bg.kind, flip[bg.pitch], bg.loudness, None)
    out = Content(tuple(seq), bg)
    if out == content:
        i = int(rng.integers(len(seq)))
        attr = ("pitch", "loudness")[int(rng.integers(2))]
        s = seq[i]
        seq[i] = Sound(s.kind, flip[s.pitch] if attr == "pitch" else s.pitch,
                       flip[s.loudness] if attr == "loudness" else s.loudness, s.count)
        out = Content(tuple(seq), bg)
    return out


def layout_scene(content: Content, rng: np.random.Generator) -> Scene:
    """Place the sounds in time: lengths from counts and kinds, gaps, a 2-6 s clip around them."""
    fg = content.sequence
    n, overlap = len(fg), content.background is not None
    lengths = []
    for s in fg:
        spec = KINDS[s.kind]
        if spec.countable:
            lengths.append(s.count * spec.period * rng.uniform(0.9, 1.2))
        else:
            lengths.append(rng.uniform(0.8, 1.8))
    gaps = [rng.uniform(0.1, 0.4) for _ in range(n - 1)]
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
    n_samples = min(int(round(total * SAMPLE_RATE)), int(MAX_DURATION * SAMPLE_RATE))
    duration = n_samples / SAMPLE_RATE

    seq, t = [], lead
    for i, (s, length) in enumerate(zip(fg, lengths, strict=True)):
        seq.append(Event(s.kind, s.pitch, s.loudness, s.count, round(t, 4), round(length, 4)))
        t += length + (gaps[i] if i < len(gaps) else 0.0)
    background = None
    if overlap:
        b = content.background
        onset = rng.uniform(0.0, 0.15)
        background = Event(b.kind, b.pitch, b.loudness, None, round(onset, 4),
                           round(duration - onset - rng.uniform(0.0, 0.15), 4))
    return Scene(duration=duration, sequence=tuple(seq), background=background)


def sample_scene(rng: np.random.Generator) -> Scene:
    """Draw a scene: :func:`sample_content`, then :func:`layout_scene`, from one generator."""
    return layout_scene(sample_content(rng), rng)
