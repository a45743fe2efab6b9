"""Using a trained model: the layer below training, search, evaluation and serve.

- :mod:`mlatr.inference.checkpoint`: the checkpoint format, :func:`load_model` (a checkpoint file or a model
  folder), :func:`export_model`; :mod:`mlatr.inference.model_folder`: ``config.json`` + ``model.safetensors``.
- :mod:`mlatr.inference.loaded_model`: :class:`LoadedModel` and its API (``embed_text``, ``embed_audio``,
  ``similarity``, ``classify``).
- :mod:`mlatr.inference.audio`: the one path from audio (files, waveforms, a manifest's clips; any length,
  windows, batches, progress) to embeddings; :mod:`mlatr.inference.encoded_split`: a manifest split as the
  evaluation contract's arrays; :mod:`mlatr.inference.model_evaluation`: what ``mlatr eval`` reports, as a dict.

It imports nothing from :mod:`mlatr.training` or :mod:`mlatr.losses` (training imports it).
"""

from __future__ import annotations

import os

import torch

from mlatr import api_args
from mlatr.inference.checkpoint import export_model, load_model, read_checkpoint, save_checkpoint
from mlatr.inference.device import resolve_device
from mlatr.inference.loaded_model import Classification, LoadedModel
from mlatr.model_registry import resolve_model


def load(path: str | os.PathLike | None = None, device: str | torch.device = "auto") -> LoadedModel:
    """The model ``path`` names (a checkpoint written by ``mlatr train``, a folder written by ``mlatr export``
    or a name registered by ``mlatr export --name``; ``None``: the default model, ``$MLATR_MODEL`` or the nearest
    ``mlatr.toml``: :mod:`mlatr.model_registry`) on ``device`` (``"auto"``: CUDA when available), ready to embed:
    ``mlatr.load``. Arguments are checked as they enter (:mod:`mlatr.api_args`)."""
    ref = None if path is None else api_args.path("path", path)
    device = resolve_device(device)  # a bad name is refused before anything is read
    return load_model(resolve_model(ref, "path").path, device)


__all__ = ["Classification", "LoadedModel", "export_model", "load", "load_model", "read_checkpoint",
           "save_checkpoint"]
