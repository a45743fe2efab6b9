"""The one path from audio to embeddings: clips -> windows -> batches -> encoder -> a vector per clip.

Every consumer of a model's audio side goes through :func:`embed`: ``mlatr encode`` / ``eval``
(:func:`mlatr.inference.encoded_split.encode_manifest`), ``embed``, ``classify``, ``index build``, a sound query,
the frozen-feature caches (:mod:`mlatr.frozen_features`, :mod:`mlatr.frozen_prefix`) and the Python API
(:meth:`mlatr.inference.LoadedModel.embed_audio`).

Clips. What the path reads is :class:`Clips`: ``len(clips)`` clips, ``clips.read(row)`` one of them decoded,
mono, at the model's rate and centre-cropped to ``max_seconds`` (``None`` for a clip skipped under
``skip_bad``, its message in ``clips.bad``). Three kinds: :class:`SoundFiles` (paths, read by
:func:`mlatr.audio.io.load_audio`), :class:`SourceClips` (a manifest's clips, shard members or a decoded store:
a :class:`~mlatr.data.pipeline.source.Source`, with its checks of a clip against its manifest line) and
:class:`Waveforms` (arrays in memory). Each clip is read once, whole or its crop, and never padded before it
is cut into windows.

Windows. Encoding a whole 300 s clip at once makes the audio encoder's activations grow with the clip. With a
window length ``W`` (by default the model's own evaluation crop, ``data.eval_max_seconds``), a clip of
``T > W`` samples is cut by :func:`window_bounds`: into ``n = ceil(T / W)`` consecutive windows of equal length
(``T / n`` samples, none longer than ``W``), or, with a hop ``H``, into windows of ``W`` samples starting every
``H`` (overlapping when ``H < W``, the last one ending at the clip's end). The windows of consecutive clips
are collated ``batch_size`` at a time (the one padding: to the longest window of the batch) and encoded; a
clip's vector is the length-weighted mean of its windows' unit vectors, normalised again
(:func:`pool_windows`); its windows' own vectors, with their start and end times, can be kept instead
(``windows=True``: :class:`WindowVectors`). The encoder never sees more than ``batch_size x W`` samples at
once; a clip no longer than ``W`` is one window. ``frames=True`` keeps each batch's frame / token features
for the matching heads that score them (every clip must then be one window).

Work. The rows are cut into consecutive chunks of ``batch_size`` clips (a batch never mixes two chunks, so the
vectors do not depend on how the chunks are shared out) and encoded in this process or by ``workers``
processes (:mod:`mlatr.inference.audio_workers`), each reading and encoding its chunks on ``threads`` torch
threads; the chunks come back in order, to a progress bar counting clips (rate and time left) and to a
:class:`~mlatr.inference.vector_journal.VectorJournal` that makes a killed run resumable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import collate_waveforms, load_audio_centre, resample
from mlatr.data.pipeline.source import Source, crop_window
from mlatr.errors import MlatrError
from mlatr.inference.worker_pool import ordered_map, threads_per_worker, usable_cores
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.outputs import EncoderOutput, at_least_float32

#: ``max_seconds`` that crops nothing (an audio file of more than 30 years is not expected).
WHOLE_CLIP = 1e9

#: An audio encoder as the path calls it: ``waveform [B, T], lengths [B] -> EncoderOutput``.
EncodeFn = Callable[[torch.Tensor, torch.Tensor], EncoderOutput]


class Clips(Protocol):
    """``len(clips)`` clips, each read decoded, mono, at the model's rate and centre-cropped; ``bad`` maps what
    names a clip skipped under ``skip_bad`` (its id, or its path as given) to why. A :class:`Clips` is sent to
    worker processes by pickling (or by fork)."""

    bad: dict[str, str]

    def __len__(self) -> int: ...

    def read(self, row: int) -> np.ndarray | None:
        """Clip ``row`` as ``[T]`` float32, or None when it is unreadable and skipped (recorded in ``bad``)."""


def max_samples(max_seconds: float, sample_rate: int) -> int:
    """The centre crop of ``max_seconds`` in samples at ``sample_rate``."""
    return int(round(max_seconds * sample_rate))


@dataclass
class SoundFiles:
    """Sound files given by path (no manifest line, no stated duration), centre-cropped
    (:func:`~mlatr.audio.io.load_audio_centre`: only the crop of a long file is decoded); errors name the file,
    ``bad`` is keyed by the path as given."""

    paths: list[str]
    sample_rate: int
    max_seconds: float = WHOLE_CLIP
    skip_bad: bool = False
    bad: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.paths)

    def read(self, row: int) -> np.ndarray | None:
        try:
            wave, _ = load_audio_centre(self.paths[row], self.sample_rate,
                                        max_samples(self.max_seconds, self.sample_rate))
        except MlatrError as exc:
            if not self.skip_bad:
                raise
            self.bad[self.paths[row]] = str(exc)
            return None
        return wave


@dataclass
class SourceClips:
    """The clips of an input-pipeline :class:`~mlatr.data.pipeline.source.Source` (a manifest's files, webdataset
    shard members, a decoded store), each its centred ``max_seconds`` (``Source.crop``: the source's own checks
    against the manifest line, its ``skip_bad``)."""

    source: Source
    max_seconds: float = WHOLE_CLIP

    @property
    def bad(self) -> dict[str, str]:
        return self.source.bad

    def __len__(self) -> int:
        return len(self.source.manifest)

    def read(self, row: int) -> np.ndarray | None:
        return self.source.crop(row, max_samples(self.max_seconds, self.source.sample_rate))


@dataclass
class Waveforms:
    """Mono waveforms in memory recorded at ``sample_rate``, resampled to ``model_rate`` and centre-cropped."""

    waves: Sequence[np.ndarray]
    sample_rate: int
    model_rate: int
    max_seconds: float = WHOLE_CLIP
    bad: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.waves)

    def read(self, row: int) -> np.ndarray:
        a = np.asarray(self.waves[row], dtype=np.float32)
        if a.ndim != 1 or a.shape[0] == 0:
            raise MlatrError(f"audio {row}: expected a non-empty 1-D waveform, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise MlatrError(f"audio {row}: the waveform holds NaN or infinite samples")
        wave = resample(a, int(self.sample_rate), self.model_rate)
        return crop_window(wave, max_samples(self.max_seconds, self.model_rate), None)


def window_bounds(n_samples: int, window: int, hop: int | None = None) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` of the windows of a clip of ``n_samples``: ``ceil(n_samples / window)`` equal
    consecutive windows covering it (``hop=None``), or windows of ``window`` samples starting every ``hop``
    samples, the last one moved back to end at the clip's end (one window when the clip is no longer)."""
    if window <= 0 or (hop is not None and hop <= 0):
        raise ValueError("window and hop must be positive")
    if hop is None:
        n = max(1, math.ceil(n_samples / window))
        edges = np.linspace(0, n_samples, n + 1).round().astype(np.int64)
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]
    if n_samples <= window:
        return [(0, n_samples)]
    starts = list(range(0, n_samples - window, hop)) + [n_samples - window]
    return [(s, s + window) for s in starts]


