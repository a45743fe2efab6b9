"""Decode a user's sound file by what its use needs, never by what its header or size suggests.

A compressed file's size says nothing of its decoded size: a 60-minute silent FLAC is half a megabyte
and decodes to 230 MB of float32 at 16 kHz. :func:`load_query_audio` therefore reads the header first,
refuses a file that declares more than ``max_declared_seconds`` (or declares no length at all and is
longer than that), and decodes only the centred ``seconds`` the query uses (the index's centre crop,
:func:`mlatr.audio.io.crop_or_pad` ``mode="center"``), seeking past the rest. It is the one place every
decoder of a query sound (``mlatr search --audio``, ``POST /search/audio``) calls.
"""

from __future__ import annotations

import math
import os

import numpy as np
import soundfile as sf

from mlatr.audio.integrity import count_slack, declared_frames
from mlatr.audio.io import MARGIN_SECONDS, SAMPLE_RATE, crop_or_pad, resample
from mlatr.errors import MlatrError

#: The longest sound a query may declare (seconds): longer files are refused before decoding.
MAX_DECLARED_SECONDS = 3600.0


def load_query_audio(path: str | os.PathLike, seconds: float, sample_rate: int = SAMPLE_RATE,
                     max_declared_seconds: float = MAX_DECLARED_SECONDS) -> np.ndarray:
    """The centred ``seconds`` of the sound at ``path`` (all of it when shorter), mono float32 at
    ``sample_rate``, decoding at most ``seconds`` plus a small margin of the file.

    Raises :class:`MlatrError` naming the file when it is unreadable, declares more than
    ``max_declared_seconds``, decodes fewer frames than the window needs (truncated), or holds
    non-finite samples.
    """
    path = os.fspath(path)
    declared = declared_frames(path)  # the WAV / AIFF header's own count (libsndfile trims it to the file)
    try:
        snd = sf.SoundFile(path)
    except Exception as exc:  # soundfile raises LibsndfileError / RuntimeError / TypeError
        raise MlatrError(f"{path}: cannot read audio ({exc})") from exc
    with snd:
        rate, frames = int(snd.samplerate), int(snd.frames)
        if rate <= 0:
            raise MlatrError(f"{path}: the header gives no sample rate")
        known = 0 < frames < (1 << 62)
        cap = int(math.ceil(max_declared_seconds * rate))
        longest = max(frames if known else 0, declared or 0)
        if longest > cap:
            raise MlatrError(f"{path}: the header declares {longest / rate:,.0f} s of audio; a query sound may be "
                             f"at most {max_declared_seconds:g} s")
        if known and declared is not None and declared > frames:
            raise MlatrError(f"{path}: truncated audio: the header declares {declared:,} frames but only "
                             f"{frames:,} are in the file")
        window = int(math.ceil(seconds * rate))
        margin = int(math.ceil(MARGIN_SECONDS * rate))
        if known and frames > window + 2 * margin:
            start = (frames - window) // 2 - margin
            want = window + 2 * margin
            try:
                snd.seek(start)
                block = snd.read(want, dtype="float32", always_2d=True)
            except Exception as exc:  # a corrupt stream fails part-way
                raise MlatrError(f"{path}: cannot decode audio ({exc})") from exc
            if block.shape[0] < want and start + block.shape[0] < frames - count_slack(snd.format):
                raise MlatrError(f"{path}: truncated audio: the header declares {frames:,} frames but the window "
                                 f"at {start:,} decodes only {block.shape[0]:,} of {want:,}")
        else:  # short, or no length declared: decode from the start, never past the cap
            try:
                block = snd.read(cap + 1 if not known else frames, dtype="float32", always_2d=True)
            except Exception as exc:
                raise MlatrError(f"{path}: cannot decode audio ({exc})") from exc
            if block.shape[0] > cap:
                raise MlatrError(f"{path}: the audio runs past {max_declared_seconds:g} s, the most a query sound "
                                 "may be")
            if block.shape[0] == 0:
                raise MlatrError(f"{path}: audio file is empty (0 samples decode)")
            if known and block.shape[0] < frames - count_slack(snd.format):
                raise MlatrError(f"{path}: truncated audio: the header declares {frames:,} frames but only "
                                 f"{block.shape[0]:,} decode")
    if not np.isfinite(block).all():
        raise MlatrError(f"{path}: audio holds NaN or infinite samples")
    mono = block[:, 0].copy() if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)  # [T]
    mono = resample(mono, rate, sample_rate)
    if mono.shape[0] == 0:
        raise MlatrError(f"{path}: audio is too short to resample to {sample_rate} Hz")
    limit = int(round(seconds * sample_rate))
    if mono.shape[0] > limit:
        mono, _ = crop_or_pad(mono, limit, mode="center")
    return mono
