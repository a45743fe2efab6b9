"""The device a run uses, and the overhead figures of ATRI Table 4: peak memory and time per epoch.

Peak memory is CUDA's max allocated bytes on a GPU (what ATRI's GMO column reports) and the
process's peak resident set size on CPU (``ru_maxrss``; it only grows, so compare runs made in
separate processes, as ``mlatr demo`` does).
"""

from __future__ import annotations

import resource
import sys

import torch

from mlatr.inference.device import resolve_device

__all__ = ["memory_kind", "peak_memory_mb", "reset_peak_memory", "resolve_device"]


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory in MiB since the last reset (CUDA) or since the process started (CPU RSS)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return rss / 2**20 if sys.platform == "darwin" else rss / 1024


def memory_kind(device: torch.device) -> str:
    return "cuda_max_allocated" if device.type == "cuda" else "cpu_peak_rss"
