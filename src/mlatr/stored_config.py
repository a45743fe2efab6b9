"""A stored model's ``model_config`` (what :meth:`~mlatr.models.dual_encoder.DualEncoder.config` writes into a
checkpoint, a model folder's ``config.json`` and an index's metadata), checked field by field without torch:
the index readers check it too, and they load no torch (:mod:`mlatr.inference.stored_model` checks the rest
of a stored model and builds it).
"""

from __future__ import annotations

import os
from typing import Any

from mlatr.errors import InputError
from mlatr.json_input import expect_field, json_type

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
