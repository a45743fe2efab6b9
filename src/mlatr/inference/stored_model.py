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
from mlatr.json_input import expect_field, json_type
from mlatr.models.dual_encoder import DualEncoder

#: Largest embedding or projection size accepted from a stored config (a larger one would allocate gigabytes
#: before anything else could go wrong; the papers' models use 512 to 1024).
MAX_DIM = 1 << 16
#: Largest integer option of a stored encoder config (vocabularies of multilingual encoders are ~250k).
MAX_OPTION = 1 << 22

_POSITIVE = {"test": lambda v: v > 0, "must": "> 0"}


def _check_encoder(file: str, cfg: dict, side: str, where: str) -> None:
    encoder = expect_field(file, cfg, f"{side}_encoder", dict, "an object with the encoder's name and options",
                           where=where)
    expect_field(file, encoder, "name", str, "an encoder name", where=f"{where}.{side}_encoder")
    for key, value in encoder.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise InputError("expected option names", file, field=f"{where}.{side}_encoder")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_OPTION:
            raise InputError(f"{value} is larger than any encoder option (at most {MAX_OPTION})", file,
                             field=f"{where}.{side}_encoder.{key}")


def check_model_config(file: str | os.PathLike, cfg: Any, where: str = "model_config") -> dict:
    """``cfg`` (what :meth:`DualEncoder.config` writes) when every field has its type and range, else an
    :class:`InputError` ``FILE: WHERE.FIELD: message`` (``where``: the config's place in the file)."""
    file = str(file)
    if not isinstance(cfg, dict):
        raise InputError(f"expected an object, found {json_type(cfg)}", file, field=where)
    for side in ("audio", "text"):
        _check_encoder(file, cfg, side, where)
    size = {"test": lambda v: 0 < v <= MAX_DIM, "must": f"in 1..{MAX_DIM}"}
    expect_field(file, cfg, "embed_dim", int, "an integer", where=where, **size)
    expect_field(file, cfg, "projection_hidden", (int, type(None)), "an integer or null", where=where,
                 required=False, test=lambda v: v is None or 0 < v <= MAX_DIM, must=f"null or in 1..{MAX_DIM}")
    for key in ("temperature", "min_temperature", "max_temperature"):
        expect_field(file, cfg, key, (int, float), "a number", where=where, required=key == "temperature",
                     **_POSITIVE)
    expect_field(file, cfg, "learnable_temperature", bool, "true or false", where=where, required=False)
    expect_field(file, cfg, "text_head", str, "a projection head's name", where=where, required=False)
    known = {"audio_encoder", "text_encoder", "embed_dim", "projection_hidden", "temperature", "min_temperature",
             "max_temperature", "learnable_temperature", "text_head"}
    unknown = sorted(str(k) for k in cfg if k not in known)
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(unknown)[:200]} (written by another mlatr version?)", file,
                         field=where)
    return cfg


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
