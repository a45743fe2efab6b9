"""A stored model's ``model_config`` (what :meth:`~mlatr.models.dual_encoder.DualEncoder.config` writes into a
checkpoint, a model folder's ``config.json`` and an index's metadata), checked field by field without torch:
the index readers check it too, and they load no torch (:mod:`mlatr.inference.stored_model` checks the rest
of a stored model and builds it).

A config is bounded before anything is built: ``num_layers: 20000`` built 1.6 GB of layers before the weights
were refused, a nested ``n_fft`` of 4,194,304 loaded and embedded at 5 GB. Every number anywhere in an
encoder's options (nested objects and lists included: a front end's settings, a Hugging Face architecture) is
finite and within :data:`RANGES` by its name (layers, heads, sizes, FFT and hop lengths, mel bins, sample
rates, positions, vocabularies, rates), any other integer within :data:`MAX_OPTION`, a list within
:data:`MAX_LIST` items and a layer list (``depths``) within :data:`MAX_LAYERS` layers in all.
:func:`check_bounded` applies the same table to any config tree (a Hugging Face folder's ``config.json`` on
import). :func:`mlatr.inference.stored_model.build_stored_model` then checks the sizes against the weights'
shapes before building for real.
"""

from __future__ import annotations

import math
import os
from typing import Any

from mlatr.errors import InputError
from mlatr.json_input import expect_field, json_type

#: Largest embedding or projection size accepted from a stored config (a larger one would allocate gigabytes
#: before anything else could go wrong; the papers' models use 512 to 1024).
MAX_DIM = 1 << 16
#: Most head pairs of a stored ensemble (``mlatr demo-real`` trains 3).
MAX_ENSEMBLE = 64
#: Largest integer option of a stored encoder config (vocabularies of multilingual encoders are ~250k).
MAX_OPTION = 1 << 22

#: Most layers of one encoder (the papers' encoders have 6 to 24; the largest text towers 48).
MAX_LAYERS = 128
#: Longest FFT / window / hop in samples (65,536 is 1.4 s at 48 kHz; the papers' front ends use 400 to 1024).
MAX_FFT = 1 << 16
#: Most items of a list option (channels, depths, language codes, ...).
MAX_LIST = 1024

#: The range of a numeric option by its name, wherever it stands in an encoder's options (or a Hugging Face
#: config): ``(low, high)``, both included.
RANGES: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("num_layers", "depth", "num_hidden_layers", "layers", "train_last_blocks", "train_last_layers",
                     "train_last_stages", "depths", "fusion_num_hidden_layers"), (0, MAX_LAYERS)),
    **dict.fromkeys(("num_heads", "num_attention_heads", "heads"), (1, 1024)),
    **dict.fromkeys(("dim", "hidden_size", "ff_dim", "intermediate_size", "embed_dim", "projection_dim",
                     "hidden_dim", "d_model", "width", "projection_hidden", "projection_hidden_size", "channels",
                     "patch_embeds_hidden_size"), (1, MAX_DIM)),
    **dict.fromkeys(("n_fft", "win_length", "fft_window_size", "hop_length", "hop_size", "block_hop",
                     "window_size"), (1, MAX_FFT)),
    **dict.fromkeys(("n_mels", "num_mel_bins", "feature_size", "mel_bins", "spec_size"), (1, 4096)),
    **dict.fromkeys(("sample_rate", "sampling_rate", "input_rate"), (1, 768_000)),
    **dict.fromkeys(("max_length", "max_position_embeddings", "target_length", "target_frames",
                     "type_vocab_size"), (1, 1 << 17)),
    "vocab_size": (1, 1 << 20),
    **dict.fromkeys(("patch_size", "patch_stride"), (1, 1024)),
    "mlp_ratio": (0, 64), "max_length_s": (1e-3, 3600), "clip_seconds": (1e-3, 3600),
    **dict.fromkeys(("dropout", "attn_dropout", "hidden_dropout_prob", "attention_probs_dropout_prob",
                     "drop_path_rate", "hidden_dropout", "attention_dropout"), (0, 1)),
    **dict.fromkeys(("f_min", "f_max", "frequency_min", "frequency_max"), (0, 384_000)),
}

_POSITIVE = {"test": lambda v: v > 0, "must": "> 0"}