def pool_windows(embeddings: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """The clip embedding ``[d]``: length-weighted mean of its windows' ``[n, d]`` embeddings, unit norm."""
    w = np.asarray(lengths, dtype=np.float64)
    mean = (embeddings.astype(np.float64) * (w / w.sum())[:, None]).sum(axis=0)
    norm = np.linalg.norm(mean)
    return (mean / norm if norm > 0 else mean).astype(np.float32)


@dataclass(frozen=True)
class Windowing:
    """How clips are cut and batched: windows of ``window`` samples (every ``hop`` samples, or ``None``: equal
    consecutive windows), ``batch_size`` windows per encoder call, at ``sample_rate``."""

    window: int
    batch_size: int
    sample_rate: int
    hop: int | None = None

    @classmethod
    def of(cls, window_seconds: float, batch_size: int, sample_rate: int,
           hop_seconds: float | None = None) -> Windowing:
        return cls(max_samples(window_seconds, sample_rate), int(batch_size), int(sample_rate),
                   None if hop_seconds is None else max(1, max_samples(hop_seconds, sample_rate)))


@dataclass
class WindowVectors:
    """One clip's windows: ``bounds [n, 2]`` their start and end in seconds (of the crop read), ``vectors [n, d]``."""

    bounds: np.ndarray
    vectors: np.ndarray


@dataclass
class Embedded:
    """Vectors of the clips read: ``rows`` (into the clips, in order; skipped ones left out), ``vectors [n, d]``
    (pooled, unit norm when the encoder's are), ``windows`` (``windows=True``: each clip's
    :class:`WindowVectors`), ``frames`` (``frames=True``: each batch's ``(frames, mask)`` on the CPU, batches in
    order, every clip one window) and ``bad`` (the clips skipped: ``{name: why}``)."""

    rows: list[int]
    vectors: np.ndarray
    windows: list[WindowVectors] | None = None
    frames: list[tuple[torch.Tensor, torch.Tensor | None]] | None = None
    bad: dict[str, str] = field(default_factory=dict)

    @classmethod
    def join(cls, parts: Sequence[Embedded], dim: int = 0) -> Embedded:
        """One :class:`Embedded` of ``parts`` in order."""
        vecs = [p.vectors for p in parts if len(p.rows)]
        windows = None if not parts or parts[0].windows is None else [w for p in parts for w in p.windows]
        frames = None if not parts or parts[0].frames is None else [f for p in parts for f in p.frames]
        bad = {k: v for p in parts for k, v in p.bad.items()}
        return cls([r for p in parts for r in p.rows], np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32),
                   windows, frames, bad)


