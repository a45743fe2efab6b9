"""Search results out to a sound designer's tools: one CSV row per hit (``mlatr search --csv FILE``).

Columns (:data:`CSV_FIELDS`): ``query`` (the text searched for, or the sound file searched with), ``rank``,
``id``, ``path`` (the file's absolute path), ``score``, ``relevance`` (:attr:`~mlatr.search.results.Hit.relevance`),
``duration`` (seconds of the file, from its header), ``start`` and ``end`` (where a long recording matched, seconds:
:attr:`~mlatr.search.results.Hit.segment`; empty for a clip without segments) and ``caption`` (the clip's first
English caption). Numbers are written as Python prints them (every digit the JSON output has); a missing one is
an empty cell. The page's picks export (``mlatr serve``: ``serve/static/app.js``) writes the same columns.

A text cell that a spreadsheet would run as a formula (one starting with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return) is written with a leading apostrophe, as OWASP's CSV-injection advice says: captions come from
names and tags that anyone may have written.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from collections.abc import Sequence

from mlatr.io_utils import atomic_write_text
from mlatr.search.results import Hit, finite_or_none

#: The columns of an exported result, in order.
CSV_FIELDS = ("query", "rank", "id", "path", "score", "relevance", "duration", "start", "end", "caption")
#: The columns that hold text (the ones a formula could hide in).
TEXT_FIELDS = ("query", "id", "path", "caption")
#: What a spreadsheet takes for the start of a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs (module docstring)."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def hit_row(query: str, hit: Hit, duration: float | None) -> dict[str, object]:
    """The CSV row of ``hit`` (``duration``: seconds of its file, None: unreadable)."""
    start, end = hit.segment if hit.segment else (None, None)
    row = {"query": query, "rank": hit.rank, "id": hit.id, "path": hit.path, "score": finite_or_none(hit.score),
           "relevance": finite_or_none(hit.relevance), "duration": finite_or_none(duration), "start": start,
           "end": end, "caption": next((c for c in hit.captions if c), "")}
    return {k: ("" if v is None else safe_cell(v) if k in TEXT_FIELDS else v) for k, v in row.items()}


def csv_text(query: str, hits: Sequence[Hit], durations: Sequence[float | None]) -> str:
    """The CSV of ``hits`` (best first; ``durations`` aligned with them), a header line first."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for hit, seconds in zip(hits, durations, strict=True):
        writer.writerow(hit_row(query, hit, seconds))
    return out.getvalue()


def write_csv(path: str | os.PathLike, query: str, hits: Sequence[Hit], durations: Sequence[float | None]) -> None:
    """Write :func:`csv_text` to ``path`` at once (atomic: a reader never sees half of it); ``-``: stdout."""
    text = csv_text(query, hits, durations)
    if os.fspath(path) == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(path, text)
