"""Which audio a run reads: the manifest's files or a prepared store, held in memory or streamed.

``data.cache_audio: auto`` keeps the decoded clips in memory when the training and validation audio,
decoded to float32 at the model rate, fits in ``data.cache_max_gb`` (shared among the training processes
of a machine): the synthetic benchmark's few hundred short clips are decoded once and read from memory,
while AudioCaps (49k clips of 10 s: 49k x 160k samples x 4 bytes = 31 GB) streams from its files or, better,
from a store. The sizes come from the audio headers (or the store's index), so deciding decodes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.pipeline.source import Source
from mlatr.data.pipeline.store import StoreSource
from mlatr.data.webdataset_shards import ShardIndex, ShardSource

BYTES_PER_SAMPLE = 4  # float32


def open_source(manifest: Manifest, sample_rate: int, store: str | None = None, skip_bad: bool = False,
                shards: ShardIndex | None = None) -> Source:
    """A source for ``manifest``'s clips: the prepared ``store`` if given, else the webdataset ``shards``
    they were read from, else its files (no cache yet)."""
    if shards is not None:
        return ShardSource(manifest, shards, sample_rate, skip_bad=skip_bad)
    if store:
        return StoreSource(store, manifest, sample_rate, skip_bad=skip_bad)
    return AudioSource(manifest, sample_rate, cache=False, skip_bad=skip_bad)


def decoded_bytes(source: Source, indices: Sequence[int]) -> int:
    """Bytes the clips ``indices`` take decoded to float32 (unreadable clips count 0)."""
    return sum((source.length(i) or 0) for i in indices) * BYTES_PER_SAMPLE


def choose_cache(setting: bool | str, parts: Sequence[tuple[Source, Sequence[int]]], budget_gb: float) -> bool:
    """Whether to keep decoded audio in memory: ``setting`` true / false, or ``auto`` = the clips of every
    ``(source, indices)`` part fit in ``budget_gb``. Sets each source's ``cache`` accordingly."""
    if setting == "auto":
        if all(isinstance(source, StoreSource) for source, _ in parts):
            cache = False  # a store is read from the page cache at memory speed already
        else:
            cache = sum(decoded_bytes(source, indices) for source, indices in parts) <= budget_gb * 2**30
    else:
        cache = bool(setting)
    for source, _ in parts:
        source.cache = cache
    return cache
