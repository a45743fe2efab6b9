"""What a stored model says about itself, checked before it is used: a checkpoint's or a model folder's
``model_config``, weights, ``matching_head`` and ``train_config``.

A checkpoint is a user's file like any other (copied, hand-edited, written by another version): a
``model_config`` whose ``embed_dim`` is a string, whose ``audio_encoder`` is missing or whose encoder options
do not fit the encoder would otherwise surface as a ``TypeError`` or ``KeyError`` from deep inside
``DualEncoder.from_config``. :func:`check_stored_state` checks the types and ranges of every field the loader
reads, and :func:`build_stored_model` turns what the encoder factories themselves refuse (their options are
the encoder's own) into ``FILE: model_config.audio_encoder: message``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from mlatr.errors import InputError, MlatrError
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


def build_stored_model(file: str | os.PathLike, model_config: dict, weights: dict,
                       weights_file: str | os.PathLike | None = None) -> DualEncoder:
    """``DualEncoder.from_config(model_config)`` with ``weights`` loaded; what the encoder factories refuse is
    an :class:`InputError` at ``file: model_config``, weights that do not fit at ``weights_file: model``
    (``weights_file``: where they are stored, when not in ``file``: a model folder's ``model.safetensors``)."""
    file = str(file)
    try:
        model = DualEncoder.from_config(model_config)
    except InputError:
        raise
    except (MlatrError, TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError, AssertionError,
            RuntimeError) as exc:  # the encoder factories' own refusals: their options are theirs
        raise InputError(f"cannot build the model: {exc}", file, field="model_config") from None
    try:
        model.load_state_dict(weights)
    except (RuntimeError, TypeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[:3]
        raise InputError(f"the weights do not fit model_config ({' '.join(first)[:300]})",
                         str(weights_file or file), field="model") from None
    return model
