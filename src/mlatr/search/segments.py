"""Moments inside long recordings: a long clip indexed as overlapping segments, each with its start and end.

A clip longer than :attr:`Segmenting.above` seconds (default: the index's window, so a clip the model sees in one
window has none) keeps its pooled vector (the centre crop, or the mean of its windows:
:mod:`mlatr.search.library_encoding`) and gets, beside it, one vector per segment of :attr:`Segmenting.seconds`
starting every :attr:`Segmenting.hop` seconds over the *whole* file (the last one moved back to end at the file's
end): the index's third table (:class:`~mlatr.search.columns.SegmentColumns`: vector, clip row, start, end). The
file is decoded block by block and resampled as a stream (:func:`stream_segments`): memory stays one segment's
worth whatever its length.

**A clip's sound score** for a text or sound query is the higher of its pooled vector's cosine and its best
segment's (:meth:`Segments.best_scores`). The maximum, and not the best segment alone, because the pooled vector is
what the model's training matched to a whole clip's caption (a 10-minute rain recording answers "rain" as a
whole), and a clip without segments has only it; and not the pooled vector alone, because a 2-second bark in a
10-minute file is diluted out of any whole-file vector. A hit reports the segment with the best cosine
(``Hit.segment``: its start and end), whichever score ranked it; the file counts once, at that segment.

Searching: :class:`MomentSearcher` is the sound searcher of an index with segments: the top ``k`` clips by that
score from the clips' searcher and the segments' (exact when both are: see its docstring). The exact text
ranking raises every clip's sound cosine to its best segment's (:meth:`Segments.raise_scores`), the windowed one
scores its candidates so (:meth:`Segments.best_scores`) after finding them through the :class:`MomentSearcher`.
A Milvus target supplies the same interface from its segments collection (:mod:`mlatr.search.milvus`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from mlatr.errors import MlatrError
from mlatr.search.backends import ShardedSearcher
from mlatr.search.columns import SegmentColumns
from mlatr.search.hybrid import RowParts

#: Segment length and hop (seconds) when a build does not say (``mlatr index build --segment-seconds``,
#: ``--segment-hop``); docs/sound-libraries.md has the ranks, times and costs of these and shorter ones.
SEGMENT_SECONDS = 5.0
SEGMENT_HOP = 2.5


@dataclass(frozen=True)
class Segmenting:
    """How long clips are cut: segments of ``seconds`` every ``hop`` seconds, for clips longer than ``above``
    seconds (``above`` None: never). What an index records as ``meta["segments"]``."""

    seconds: float = SEGMENT_SECONDS
    hop: float = SEGMENT_HOP
    above: float | None = None

    def __post_init__(self):
        if not (self.seconds > 0 and 0 < self.hop <= self.seconds):
            raise MlatrError(f"segments: expected 0 < hop <= length, got length {self.seconds} s, hop {self.hop} s")
        if self.above is not None and not self.above > 0:
            raise MlatrError(f"segments: the length above which a clip is segmented must be > 0, got {self.above}")

    def meta(self) -> dict | None:
        """The index meta's ``segments`` entry (None: no clip is segmented)."""
        return None if self.above is None else {"seconds": self.seconds, "hop": self.hop, "above": self.above}

    @classmethod
    def of_meta(cls, meta: dict | None) -> Segmenting:
        return cls() if not meta else cls(float(meta["seconds"]), float(meta["hop"]), float(meta["above"]))

    def wants(self, path: str | os.PathLike) -> bool:
        """Whether the file at ``path`` is long enough to be segmented (its header's duration)."""
        if self.above is None:
            return False
        from mlatr.audio.io import audio_duration  # loads torch: the storages, which parsers read, import this

        seconds = audio_duration(path)
        return seconds is not None and seconds > self.above


