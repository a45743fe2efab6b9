"""JSON read from a user's file: every way it can fail is an :class:`~mlatr.errors.InputError` with its place.

``json.loads`` fails in more ways than :class:`json.JSONDecodeError`: a deeply nested value
(``[[[[...]]]]``) raises :class:`RecursionError`, an integer of more than 4300 digits a plain
:class:`ValueError`. :func:`parse_json` turns each into ``FILE:LINE: FIELD: message`` and also refuses a
value nested deeper than :data:`MAX_DEPTH` levels, so the code that walks a parsed value (recursively)
never meets one that would exhaust the stack.

The files mlatr writes for itself and reads back (an index's meta, a decoded-audio store's ``index.json``, a
model folder's ``config.json``) are tagged with a format name and version (``"format": "mlatr-index-2"``);
:func:`read_format_json` / :func:`check_format` read and recognise them, :func:`expect_field` checks each field's
type and range, so a damaged or hand-edited file is refused as ``FILE: FIELD: message``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from typing import Any

from mlatr.errors import InputError
from mlatr.file_kinds import special_file

#: The deepest nesting of arrays and objects accepted (a manifest line needs 3).
MAX_DEPTH = 64
#: The types of JSON's (and YAML's plain) scalars.
_SCALARS = {str, int, float, bool, type(None)}


def nesting_depth(value: Any, limit: int | None = None) -> int:
    """How deeply ``value``'s arrays and objects nest (0 for a scalar), without recursion; a value shared by
    several parents (a YAML alias) is walked once per depth, and the walk stops once deeper than ``limit`` (a
    YAML value can contain itself)."""
    deepest, stack, seen = 0, [(value, 1)], {}
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None or seen.get(id(node), 0) >= depth:
            continue
        seen[id(node)] = depth
        deepest = max(deepest, depth)
        if limit is not None and deepest > limit:
            return deepest
        # a scalar child adds no depth: only arrays and objects are walked (a list of a million strings is
        # looked at in one pass of C code, not pushed a million times)
        if not (isinstance(node, list) and set(map(type, children)) <= _SCALARS):
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def expanded_size(value: Any) -> int:
    """How many values ``value`` holds once every shared part is copied out (a YAML alias counts each time it
    is used: ten aliases of ten aliases of ... are billions of values). ``value`` must not contain itself
    (:func:`nesting_depth` with a limit refuses that first)."""
    sizes: dict[int, int] = {}
    stack = [(value, False)]
    while stack:
        node, children_done = stack.pop()
        kids = list(node.values()) if isinstance(node, dict) else node if isinstance(node, list) else []
        if id(node) in sizes:
            continue
        if children_done or not kids:
            sizes[id(node)] = 1 + sum(sizes.get(id(k), 1) for k in kids)
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in kids if isinstance(k, dict | list) and id(k) not in sizes)
    return sizes[id(value)]


def parse_json(text: str | bytes, file: str | None = None, line: int | None = None, field: str = "json") -> Any:
    """``json.loads(text)``, or :class:`InputError` at ``file:line: field`` saying what is wrong.

    ``line`` is the line ``text`` came from (a JSONL line); when None, a syntax error is reported at its own
    line of ``text`` (a whole JSON file).
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        where = line if line is not None else exc.lineno
        raise InputError(f"invalid JSON: {exc.msg} at column {exc.colno}", file, where, field) from None
    except RecursionError:
        raise InputError(f"JSON nested too deeply (more than {MAX_DEPTH} levels)", file, line, field) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputError(f"invalid JSON: {exc}", file, line, field) from None
    if nesting_depth(value, MAX_DEPTH) > MAX_DEPTH:
        raise InputError(f"JSON nested too deeply (more than {MAX_DEPTH} levels)", file, line, field)
    return value


# ---- format-tagged JSON files: an index's meta, a store's index, a model folder's config ----------------------
#: The largest JSON file read whole (an index's ``ids.json`` of ten million clips is about 150 MB).
MAX_JSON_BYTES = 2**30


