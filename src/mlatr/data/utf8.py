"""Text inputs that are not UTF-8, reported row by row.

Manifests, CSVs and JSON sources are read with ``errors="surrogateescape"``: a byte that is not UTF-8
becomes a lone surrogate (U+DC80-U+DCFF) instead of a ``UnicodeDecodeError`` for the whole file, so the
row that holds it is reported with its line and field like any other malformed row (and counted under
``--skip-bad``), and the other rows import.
"""

from __future__ import annotations

import re
from typing import Any

#: Open text inputs with this ``errors`` policy.
ERRORS = "surrogateescape"

_ESCAPED = re.compile("[\udc80-\udcff]")


def bad_byte(text: str) -> int | None:
    """The first byte of ``text`` that was not UTF-8 (read with :data:`ERRORS`), or ``None``."""
    m = _ESCAPED.search(text)
    return None if m is None else ord(m.group()) - 0xDC00


def message(byte: int) -> str:
    """What to tell the user about a non-UTF-8 byte."""
    return (f"not UTF-8 text (byte 0x{byte:02x}); save the file as UTF-8, e.g. "
            "iconv -f latin1 -t utf-8 IN > OUT")


def first_bad_field(obj: Any, prefix: str = "") -> tuple[str, int] | None:
    """``(dotted path, byte)`` of the first string in a parsed JSON value (keys included) holding a
    non-UTF-8 byte, or ``None``. Paths look like the manifest's fields: ``captions.fra[1]``."""
    if isinstance(obj, str):
        b = bad_byte(obj)
        return None if b is None else (prefix or "value", b)
    if isinstance(obj, dict):
        for key, value in obj.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            b = bad_byte(str(key))
            if b is not None:
                return path, b
            found = first_bad_field(value, path)
            if found:
                return found
    if isinstance(obj, list):
        for i, value in enumerate(obj):
            found = first_bad_field(value, f"{prefix}[{i}]")
            if found:
                return found
    return None


def printable(text: str) -> str:
    """``text`` with each byte that was not UTF-8 written as ``\\xNN`` (a file name to put in UTF-8 output)."""
    return text.encode("utf-8", ERRORS).decode("utf-8", "backslashreplace")
