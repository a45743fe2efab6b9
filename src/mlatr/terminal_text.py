"""User text made safe to print on a terminal: the one place captions, ids, file names and queries pass through
before the CLI prints them.

A caption is data, and data can hold what a terminal obeys: an escape sequence (``ESC ]0;title BEL`` retitles
the window, ``ESC [2J`` clears it, ``ESC [8m`` hides what follows), a carriage return that overwrites the line
before it, a bidirectional override that shows text in another order than it is stored. :func:`shown` writes
every such character as a visible escape (``\\x1b``, ``\\r``, ``\\u202e``) and cuts a long text to ``limit``
characters with an ellipsis and its full length, so a 20,000-character caption takes a line, not a screen.
JSON output (``--json``) keeps the exact text: ``json.dumps`` escapes control characters itself.
"""

from __future__ import annotations

import unicodedata

#: Characters shown longer than this are cut (captions are a sentence or two; ids and paths shorter).
SHOWN_CHARS = 300
#: Unicode categories a terminal may act on or render invisibly: controls (C0, DEL, C1), format characters
#: (bidirectional overrides and isolates, zero-width joiners), line and paragraph separators, surrogates.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _visible(ch: str) -> str:
    if unicodedata.category(ch) not in _UNSAFE_CATEGORIES:
        return ch
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object, limit: int | None = SHOWN_CHARS) -> str:
    """``text`` (any object, through ``str``) with every control, format or separator character written as a
    visible escape, cut to ``limit`` characters (None: no cut) as ``start… (N characters)``.

    The cut counts the text's own characters, before escaping, so an id and its escaped form are cut alike.
    """
    text = str(text)
    cut = limit is not None and len(text) > limit
    head = text[:limit] if cut else text
    safe = "".join(_visible(ch) for ch in head) if not head.isprintable() else head
    return f"{safe}\u2026 ({len(text):,} characters)" if cut else safe


def shown_lines(text: object, limit: int | None = 2000) -> str:
    """:func:`shown` of each line of a message that has several on purpose (an error with a hint below it):
    the line breaks stay, every other control character is escaped, each line cut to ``limit``."""
    return "\n".join(shown(line, limit) for line in str(text).split("\n"))


def undecodable_argument(argv: list[str]) -> str | None:
    """A message naming the first command-line argument that is not valid UTF-8, or None.

    Python hands such bytes over as lone surrogates (PEP 383), which no file or query can hold: every later
    ``encode`` fails. The message shows the argument's bytes (``b'\\xff\\xfe'``).
    """
    for position, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            try:
                raw: object = arg.encode("utf-8", "surrogateescape")
            except UnicodeEncodeError:  # a surrogate no byte stands for (given through the Python API)
                raw = arg
            return (f"argument {position} ({shown(raw, 200)}): not valid UTF-8; give queries, ids and file names "
                    "as UTF-8 text")
    return None
