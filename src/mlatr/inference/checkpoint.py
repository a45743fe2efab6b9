"""Checkpoints and model folders: how a trained model is stored and becomes a :class:`LoadedModel`.

A checkpoint is one file, a dict saved with ``torch.save`` and loaded with ``weights_only=True``::

    {"format": "mlatr-checkpoint-1", "model_config": {...}, "model": state_dict,
     "matching_head": {"name": ...}, "train_config": {...}, "objective": state_dict,
     "epoch": int, "step": int, "optimizer": ..., "scheduler": ..., "best": {...}, "history": [...]}

Only ``model_config``, ``model``, ``matching_head`` and the ``data`` part of ``train_config`` are needed
to use a model, and ``calibration`` where the model has one (:mod:`mlatr.calibration_file`: what turns its scores
into probabilities, fitted for these weights and used only with them); the rest resumes training
(:mod:`mlatr.training`). A model folder (:mod:`mlatr.inference.model_folder`, ``mlatr export``) holds exactly
those, without pickle.
:func:`load_model` is the one way either becomes a usable model (evaluation, encoding, search, serve,
initialisation of a run). Files are written atomically, so an interrupted save never corrupts the
previous one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mlatr.calibration_file import calibration_problem, check_calibration
from mlatr.errors import InputError, MissingFileError, MlatrError
from mlatr.file_kinds import special_file, unreadable
from mlatr.inference.device import resolve_device
from mlatr.inference.loaded_model import LoadedModel
from mlatr.inference.model_card import model_card, with_calibration_row
from mlatr.inference.model_folder import (
    CARD_FILE,
    is_model_folder,
    model_folder_files,
    read_model_folder,
    stored_weights,
    write_folder_calibration,
    write_model_folder,
)
from mlatr.inference.model_identity import weights_sha256
from mlatr.inference.stored_model import build_stored_model, check_stored_state
from mlatr.io_utils import atomic_write_text, atomic_write_with
from mlatr.matching import MatchingHead, head_from_config

FORMAT = "mlatr-checkpoint-1"


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any], calibration: dict | None = None) -> None:
    """Write ``state`` (the layout above) to ``path`` atomically; ``calibration``: the model's calibration (a
    :mod:`mlatr.calibration_file` dict fitted for ``state["model"]``, checked: its ``weights_sha256`` must be
    theirs)."""
    state = {"format": FORMAT, **state}
    if calibration is not None:
        state["calibration"] = checked_calibration(calibration, state["model"], str(path))
    atomic_write_with(path, lambda fh: torch.save(state, fh))


def checked_calibration(calibration: dict, weights: dict, where: str) -> dict:
    """``calibration`` (checked: :func:`~mlatr.calibration_file.check_calibration`) when it was fitted for the
    state dict ``weights``; else a :class:`MlatrError` saying whose it is."""
    check_calibration(calibration, where)
    problem = calibration_problem(calibration, weights_sha256(weights))
    if problem:
        raise MlatrError(f"{where}: cannot store this calibration with the model: {problem}")
    return calibration


def store_calibration(path: str | os.PathLike, calibration: dict | None) -> Path:
    """Write ``calibration`` into the model at ``path`` (a checkpoint file, rewritten atomically, or a model
    folder's ``config.json``), replacing the one it carried; None removes it. The weights are untouched (an
    index made with the model still knows it by its weights' SHA-256). Returns ``path``."""
    if is_model_folder(path):
        write_folder_calibration(path, None if calibration is None else
                                 checked_calibration(calibration, read_model_folder(path)["model"], str(path)))
        card = Path(path) / CARD_FILE
        if card.is_file():  # the card says which calibration the folder now carries
            atomic_write_text(card, with_calibration_row(card.read_text(encoding="utf-8"), calibration))
        return Path(path)
    state = read_checkpoint(path)
    state.pop("calibration", None)
    state.pop("format", None)
    save_checkpoint(path, state, calibration)
    return Path(path)


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint dict of file ``path``; an error naming what the file is when it is not one."""
    p = Path(path)
    if p.is_dir():
        raise MlatrError(f"{p} is a folder, not a checkpoint file (a model folder written by mlatr export is "
                         "read by mlatr.load / --model)")
    special = special_file(p)
    if special:  # torch.load of a FIFO blocks, of /dev/zero never ends
        raise MlatrError(f"{p}: not a regular file but {special} (not opened; a checkpoint is a file)")
    if not p.is_file():
        raise MissingFileError(p, "a checkpoint")
    try:
        state = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError / UnpicklingError / EOFError / BadZipFile ...
        raise unreadable(p, "an mlatr checkpoint (written by mlatr train)", exc, ("torch",)) from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise MlatrError(f"{p}: a PyTorch file but not an mlatr checkpoint (expected format {FORMAT}, "
                         "written by mlatr train)")
    return state


def head_of(state: dict[str, Any]) -> MatchingHead:
    """The matching head a checkpoint's model ranks with: ``state["matching_head"]`` (written by the
    trainer), else the training config's ``objective.matching`` (older checkpoints), else pooled cosine."""
    stored = state.get("matching_head")
    return head_from_config(dict(stored) if stored else
                            ((state.get("train_config") or {}).get("objective") or {}).get("matching"))


