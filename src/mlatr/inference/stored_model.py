"""What a stored model says about itself, checked before it is used: a checkpoint's or a model folder's
``model_config``, weights, ``matching_head`` and ``train_config``.

A checkpoint is a user's file like any other (copied, hand-edited, written by another version): a
``model_config`` whose ``embed_dim`` is a string, whose ``audio_encoder`` is missing or whose encoder options
do not fit the encoder would otherwise surface as a ``TypeError`` or ``KeyError`` from deep inside
``DualEncoder.from_config``. :func:`check_stored_state` checks the types and ranges of every field the loader
reads, and :func:`build_stored_model` turns what the encoder factories themselves refuse (their options are
the encoder's own) into ``FILE: model_config.audio_encoder: message``.

Sizes are checked against the weights before anything is allocated: :func:`weights_problem` builds the model
on PyTorch's ``meta`` device (shapes without memory) and compares its state dict with the stored one, so a
config whose layers or sizes the weights do not hold is refused before a byte of it is built. A tokenizer's
panic (a Rust ``PanicException``, which is no ``Exception``) while the model is built is one error too.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from mlatr.errors import InputError, MlatrError, panic_as_error
from mlatr.json_input import expect_field
from mlatr.models.dual_encoder import DualEncoder
from mlatr.stored_config import check_model_config


def check_stored_state(file: str | os.PathLike, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (a checkpoint's dict, or a model folder's as :func:`~mlatr.inference.model_folder.read_model_folder`
    gives it) when the fields a loader reads have their types: ``model_config`` (:func:`check_model_config`),
    ``model`` (a mapping of tensors), ``matching_head`` and ``train_config`` (objects or null)."""
    file = str(file)
    check_model_config(file, expect_field(file, state, "model_config", dict, "an object (the dual encoder's config)"))
    weights = expect_field(file, state, "model", dict, "the model's weights (a state_dict)")
    bad = next((k for k, v in weights.items() if not isinstance(k, str) or not isinstance(v, torch.Tensor)), None)
    if bad is not None:
        raise InputError(f"expected tensors, found {type(weights[bad]).__name__} at {str(bad)[:80]!r}", file,
                         field="model")
    expect_field(file, state, "matching_head", (dict, type(None)), "an object or null", required=False)
    train = expect_field(file, state, "train_config", (dict, type(None)), "an object or null", required=False) or {}
    for section in ("data", "objective"):
        value = expect_field(file, train, section, (dict, type(None)), "an object or null", where="train_config",
                             required=False)
        if section == "objective" and value:
            expect_field(file, value, "matching", (dict, type(None)), "an object or null",
                         where="train_config.objective", required=False)
    return state


#: What building a model from a stored config may raise that says the config is wrong (the encoder factories'
#: own refusals: their options are theirs).
_BUILD_ERRORS = (MlatrError, TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, AssertionError,
                 RuntimeError, NotImplementedError)


def _build(file: str, model_config: dict) -> DualEncoder:
    try:
        with panic_as_error("building the model"):
            return DualEncoder.from_config(model_config)
    except InputError as exc:
        if exc.file is not None:  # already placed in its file
            raise
        raise InputError(f"cannot build the model: {exc}", file, field="model_config") from None
    except _BUILD_ERRORS as exc:
        raise InputError(f"cannot build the model: {exc}", file, field="model_config") from None


def weights_problem(model_config: dict, weights: dict) -> str | None:
    """What the model ``model_config`` builds does not share with ``weights`` (missing or unexpected tensors,
    other shapes: the first few, with counts), found on the ``meta`` device without allocating; None when
    they fit, or when the model cannot be built there (an encoder that reads files as it is built): the real
    build and ``load_state_dict`` then judge."""
    try:  # an encoder that loads pretrained weights as it is built warns that meta tensors take no copy
        with torch.device("meta"), panic_as_error("building the model"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            shapes = {k: tuple(v.shape) for k, v in DualEncoder.from_config(model_config).state_dict().items()}
    except (*_BUILD_ERRORS, OSError):
        return None
    stored = {k: tuple(v.shape) for k, v in weights.items()}
    missing = [k for k in shapes if k not in stored]
    unexpected = [k for k in stored if k not in shapes]
    other = [f"{k}: stored {list(stored[k])}, config {list(shapes[k])}" for k in shapes
             if k in stored and stored[k] != shapes[k]]
    parts = [f"{len(found)} {what} ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''})"
             for found, what in ((missing, "tensor(s) the weights lack"), (unexpected, "tensor(s) it has no place for"),
                                 (other, "tensor(s) of another shape"))
             if found]
    return "; ".join(parts) or None


def build_stored_model(file: str | os.PathLike, model_config: dict, weights: dict,
                       weights_file: str | os.PathLike | None = None) -> DualEncoder:
    """``DualEncoder.from_config(model_config)`` with ``weights`` loaded; what the encoder factories refuse is
    an :class:`InputError` at ``file: model_config``; weights that do not fit at ``weights_file: model``, from
    their shapes before anything is built (:func:`weights_problem`) or when loaded
    (``weights_file``: where they are stored, when not in ``file``: a model folder's ``model.safetensors``)."""
    file = str(file)
    problem = weights_problem(model_config, weights)
    if problem:
        raise InputError(f"the weights do not fit model_config (found before building it: {problem})",
                         str(weights_file or file), field="model")
    model = _build(file, model_config)
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[:3]
        raise InputError(f"the weights do not fit model_config ({' '.join(first)[:300]})",
                         str(weights_file or file), field="model") from None
    return model
