"""Audio input that streams: an epoch's plan drawn up front, batches assembled in worker processes.

Training (:class:`~mlatr.data.dataset.TrainBatches`) splits each epoch in two:

1. **The plan** (:func:`plan_epoch`, in the training process): clip order, caption index ``j`` and crop
   offset of every clip of the epoch, drawn from the generators of ``(seed, epoch)`` in exactly the order
   the single-process loader always drew them (order; then per clip ``j``, then the crop offset if the clip
   is longer than the crop). The crop draw needs each clip's length, which comes from the audio headers
   (:func:`~mlatr.audio.io.probe_length`), the decoded-audio store or the in-memory cache, so no audio has
   to be decoded to plan. The plan is a function of ``(seed, epoch)`` and the data only: the same for any
   number of workers and any number of training processes.
2. **Assembly** (:class:`ClipWindows`, in ``data.workers`` worker processes of a
   ``torch.utils.data.DataLoader``, ``data.prefetch`` batches ahead each, or inline with 0 workers):
   read each planned clip's window, collate. Nothing random happens here, so workers cannot change a run.

Under ``torchrun`` every process plans the whole global batch and assembles only its shard
(:func:`shard_range`: contiguous positions, rank order), so the union of the shards is the single-process
batch. Evaluation (:func:`eval_items`) streams every clip in order the same way.

Unreadable clips: with ``skip_bad`` a clip the header probe cannot read is planned as unreadable (its ``j``
is drawn, no crop, as before); a clip that fails only when decoded is dropped from its batch and reported
back (``failed``), so the main process counts it in ``source.bad``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from mlatr.audio.io import collate_waveforms
from mlatr.errors import MlatrError


@dataclass(frozen=True)
class PlannedClip:
    """One clip of a planned batch: manifest row, source caption ``j``, crop start (0 when not cropped),
    and whether its audio was readable when the epoch was planned."""

    index: int
    caption: int
    offset: int
    readable: bool = True


def plan_epoch(clips: Sequence[int], options: Sequence[Sequence[int]], lengths: dict[int, int | None],
               batch_size: int, num_samples: int, seed: int, epoch: int) -> list[list[PlannedClip]]:
    """Every batch of epoch ``epoch``: ``len(clips) // batch_size`` lists of ``batch_size`` planned clips.

    ``clips`` are the manifest rows that can train, ``options[i]`` the usable caption indices of row ``i``
    and ``lengths[i]`` its decoded length at the model rate (None = unreadable). Draws (the randomness
    contract of :mod:`mlatr.data.dataset`): ``torch.randperm`` from the ``(seed, epoch, "order")`` generator
    orders the clips; then, clip by clip, the ``(seed, epoch, "crop")`` numpy generator draws ``j`` and,
    for a readable clip longer than ``num_samples``, the crop start in ``[0, length - num_samples]``.
    """
    from mlatr.data.dataset import derive_seed

    g = torch.Generator().manual_seed(derive_seed(seed, epoch, "order"))
    crop = np.random.default_rng(derive_seed(seed, epoch, "crop"))
    order = [clips[i] for i in torch.randperm(len(clips), generator=g).tolist()]
    plan = []
    for b in range(len(clips) // batch_size):
        batch = []
        for idx in order[b * batch_size:(b + 1) * batch_size]:
            opts = options[idx]
            j = opts[int(crop.integers(len(opts)))]
            length = lengths[idx]
            offset = 0
            if length is not None and length > num_samples:
                offset = int(crop.integers(0, length - num_samples + 1))
            batch.append(PlannedClip(idx, j, offset, length is not None))
        plan.append(batch)
    return plan


def shard_range(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """Positions ``[start, stop)`` of process ``rank``'s shard of ``n`` items: contiguous, in rank order,
    sizes differing by at most one (the first ``n % world_size`` ranks take one more)."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


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


def training_items(plan: list[list[PlannedClip]], rank: int = 0, world_size: int = 1
                   ) -> list[list[tuple[int, int, int | None]]]:
    """:class:`ClipWindows` items of process ``rank``'s shard of every planned batch (readable clips)."""
    items = []
    for batch in plan:
        start, stop = shard_range(len(batch), rank, world_size)
        items.append([(p, batch[p].index, batch[p].offset) for p in range(start, stop) if batch[p].readable])
    return items


def eval_items(indices: list[int], batch_size: int) -> list[list[tuple[int, int, int | None]]]:
    """:class:`ClipWindows` items of every clip of ``indices`` in order, centred windows."""
    chunks = [indices[s:s + batch_size] for s in range(0, len(indices), batch_size)]
    return [[(k, i, None) for k, i in enumerate(chunk)] for chunk in chunks]


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
    from tqdm import tqdm

    bar = tqdm(total=len(indices), desc=desc, unit="clip", disable=not progress, leave=False)
    for i, wave, failed, error in _items(WholeClips(source, indices), workers, prefetch):
        source.bad.update(failed)
        if error is not None:
            raise MlatrError(error)
        bar.update(1)
        yield i, (None if wave is None else np.array(wave.numpy()))  # own copy: frees the shared memory
    bar.close()