#: How a model folder may store its floating-point weights (``mlatr export --weights-dtype``): as the checkpoint
#: holds them, or in half precision (half the bytes; loaded back into the model's own float32, each weight
#: rounded once).
WEIGHT_DTYPES = ("as-is", "float16")


def check_bounded(file: str, value: Any, where: str) -> None:
    """Refuse a number of ``value`` (an encoder's options, a config tree) outside its :data:`RANGES` (by its key;
    a list's items by the list's key), any other integer beyond :data:`MAX_OPTION`, a non-finite number, a
    list of more than :data:`MAX_LIST` items or a ``depths`` list of more than :data:`MAX_LAYERS` layers in all:
    :class:`InputError` ``FILE: WHERE.KEY: message``. Walked without recursion (``value`` comes from a parser
    that bounds nesting)."""
    stack: list[tuple[Any, str, str | None]] = [(value, where, None)]
    while stack:
        node, place, name = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{place}.{k}", str(k)) for k, v in node.items())
        elif isinstance(node, list):
            if len(node) > MAX_LIST:
                raise InputError(f"a list of {len(node):,} items (at most {MAX_LIST})", file, field=place)
            numbers = [v for v in node if isinstance(v, int | float) and not isinstance(v, bool)]
            if name == "depths" and sum(numbers) > MAX_LAYERS:
                raise InputError(f"{sum(numbers):,} layers in all (at most {MAX_LAYERS})", file, field=place)
            stack.extend((v, f"{place}[{i}]", name) for i, v in enumerate(node))
        elif isinstance(node, int | float) and not isinstance(node, bool):
            _check_number(file, node, place, name)


def _check_number(file: str, value: float, place: str, name: str | None) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"expected a finite number, found {value}", file, field=place)
    low, high = RANGES.get(name or "", (-MAX_OPTION, MAX_OPTION))
    if not low <= value <= high:
        kind = f"{name} " if name in RANGES else ""
        raise InputError(f"{value:,} is outside the range of any {kind}option ({low:,} to {high:,})", file,
                         field=place)


def _check_encoder(file: str, cfg: dict, side: str, where: str) -> None:
    encoder = expect_field(file, cfg, f"{side}_encoder", dict, "an object with the encoder's name and options",
                           where=where)
    expect_field(file, encoder, "name", str, "an encoder name", where=f"{where}.{side}_encoder")
    for key in encoder:
        if not isinstance(key, str) or not key.isidentifier():
            raise InputError("expected option names", file, field=f"{where}.{side}_encoder")
    check_bounded(file, encoder, f"{where}.{side}_encoder")


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
    expect_field(file, cfg, "ensemble", int, "an integer", where=where, required=False,
                 test=lambda v: 1 <= v <= MAX_ENSEMBLE, must=f"in 1..{MAX_ENSEMBLE}")
    known = {"audio_encoder", "text_encoder", "embed_dim", "projection_hidden", "temperature", "min_temperature",
             "max_temperature", "learnable_temperature", "text_head", "ensemble"}
    unknown = sorted(str(k) for k in cfg if k not in known)
    if unknown:
        raise InputError(f"unknown field(s) {', '.join(unknown)[:200]} (written by another mlatr version?)", file,
                         field=where)
    return cfg


