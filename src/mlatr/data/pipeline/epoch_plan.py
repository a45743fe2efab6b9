"""An epoch's plan, drawn up front in the training process: clip order, caption ``j`` and crop of every clip.

:func:`plan_epoch` draws from the generators of ``(seed, epoch)`` in the order the single-process loader
always drew them (order; then per clip ``j``, then the crop offset if the clip is longer than the crop).
The crop draw needs each clip's length, which comes from the audio headers, the decoded-audio store or the
in-memory cache, so no audio is decoded to plan. The plan is a function of ``(seed, epoch)`` and the data
only: the same for any number of workers and any number of training processes. Under ``torchrun`` every
process plans the whole global batch and reads only its shard (:func:`shard_range`). Which captions a clip
can train with (:func:`usable_caption_indices`) and the row of one caption in every language
(:func:`caption_row`) are here too.

Unreadable clips: with ``skip_bad`` a clip the header probe cannot read is planned as unreadable (its ``j``
is drawn, no crop); a clip that fails only when decoded is dropped from its batch by the workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mlatr.data.manifest import Clip
from mlatr.seeds import derive_seed


@dataclass(frozen=True)
class PlannedClip:
    """One clip of a planned batch: manifest row, source caption ``j``, crop start (0 when not cropped),
    and whether its audio was readable when the epoch was planned."""

    index: int
    caption: int
    offset: int
    readable: bool = True


def plan_epoch(clips: Sequence[int], options: Sequence[Sequence[int]], lengths: dict[int, int | None] | None,
               batch_size: int, num_samples: int, seed: int, epoch: int) -> list[list[PlannedClip]]:
    """Every batch of epoch ``epoch``: ``len(clips) // batch_size`` lists of ``batch_size`` planned clips.

    ``clips`` are the manifest rows that can train, ``options[i]`` the usable caption indices of row ``i``
    and ``lengths[i]`` its decoded length at the model rate (None = unreadable; ``lengths=None``: nothing
    to crop, e.g. cached backbone features, so no crop is drawn). Draws (the randomness
    contract: :mod:`mlatr.data.pipeline`): ``torch.randperm`` from the ``(seed, epoch, "order")`` generator
    orders the clips; then, clip by clip, the ``(seed, epoch, "crop")`` numpy generator draws ``j`` and,
    for a readable clip longer than ``num_samples``, the crop start in ``[0, length - num_samples]``.
    """
    g = torch.Generator().manual_seed(derive_seed(seed, epoch, "order"))
    crop = np.random.default_rng(derive_seed(seed, epoch, "crop"))
    order = [clips[i] for i in torch.randperm(len(clips), generator=g).tolist()]
    plan = []
    for b in range(len(clips) // batch_size):
        batch = []
        for idx in order[b * batch_size:(b + 1) * batch_size]:
            opts = options[idx]
            j = opts[int(crop.integers(len(opts)))]
            length = lengths[idx] if lengths is not None else 0
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


def caption_row(clip: Clip, j: int, languages: Sequence[str]) -> list[str | None]:
    """The captions of source caption ``j`` of ``clip`` in each language (None where missing)."""
    row: list[str | None] = []
    for lang in languages:
        caps = clip.captions.get(lang, [])
        row.append(caps[j] if j < len(caps) else None)
    return row


def usable_caption_indices(clip: Clip, languages: Sequence[str], need_first: bool) -> list[int]:
    """Indices ``j`` with a caption in some language (in the first language if ``need_first``)."""
    longest = max((len(clip.captions.get(lang, [])) for lang in languages), default=0)
    out = []
    for j in range(longest):
        row = caption_row(clip, j, languages)
        if (row[0] is not None) if need_first else any(t is not None for t in row):
            out.append(j)
    return out


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
