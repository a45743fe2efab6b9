"""JSON read from a user's file: every way it can fail is an :class:`~mlatr.errors.InputError` with its place.

``json.loads`` fails in more ways than :class:`json.JSONDecodeError`: a deeply nested value
(``[[[[...]]]]``) raises :class:`RecursionError`, an integer of more than 4300 digits a plain
:class:`ValueError`. :func:`parse_json` turns each into ``FILE:LINE: FIELD: message`` and also refuses a
value nested deeper than :data:`MAX_DEPTH` levels, so the code that walks a parsed value (recursively)
never meets one that would exhaust the stack.
"""

from __future__ import annotations

import json
from typing import Any

from mlatr.errors import InputError

#: The deepest nesting of arrays and objects accepted (a manifest line needs 3).
MAX_DEPTH = 64


def nesting_depth(value: Any) -> int:
    """How deeply ``value``'s arrays and objects nest (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


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
    if nesting_depth(value) > MAX_DEPTH:
        raise InputError(f"JSON nested too deeply (more than {MAX_DEPTH} levels)", file, line, field)
    return value