#: Options of a pretrained encoder that say how a run trains it, not what it is.
FINE_TUNING_OPTIONS = ("freeze", "train_last_blocks", "train_last_layers", "train_last_stages",
                       "gradient_checkpointing", "attention")
#: Of those, options newer than some stored models: set even where the stored encoder does not name them
#: (an encoder class that does not take one refuses it when the model is built).
NEWER_OPTIONS = ("attention",)


def with_fine_tuning(model_config: dict[str, Any], fine_tuning: dict[str, dict[str, Any]],
                     path: str | os.PathLike) -> dict[str, Any]:
    """``model_config`` with each encoder's fine-tuning options taken from ``fine_tuning[side]`` where given."""
    config = dict(model_config)
    for side, options in fine_tuning.items():
        encoder = dict(config[f"{side}_encoder"])
        for key in FINE_TUNING_OPTIONS:
            if key not in options:
                continue
            if key not in encoder and key not in NEWER_OPTIONS:
                raise MlatrError(f"config: model.{side}.{key}: the {encoder['name']!r} {side} encoder of "
                                 f"model.init_checkpoint {path} has no such option")
            encoder[key] = options[key]
        config[f"{side}_encoder"] = encoder
    return config


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu",
               fine_tuning: dict[str, dict[str, Any]] | None = None) -> LoadedModel:
    """The :class:`LoadedModel` saved at ``path``: a checkpoint file or a model folder (``mlatr export``);
    weights on ``device`` (``"auto"`` = CUDA when available), eval mode.

    ``fine_tuning`` (``{"audio": options, "text": options}``, a run's ``model.audio`` / ``model.text``)
    replaces the stored :data:`FINE_TUNING_OPTIONS` by the ones these options give, so a run started
    from ``model.init_checkpoint`` freezes what its own config says; an option the stored encoder
    does not take is refused, naming the key.
    """
    device = resolve_device(device)  # a bad name is refused before anything is read
    folder = is_model_folder(path)
    state = read_model_folder(path) if folder else read_checkpoint(path)
    meta_file, weights_file = model_folder_files(path) if folder else (path, path)
    check_stored_state(meta_file, state)
    try:
        head = head_of(state)
    except (MlatrError, TypeError, ValueError) as exc:  # a head's options are the head's own
        field = "matching_head" if state.get("matching_head") else "train_config.objective.matching"
        raise InputError(f"no matching head takes these options: {exc}", str(meta_file), field=field) from None
    model = build_stored_model(meta_file, with_fine_tuning(state["model_config"], fine_tuning or {}, path),
                               state["model"], weights_file)
    loaded = LoadedModel(model=model.to(device).eval(), head=head, train_config=dict(state.get("train_config") or {}),
                         path=Path(path))
    stored = state.get("calibration")
    if stored is not None:
        check_calibration(stored, f"{meta_file}: calibration")
    loaded.use_calibration(stored)
    return loaded


def export_model(checkpoint: str | os.PathLike, folder: str | os.PathLike, *, name: str | None = None,
                 metrics: Sequence[str | os.PathLike] = (), training_data: str | os.PathLike | None = None,
                 weights_dtype: str = "as-is", notes: str | None = None) -> Path:
    """Write the model of ``checkpoint`` (a file, or a model folder to copy) as a model folder that travels
    (:mod:`mlatr.inference.model_folder`) with its model card (``README.md``, :mod:`mlatr.inference.model_card`:
    ``name`` is how it tells the reader to load it, default the folder's name; ``metrics`` files it quotes;
    ``training_data``: the training manifest, default the one the checkpoint records; ``weights_dtype``:
    ``float16`` halves the weights' bytes; ``notes``: Markdown the card ends with); returns the folder."""
    state = read_model_folder(checkpoint) if is_model_folder(checkpoint) else read_checkpoint(checkpoint)
    if Path(folder).resolve() == Path(checkpoint).resolve():
        raise MlatrError(f"-o {folder}: the output is the model being exported")
    head = head_of(state).config()
    # The digest the card gives is the one of the weights as mlatr loads them back (what an index built with
    # the folder records); a float16 folder also names the checkpoint's own.
    stored = stored_weights(state["model"], weights_dtype)
    digests = {"weights": weights_sha256({k: v.to(state["model"][k].dtype) for k, v in stored.items()})}
    if weights_dtype == "float16":
        digests["stored_as"] = ("float16 (half the bytes; read back into float32, each weight rounded once; the "
                                f"checkpoint's float32 weights: sha256 {weights_sha256(state['model'])})")
    if state.get("calibration") is not None:
        check_calibration(state["calibration"], f"{checkpoint}: calibration")
        if calibration_problem(state["calibration"], digests["weights"]):  # fitted for the float32 weights, not
            state = {k: v for k, v in state.items() if k != "calibration"}  # the rounded ones: left out
    card = model_card(state, name or Path(folder).name, head, digests, metrics,
                      None if training_data is None else str(training_data), notes)
    return write_model_folder(state, head, folder, card, weights_dtype)
