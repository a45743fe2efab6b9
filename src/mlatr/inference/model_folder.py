"""A model folder other tools can read: ``config.json`` + ``model.safetensors`` (the Hugging Face layout).

``mlatr export CKPT -o DIR`` writes one; :func:`mlatr.load` / ``--model`` read it as they read a
checkpoint, with the same embeddings to the last bit (the same tensors, stored without pickle).

- ``config.json``: ``{"format": "mlatr-model-1", "model_config": {...}, "matching_head": {...},
  "train_config": {"data": {...}}}``: the dual encoder's config (what ``DualEncoder.from_config``
  rebuilds), the head it ranks with, and the data settings it was trained with (sample rate, evaluation
  crop, languages). Nothing of the optimizer or the training run.
- ``model.safetensors``: the model's ``state_dict``, each tensor stored contiguous on its own (safetensors
  refuses shared storage), in the checkpoint's dtypes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_json, atomic_write_with
from mlatr.json_input import expect_field, read_format_json
from mlatr.output_paths import check_output_path

FORMAT = "mlatr-model-1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


def is_model_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder (a model folder, or a folder given where a model was expected)."""
    return Path(path).is_dir()


def model_folder_files(path: str | os.PathLike) -> list[Path]:
    """The files of model folder ``path`` that define the model, config first."""
    return [Path(path) / CONFIG_FILE, Path(path) / WEIGHTS_FILE]


def write_model_folder(state: dict[str, Any], head: dict[str, Any], folder: str | os.PathLike) -> Path:
    """Write the parts of checkpoint ``state`` needed to use the model, with the config of the ``head`` it
    ranks with, into ``folder`` (created); weights first, then the config, each atomically."""
    folder = check_output_path(folder, folder=True)
    folder.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in state["model"].items()}
    data = (state.get("train_config") or {}).get("data")
    config = {"format": FORMAT, "model_config": state["model_config"], "matching_head": dict(head),
              "train_config": {"data": data} if data else {}}
    payload = save(weights, metadata={"format": FORMAT})
    atomic_write_with(folder / WEIGHTS_FILE, lambda fh: fh.write(payload))
    atomic_write_json(folder / CONFIG_FILE, config)
    return folder


def read_model_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint-like dict (``model_config``, ``model``, ``matching_head``, ``train_config``) of a model
    folder; an error naming what is missing, with the hint when the folder holds sounds instead."""
    folder = Path(folder)
    config_path, weights_path = model_folder_files(folder)
    if not config_path.is_file() or not weights_path.is_file():
        missing = ", ".join(p.name for p in (config_path, weights_path) if not p.is_file())
        raise MlatrError(f"{folder}: not a model folder (no {missing}); a model is a checkpoint file written by "
                         "mlatr train or a folder written by mlatr export")
    config = read_format_json(config_path, FORMAT, "an mlatr model config (written by mlatr export)")
    model_config = expect_field(config_path, config, "model_config", dict, "an object (the dual encoder's config)",
                                hint="rewrite the folder with mlatr export")
    head = expect_field(config_path, config, "matching_head", (dict, type(None)), "an object", required=False)
    train_config = expect_field(config_path, config, "train_config", (dict, type(None)), "an object",
                                required=False) or {}
    expect_field(config_path, train_config, "data", (dict, type(None)), "an object", where="train_config",
                 required=False)
    try:
        weights: dict[str, torch.Tensor] = load_file(str(weights_path))
    except (SafetensorError, OSError) as exc:
        raise MlatrError(f"{weights_path}: cannot read the weights ({exc})") from exc
    return {"model_config": model_config, "model": weights, "matching_head": head, "train_config": train_config}
