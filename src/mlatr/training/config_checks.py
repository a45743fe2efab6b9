"""The one validator of a training config's values: types from the annotations, ranges from field metadata.

Every field of the config's dataclasses (:mod:`mlatr.training.config`) states its own rule: its type
annotation (``int``, ``float | None``, a ``Literal`` of the allowed values, ``list[str]``, ...) and, where a
value has a range, a :func:`checked` default whose metadata holds the test and what the value must be.
:func:`check_config_values` walks the dataclasses depth first and raises naming the first key whose value has
the wrong type (``true`` is not an integer, ``"fast"`` not a number), is not finite, is not one of its
``Literal`` values or lies outside its range. ``data.languages`` goes through the one language normaliser
(:func:`mlatr.languages.normalize_all`: ``fr`` becomes ``fra``, an unknown code is an error). Rules that
relate several fields are :func:`mlatr.training.config.check_rules`.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

from mlatr.errors import MlatrError
from mlatr.languages import normalize_all

#: Field metadata key of a value's range: ``(test, what the value must be)``.
MUST = "must"


def checked(default: Any, test: Callable[[Any], bool], must: str) -> Any:
    """A dataclass field with ``default`` whose (non-null) value must pass ``test``; ``must`` says what it must
    be, for the message (``"> 0"`` gives ``config: optim.lr: must be > 0, got -0.01``)."""
    return dataclasses.field(default=default, metadata={MUST: (test, must)})


def _type_problem(tp: Any, value: Any) -> str | None:
    """What is wrong with ``value`` for a field of type ``tp``, or ``None``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None:
            return None if type(None) in args else "must be given (null is not allowed)"
        kinds = [a for a in args if a is not type(None)]
        problems = [_type_problem(kind, value) for kind in kinds]
        if None in problems or len(kinds) == 1:
            return problems[0] if len(kinds) == 1 else None
        kinds_text = " or ".join(p.split(", got")[0].removeprefix("must be ") for p in problems)
        return f"must be {kinds_text}, got {value!r}"
    if value is None:
        return "must be given (null is not allowed)"
    if origin is Literal:
        if any(type(value) is type(a) and value == a for a in args):
            return None
        hint = ""
        if isinstance(value, bool) and any(isinstance(a, str) for a in args):
            # YAML 1.1 reads an unquoted on / off / yes / no as a boolean, and a shell strips one level of quotes
            hint = (" (YAML reads an unquoted off / on / yes / no as a boolean: quote the value inside the "
                    "argument, e.g. \"optim.amp='off'\" in bash)")
        return f"must be one of {', '.join(str(a) for a in args)}, got {value!r}{hint}"
    if tp in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float) or (tp is int and not isinstance(value, int)):
            return f"must be {'an integer' if tp is int else 'a number'}, got {value!r}"
        if not math.isfinite(value):
            return f"must be a finite number, got {value!r}"
    elif tp is bool and not isinstance(value, bool):
        return f"must be true or false, got {value!r}"
    elif tp is str and not isinstance(value, str):
        return f"must be a string, got {value!r}"
    elif origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return f"must be a list, got {value!r}"
        if float in args and any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
                                 for v in value):
            return f"must be a list of finite numbers, got {value!r}"
        if str in args and not all(isinstance(v, str) for v in value):
            return f"must be a list of strings, got {value!r}"
    elif origin is dict and not isinstance(value, dict):
        return f"must be a mapping, got {value!r}"
    return None


def _walk(obj: Any, prefix: str = ""):
    """``(dotted key, field, field type, value)`` of every field of a config dataclass, depth first."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        key = f"{prefix}{f.name}"
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _walk(value, key + ".")
        else:
            yield key, f, hints[f.name], value


def check_config_values(cfg) -> None:
    """Raise :class:`~mlatr.errors.MlatrError` naming the first key whose value has the wrong type or is
    out of range; normalise ``data.languages`` in place."""
    for key, f, tp, value in _walk(cfg):
        problem = _type_problem(tp, value)
        if problem:
            raise MlatrError(f"config: {key}: {problem}")
        rule = f.metadata.get(MUST)
        if rule is not None and value is not None and not rule[0](value):
            raise MlatrError(f"config: {key}: must be {rule[1]}, got {value!r}")
    if dataclasses.is_dataclass(getattr(cfg, "data", None)):  # a training config (head training has no data)
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
