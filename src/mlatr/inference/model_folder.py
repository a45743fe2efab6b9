"""A model folder that travels: ``config.json`` + ``model.safetensors`` (+ ``README.md``, its model card).

``mlatr export --model CKPT -o DIR`` writes one; :func:`mlatr.load` / ``--model`` read it as they read a
checkpoint, with the same embeddings to the last bit (the same tensors, stored without pickle). mlatr is what
loads it: the file names follow the Hugging Face layout, but ``transformers`` cannot load it (the encoders are
mlatr's).

- ``config.json``: ``{"format": "mlatr-model-1", "model_config": {...}, "matching_head": {...},
  "train_config": {"data": {...}}}``: the dual encoder's config (what ``DualEncoder.from_config``
  rebuilds), the head it ranks with, and the data settings it was trained with (sample rate, evaluation
  crop, languages). Nothing of the optimizer, the training run or the training machine: the encoders'
  options that name a file of that machine (:data:`MACHINE_OPTIONS`: a text-embedding cache, the aiSFX
  wheel's checkpoint) are replaced by what needs no file (the weights are all in ``model.safetensors``, a
  text cache is rebuilt as texts are embedded), and a Hugging Face folder an encoder reads (its tokenizer
  and architecture: ``path``) is copied into the model folder (``text_encoder/``, ``audio_encoder/``) and
  named relative to it.
- ``config.json``'s ``calibration`` (where the model has one): what turns its scores into probabilities, fitted
  for these weights (:mod:`mlatr.calibration_file`); read back by :func:`read_model_folder`, replaced alone by
  :func:`write_folder_calibration` (the weights untouched).
- ``model.safetensors``: the model's ``state_dict``, each tensor stored contiguous on its own (safetensors
  refuses shared storage), in the checkpoint's dtypes.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save

from mlatr.errors import MlatrError
from mlatr.file_kinds import folder_file, special_file
from mlatr.io_utils import atomic_write_json, atomic_write_text, atomic_write_with
from mlatr.json_input import expect_field, read_format_json
from mlatr.output_paths import check_output_path
from mlatr.stored_config import WEIGHT_DTYPES

FORMAT = "mlatr-model-1"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"
#: The sides of a dual encoder's config that hold an encoder's options.
SIDES = ("audio_encoder", "text_encoder")

#: Encoder options that name a file of the machine a model was made on, and what a model folder holds
#: instead (``"*"``: every encoder). The weights they load are in ``model.safetensors`` anyway.
MACHINE_OPTIONS: dict[str, dict[str, Any]] = {
    "*": {"cache_path": None},  # a text-embedding cache file: rebuilt as texts are embedded
    "aisfx": {"checkpoint": None, "pretrained": False},  # the aisfx wheel's weights: the CNN is in the state dict
}


def portable_config(model_config: dict[str, Any]) -> dict[str, Any]:
    """``model_config`` without what names a file of the machine it was made on (:data:`MACHINE_OPTIONS`)."""
    config = copy.deepcopy(model_config)
    for side in SIDES:
        encoder = config.get(side)
        if not isinstance(encoder, dict):
            continue
        for name in ("*", encoder.get("name")):
            for key, value in MACHINE_OPTIONS.get(name, {}).items():
                if key in encoder:
                    encoder[key] = value
    return config


def _copy_encoder_folders(model_config: dict[str, Any], folder: Path) -> None:
    """Copy each Hugging Face folder an encoder reads (``path``: its tokenizer and architecture) into
    ``folder/SIDE/`` and name it relative to the model folder (regular files only, no link followed out)."""
    for side in SIDES:
        encoder = model_config.get(side)
        source = encoder.get("path") if isinstance(encoder, dict) else None
        if not source or not Path(source).expanduser().is_dir():
            continue
        source, target = Path(source).expanduser(), folder / side
        if target.resolve() != source.resolve():
            shutil.rmtree(target, ignore_errors=True)
            for file in sorted(source.rglob("*")):
                if file.is_file() and not file.is_symlink() and not special_file(file):
                    (target / file.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(file, target / file.relative_to(source))
        encoder["path"] = side


def _local_encoder_folders(model_config: dict[str, Any], folder: Path, config_path: Path) -> dict[str, Any]:
    """``model_config`` with each encoder's relative ``path`` (a folder the model folder ships) made absolute,
    refused when it leads outside the model folder."""
    for side in SIDES:
        encoder = model_config.get(side)
        path = encoder.get("path") if isinstance(encoder, dict) else None
        if isinstance(path, str) and path and not Path(path).is_absolute():
            folder_file(folder, f"{path}/config.json", f"{config_path}: model_config.{side}.path")
            encoder["path"] = str((folder / path).resolve())
    return model_config


def is_model_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder (a model folder, or a folder given where a model was expected)."""
    return Path(path).is_dir()


