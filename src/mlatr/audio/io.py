"""Audio loading for the model: read, mix to mono, resample to 16 kHz, crop/pad, collate.

Every model in mlatr sees 16 kHz mono float32 waveforms (ATRI §5.3: "The audio was sampled at
1.6 x 10^4"; the CED front end of ATRI §5.2 expects 16 kHz). This module is the only place that
touches audio files.

Crop policy:

* training (``mode="random"``): a window of ``num_samples`` starting at a uniformly drawn offset,
  drawn from the explicit generator the caller passes (``numpy.random.Generator`` or
  ``torch.Generator``); the same generator state gives the same crop;
* evaluation (``mode="center"``, the default of :func:`crop_or_pad`): the centred window, offset
  ``(len - num_samples) // 2`` — deterministic and independent of any generator. ``mode="start"``
  takes the first ``num_samples`` samples.

Clips shorter than the window are zero-padded at the end and keep their true length, so the
front end can mask the padding (:class:`mlatr.audio.frontend.LogMel`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from mlatr.audio.integrity import (
    count_slack,
    declared_frames,
    decode_mono,
    mono_blocks,
    open_audio,
    read_audio_blocks,
    soundfile,
)
from mlatr.errors import MissingFileError, MlatrError

#: The sample rate every mlatr model consumes.
SAMPLE_RATE = 16_000
#: Source seconds decoded on each side of a part of a file, so the resampler's edges fall outside it.
MARGIN_SECONDS = 0.05
#: :func:`load_audio_centre` reads a part of a file only when the file is this many times longer than the part.
PART_READ_RATIO = 2.0

CROP_MODES = ("random", "center", "start")


def to_mono(audio: np.ndarray) -> np.ndarray:
    """Mix ``[T]`` or ``[T, C]`` (soundfile layout) to ``[T]`` by the mean over channels."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 1:
        return audio
    if audio.ndim != 2:
        raise MlatrError(f"expected audio of shape [T] or [T, C], got {audio.shape}")
    return audio.mean(axis=1, dtype=np.float32)


def resample(audio: np.ndarray, sr_in: int, sr_out: int = SAMPLE_RATE) -> np.ndarray:
    """Resample a mono ``[T]`` signal from ``sr_in`` to ``sr_out`` Hz with soxr (high quality)."""
    audio = np.asarray(audio, dtype=np.float32)
    if sr_in == sr_out:
        return audio

    import soxr  # imported where audio is resampled (mlatr.audio.integrity.soundfile says why)

    return soxr.resample(audio, sr_in, sr_out, quality="HQ").astype(np.float32, copy=False)


def audio_duration(path: str | os.PathLike) -> float | None:
    """Seconds of audio in the file at ``path``, from its header (no decoding); ``None`` if unreadable."""
    try:
        info = soundfile().info(os.fspath(path))
    except Exception:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        return None
    return float(info.frames) / info.samplerate if info.samplerate > 0 else None


