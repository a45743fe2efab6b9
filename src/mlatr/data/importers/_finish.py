"""Final check of imported clips against the manifest rules, so an importer never writes a bad manifest."""

from __future__ import annotations

from mlatr.data.importers._common import BadRows
from mlatr.data.manifest import Clip, clip_from_json


def checked_clips(clips: list[Clip], origin: dict[str, tuple[str, int | None]], bad: BadRows) -> list[Clip]:
    """Keep the clips that satisfy :func:`mlatr.data.manifest.clip_from_json`; report the others at the
    source place ``origin[clip.id]`` (file, line)."""
    out = []
    for clip in clips:
        file, line = origin.get(clip.id, ("?", clip.line))
        _, problems = clip_from_json(clip.to_json(), file, line)
        for p in problems:
            bad.report(p.file, p.line, p.field, p.message)
        if not problems:
            clip.line = None
            out.append(clip)
    return out
