"""Assembly of planned batches, inline or in worker processes: read each clip's window, collate.

:class:`ClipWindows` is the ``torch.utils.data.Dataset`` whose item ``b`` is planned batch ``b`` (the clips'
windows, collated); :func:`stream` yields its items in order, read inline (``data.workers: 0``) or by
``data.workers`` processes of a ``DataLoader``, ``data.prefetch`` batches ahead each. Nothing random happens
here, so workers cannot change a run. A clip that fails when read is reported back (``failed``) and counted
in the source's ``bad`` by the training process; an error without ``skip_bad`` is raised there, not in a
worker. :func:`decode_all` decodes whole clips the same way (filling a cache).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import collate_waveforms
from mlatr.errors import MlatrError


def default_workers(cpus: int | None = None, local_processes: int | None = None) -> int:
    """``data.workers: auto``: the CPUs this process may use, shared among the training processes of this
    machine (``LOCAL_WORLD_SIZE`` under torchrun), minus one for the training process itself; at most 8
    (beyond that, decoding outpaces any one GPU step; see the README's data throughput figures)."""
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if local_processes is None:
        local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(0, min(8, cpus // max(1, local_processes) - 1))


@dataclass
class LoadedBatch:
    """What one worker returns: the kept clips of a planned batch (shard) and the clips that failed."""

    position: list[int]  # positions of the kept clips in the global planned batch
    clip_index: list[int]
    waveform: torch.Tensor | None  # [n, T] (None when no clip was kept)
    lengths: torch.Tensor | None  # [n]
    failed: dict[str, str] = field(default_factory=dict)  # clip id -> message (skip_bad)
    error: str | None = None  # an unreadable clip without skip_bad: raised by the training process


def _read(source, index: int, read, failed: dict[str, str]) -> tuple[np.ndarray | None, str | None]:
    """``read()`` of clip ``index``: ``(waveform, None)``; ``(None, None)`` for a clip skipped under
    ``skip_bad`` (recorded in ``failed``); ``(None, message)`` for an error the training process raises
    (so a worker never raises through the DataLoader, which would bury the message in a traceback)."""
    try:
        wave = read()
    except MlatrError as exc:
        return None, str(exc)
    if wave is None:
        clip_id = source.manifest[index].id
        failed[clip_id] = source.bad.get(clip_id, "unreadable")
    return wave, None


class ClipWindows(torch.utils.data.Dataset):
    """Item ``b`` = the clips ``items[b]``, each ``(position, clip index, start)``, read as the window of
    ``count`` samples from ``start`` (None: the centred window; the whole clip when shorter) and collated.

    Training passes the plan's crop starts (:func:`training_items`); should a decoded length differ from the
    planned one (a header that estimates its length), the window is moved inside the clip. Evaluation passes
    None (:func:`eval_items`). Safe to run in worker processes: nothing here draws random numbers."""

    def __init__(self, source, items: list[list[tuple[int, int, int | None]]], count: int):
        self.source = source
        self.items = items
        self.count = count

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, b: int) -> LoadedBatch:
        position, kept, waves, failed = [], [], [], {}
        for pos, index, start in self.items[b]:
            wave, error = _read(self.source, index, lambda i=index, s=start: self.source.crop(i, self.count, s),
                                failed)
            if error is not None:
                return LoadedBatch([], [], None, None, failed, error)
            if wave is None:
                continue
            position.append(pos)
            kept.append(index)
            waves.append(wave)
        if not waves:
            return LoadedBatch(position, kept, None, None, failed)
        in_worker = torch.utils.data.get_worker_info() is not None
        waveform, lengths = collate_waveforms(waves, shared=in_worker)  # padded to the longest of the batch
        return LoadedBatch(position, kept, waveform, lengths, failed)


def stream(dataset: torch.utils.data.Dataset, workers: int, prefetch: int = 2) -> Iterator[LoadedBatch]:
    """The items of ``dataset`` in order: read inline (``workers == 0``) or by ``workers`` processes of a
    ``DataLoader`` keeping ``prefetch`` items each in flight. Failures are merged into the source's ``bad``."""
    source = dataset.source
    for item in _items(dataset, workers, prefetch):
        source.bad.update(item.failed)
        if item.error is not None:
            raise MlatrError(item.error)
        yield item


def _items(dataset: torch.utils.data.Dataset, workers: int, prefetch: int) -> Iterator:
    """``dataset``'s items in order: read inline (``workers <= 0``) or by a ``DataLoader`` of ``workers``
    processes (at most one per item) keeping ``prefetch`` items each in flight."""
    if workers <= 0 or len(dataset) == 0:
        return (dataset[k] for k in range(len(dataset)))
    return iter(torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=False,
                                            num_workers=min(workers, len(dataset)), prefetch_factor=prefetch,
                                            collate_fn=_identity, generator=_quiet_generator(),
                                            worker_init_fn=_worker_without_cache))


def _identity(item):
    return item


def _worker_without_cache(worker_id: int) -> None:
    """A worker keeps no decoded clip: what it reads goes to the training process (which may cache it),
    and a worker's own cache would hold a copy of everything it ever read."""
    torch.utils.data.get_worker_info().dataset.source.cache = False


def _quiet_generator() -> torch.Generator:
    """A DataLoader draws its workers' base seed from its generator, by default the global one: a generator
    of its own leaves the global random stream (dropout) as it was, whatever the number of workers."""
    return torch.Generator().manual_seed(0)


class WholeClips(torch.utils.data.Dataset):
    """Item ``k`` = clip ``indices[k]`` decoded whole: ``(index, waveform [T] | None, failed)`` (cache filling)."""

    def __init__(self, source, indices: list[int]):
        self.source = source
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int):
        i, failed = self.indices[k], {}
        wave, error = _read(self.source, i, lambda: self.source.load(i), failed)
        if wave is None:
            return i, None, failed, error
        shared, _ = collate_waveforms([wave], shared=torch.utils.data.get_worker_info() is not None)
        return i, shared[0], failed, error


def decode_all(source, indices: list[int], workers: int, prefetch: int = 2, progress: bool = False,
               desc: str = "decoding audio") -> Iterator[tuple[int, np.ndarray | None]]:
    """``(index, waveform or None)`` for every clip of ``indices`` in order, decoded by ``workers`` processes
    (inline with 0); failures are merged into ``source.bad``."""
    bar = tqdm(total=len(indices), desc=desc, unit="clip", disable=not progress, leave=False)
    for i, wave, failed, error in _items(WholeClips(source, indices), workers, prefetch):
        source.bad.update(failed)
        if error is not None:
            raise MlatrError(error)
        bar.update(1)
        yield i, (None if wave is None else np.array(wave.numpy()))  # own copy: frees the shared memory
    bar.close()
