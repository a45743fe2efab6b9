"""AudioCaps captions CSVs (``audiocap_id,youtube_id,start_time,caption``) -> manifest.

Rows with the same ``youtube_id`` and ``start_time`` are one clip with several English captions, in row
order; their ``audiocap_id`` values are kept, aligned with the captions, in ``extra["audiocap_ids"]``.
The audio file name comes from a pattern over ``youtube_id``, ``start_time`` and ``end_time``
(= start + 10 s), default ``Y{youtube_id}.wav`` (the ML-CLAP / CED layout); the clip id is that name
without its extension, so the ids match those of the ``mlclap-json`` importer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mlatr.data.importers._common import (
    BadRows,
    SeenIds,
    format_pattern,
    id_from_name,
    join_audio,
    parse_float,
    read_csv_rows,
)
from mlatr.data.importers._finish import checked_clips
from mlatr.data.manifest import Clip, Manifest

DEFAULT_PATTERN = "Y{youtube_id}.wav"
COLUMNS = ("audiocap_id", "youtube_id", "start_time", "caption")


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def import_audiocaps_csv(
    sources: Sequence[str | os.PathLike],
    *,
    audio_pattern: str | None = None,
    audio_dir: str | None = None,
    split: str | None = None,
    skip_bad: bool = False,
) -> Manifest:
    """Read AudioCaps CSVs into one manifest (see the module docstring)."""
    pattern = audio_pattern or DEFAULT_PATTERN
    bad = BadRows(skip_bad)
    groups: dict[tuple[str, float], Clip] = {}
    origin: dict[str, tuple[str, int | None]] = {}
    names: dict[str, tuple[str, int]] = {}
    cap_ids: dict[str, tuple[str, int]] = {}
    seen = SeenIds()
    for src in sources:
        file = str(src)
        for line, row in read_csv_rows(src, COLUMNS, bad):
            ytid, caption, cap_id = row["youtube_id"], row["caption"], row["audiocap_id"]
            if not ytid:
                bad.report(file, line, "youtube_id", "empty")
                continue
            if not caption:
                bad.report(file, line, "caption", "empty caption")
                continue
            start = parse_float(row["start_time"], file, line, "start_time", bad)
            if start is None:
                continue
            if cap_id and cap_id in cap_ids:
                f0, l0 = cap_ids[cap_id]
                bad.report(file, line, "audiocap_id",
                           f"duplicate audiocap_id {cap_id!r} (first at {f0}:{l0})")
                continue
            key = (ytid, start)
            clip = groups.get(key)
            if clip is None:
                values = {"youtube_id": ytid, "start_time": _number(start), "end_time": _number(start + 10)}
                name = format_pattern(pattern, values, file, line)
                if name in names:
                    f0, l0 = names[name]
                    bad.report(file, line, "start_time",
                               f"clip {ytid} at {row['start_time']} s gets the audio name {name!r} of the "
                               f"clip "
                               f"at {f0}:{l0} (another start time); put {{start_time}} in --audio-pattern")
                    continue
                audio = join_audio(audio_dir, name, file, line, bad)
                if audio is None:
                    continue
                ident = id_from_name(name)
                if not seen.claim(ident, file, line, bad):
                    continue
                names[name] = (file, line)
                clip = Clip(id=ident, audio=audio, captions={"eng": []}, split=split,
                            extra={"youtube_id": ytid, "start_time": _number(start), "audiocap_ids": []},
                            line=line)
                groups[key] = clip
                origin[ident] = (file, line)
            clip.captions["eng"].append(caption)
            clip.extra["audiocap_ids"].append(int(cap_id) if cap_id.isdigit() else cap_id)
            if cap_id:
                cap_ids[cap_id] = (file, line)
    clips = checked_clips(list(groups.values()), origin, bad)
    return Manifest(clips=clips, root=Path.cwd(), problems=bad.problems)
