"""Which device a model runs on."""

from __future__ import annotations

import torch

from mlatr.api_args import ArgumentError, ArgumentTypeError


def resolve_device(name: str | torch.device) -> torch.device:
    """``"auto"`` = CUDA when available, else CPU; any other name as given (``cpu``, ``cuda:1``, ...). A name torch
    does not know, or CUDA on a machine without it, is :class:`~mlatr.api_args.ArgumentError` naming ``device``."""
    if isinstance(name, torch.device):
        device = name
    elif not isinstance(name, str):
        raise ArgumentTypeError(f"device: expected a device name (auto, cpu, cuda, cuda:N), got {type(name).__name__}")
    elif name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            device = torch.device(name)
        except RuntimeError:
            raise ArgumentError(f"device: {name!r:.40} is no device (auto, cpu, cuda, cuda:N, mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ArgumentError(f"device: {name} asked for, but this machine (or this torch build) has no CUDA device; "
                            "use cpu or auto")
    return device