@torch.no_grad()
def embed_rows(encode: EncodeFn, clips: Clips, rows: Sequence[int], how: Windowing, device: torch.device | str,
               *, frames: bool = False, windows: bool = False) -> Embedded:
    """The vectors of clips ``rows`` in this process: each read, cut into windows, ``how.batch_size`` windows
    (of consecutive clips) collated and encoded per call; a clip of several windows gets :func:`pool_windows`."""
    kept: list[int] = []
    out: list[np.ndarray] = []
    kept_windows: list[WindowVectors] = []
    frame_parts: list = []
    pending: list[tuple[int, int, int, np.ndarray]] = []  # (row, windows of that row, start, window waveform)
    parts: dict[int, tuple[list[np.ndarray], list[tuple[int, int]]]] = {}

    def flush() -> None:
        wave, lens = collate_waveforms([w for *_, w in pending])  # [B, T_max], [B]
        encoded = encode(wave.to(device), lens.to(device))
        emb = at_least_float32(encoded.pooled).cpu().numpy()  # [B, d]
        if frames:
            if encoded.frames is None:
                raise MlatrError("this encoder gives no frame/token features, which the model's matching head needs")
            frame_parts.append((encoded.frames.float().cpu(), None if encoded.mask is None else encoded.mask.cpu()))
        for (row, count, start, w), e in zip(pending, emb, strict=True):
            embs, spans = parts.setdefault(row, ([], []))
            embs.append(e)
            spans.append((start, start + w.shape[0]))
            if len(embs) == count:
                del parts[row]
                kept.append(row)
                stacked = np.stack(embs)
                out.append(embs[0] if count == 1 else pool_windows(stacked, [b - a for a, b in spans]))
                if windows:
                    kept_windows.append(WindowVectors(np.asarray(spans, np.float64) / how.sample_rate, stacked))
        pending.clear()

    for row in rows:
        wave = clips.read(row)
        if wave is None:
            continue
        bounds = window_bounds(wave.shape[0], how.window, how.hop)
        if frames and len(bounds) > 1:
            raise MlatrError("frame features of a clip longer than one window cannot be kept: encode it whole "
                             "(a window as long as the crop)")
        for a, b in bounds:
            pending.append((row, len(bounds), a, wave[a:b]))
            if len(pending) == how.batch_size:
                flush()
    if pending:
        flush()
    dim = out[0].shape[0] if out else 0
    return Embedded(kept, np.stack(out) if out else np.zeros((0, dim), np.float32),
                    kept_windows if windows else None, frame_parts if frames else None)


def chunks(rows: Sequence[int], size: int) -> list[list[int]]:
    """``rows`` cut into consecutive chunks of ``size`` (the last one shorter)."""
    rows = list(rows)
    return [rows[i:i + size] for i in range(0, len(rows), max(1, size))]


