"""A clip's audio as its manifest line describes it: the file decodes whole and lasts what ``duration`` says.

Every consumer of a manifest's audio (training, evaluation, encoding, index build) loads it through
:func:`load_clip_audio`, so a truncated or replaced file is refused the same way everywhere, with the
manifest's file, line and field (``audio`` for a file that does not decode whole, ``duration`` for one far
from the stated length); ``data validate --check-audio`` reports the same problems through
:func:`mlatr.audio.integrity.audio_file_problem`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from mlatr.audio.integrity import duration_problem
from mlatr.audio.io import load_audio, load_audio_centre
from mlatr.errors import InputError, MlatrError

if TYPE_CHECKING:
    from mlatr.data.manifest import Clip


def load_clip_audio(clip: Clip, root: str | os.PathLike, sample_rate: int,
                    manifest_file: str | os.PathLike | None = None, count: int | None = None) -> np.ndarray:
    """Mono float32 audio of ``clip`` (audio relative to ``root``) at ``sample_rate``, or its centred ``count``
    samples (reading only that part of a long file: :func:`~mlatr.audio.io.load_audio_centre`);
    :class:`~mlatr.errors.InputError` naming ``manifest_file`` and the clip's line when the file is missing,
    does not decode whole, or is far from the stated duration (without a manifest file, a clip listed from a
    folder or given as a file: the error names the sound file alone)."""
    path = clip.audio_path(root)
    try:
        if count is None:
            wave = load_audio(path, sample_rate)
            length = wave.shape[0]
        else:
            wave, length = load_audio_centre(path, sample_rate, count)
    except MlatrError as exc:
        if manifest_file is None:
            raise  # it names the file, the one place there is
        raise InputError(f"clip {clip.id!r}: {exc}", str(manifest_file), clip.line, "audio") from exc
    problem = duration_problem(length / sample_rate, clip.duration)
    if problem:
        if manifest_file is None:
            raise InputError(problem, str(path))
        raise InputError(f"clip {clip.id!r}: {path}: {problem}", str(manifest_file), clip.line, "duration")
    return wave
