"""Types and ranges of a training config's values, checked before anything is built, with the key named.

``optim.lr=-0.01``, ``optim.lr=nan`` or ``model.embed_dim=-5`` used to reach torch and end in a
traceback. :func:`check_config_values` walks the config's dataclasses: every value must have its
field's type (``true`` is not an integer, ``"fast"`` not a number), numbers must be finite, and the keys
of :data:`RANGES` must lie in their range. ``data.languages`` goes through the one language normaliser
(:func:`mlatr.languages.normalize_all`: ``fr`` becomes ``fra``, an unknown code is an error).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from mlatr.errors import MlatrError
from mlatr.languages import normalize_all

#: dotted key -> (test, what the value must be). Keys absent from a config (an optional section) are
#: not checked.
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "data.sample_rate": (lambda v: v > 0, "> 0"),
    "data.max_seconds": (lambda v: v > 0, "> 0 (seconds)"),
    "data.eval_max_seconds": (lambda v: v > 0, "> 0 (seconds)"),
    "data.cache_audio": (lambda v: v in (True, False, "auto"), "true, false or auto"),
    "data.cache_max_gb": (lambda v: v >= 0, ">= 0 (GB)"),
    "data.workers": (lambda v: v == "auto" or (isinstance(v, int) and v >= 0), "auto or an integer >= 0"),
    "data.prefetch": (lambda v: v >= 1, ">= 1"),
    "model.embed_dim": (lambda v: v >= 1, ">= 1"),
    "model.temperature": (lambda v: v > 0, "> 0"),
    "optim.lr": (lambda v: v > 0, "> 0"),
    "optim.weight_decay": (lambda v: v >= 0, ">= 0"),
    "optim.betas": (lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "two numbers in [0, 1)"),
    "optim.warmup_steps": (lambda v: v >= 0, ">= 0"),
    "optim.min_lr_ratio": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "optim.grad_clip": (lambda v: v is None or v > 0, "> 0, or null for no clipping"),
    "optim.accumulate": (lambda v: v >= 1, ">= 1"),
    "optim.grad_cache_chunk": (lambda v: v is None or v >= 1, ">= 1, or null for no gradient caching"),
    "train.epochs": (lambda v: v >= 1, ">= 1"),
    "train.batch_size": (lambda v: v >= 2, ">= 2 (a contrastive batch needs negatives)"),
    "train.eval_batch_size": (lambda v: v >= 1, ">= 1"),
    "train.log_every": (lambda v: v >= 1, ">= 1"),
    "train.eval_every": (lambda v: v >= 0, ">= 0 (0: never)"),
    "objective.svr.alpha": (lambda v: v >= 0, ">= 0"),
    "objective.svr.beta": (lambda v: v is None or v >= 0, ">= 0, or null for the default"),
    "objective.matching.tau_w": (lambda v: v > 0, "> 0"),
    "objective.matching.lam": (lambda v: v > 0, "> 0"),
    "objective.cmsc.beta": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "dist.timeout_minutes": (lambda v: v > 0, "> 0 (minutes)"),
}

_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


def _type_problem(type_text: str, value: Any) -> str | None:
    """What is wrong with ``value`` for a field annotated ``type_text`` (a string: the config module
    uses postponed annotations), or ``None``."""
    parts = [p.strip() for p in type_text.split("|")]
    if value is None:
        return None if "None" in parts else "must be given (null is not allowed)"
    kinds = [p for p in parts if p != "None"]
    if len(kinds) > 1:  # a union of scalars (data.workers: auto or a number): any of them will do
        problems = [_type_problem(kind, value) for kind in kinds]
        if None in problems:
            return None
        kinds_text = " or ".join(p.split(", got")[0].removeprefix("must be ") for p in problems)
        return f"must be {kinds_text}, got {value!r}"
    base = parts[0]
    if base in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float) or (base == "int" and
                                                                            not isinstance(value, int)):
            return f"must be {'an integer' if base == 'int' else 'a number'}, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
    elif base in ("bool", "str") and not isinstance(value, _SCALARS[base]):
        return f"must be {'true or false' if base == 'bool' else 'a string'}, got {value!r}"
    elif base.startswith(("list", "tuple")):
        if not isinstance(value, list | tuple):
            return f"must be a list, got {value!r}"
        if "float" in base and any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                                   for v in value):
            return f"must be a list of finite numbers, got {value!r}"
        if "str" in base and not all(isinstance(v, str) for v in value):
            return f"must be a list of strings, got {value!r}"
    elif base.startswith("dict") and not isinstance(value, dict):
        return f"must be a mapping, got {value!r}"
    return None


def _walk(obj: Any, prefix: str = ""):
    """``(dotted key, field type text, value)`` of every field of a config dataclass, depth first."""
    for f in dataclasses.fields(obj):
        key = f"{prefix}{f.name}"
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(value, key + ".")
        else:
            yield key, str(f.type), value


def check_config_values(cfg) -> None:
    """Raise :class:`~mlatr.errors.MlatrError` naming the first key whose value has the wrong type or is
    out of range; normalise ``data.languages`` in place."""
    for key, type_text, value in _walk(cfg):
        problem = _type_problem(type_text, value)
        if problem:
            raise MlatrError(f"config: {key}: {problem}")
        rule = RANGES.get(key)
        if rule is not None and not rule[0](value):
            raise MlatrError(f"config: {key}: must be {rule[1]}, got {value!r}")
    cfg.data.languages = normalize_all(cfg.data.languages, "config: data.languages")


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: list(tree) if isinstance(tree, tuple) else tree}


def config_differences(old: dict, new: dict, shown: int = 5) -> str:
    """``"optim.lr: 0.001 in the run, 0.5 now; ..."``: the keys whose values differ between two config
    trees (for the message of a refused resume)."""
    a, b = _flat(old), _flat(new)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, "<unset>") != b.get(k, "<unset>"))
    parts = [f"{k}: {a.get(k, '<unset>')!r} in the run, {b.get(k, '<unset>')!r} now" for k in keys[:shown]]
    more = f"; and {len(keys) - shown} more" if len(keys) > shown else ""
    return "; ".join(parts) + more + ("; drop the override(s), or train into another out_dir" if keys else "")
