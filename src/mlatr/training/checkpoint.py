"""Checkpoints: one file holding the model's config and weights plus the state to resume training.

Layout (a dict saved with ``torch.save``, loaded with ``weights_only=True``)::

    {"format": "mlatr-checkpoint-1", "model_config": {...}, "model": state_dict,
     "objective": state_dict, "train_config": {...}, "epoch": int, "step": int,
     "optimizer": ..., "scheduler": ..., "best": {...}, "history": [...]}

Only ``model_config`` and ``model`` are needed to use a model (``load_model``); the rest resumes
training. Files are written atomically, so an interrupted save never corrupts the previous one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_with

FORMAT = "mlatr-checkpoint-1"


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    state = {"format": FORMAT, **state}
    atomic_write_with(path, lambda fh: torch.save(state, fh))


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise MlatrError(f"checkpoint not found: {p}")
    try:
        state = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise MlatrError(f"{p}: not a readable checkpoint ({exc})") from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise MlatrError(f"{p}: not an mlatr checkpoint (expected format {FORMAT})")
    return state


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu"):
    """Rebuild the :class:`~mlatr.models.dual_encoder.DualEncoder` saved in a checkpoint, in eval mode."""
    from mlatr.models.dual_encoder import DualEncoder

    state = read_checkpoint(path)
    model = DualEncoder.from_config(state["model_config"])
    model.load_state_dict(state["model"])
    return model.to(device).eval()
