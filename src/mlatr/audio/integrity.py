"""Is an audio file whole? The frames its header declares against the frames that decode, and the
decoded duration against the manifest's.

libsndfile trusts the data over the header: a WAV whose header declares 36,092 frames but whose file
stops after 8 reads as an 8-frame clip, without an error. A truncated copy (an interrupted download, a
full disk) would then train, evaluate and index as a different, shorter sound. This module reads the
declared length itself for the formats whose header states it (RIFF/WAVE data chunk, AIFF COMM), takes
libsndfile's count for the others (FLAC's STREAMINFO, Ogg's last granule, an MP3's Xing / Info / VBRI
frame count), decodes the file in blocks and compares. An MP3 without such a header declares nothing:
libsndfile then estimates its length from the file's size and bit rate, ID3 tags included (a 4 KiB tag
made a whole 0.5 s sound of Scratch's library "declare" 1 s), so its count is no promise.

- :func:`declared_frames`: frames a header promises (``None`` where the header does not say, e.g. a WAV
  written to a pipe, whose size fields hold a placeholder).
- :func:`probe_audio`: decode a file block by block without keeping it (``data validate --check-audio``,
  folder import); :func:`read_audio_blocks`: decode it mono, keeping it (:func:`mlatr.audio.io.load_audio`).
  Both raise :class:`~mlatr.errors.MlatrError` naming the file when it is unreadable, empty, holds
  non-finite samples or fewer frames than declared.
- :func:`audio_file_problem`: ``(field, message)`` for a file that is missing, does not decode whole or is
  far from a stated duration (``data validate --check-audio``).
- :func:`duration_problem`: a message when a decoded duration is far from the one a manifest states
  (``|decoded - stated| > max(DURATION_TOLERANCE_S, DURATION_TOLERANCE_RATIO * stated)``), else ``None``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mlatr.audio.riff_chunks import iter_chunks
from mlatr.errors import MissingFileError, MlatrError
from mlatr.file_kinds import special_file

if TYPE_CHECKING:
    import soundfile as sf


def soundfile():
    """The ``soundfile`` module, imported where audio is read: the planner and the GPU suite import the
    manifest (and so this module) on GPU machines that have no audio stack."""
    import soundfile  # see the docstring

    return soundfile

#: Frames decoded per block (bounded memory whatever the file's length).
BLOCK_FRAMES = 1 << 16
#: A decoded duration differing from the manifest's by more than this many seconds, and by more than
#: :data:`DURATION_TOLERANCE_RATIO` of it, is a problem (a half-length file is; 9.9 s for 10 s is not).
DURATION_TOLERANCE_S = 0.5
DURATION_TOLERANCE_RATIO = 0.2
#: Frames an MPEG (MP3) decode may fall short of libsndfile's count and still be whole: that count comes from
#: the Xing / LAME header or from the bit rate and does not subtract the encoder's delay and padding (up to
#: about two MPEG frames of 1,152 samples); four frames of slack. Every other format's count is exact.
MPEG_SLACK_FRAMES = 4 * 1152
#: First two bytes of an MPEG audio frame (MP3 without an ID3 tag), by version and layer.
_MPEG_SYNC = tuple(bytes([0xFF, b]) for b in range(0xE0, 0x100))
#: RIFF size fields that writers use as "unknown" (streamed output).
_PLACEHOLDER_SIZES = (0, 0xFFFFFFFF)
#: WAVE format tags whose data chunk is plain frames: PCM, IEEE float, A-law, mu-law, extensible.
_FRAME_FORMATS = (0x0001, 0x0003, 0x0006, 0x0007, 0xFFFE)


@dataclass(frozen=True)
class AudioProbe:
    """What decoding a file found: its rate and channels, the frames declared and the frames read, and
    libsndfile's names of its container and encoding (``format``: ``WAV``, ``FLAC``, ``OGG``, ``MP3`` ...;
    ``subtype``: ``PCM_16``, ``FLOAT``, ``VORBIS`` ...)."""

    path: str
    samplerate: int
    channels: int
    frames_declared: int | None
    frames_read: int
    format: str = ""
    subtype: str = ""

    @property
    def seconds(self) -> float:
        """Decoded duration in seconds."""
        return self.frames_read / self.samplerate if self.samplerate > 0 else 0.0


def _wav_frames(fh) -> int | None:
    """Frames of a RIFF/WAVE file's data chunk (``fh`` positioned after the 12-byte RIFF header)."""
    block_align = None
    for kind, size in iter_chunks(fh, "<"):
        if kind == b"fmt ":
            fmt = fh.read(16)
            if len(fmt) < 16:
                return None
            tag, _channels, _rate, _bytes_per_s, block_align = struct.unpack("<HHIIH", fmt[:14])
            if tag not in _FRAME_FORMATS or block_align == 0:
                return None
        elif kind == b"data":
            if block_align is None or size in _PLACEHOLDER_SIZES:
                return None
            return size // block_align
    return None


