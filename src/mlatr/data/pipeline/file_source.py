"""The manifest's own audio files as a :class:`~mlatr.data.pipeline.source.Source`.

Each clip is read through :func:`mlatr.data.clip_audio.load_clip_audio` (decoded whole, or only its centred
crop when that is all a reader wants of a long file; resampled, refused when truncated or far from its stated
duration); lengths come from the file headers, so planning an epoch
decodes nothing. With ``cache`` the decoded clips stay in memory (``data.cache_audio``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from mlatr.audio.io import probe_length
from mlatr.data.clip_audio import load_clip_audio
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.pipeline.source import crop_window
from mlatr.data.pipeline.workers import decode_all
from mlatr.errors import InputError, MlatrError


class AudioSource:
    """A :class:`~mlatr.data.pipeline.source.Source` of the manifest's files, decoded and resampled when read,
    optionally kept in memory.

    With ``skip_bad`` an unreadable clip is recorded in :attr:`bad` (id -> message) and reported as
    ``None`` instead of raising; the caller counts and drops it. A source is sent to worker processes
    without its in-memory clips (:meth:`__getstate__`).
    """

    def __init__(self, manifest: Manifest, sample_rate: int = 16000, cache: bool = False,
                 skip_bad: bool = False):
        self.manifest = manifest
        self.sample_rate = sample_rate
        self.cache = cache
        self.skip_bad = skip_bad
        self.bad: dict[str, str] = {}
        self._decoded: dict[int, np.ndarray] = {}
        self._probed: dict[int, int] = {}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_decoded"] = {}
        return state

    def _failed(self, clip: Clip, exc: MlatrError) -> None:
        """Record ``clip`` as unreadable under ``skip_bad``, else raise: an :class:`InputError` as it is (it
        names the manifest's file, line and field already), any other error with the clip's id."""
        if not self.skip_bad:
            if isinstance(exc, InputError):
                raise exc
            raise MlatrError(f"clip {clip.id!r}: {exc}") from exc
        self.bad[clip.id] = str(exc)
        return None

    def _decode(self, index: int) -> np.ndarray:
        """Clip ``index`` decoded whole; refused when truncated or far from its stated duration."""
        return load_clip_audio(self.manifest[index], self.manifest.root, self.sample_rate, self.manifest.path)

    def _probe(self, index: int) -> int:
        clip = self.manifest[index]
        return probe_length(clip.audio_path(self.manifest.root), self.sample_rate)

    def load(self, index: int) -> np.ndarray | None:
        """Clip ``index`` whole at the source's sample rate (None if unreadable under ``skip_bad``)."""
        if index in self._decoded:
            return self._decoded[index]
        clip = self.manifest[index]
        if clip.id in self.bad:
            return None
        try:
            wave = self._decode(index)
        except MlatrError as exc:
            return self._failed(clip, exc)
        if self.cache:
            self._decoded[index] = wave
        return wave

    def _decode_centre(self, index: int, count: int) -> np.ndarray:
        """The centred ``count`` samples of clip ``index``, reading only that part of a long file."""
        return load_clip_audio(self.manifest[index], self.manifest.root, self.sample_rate, self.manifest.path, count)

    def crop(self, index: int, count: int, start: int | None = None) -> np.ndarray | None:
        """Samples ``[start, start + count)`` of clip ``index`` (``start=None``: the centred window, read alone
        from a long file unless the source keeps clips in memory; a start past the end is moved back inside), or
        the whole clip when it has at most ``count`` samples."""
        if start is None and not self.cache and index not in self._decoded:
            clip = self.manifest[index]
            if clip.id in self.bad:
                return None
            try:
                return self._decode_centre(index, count)
            except MlatrError as exc:
                return self._failed(clip, exc)
        wave = self.load(index)
        if wave is None:
            return None
        return crop_window(wave, count, start)

    def length(self, index: int) -> int | None:
        """The decoded length of clip ``index`` (from the cache, else the file's header), None if unreadable."""
        if index in self._decoded:
            return int(self._decoded[index].shape[0])
        if index in self._probed:
            return self._probed[index]
        clip = self.manifest[index]
        if clip.id in self.bad:
            return None
        try:
            self._probed[index] = self._probe(index)
        except MlatrError as exc:
            return self._failed(clip, exc)
        return self._probed[index]

    def lengths(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> dict[int, int | None]:
        """:meth:`length` of every clip of ``indices``; a caching source decodes them all first (by
        ``workers`` processes), so every length is the decoded one."""
        if self.cache:
            self.fill(indices, workers, progress)
            return {i: (int(self._decoded[i].shape[0]) if i in self._decoded else None) for i in indices}
        bar = tqdm(indices, desc="reading audio headers", unit="clip", disable=not progress or len(indices) < 1000,
                   leave=False)
        return {i: self.length(i) for i in bar}

    def fill(self, indices: Sequence[int], workers: int = 0, progress: bool = False) -> None:
        """Decode every clip of ``indices`` not in memory yet into the cache (by ``workers`` processes)."""
        todo = [i for i in indices if i not in self._decoded and self.manifest[i].id not in self.bad]
        for i, wave in decode_all(self, todo, workers, progress=progress, desc="decoding audio into memory"):
            if wave is not None:
                self._decoded[i] = wave

    @property
    def decoded_bytes(self) -> int:
        """Bytes of decoded audio held in memory."""
        return sum(w.nbytes for w in self._decoded.values())
