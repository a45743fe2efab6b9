"""Which device a model runs on."""

from __future__ import annotations

import torch


def resolve_device(name: str | torch.device) -> torch.device:
    """``"auto"`` = CUDA when available, else CPU; any other name as given (``cpu``, ``cuda:1``, ...)."""
    if str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
