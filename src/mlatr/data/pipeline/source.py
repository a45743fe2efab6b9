"""What the input pipeline reads clips from: the :class:`Source` protocol, and where a crop window begins.

Two sources implement it: the manifest's files (:class:`~mlatr.data.pipeline.file_source.AudioSource`,
decoded and resampled when read, optionally kept in memory) and a decoded-audio store
(:class:`~mlatr.data.pipeline.store.StoreSource`). The plan, the worker processes and the batches
(:mod:`mlatr.data.pipeline.epoch_plan`, :mod:`~mlatr.data.pipeline.workers`, :mod:`~mlatr.data.pipeline.batches`)
see only this protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from mlatr.data.manifest import Manifest


class Source(Protocol):
    """A manifest's clips at one sample rate.

    ``bad`` maps the id of every clip found unreadable under ``skip_bad`` to its message (such a clip reads
    as ``None``); ``cache`` says whether decoded clips are kept in memory. A source is sent to worker
    processes by pickling, without its in-memory clips.
    """

    manifest: Manifest
    sample_rate: int
    cache: bool
    skip_bad: bool
    bad: dict[str, str]

    def load(self, index: int) -> np.ndarray | None:
        """Clip ``index`` whole (None if unreadable under ``skip_bad``)."""

    def crop(self, index: int, count: int, start: int | None = None) -> np.ndarray | None:
        """Samples ``[start, start + count)`` of clip ``index`` (None: centred), or the whole clip when it has
        at most ``count`` samples (:func:`window_begin`)."""

    def length(self, index: int) -> int | None:
        """Clip ``index``'s decoded length in samples, without decoding where possible."""

    def lengths(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> dict[int, int | None]:
        """:meth:`length` of every clip of ``indices``."""

    def fill(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> None:
        """Decode the clips of ``indices`` into memory (a caching source)."""


def window_begin(length: int, count: int, start: int | None) -> int:
    """Where the ``count``-sample window of a clip of ``length > count`` samples begins: centred for
    ``start=None``, else ``start`` moved back inside the clip."""
    return (length - count) // 2 if start is None else min(int(start), length - count)


def crop_window(wave: np.ndarray, count: int, start: int | None) -> np.ndarray:
    """The ``count``-sample window of ``wave`` from ``start`` (:func:`window_begin`), or ``wave`` itself
    when it has at most ``count`` samples."""
    n = wave.shape[0]
    if n <= count:
        return wave
    begin = window_begin(n, count, start)
    return np.asarray(wave[begin:begin + count], dtype=np.float32).copy()
