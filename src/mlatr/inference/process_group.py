"""Where this process stands among the processes ``torchrun`` started, and joining their process group.

Training (:mod:`mlatr.training.distributed`: the global batch's embeddings, DDP) and an index build split
over processes (:mod:`mlatr.search.rank_build`) both start here: :func:`setup` joins the process group
(nccl on CUDA, gloo on CPU) and gives the :class:`DistContext` that says this process's rank; one process
(``WORLD_SIZE`` unset or 1) gets the context of a single process and joins nothing.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from mlatr.errors import MlatrError
from mlatr.inference.device import resolve_device


@dataclass
class DistContext:
    """Where this process stands: ``rank`` of ``world_size`` (``local_rank`` on its machine)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    group: Any = None  # the process group of the embedding gathers
    device: torch.device = torch.device("cpu")  # where collective tensors live (nccl: this process's GPU)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """The process that writes checkpoints, logs and the progress bar, and validates."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def environment_world_size() -> int:
    """``WORLD_SIZE`` as torchrun sets it (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def setup(device_name: str, timeout_minutes: float = 60.0) -> tuple[DistContext, torch.device]:
    """The context and device of this process; under torchrun (``WORLD_SIZE > 1``) joins the process group
    (nccl on CUDA, gloo on CPU; an already initialised group is reused)."""
    world = environment_world_size()
    if world == 1:
        return DistContext(), resolve_device(device_name)
    try:
        rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    except (KeyError, ValueError) as exc:
        raise MlatrError(f"WORLD_SIZE={world} but RANK / LOCAL_RANK are missing or wrong ({exc}): "
                         "start several processes with torchrun") from exc
    device = resolve_device(device_name)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    group = dist.new_group(backend=backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return DistContext(rank, world, local_rank, local_world, group, device), device


def shutdown() -> None:
    """Leave the process group (if any)."""
    if dist.is_initialized():
        dist.destroy_process_group()