def _mp3_counts_frames(magic: bytes, fh) -> bool:
    """Whether the first MPEG frame after any ID3v2 tag holds a Xing, Info or VBRI header (a frame count)."""
    start = 0
    if magic[:3] == b"ID3" and len(magic) >= 10:  # size: four 7-bit bytes, after a 10-byte header (+10: footer)
        size = (magic[6] << 21) | (magic[7] << 14) | (magic[8] << 7) | magic[9]
        start = 10 + size + (10 if magic[5] & 0x10 else 0)
    fh.seek(start)
    head = fh.read(4096)
    sync = next((i for i in range(len(head) - 1) if head[i] == 0xFF and head[i + 1] & 0xE0 == 0xE0), None)
    return sync is not None and any(tag in head[sync:sync + 200] for tag in (b"Xing", b"Info", b"VBRI"))


def _aiff_frames(fh) -> int | None:
    """``numSampleFrames`` of an AIFF/AIFC file's COMM chunk (``fh`` after the 12-byte FORM header)."""
    for kind, _size in iter_chunks(fh, ">"):
        if kind == b"COMM":
            comm = fh.read(6)
            return struct.unpack(">I", comm[2:6])[0] if len(comm) == 6 else None
    return None


def declared_frames(path: str | os.PathLike, snd: sf.SoundFile | None = None) -> int | None:
    """Frames the header of a WAV or AIFF file declares; for other formats libsndfile's count (FLAC
    STREAMINFO, Ogg granule position; that of ``snd``, the file already open, when given); ``None`` where nothing
    is declared or the header is unreadable (or the path is no regular file: a FIFO is never opened)."""
    if not os.path.isfile(path):  # a FIFO, socket or device is no regular file
        return None
    try:
        with open(path, "rb") as fh:
            magic = fh.read(12)
            if magic[:4] == b"RIFF" and magic[8:12] == b"WAVE":
                return _wav_frames(fh)
            if magic[:4] == b"FORM" and magic[8:12] in (b"AIFF", b"AIFC"):
                return _aiff_frames(fh)
            if (magic[:3] == b"ID3" or magic[:2] in _MPEG_SYNC) and not _mp3_counts_frames(magic, fh):
                return None
    except (OSError, struct.error):
        return None
    try:
        frames = snd.frames if snd is not None else soundfile().info(os.fspath(path)).frames
    except Exception:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        return None
    return int(frames) if 0 < frames < (1 << 62) else None


def open_audio(path: str) -> sf.SoundFile:
    """The sound file at ``path`` opened by libsndfile; :class:`MlatrError` naming it when it is not a regular
    file, missing or unreadable."""
    special = special_file(path)
    if special:
        raise MlatrError(f"{path}: not a regular file but {special} (not opened)")
    if not os.path.isfile(path):
        raise MissingFileError(path, "a sound file")
    try:
        return soundfile().SoundFile(path)
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        raise MlatrError(f"{path}: cannot read audio ({exc})") from exc


def _seconds(frames: int, rate: int) -> str:
    s = frames / rate if rate > 0 else 0.0
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def count_slack(format_name: str) -> int:
    """Frames a whole file of libsndfile format ``format_name`` may decode short of its declared count."""
    return MPEG_SLACK_FRAMES if format_name in ("MP3", "MPEG") else 0


def _check_whole(path: str, declared: int | None, read: int, rate: int, format_name: str) -> None:
    if read == 0:
        raise MlatrError(f"{path}: audio file is empty (0 samples decode)")
    if declared is not None and read < declared - count_slack(format_name):
        raise MlatrError(f"{path}: truncated audio: the header declares {declared:,} frames "
                         f"({_seconds(declared, rate)}) but only {read:,} decode ({_seconds(read, rate)})")


def _blocks(snd: sf.SoundFile, path: str):
    """Yield the blocks ``[n, C]`` float32 of the open file ``snd``; decoding errors become :class:`MlatrError`."""
    while True:
        try:
            block = snd.read(BLOCK_FRAMES, dtype="float32", always_2d=True)
        except Exception as exc:  # a corrupt stream fails part-way
            raise MlatrError(f"{path}: cannot decode audio ({exc})") from exc
        if block.shape[0] == 0:
            return
        if not np.isfinite(block).all():
            raise MlatrError(f"{path}: audio holds NaN or infinite samples")
        yield block