def read_json_file(path: str | os.PathLike, field: str = "json") -> Any:
    """:func:`parse_json` of file ``path``'s UTF-8 text; an unreadable or undecodable file, a FIFO or device (never
    opened: a FIFO blocks, ``/dev/zero`` never ends) or a file over :data:`MAX_JSON_BYTES` is an
    :class:`InputError` naming it."""
    special = special_file(path)
    if special:
        raise InputError(f"not a regular file but {special} (not opened)", str(path))
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise InputError(f"unreadable ({exc.strerror or exc})", str(path)) from None
    if len(data) > MAX_JSON_BYTES:
        raise InputError(f"larger than {MAX_JSON_BYTES:,} bytes: not a JSON file mlatr reads", str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", str(path), field=field) from None
    return parse_json(text, str(path), field=field)


def _name_and_version(tag: str) -> tuple[str, str]:
    name, _, version = tag.rpartition("-")
    return (name, version) if name and version.isdigit() else (tag, "")


def check_format(file: str | os.PathLike, value: Any, expected: str, what: str) -> dict:
    """``value`` as a JSON object whose ``format`` is ``expected`` (``"mlatr-index-2"``: a name and a version),
    else an :class:`InputError` saying what the file is instead: not an object, no format, another version
    of the same format (written by another mlatr), or another format."""
    file = str(file)
    if not isinstance(value, dict):
        raise InputError(f"expected a JSON object, found {json_type(value)} (not {what})", file)
    found = value.get("format")
    if found == expected:
        return value
    if not isinstance(found, str):
        raise InputError(f"expected {expected!r}, found {json_type(found) if 'format' in value else 'nothing'} "
                         f"(not {what})", file, field="format")
    name, version = _name_and_version(expected)
    found_name, found_version = _name_and_version(found)
    if found_name == name and found_version:
        raise InputError(f"version {found_version} of {name}; this mlatr reads version {version} (the file was "
                         "written by another mlatr version)", file, field="format")
    raise InputError(f"{found[:80]!r}, expected {expected!r} (not {what})", file, field="format")


def read_format_json(path: str | os.PathLike, expected: str, what: str) -> dict:
    """The JSON object of file ``path``, tagged ``"format": expected`` (:func:`check_format`)."""
    return check_format(path, read_json_file(path), expected, what)


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type (``object``, ``array``, ``string``, ``number``, ``true``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}.get(
        type(value), type(value).__name__)


def expect_field(file: str | os.PathLike, obj: dict, field: str, kinds: type | tuple[type, ...], what: str, *,
                 where: str = "", required: bool = True, test: Callable[[Any], bool] | None = None,
                 must: str = "", hint: str = "") -> Any:
    """``obj[field]`` when it is one of ``kinds`` (a bool is never a number here) and passes ``test``; else an
    :class:`InputError` ``FILE: WHERE.FIELD: expected WHAT, found ...`` (``must``: what ``test`` asks, e.g.
    ``"> 0"``). A missing field is an error when ``required`` (``hint`` says what to do), else None."""
    name = f"{where}.{field}" if where else field
    if field not in obj:
        if not required:
            return None
        raise InputError("missing" + (f" ({hint})" if hint else ""), str(file), field=name)
    value = obj[field]
    numeric = isinstance(kinds, tuple) and (int in kinds or float in kinds) or kinds in (int, float)
    if not isinstance(value, kinds) or (numeric and isinstance(value, bool)):
        raise InputError(f"expected {what}, found {json_type(value)} {_preview(value)}", str(file), field=name)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"expected {what}, found {value}", str(file), field=name)
    if test is not None and not test(value):
        raise InputError(f"must be {must}, found {_preview(value)}", str(file), field=name)
    return value


def _preview(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if nesting_depth(value, MAX_DEPTH) <= MAX_DEPTH else "[...]"
    return text if len(text) <= 60 else text[:57] + "..."
