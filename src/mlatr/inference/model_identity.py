"""Which model made an index, told by its weights: an index and a model that do not belong together are refused.

An index records the model that made its embeddings: the checkpoint's path and the SHA-256 of its file (or of
a model folder's files), and the SHA-256 of the weights themselves (:func:`weights_sha256`: every tensor of the
state dict, by name, dtype, shape and bytes). The file digest changes when a checkpoint is exported to a model
folder; the weights digest does not, and it is what says whether two models embed into one space: another seed
or another epoch of the same config gives other weights, and its queries would land in another space (rankings
silently wrong). :func:`check_index_model` refuses such a model for an index, naming both identities, unless
the user says they mean it (``--allow-other-model``, ``Index.load(..., allow_other_model=True)``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from mlatr.errors import MlatrError
from mlatr.file_state import file_sha256
from mlatr.inference.model_folder import SIDES, model_folder_files, portable_config


class OtherModelError(MlatrError):
    """A model given for an index is not the one that made its embeddings."""


def model_sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a stored model: the checkpoint file's bytes, or a model folder's files (config and
    weights, in that order), read in 1 MiB chunks; an index records it to refuse a changed model."""
    return file_sha256(*(model_folder_files(path) if Path(path).is_dir() else [path]))


def weights_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """Hex SHA-256 of a state dict: each tensor by name (sorted), dtype, shape and bytes (on the CPU,
    contiguous), so a checkpoint and the model folder exported from it give the same digest. A float16 or bfloat16
    tensor is taken as the float32 it is read back into (a folder stored in half precision is loaded into float32
    modules), so stored weights and the model loaded from them give one digest: what a calibration stored in such a
    folder is checked against when it is loaded."""
    h = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().to("cpu")
        tensor = (tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor).contiguous()
        h.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode("utf-8"))
        if tensor.numel():
            h.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _short(digest: str | None) -> str:
    return digest[:12] if digest else "not recorded"


def comparable_config(model_config: Any) -> Any:
    """A model config as two copies of one model share it wherever they are: without the options that name a
    file of a machine (:func:`~mlatr.inference.model_folder.portable_config`) or the folder an encoder's
    tokenizer is read from (``path``: a model folder ships its own copy)."""
    config = json.loads(json.dumps(model_config))
    if not isinstance(config, dict):
        return config
    config = portable_config(config)
    for side in SIDES:
        if isinstance(config.get(side), dict):
            config[side].pop("path", None)
    return config


def model_mismatch(recorded: Mapping[str, Any], model_config: Any, weights: str, file_sha: str | None) -> str | None:
    """Why a model is not the one an index recorded (``recorded``: the index meta's ``checkpoint`` and
    ``model_config``), or None when it is: its ``model_config`` (as stored) must be the recorded one, and its
    ``weights`` digest the recorded ``weights_sha256``; an index from before that digest compares the model
    file's digest (``file_sha``) with the recorded ``sha256``."""
    checkpoint = recorded.get("checkpoint") or {}
    built_with = recorded.get("model_config")
    if built_with is not None and comparable_config(built_with) != comparable_config(model_config):
        return "its config differs from the one the index records"
    recorded_weights = checkpoint.get("weights_sha256")
    if recorded_weights:
        if recorded_weights != weights:
            return f"its weights differ (sha256 {_short(weights)}, the index's model's {_short(recorded_weights)})"
        return None
    if file_sha is not None and file_sha != checkpoint.get("sha256"):
        return (f"its file differs (sha256 {_short(file_sha)}, the index's model file's "
                f"{_short(checkpoint.get('sha256'))}; the index predates weight digests: rebuild it to compare "
                "weights)")
    return None


def check_index_model(recorded: Mapping[str, Any], loaded, index: str, allow_other_model: bool = False) -> None:
    """Refuse ``loaded`` (a :class:`~mlatr.inference.LoadedModel`) for the index at ``index`` whose meta is
    ``recorded`` when :func:`model_mismatch` says it is another model: :class:`OtherModelError` naming both
    models (path and weights digest), unless ``allow_other_model``."""
    if allow_other_model:
        return
    checkpoint = recorded.get("checkpoint") or {}
    file_sha = None if checkpoint.get("weights_sha256") else loaded.file_sha256()
    why = model_mismatch(recorded, loaded.model.config(), loaded.weights_sha256(), file_sha)
    if why is None:
        return
    raise OtherModelError(
        f"{index} was built with the model {checkpoint.get('path')} (weights sha256 "
        f"{_short(checkpoint.get('weights_sha256'))}), but the model given is {loaded.path} (weights sha256 "
        f"{_short(loaded.weights_sha256())}): {why}; its queries would be ranked in another embedding space. "
        "Give the index's own model, rebuild the index with this one, or --allow-other-model "
        "(Index.load(..., allow_other_model=True)) if you mean it")