# ---- a transformers ClapModel folder (import-checkpoint --from hf-clap) -------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: A JSON field's kind: (what it is called in a message, its test).
KINDS: dict[str, tuple[str, Any]] = {
    "int": ("an integer", _is_int),
    "number": ("a number", lambda v: _is_int(v) or isinstance(v, float)),
    "string": ("a string", lambda v: isinstance(v, str)),
    "string?": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "object?": ("an object or null", lambda v: v is None or isinstance(v, dict)),
    "ints": ("a list of integers", lambda v: isinstance(v, list) and all(map(_is_int, v))),
    "int|ints": ("an integer or a list of integers", lambda v: _is_int(v) or (isinstance(v, list)
                                                                               and all(map(_is_int, v)))),
}
#: The fields of a ClapModel ``config.json`` mlatr passes on, by part, with their kinds (:data:`KINDS`).
CLAP_FIELDS: dict[str, dict[str, str]] = {
    "": {"model_type": "string", "projection_dim": "int", "projection_hidden_act": "string",
         "logit_scale_init_value": "number", "initializer_factor": "number", "audio_config": "object?",
         "text_config": "object?"},
    "text_config": {
        **dict.fromkeys(("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                         "max_position_embeddings", "type_vocab_size", "projection_dim", "pad_token_id",
                         "bos_token_id", "eos_token_id"), "int"),
        **dict.fromkeys(("hidden_dropout_prob", "attention_probs_dropout_prob", "layer_norm_eps",
                         "initializer_factor"), "number"),
        **dict.fromkeys(("hidden_act", "projection_hidden_act"), "string")},
    "audio_config": {
        **dict.fromkeys(("window_size", "num_mel_bins", "spec_size", "patch_size", "num_classes", "hidden_size",
                         "projection_dim", "patch_embed_input_channels", "patch_embeds_hidden_size", "aff_block_r",
                         "num_hidden_layers"), "int"),
        "depths": "ints", "num_attention_heads": "ints", "patch_stride": "int|ints",
        **dict.fromkeys(("enable_fusion", "flatten_patch_embeds", "enable_patch_layer_norm", "qkv_bias"), "bool"),
        **dict.fromkeys(("hidden_dropout_prob", "drop_path_rate", "attention_probs_dropout_prob", "mlp_ratio",
                         "layer_norm_eps", "initializer_factor"), "number"),
        **dict.fromkeys(("hidden_act", "projection_hidden_act"), "string"), "fusion_type": "string?"},
}
#: The feature extractor's settings (``preprocessor_config.json``) mlatr reads, with their kinds.
CLAP_FEATURE_FIELDS: dict[str, str] = {
    **dict.fromkeys(("feature_size", "sampling_rate", "hop_length", "fft_window_size"), "int"),
    **dict.fromkeys(("max_length_s", "frequency_min", "frequency_max"), "number"),
    **dict.fromkeys(("truncation", "padding"), "string")}


def check_kinds(file: str, obj: dict, fields: dict[str, str], where: str = "") -> None:
    """Refuse a field of ``obj`` whose value is not of its kind (:data:`KINDS`): ``FILE: WHERE.FIELD: expected
    ..., found ...``; absent fields are not checked."""
    for key, kind in fields.items():
        if key in obj and not KINDS[kind][1](obj[key]):
            raise InputError(f"expected {KINDS[kind][0]}, found {json_type(obj[key])} {str(obj[key])[:40]!r}", file,
                             field=f"{where}.{key}" if where else key)


def check_clap_config(file: str | os.PathLike, config: Any) -> dict:
    """A ClapModel folder's ``config.json`` (``config``) when it is an object of ``model_type`` clap whose fields
    mlatr reads have their types (:data:`CLAP_FIELDS`) and every number its range (:func:`check_bounded`: 100,000
    layers or a ``projection_dim`` of 10^7 are refused before anything is built); else :class:`InputError`
    ``FILE: FIELD: message``."""
    file = str(file)
    if not isinstance(config, dict):
        raise InputError(f"expected a JSON object (a ClapModel config), found {json_type(config)}", file)
    if config.get("model_type") != "clap":
        raise InputError(f"{str(config.get('model_type'))[:40]!r}, not clap (a transformers ClapModel folder)", file,
                         field="model_type")
    for part, fields in CLAP_FIELDS.items():
        check_kinds(file, config if not part else config.get(part) or {}, fields, part)
    audio = config.get("audio_config") or {}
    if "depths" in audio and "num_attention_heads" in audio and len(audio["depths"]) != len(
            audio["num_attention_heads"]):
        raise InputError(f"{len(audio['depths'])} stages but {len(audio['num_attention_heads'])} head counts", file,
                         field="audio_config.num_attention_heads")
    check_bounded(file, config, "config")
    return config


def check_clap_features(file: str | os.PathLike, settings: Any) -> dict:
    """A ClapModel folder's ``preprocessor_config.json`` when the settings mlatr reads have their types
    (:data:`CLAP_FEATURE_FIELDS`) and ranges (``hop_length: 0`` is refused); else :class:`InputError`."""
    file = str(file)
    if not isinstance(settings, dict):
        raise InputError(f"expected a JSON object (feature extractor settings), found {json_type(settings)}", file)
    check_kinds(file, settings, CLAP_FEATURE_FIELDS)
    check_bounded(file, {k: settings[k] for k in CLAP_FEATURE_FIELDS if k in settings}, "preprocessor_config")
    return settings