def mono_blocks(path: str | os.PathLike):
    """Yield ``(sample rate, block [n] float32)``: the file decoded block by block and mixed to mono as it is
    read, nothing kept (a long recording's segments, :mod:`mlatr.search.segments`; the prints that tell copies
    apart, :mod:`mlatr.data.dedup`); a decoding error, NaN or infinite samples raise :class:`MlatrError` naming the
    file, and so does, once the last block is read, a file shorter than its header declares (as :func:`probe_audio`:
    every reader calls a truncated file the same)."""
    path = os.fspath(path)
    with open_audio(path) as snd:
        declared = declared_frames(path, snd)
        rate, read = int(snd.samplerate), 0
        for block in _blocks(snd, path):
            read += block.shape[0]
            yield rate, (block[:, 0].copy() if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32))
        _check_whole(path, declared, read, rate, snd.format)


def probe_audio(path: str | os.PathLike, on_block: Callable[[np.ndarray, int], None] | None = None) -> AudioProbe:
    """Decode ``path`` block by block (nothing kept) and check it is whole; see the module docstring.
    ``on_block(block, sample_rate)`` sees each decoded block (``[n, channels]`` float32, in order): what a
    measurement of the whole file (:mod:`mlatr.audio.loudness`) needs from the same decode."""
    path = os.fspath(path)
    with open_audio(path) as snd:
        declared = declared_frames(path, snd)
        rate, channels, format_name, subtype = int(snd.samplerate), int(snd.channels), snd.format, snd.subtype
        read = 0
        for block in _blocks(snd, path):
            read += block.shape[0]
            if on_block is not None:
                on_block(block, rate)
    _check_whole(path, declared, read, rate, format_name)
    return AudioProbe(path, rate, channels, declared, read, format_name, subtype)


def read_audio_blocks(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Decode ``path`` to mono float32 at its own rate (each block mixed to the channel mean as it is read,
    so a long multi-channel file never sits in memory whole) and check it is whole: ``(mono [T], rate)``."""
    path = os.fspath(path)
    with open_audio(path) as snd:
        return decode_mono(snd, path, declared_frames(path, snd)), int(snd.samplerate)


def decode_mono(snd: sf.SoundFile, path: str, declared: int | None) -> np.ndarray:
    """The open file ``snd`` from where it stands to its end, mono float32, checked whole against ``declared``."""
    parts = [block[:, 0].copy() if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)
             for block in _blocks(snd, path)]
    mono = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    _check_whole(path, declared, mono.shape[0], int(snd.samplerate), snd.format)
    return mono


def peak_envelope(path: str | os.PathLike, bins: int) -> tuple[float, np.ndarray]:
    """``(seconds, peaks [bins])`` of ``path``: the largest absolute sample (channels mixed) of each of ``bins``
    equal stretches, decoded block by block, so memory stays bounded for a file of hours; refused, as
    :func:`read_audio_blocks`, when it does not decode whole."""
    path = os.fspath(path)
    with open_audio(path) as snd:
        declared = declared_frames(path, snd)
        rate, format_name, frames = int(snd.samplerate), snd.format, int(snd.frames)
        total = declared or frames
        peaks = np.zeros(bins, np.float32)
        seen = 0
        for block in _blocks(snd, path):
            mono = np.abs(block[:, 0] if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32))
            where = np.minimum((seen + np.arange(len(mono))) * bins // max(total, 1), bins - 1)
            np.maximum.at(peaks, where, mono)
            seen += len(mono)
    _check_whole(path, declared, seen, rate, format_name)
    return seen / rate, peaks


def duration_problem(decoded_s: float, stated_s: float | None) -> str | None:
    """A message when ``decoded_s`` is far from the manifest's ``stated_s`` (see the module docstring)."""
    if stated_s is None:
        return None
    if abs(decoded_s - stated_s) <= max(DURATION_TOLERANCE_S, DURATION_TOLERANCE_RATIO * stated_s):
        return None
    return (f"the audio decodes to {decoded_s:.3f} s but the manifest says {stated_s:g} s "
            "(a truncated or replaced file?)")


def audio_file_problem(path: str | os.PathLike, stated_s: float | None = None) -> tuple[str, str] | None:
    """``(field, message)`` of what is wrong with the audio file ``path`` (decoded block by block, nothing
    kept): field ``audio`` when it is missing or does not decode whole, ``duration`` when it is far from
    ``stated_s``; ``None`` when it is fine."""
    if not os.path.isfile(path) and not special_file(path):  # a FIFO is refused by probe_audio, unopened
        return "audio", f"{path}: file not found (a sound file)"
    try:
        probe = probe_audio(path)
    except MlatrError as exc:
        return "audio", str(exc)
    problem = duration_problem(probe.seconds, stated_s)
    return ("duration", f"{path}: {problem}") if problem else None