def model_folder_files(path: str | os.PathLike) -> list[Path]:
    """The files of model folder ``path`` that define the model, config first."""
    return [Path(path) / CONFIG_FILE, Path(path) / WEIGHTS_FILE]


def folder_config(state: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
    """The ``config.json`` of a model folder for checkpoint ``state`` ranking with ``head``: what loading needs,
    nothing of the training run or machine (:func:`portable_config`; the training data settings without the
    paths of its files)."""
    data = {k: v for k, v in ((state.get("train_config") or {}).get("data") or {}).items()
            if k in ("sample_rate", "eval_max_seconds", "languages", "max_seconds")}
    config = {"format": FORMAT, "model_config": portable_config(state["model_config"]), "matching_head": dict(head),
              "train_config": {"data": data} if data else {}}
    if state.get("calibration") is not None:
        config["calibration"] = state["calibration"]
    return config


def write_folder_calibration(folder: str | os.PathLike, calibration: dict | None) -> None:
    """Replace model folder ``folder``'s calibration (``config.json``'s ``calibration``; None: remove it)."""
    config_path = Path(folder) / CONFIG_FILE
    config = read_format_json(config_path, FORMAT, "an mlatr model config (written by mlatr export)")
    config.pop("calibration", None)
    if calibration is not None:
        config["calibration"] = calibration
    atomic_write_json(config_path, config)


def stored_weights(weights: dict[str, torch.Tensor], weights_dtype: str = "as-is") -> dict[str, torch.Tensor]:
    """The tensors of state dict ``weights`` as a model folder stores them (``weights_dtype``:
    :data:`WEIGHT_DTYPES`; ``float16`` rounds the floating-point ones to half precision), on the CPU."""
    if weights_dtype not in WEIGHT_DTYPES:
        raise MlatrError(f"weights dtype {weights_dtype!r}: choose from {', '.join(WEIGHT_DTYPES)}")
    half = weights_dtype == "float16"
    return {k: (v.half() if half and v.is_floating_point() else v).detach().cpu().contiguous().clone()
            for k, v in weights.items()}


def write_model_folder(state: dict[str, Any], head: dict[str, Any], folder: str | os.PathLike,
                       card: str | None = None, weights_dtype: str = "as-is") -> Path:
    """Write the parts of checkpoint ``state`` needed to use the model, with the config of the ``head`` it
    ranks with (:func:`folder_config`), into ``folder`` (created): the encoders' Hugging Face folders, the
    weights (``weights_dtype``: :data:`WEIGHT_DTYPES`), the config, then the model ``card`` (``README.md``), each
    file atomically."""
    weights = stored_weights(state["model"], weights_dtype)
    folder = check_output_path(folder, folder=True)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder_config(state, head)
    _copy_encoder_folders(config["model_config"], folder)
    payload = save(weights, metadata={"format": FORMAT})
    atomic_write_with(folder / WEIGHTS_FILE, lambda fh: fh.write(payload))
    atomic_write_json(folder / CONFIG_FILE, config)
    if card is not None:
        atomic_write_text(folder / CARD_FILE, card)
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
    calibration = expect_field(config_path, config, "calibration", (dict, type(None)), "an object", required=False)
    model_config = _local_encoder_folders(portable_config(model_config), folder, config_path)
    return {"model_config": model_config, "model": weights, "matching_head": head, "train_config": train_config,
            "calibration": calibration}
