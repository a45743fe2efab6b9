"""A live-tensor memory tracker: every storage an operation creates, its size, its birth and its death.

:class:`LiveTensorTracker` is a ``TorchDispatchMode``. For every operation's output it records the output's
storage (bytes, the event count at creation) and a finaliser records the event at which the storage is
freed; ``current`` is the sum of the live storages, ``peak`` its maximum. It counts what PyTorch's CUDA
caching allocator counts as *allocated* (``torch.cuda.memory_allocated``: live tensor storages), not what
it reserves. It works on real tensors (the CPU validation runs the real step) and on fake tensors
(``FakeTensorMode``: shapes, dtypes and storages, no data), where nothing is allocated.

With ``fake=True`` an operation none of whose inputs is a fake tensor runs for real (outside the fake
mode): the small index tensors built from a batch's captions (a scheme's selection masks) keep their
values, so data-dependent operations on them (``nonzero``, boolean indexing) have their real shapes. Only
factory calls and operations on such real tensors take this path; every encoder tensor is fake.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

#: PyTorch's CUDA caching allocator rounds every allocation up to a multiple of 512 bytes (``kMinBlockSize``
#: in ``c10/cuda/CUDACachingAllocator.cpp``); ``memory_allocated`` counts the rounded sizes.
CUDA_BLOCK_BYTES = 512


def cuda_rounded(nbytes: int) -> int:
    """``nbytes`` rounded up as the CUDA caching allocator rounds a request (:data:`CUDA_BLOCK_BYTES`)."""
    return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


@dataclass
class StorageRecord:
    """One storage: its bytes, the event at which it appeared and the one at which it was freed (None = live)."""

    nbytes: int
    born: int
    freed: int | None = None


#: Operations whose indices may be a real boolean mask next to fake tensors (a selection's mask in backward).
_INDEXING = {torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default,
             torch.ops.aten._index_put_impl_.default}


def _long_indices(indices):
    """Real boolean masks among ``indices`` replaced by the long indices of their True entries (the
    standard expansion of a mask index, computed on the real values; a fake mask has none)."""
    out = []
    for t in indices:
        if isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) and t.dtype == torch.bool:
            with unset_fake_temporarily():
                out.extend(t.nonzero().unbind(1))
        else:
            out.append(t)
    return out


class LiveTensorTracker(TorchDispatchMode):
    """``with LiveTensorTracker(fake) as t: ...`` records every storage the operations create.

    ``count_flops`` also sums the FLOPs of the matrix products, convolutions and attention kernels with the
    formulas of ``torch.utils.flop_counter`` (what ``FlopCounterMode`` counts, without its module tracking).
    ``t.current`` / ``t.peak`` are bytes of live storages; :meth:`reset_peak` starts a new peak window (the
    steady-state step after a warm-up); :meth:`live_at` gives the records alive at an event (a peak) and
    :meth:`records_of` the records of given tensors, so a caller can say what the peak is made of.
    """

    def __init__(self, fake: bool = False, count_flops: bool = False):
        super().__init__()
        self.fake, self.count_flops = fake, count_flops
        #: FLOPs of the operations seen, by ``torch.utils.flop_counter``'s formulas (with ``count_flops``).
        self.flops = 0
        self.records: list[StorageRecord] = []
        self._live: dict[int, int] = {}  # storage address -> record index
        self.event = 0
        self.current = 0
        self.peak = 0
        self.peak_event = 0
        self.active = True

    # ---- recording -------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.fake and not any(isinstance(a, FakeTensor) for a in tree_leaves((args, kwargs))):
            with unset_fake_temporarily():
                out = func(*args, **kwargs)
        elif self.fake and func in _INDEXING:
            out = func(args[0], _long_indices(args[1]), *args[2:], **kwargs)
        else:
            out = func(*args, **kwargs)
        self.track(t for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        if self.count_flops and func._overloadpacket in flop_registry:
            self.flops += int(flop_registry[func._overloadpacket](*args, **kwargs, out_val=out))
        return out

    def track(self, tensors: Iterable[torch.Tensor]) -> None:
        """Record the storages of ``tensors`` not recorded yet (inputs and weights made before tracking)."""
        for t in tensors:
            storage = t.untyped_storage()
            key = storage._cdata
            nbytes = storage.nbytes()
            if key in self._live or nbytes == 0:
                continue
            self.event += 1
            index = len(self.records)
            self.records.append(StorageRecord(nbytes, self.event))
            self._live[key] = index
            weakref.finalize(storage, self._free, key, index)
            self.current += nbytes
            if self.current > self.peak:
                self.peak, self.peak_event = self.current, self.event

    def _free(self, key: int, index: int) -> None:
        record = self.records[index]
        if record.freed is not None:
            return
        self.event += 1
        record.freed = self.event
        self.current -= record.nbytes
        if self._live.get(key) == index:
            del self._live[key]

    # ---- reading ---------------------------------------------------------------------------------
    def reset_peak(self) -> None:
        """Start a new peak window at the current live bytes."""
        self.peak, self.peak_event = self.current, self.event

    def records_of(self, tensors: Iterable[torch.Tensor | None]) -> set[int]:
        """Indices of the (live) records holding ``tensors``' storages."""
        out = set()
        for t in tensors:
            if t is None:
                continue
            index = self._live.get(t.untyped_storage()._cdata)
            if index is not None:
                out.add(index)
        return out

    def live_at(self, event: int) -> list[int]:
        """Indices of the records alive just after ``event`` (e.g. a window's ``peak_event``)."""
        e = event
        return [i for i, r in enumerate(self.records) if r.born <= e and (r.freed is None or r.freed > e)]