def segmenting(window_seconds: float, seconds: float | None = None, hop: float | None = None,
               above: float | None = None, enabled: bool = True) -> Segmenting:
    """How a build with model windows of ``window_seconds`` cuts long clips: segments of ``seconds`` (default the
    smaller of :data:`SEGMENT_SECONDS` and the window) every ``hop`` (default the same fraction of the length as
    :data:`SEGMENT_HOP` of :data:`SEGMENT_SECONDS`) for clips longer than ``above`` (default: the window);
    ``enabled`` False: none. A segment is one model window: longer than the window is refused."""
    length = float(seconds or min(SEGMENT_SECONDS, window_seconds))
    if length > window_seconds + 1e-9:
        raise MlatrError(f"a segment of {length:g} s is longer than the model's window of {window_seconds:g} s: "
                         "give a segment length no longer than --window-seconds")
    return Segmenting(length, float(hop or length * SEGMENT_HOP / SEGMENT_SECONDS),
                      float(above or window_seconds) if enabled else None)


def segment_bounds(n_samples: int, length: int, hop: int) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` of windows of ``length`` samples starting every ``hop`` samples, the last one moved
    back to end at the clip's end (one window when the clip is no longer than ``length``)."""
    if n_samples <= length:
        return [(0, n_samples)]
    starts = list(range(0, n_samples - length, hop)) + [n_samples - length]
    return [(s, s + length) for s in starts]


def stream_segments(path: str | os.PathLike, sample_rate: int, seconds: float, hop: float
                    ) -> Iterator[tuple[float, float, np.ndarray]]:
    """``(start s, end s, waveform [n])`` of each segment of the file at ``path`` (:func:`segment_bounds`), mono at
    ``sample_rate`` (:func:`mlatr.audio.io.stream_audio`), keeping at most one segment and a block."""
    from mlatr.audio.io import stream_audio  # loads torch, as in Segmenting.wants

    length, step = int(round(seconds * sample_rate)), max(1, int(round(hop * sample_rate)))
    buffer = np.zeros(0, np.float32)
    first = 0  # the file sample (at sample_rate) that buffer[0] is
    start = 0  # the next window's start
    last_end = 0
    for block in stream_audio(path, sample_rate):
        buffer = np.concatenate([buffer, np.asarray(block, np.float32)])
        while start + length <= first + len(buffer):
            yield start / sample_rate, (start + length) / sample_rate, buffer[start - first:start - first + length]
            last_end = start + length
            start += step
        keep = max(0, min(start, first + len(buffer) - length) - first)  # the last `length` samples stay
        buffer, first = buffer[keep:], first + keep
    total = first + len(buffer)
    if total and last_end < total:  # the window moved back to the end (or the whole of a short file)
        a = max(0, total - length)
        yield a / sample_rate, total / sample_rate, buffer[a - first:]


def encode_segments(embed, paths: Sequence[tuple[int, str]], how: Segmenting, sample_rate: int,
                    on_clip: Callable[[], None] | None = None) -> SegmentColumns:
    """The segments of the files ``paths`` (``(clip row, path)``), embedded by ``embed(waves) -> [n, d]`` (each
    wave one model window; called on one batch of segments at a time, in order; ``on_clip`` after each file): the
    one function a build's segment encoding goes through (when the audio path gives windows with their times, it
    is re-pointed there)."""
    clip, times, vectors = [], [], []

    def segments() -> Iterator[tuple[int, float, float, np.ndarray]]:
        for row, path in paths:
            yield from ((row, a, b, wave) for a, b, wave in stream_segments(path, sample_rate, how.seconds, how.hop))
            if on_clip is not None:
                on_clip()

    batch: list[tuple[int, float, float, np.ndarray]] = []
    for item in segments():
        batch.append(item)
        if len(batch) == SEGMENT_BATCH:
            vectors.append(embed([w for *_, w in batch]))
            clip += [r for r, *_ in batch]
            times += [(a, b) for _, a, b, _ in batch]
            batch = []
    if batch:
        vectors.append(embed([w for *_, w in batch]))
        clip += [r for r, *_ in batch]
        times += [(a, b) for _, a, b, _ in batch]
    if not vectors:
        raise MlatrError("no segment to encode")
    return SegmentColumns(np.concatenate(vectors).astype(np.float32), np.asarray(clip, np.int64),
                          np.asarray(times, np.float64))


#: Segments embedded per call of :func:`encode_segments`' ``embed`` (the encoder batches them further).
SEGMENT_BATCH = 64


# ---- scoring -----------------------------------------------------------------------------------------------
class Segments:
    """The segments of an index held locally, for scoring its clips' sound (module docstring): ``table`` (the
    segments, ``clip`` rows of the index's ``n_clips`` clips), ``searcher`` (top-k over their vectors, the
    segments of deleted clips skipped); ``vectors``: where their vectors are read (``take(rows)``; default the
    table's; a Milvus target fetches them)."""

    def __init__(self, table: SegmentColumns, n_clips: int, searcher, vectors=None):
        # [S, d], as stored (a folder's shards: memory-mapped); ``vectors``: rows fetched on demand (``take``)
        self.vectors = RowParts(table.embeddings) if vectors is None else vectors
        self.clip = np.asarray(table.clip, np.int64)  # [S]
        self.times = table.times  # [S, 2]
        self.searcher = searcher
        ordered = len(self.clip) < 2 or bool(np.all(np.diff(self.clip) >= 0))
        self._order = None if ordered else np.argsort(self.clip, kind="stable")
        grouped = self.clip if ordered else self.clip[self._order]
        self._start = np.searchsorted(grouped, np.arange(n_clips), side="left")  # [N]
        self._end = np.searchsorted(grouped, np.arange(n_clips), side="right")
        self._owners = np.flatnonzero(self._end > self._start)  # clips with segments, ascending

    def __len__(self) -> int:
        return len(self.clip)

    def rows_of(self, clips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(segment rows [c], counts [n])``: the segments of ``clips [n]``, clip after clip, and how many each has."""
        clips = np.asarray(clips, np.int64)
        counts = self._end[clips] - self._start[clips]
        first = np.repeat(self._start[clips] - np.cumsum(counts) + counts, counts)
        at = first + np.arange(int(counts.sum()))
        return (at if self._order is None else self._order[at]), counts

    def best_scores(self, vecs: np.ndarray, clips: np.ndarray) -> np.ndarray:
        """``[B, n]`` the best cosine of each of ``vecs [B, d]`` with a segment of each of ``clips [n]`` (-inf for a
        clip without segments)."""
        vecs = np.atleast_2d(np.asarray(vecs, np.float32))
        clips = np.asarray(clips, np.int64)
        out = np.full((len(vecs), len(clips)), -np.inf, np.float32)
        rows, counts = self.rows_of(clips)
        if len(rows):
            scores = vecs @ self.vectors.take(rows).T  # [B, c]
            has = counts > 0
            out[:, has] = np.maximum.reduceat(scores, (np.cumsum(counts) - counts)[has], axis=1)
        return out

    def best_segment(self, vec: np.ndarray, clips: np.ndarray) -> np.ndarray:
        """``[n]`` the segment row with the best cosine with ``vec [d]`` of each of ``clips [n]`` (-1: none; ties:
        the earlier segment)."""
        out = np.full(len(clips), -1, np.int64)
        rows, counts = self.rows_of(clips)
        if len(rows):
            scores = self.vectors.take(rows) @ np.asarray(vec, np.float32)
            ends = np.cumsum(counts)
            for j in np.flatnonzero(counts):
                a, b = ends[j] - counts[j], ends[j]
                mine = rows[a:b]
                order = np.lexsort((self.times[mine, 0], -scores[a:b]))
                out[j] = mine[order[0]]
        return out

    def raise_scores(self, vecs: np.ndarray, audio: np.ndarray) -> np.ndarray:
        """``audio [B, N]`` (the clips' pooled cosines with ``vecs [B, d]``) with each clip's raised to its best
        segment's where higher: one product with every segment (the exact text ranking)."""
        if not len(self._owners):
            return audio
        scores = self.vectors.scores(np.atleast_2d(np.asarray(vecs, np.float32)))  # [B, S]
        if self._order is not None:
            scores = scores[:, self._order]
        best = np.maximum.reduceat(scores, self._start[self._owners], axis=1)  # [B, owners]
        audio = np.array(audio, np.float32, copy=True)
        audio[:, self._owners] = np.maximum(audio[:, self._owners], best)
        return audio

    def span(self, row: int) -> tuple[float, float]:
        """``(start, end)`` seconds of segment ``row``."""
        return float(self.times[row, 0]), float(self.times[row, 1])


def local_segments(table: SegmentColumns, n_clips: int, deleted: np.ndarray, parts: list[tuple[int, int, object]]
                   ) -> Segments | None:
    """The :class:`Segments` of an index held locally (None without a segment): ``parts``, the segment searchers
    of :class:`~mlatr.search.backends.ShardedSearcher` (first row, rows, searcher), the segments of the
    ``deleted`` clips skipped."""
    if not len(table):
        return None
    gone = np.flatnonzero(np.isin(table.clip, np.asarray(deleted, np.int64)))
    return Segments(table, n_clips, ShardedSearcher(parts, gone))


class MomentSearcher:
    """Top-k clips of an index with segments by their sound score, the higher of the pooled vector's cosine and
    the best segment's (module docstring), with the contract of :mod:`mlatr.search.backends` (ties: lower row first).

    From ``clips`` (a searcher over the pooled vectors) the ``k`` best clips, each scored by the higher of its
    pooled cosine and its best segment (:meth:`Segments.best_scores`), and from the segments' searcher the best
    segments until they name ``k`` clips (or all are read), each such clip scored by its first, best, segment. A
    clip found by neither has a pooled cosine below the k-th pooled one and a best segment below the last segment
    read, so at least ``k`` clips found score more: with exact searchers the answer is the exact top ``k``."""

    name = "moments"

    def __init__(self, clips, segments: Segments):
        self.clips, self.segments = clips, segments

    def top_k(self, queries: np.ndarray, k: int, rerank: int | None = None, allowed=None
              ) -> tuple[np.ndarray, np.ndarray]:
        """``allowed``: the clips a filter lets through (:class:`~mlatr.search.eligibility.Allowed`, or its bool
        mask over the clip rows): the top ``k`` among them, their segments searched among theirs."""
        queries = np.atleast_2d(np.asarray(queries, np.float32))
        k = int(k)
        extra = {"rerank": rerank} if rerank is not None else {}
        if allowed is not None:
            extra["allowed"] = allowed
        of_segments = None if allowed is None else allowed.of_rows(self.segments.clip) \
            if hasattr(allowed, "of_rows") else np.asarray(allowed, bool)[self.segments.clip]
        pooled_s, pooled_r = self.clips.top_k(queries, k, **extra)
        found = []
        for q, vec in enumerate(queries):
            keep = pooled_r[q] >= 0
            rows, scores = pooled_r[q][keep], pooled_s[q][keep]
            score = dict(zip(rows.tolist(), np.maximum(scores, self.segments.best_scores(vec, rows)[0]).tolist(),
                             strict=True))
            for clip, s in self._segment_clips(vec, k, of_segments):
                score.setdefault(clip, s)
            r = np.asarray(list(score), np.int64)
            s = np.asarray(list(score.values()), np.float32)
            order = np.lexsort((r, -s))[:k]
            found.append((s[order], r[order]))
        width = min(k, max((len(f[0]) for f in found), default=0))
        s_out = np.full((len(queries), width), -np.inf, np.float32)
        r_out = np.full((len(queries), width), -1, np.int64)
        for q, (s, r) in enumerate(found):
            s_out[q, :len(s)], r_out[q, :len(r)] = s[:width], r[:width]
        return s_out, r_out

    def _segment_clips(self, vec: np.ndarray, k: int, allowed=None) -> list[tuple[int, float]]:
        """``(clip, its best segment's cosine)`` of the clips the best segments name, best first, until ``k``
        clips are named or every segment is read (``allowed``: the segments that may be read, as a searcher takes
        them)."""
        total = len(self.segments)
        depth = min(total, max(4 * k, 64))
        extra = {} if allowed is None else {"allowed": allowed}
        while True:
            s, r = self.segments.searcher.top_k(vec[None], depth, **extra)
            keep = r[0] >= 0
            clips, scores = self.segments.clip[r[0][keep]], s[0][keep]
            first: dict[int, float] = {}
            for c, sc in zip(clips.tolist(), scores.tolist(), strict=True):
                first.setdefault(c, sc)
            if len(first) >= k or depth >= total or keep.sum() < depth:
                return list(first.items())
            depth = min(total, depth * 4)


def sound_searcher(clips, segments: Segments | None):
    """The searcher of clips by sound: ``clips`` itself without segments, else a :class:`MomentSearcher`."""
    return clips if segments is None else MomentSearcher(clips, segments)
