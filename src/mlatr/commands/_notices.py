"""What a command tells the user besides its result, on stderr: what ``--skip-bad`` skipped (the count,
then the first items) and warnings about numbers that mean less than they seem; and, on stdout, which
metadata a folder's clips got."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence

from mlatr.data.file_metadata import metadata_report
from mlatr.data.manifest import Clip
from mlatr.terminal_text import shown, shown_lines

#: Skipped items listed one per line; the rest are counted.
SHOWN = 10


def report_skipped(items: Mapping[str, str] | Iterable[object], what: str) -> int:
    """Print ``mlatr: skipped N WHAT (--skip-bad):`` and the first :data:`SHOWN` items (a mapping id ->
    message, or objects whose ``str`` names file, line and field) to stderr; returns N."""
    lines = [f"{k}: {v}" for k, v in items.items()] if isinstance(items, Mapping) else [str(x) for x in items]
    if not lines:
        return 0
    print(f"mlatr: skipped {len(lines)} {what} (--skip-bad):", file=sys.stderr)
    for line in lines[:SHOWN]:  # one line each: a newline in a file name or id is shown as \n, never a new line
        print(f"  {shown(line, 2000)}", file=sys.stderr)
    if len(lines) > SHOWN:
        print(f"  ... and {len(lines) - SHOWN} more", file=sys.stderr)
    return len(lines)


def report_metadata(clips: Sequence[Clip]) -> None:
    """Print which metadata ``clips`` got (:func:`~mlatr.data.file_metadata.metadata_report`: ``metadata: 3
    sidecar, 12 bext, ...``) and, on stderr, the first :data:`SHOWN` tags skipped, each with its clip."""
    line = metadata_report(clips)
    if line:
        print(line)
    problems = [f"{c.id}: {p}" for c in clips for p in c.extra.get("tag_problems", [])]
    for text in problems[:SHOWN]:
        print(f"  {shown(text, 2000)}", file=sys.stderr)
    if len(problems) > SHOWN:
        print(f"  ... and {len(problems) - SHOWN} more", file=sys.stderr)


def some_ids(ids: list[str], n: int = 5) -> str:
    """The first ``n`` of ``ids`` for a message, each through :func:`~mlatr.terminal_text.shown` (a right-to-left
    override or a newline in an id is shown as its escape), and how many more."""
    return ", ".join(shown(i) for i in ids[:n]) + (f" and {len(ids) - n} more" if len(ids) > n else "")


def warn(messages: Iterable[str]) -> list[str]:
    """Print each message as ``mlatr: warning: ...`` to stderr; returns them as a list."""
    out = list(messages)
    for m in out:
        print(f"mlatr: warning: {shown_lines(m)}", file=sys.stderr)
    return out