def load_audio(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Read an audio file (wav, flac, ogg, mp3, ... via soundfile) as mono float32 at ``sample_rate``.

    Raises :class:`MlatrError` naming the file when it is missing, unreadable, empty, truncated (fewer
    frames decode than its header declares: :mod:`mlatr.audio.integrity`) or holds non-finite samples.
    """

    path = os.fspath(path)
    mono, sr = read_audio_blocks(path)
    mono = resample(mono, sr, sample_rate)
    if mono.shape[0] == 0:
        raise MlatrError(f"{path}: audio is too short to resample to {sample_rate} Hz")
    return mono


def load_audio_centre(path: str | os.PathLike, sample_rate: int, count: int) -> tuple[np.ndarray, int]:
    """``(the centred count samples of load_audio(path, sample_rate), the length load_audio would give)``; all of
    it when no longer. Of a file :data:`PART_READ_RATIO` times longer than the part, in a format libsndfile seeks
    to the sample (WAV, AIFF, FLAC, Ogg; not MP3, whose header length is an estimate), only that part and
    :data:`MARGIN_SECONDS` on each side are decoded, from an input sample where the resampler's phase is the whole
    file's, so the samples equal the whole decode's (to float rounding). Such a file is checked as far as it is
    read: the part must decode whole and a WAV / AIFF header must not declare more frames than the file holds;
    damage past the part goes unseen. The file is opened once. Errors as :func:`load_audio`'s, naming the file."""
    path = os.fspath(path)
    rate, count = int(sample_rate), int(count)
    with open_audio(path) as snd:
        declared = declared_frames(path, snd)
        sr, frames = int(snd.samplerate), int(snd.frames)
        length = resampled_length(frames, sr, rate) if 0 < frames < (1 << 62) and sr > 0 else 0
        if count_slack(snd.format) or not snd.seekable() or length < PART_READ_RATIO * count:
            wave = resample(decode_mono(snd, path, declared), sr, rate)  # decoded whole
            if wave.shape[0] == 0:
                raise MlatrError(f"{path}: audio is too short to resample to {rate} Hz")
            n = wave.shape[0]
            start = max(0, (n - count) // 2)
            return (wave if n <= count else wave[start:start + count].copy()), n
        if declared is not None and declared > frames:
            raise MlatrError(f"{path}: truncated audio: the header declares {declared:,} frames but only "
                             f"{frames:,} are in the file")
        period_in = sr // math.gcd(sr, rate)  # input samples per resampling phase cycle
        period_out = rate // math.gcd(sr, rate)
        start_out = (length - count) // 2
        margin = int(math.ceil(MARGIN_SECONDS * sr))
        first = max(0, (start_out * sr // rate - margin) // period_in) * period_in
        stop = min(frames, -(-(start_out + count) * sr // rate) + margin + 1)
        try:
            snd.seek(first)
            block = snd.read(stop - first, dtype="float32", always_2d=True)
        except Exception as exc:  # a corrupt stream fails part-way
            raise MlatrError(f"{path}: cannot decode audio ({exc})") from exc
    if block.shape[0] < stop - first:
        raise MlatrError(f"{path}: truncated audio: the header declares {frames:,} frames but the part at "
                         f"{first:,} decodes only {block.shape[0]:,} of {stop - first:,}")
    if not np.isfinite(block).all():
        raise MlatrError(f"{path}: audio holds NaN or infinite samples")
    mono = block[:, 0].copy() if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)
    offset = start_out - first // period_in * period_out
    return resample(mono, sr, rate)[offset:offset + count].copy(), length


def stream_audio(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> Iterator[np.ndarray]:
    """The file at ``path`` as consecutive mono float32 blocks at ``sample_rate``: decoded block by block and
    resampled as a stream (soxr), so memory stays a block whatever the file's length (a long recording's
    segments, a comparison of two files' samples). Equal to :func:`load_audio` within the resampler's stream
    edges (about 1e-3 at most); errors as :func:`mlatr.audio.integrity.mono_blocks`."""
    import soxr  # imported where audio is resampled (mlatr.audio.integrity.soundfile says why)

    stream, previous = None, None
    for rate, block in mono_blocks(path):
        if previous is not None:
            yield previous if stream is None else stream.resample_chunk(previous)
        if stream is None and rate != sample_rate:
            stream = soxr.ResampleStream(rate, sample_rate, 1, dtype="float32", quality="HQ")
        previous = block
    if previous is not None:
        yield previous if stream is None else stream.resample_chunk(previous, last=True)


def resampled_length(frames: int, sr_in: int, sr_out: int = SAMPLE_RATE) -> int:
    """Samples that :func:`resample` gives for ``frames`` input samples: ``round(frames * sr_out / sr_in)``
    with halves rounded up (soxr's output length)."""
    if sr_in == sr_out:
        return int(frames)
    return (2 * int(frames) * sr_out + sr_in) // (2 * sr_in)


def probe_length(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> int:
    """The length :func:`load_audio` will return for ``path``, from the file's header (no decoding).

    Exact for WAV, FLAC and Ogg; formats whose header only estimates the frame count (some MP3) may
    differ by a few samples from the decoded length, which the training loader tolerates. Raises
    :class:`MlatrError` naming the file when it is missing, unreadable or empty.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MissingFileError(path, "a sound file")
    try:
        info = soundfile().info(path)
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        raise MlatrError(f"{path}: cannot read audio ({exc})") from exc
    if info.frames <= 0 or info.channels <= 0:
        raise MlatrError(f"{path}: audio file is empty (0 samples)")
    length = resampled_length(info.frames, int(info.samplerate), sample_rate)
    if length <= 0:
        raise MlatrError(f"{path}: audio is too short to resample to {sample_rate} Hz")
    return length


def _draw_offset(high: int, generator: np.random.Generator | torch.Generator | None) -> int:
    """A uniform integer in ``[0, high]`` from the caller's generator."""
    if generator is None:
        raise MlatrError("a random crop needs an explicit generator (numpy or torch)")
    if isinstance(generator, torch.Generator):
        return int(torch.randint(0, high + 1, (1,), generator=generator).item())
    return int(generator.integers(0, high + 1))


def crop_or_pad(
    audio: np.ndarray,
    num_samples: int,
    mode: str = "center",
    generator: np.random.Generator | torch.Generator | None = None,
) -> tuple[np.ndarray, int]:
    """Cut or zero-pad a mono ``[T]`` signal to exactly ``num_samples``.

    Returns ``(segment [num_samples], valid_length)``; ``valid_length = min(T, num_samples)`` counts
    the samples that come from the signal (the rest is end padding). ``mode``: ``"random"`` (training,
    needs ``generator``), ``"center"`` (evaluation) or ``"start"``; see the module docstring.
    """
    if mode not in CROP_MODES:
        raise MlatrError(f"crop mode must be one of {CROP_MODES}, got {mode!r}")
    if num_samples <= 0:
        raise MlatrError("num_samples must be positive")
    audio = np.asarray(audio, dtype=np.float32)
    n = audio.shape[0]
    if n >= num_samples:
        excess = n - num_samples
        if mode == "random":
            start = _draw_offset(excess, generator)
        elif mode == "center":
            start = excess // 2
        else:
            start = 0
        return audio[start:start + num_samples].copy(), num_samples
    out = np.zeros(num_samples, dtype=np.float32)
    out[:n] = audio
    return out, n


def collate_waveforms(
    waveforms: Sequence[np.ndarray | torch.Tensor], lengths: Sequence[int] | None = None, shared: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack mono signals of any lengths into ``([B, T_max] float32, lengths [B] long)``.

    Shorter signals are zero-padded at the end. ``lengths`` (e.g. the ``valid_length`` of
    :func:`crop_or_pad`) overrides the array lengths when given, so padding already present in a
    cropped segment stays masked. ``shared``: the batch is made in shared memory, as a DataLoader worker
    sends it (no copy on the way; moving it there afterwards leaves the worker's heap growing).
    """
    if len(waveforms) == 0:
        raise MlatrError("cannot collate an empty batch")
    arrays = [torch.as_tensor(np.asarray(w, dtype=np.float32)).reshape(-1) for w in waveforms]
    sizes = [a.shape[0] for a in arrays]
    valid = list(sizes) if lengths is None else [int(x) for x in lengths]
    if len(valid) != len(arrays):
        raise MlatrError("lengths must have one entry per waveform")
    if any(v < 0 or v > s for v, s in zip(valid, sizes, strict=True)):
        raise MlatrError("a length exceeds its waveform")
    if shared:
        storage = torch.empty(0, dtype=torch.float32)._typed_storage()._new_shared(len(arrays) * max(sizes))
        batch = torch.empty(0, dtype=torch.float32).new(storage).view(len(arrays), max(sizes)).zero_()
    else:
        batch = torch.zeros(len(arrays), max(sizes), dtype=torch.float32)
    for i, a in enumerate(arrays):
        batch[i, : a.shape[0]] = a
    return batch, torch.tensor(valid, dtype=torch.long)