def chunk_vectors(encode: EncodeFn, clips: Clips, how: Windowing, device: torch.device | str, frames: bool,
                  windows: bool, rows: Sequence[int]) -> Embedded:
    """:func:`embed_rows` of one chunk, with the clips it skipped (what a worker sends back)."""
    before = set(clips.bad)
    part = embed_rows(encode, clips, rows, how, device, frames=frames, windows=windows)
    part.bad = {k: v for k, v in clips.bad.items() if k not in before}
    return part


@dataclass
class Decoded:
    """A chunk's clips as a worker read them (a decode-only worker's result): ``{row: waveform}`` and the skipped."""

    waves: dict[int, np.ndarray]
    bad: dict[str, str]

    def __len__(self) -> int:
        return len(self.waves)

    def read(self, row: int) -> np.ndarray | None:
        return self.waves.get(row)


def decode_chunk(clips: Clips, rows: Sequence[int]) -> Decoded:
    """The clips of ``rows`` read (what a decode-only worker sends back)."""
    before = set(clips.bad)
    waves = {row: wave for row in rows if (wave := clips.read(row)) is not None}
    return Decoded(waves, {k: v for k, v in clips.bad.items() if k not in before})


def embed(encode: EncodeFn, clips: Clips, how: Windowing, device: torch.device | str, *,
          rows: Sequence[int] | None = None, workers: int = 1, threads: int = 1, progress: bool = False,
          desc: str = "audio", frames: bool = False, windows: bool = False,
          on_chunk: Callable[[Embedded], None] | None = None) -> Embedded:
    """The vectors of ``clips`` (of ``rows``, default all) in order: chunks of ``how.batch_size`` clips, each
    read and encoded by :func:`embed_rows` in this process (``workers <= 1``) or by ``workers`` processes of
    ``threads`` torch threads (:func:`mlatr.inference.worker_pool.ordered_map`; on a CPU each process reads and
    encodes its chunks, on another device the processes read and this one encodes). ``on_chunk`` receives each
    chunk's result in order (a journal), ``clips.bad`` the clips skipped; ``progress``: a bar of clips with
    their rate and the time left."""
    todo = chunks(range(len(clips)) if rows is None else rows, how.batch_size)
    on_cpu = torch.device(device).type == "cpu"
    if workers <= 1 or on_cpu:
        work = partial(chunk_vectors, encode, clips, how, device, frames, windows)
    else:
        work = partial(decode_chunk, clips)
    bar = tqdm(total=sum(map(len, todo)), desc=desc, unit="clip", disable=not progress, leave=False,
               smoothing=0.05)
    done: list[Embedded] = []
    try:
        for part in ordered_map(work, todo, workers, threads, caller_works=on_cpu):
            if isinstance(part, Decoded):  # read by a worker, encoded here (the model is on a GPU)
                part = chunk_vectors(encode, part, how, device, frames, windows, list(part.waves))
            clips.bad.update(part.bad)
            if on_chunk is not None:
                on_chunk(part)
            done.append(part)
            bar.update(len(part.rows) + len(part.bad))
    finally:
        bar.close()
    return Embedded.join(done)


def model_vectors(model: DualEncoder, clips: Clips, how: Windowing, *, workers: int = 1, **options) -> Embedded:
    """:func:`embed` with ``model``'s audio side (in eval mode, on its device) by ``workers`` processes sharing
    this process's cores (1: this process, through ``model.encode_audio``; else its
    :meth:`~mlatr.models.dual_encoder.DualEncoder.audio_tower`, which pickles without the text tower)."""
    encode = model.encode_audio if workers <= 1 else model.audio_tower()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        return embed(encode, clips, how, device, workers=workers,
                     threads=threads_per_worker(usable_cores(), workers), **options)
    finally:
        model.train(was_training)


def check_readable(result: Embedded, total: int, what: str) -> None:
    """Refuse a result that kept none of ``total`` clips, naming the first reason."""
    if total and not result.rows:
        first = next(iter(result.bad.values()), "")
        raise MlatrError(f"none of the {total} {what} could be read (first: {first})")
