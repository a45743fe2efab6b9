"""Clotho captions CSVs (``file_name,caption_1,...,caption_5``) -> manifest.

Every ``caption_N`` column present is used, in the order of N; the clip id is the file name without its
extension, the audio path ``audio_dir / pattern`` with the pattern over the row's columns
(default ``{file_name}``). An empty caption cell is a malformed row.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from mlatr.data.importers._common import (
    BadRows,
    SeenIds,
    format_pattern,
    header_of,
    id_from_name,
    join_audio,
    read_csv_rows,
)
from mlatr.data.importers._finish import checked_clips
from mlatr.data.manifest import Clip, Manifest

CAPTION_COLUMN = re.compile(r"^caption_(\d+)$")


def caption_columns(header: Sequence[str]) -> list[str]:
    """The ``caption_N`` columns of a header, sorted by N."""
    found = [(int(m.group(1)), h) for h in header if (m := CAPTION_COLUMN.match(h))]
    return [h for _, h in sorted(found)]


def import_clotho_csv(
    sources: Sequence[str | os.PathLike],
    *,
    audio_pattern: str | None = None,
    audio_dir: str | None = None,
    split: str | None = None,
    skip_bad: bool = False,
) -> Manifest:
    """Read Clotho captions CSVs into one manifest (see the module docstring)."""
    pattern = audio_pattern or "{file_name}"
    bad = BadRows(skip_bad)
    seen = SeenIds()
    clips: list[Clip] = []
    origin: dict[str, tuple[str, int | None]] = {}
    for src in sources:
        file = str(src)
        cols = caption_columns(header_of(src)) if Path(src).is_file() else []
        required = ("file_name", *(cols or ["caption_1"]))
        for line, row in read_csv_rows(src, required, bad):
            name = row["file_name"]
            if not name:
                bad.report(file, line, "file_name", "empty")
                continue
            empty = [c for c in cols if not row[c]]
            if empty:
                bad.report(file, line, empty[0], "empty caption")
                continue
            ident = id_from_name(name)
            if not seen.claim(ident, file, line, bad):
                continue
            audio = join_audio(audio_dir, format_pattern(pattern, row, file, line), file, line, bad)
            if audio is None:
                continue
            clips.append(Clip(id=ident, audio=audio, captions={"eng": [row[c] for c in cols]}, split=split,
                              line=line))
            origin[ident] = (file, line)
    return Manifest(clips=checked_clips(clips, origin, bad), root=Path.cwd(), problems=bad.problems)
