"""What an index build encodes and deletes: the clips not indexed yet, those whose audio changed, those gone.

A build over an existing index (``mlatr index build --add``) encodes only the clips whose id it does not
hold yet, encodes again a clip whose audio file changed since it was encoded (size or mtime: its old row is
deleted), and deletes every indexed clip whose recorded file is gone: those the manifest lists and those it
does not (a file deleted from a library is no longer listed by the folder it is added from, but would
still be ranked). Every process of a build split over processes plans the same (:mod:`mlatr.search.rank_build`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlatr.data.manifest import Clip
from mlatr.search.index import Index


@dataclass
class BuildPlan:
    """``new``: the clips to encode; ``drop``: id -> row of the existing index to delete; ``changed`` /
    ``deleted``: the ids encoded again because their file changed / deleted because their file is gone."""

    new: list[Clip]
    drop: dict[str, int] = field(default_factory=dict)
    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def plan_build(existing: Index | None, clips: Sequence[Clip], root: str | Path) -> BuildPlan:
    """The plan of a build of ``clips`` (audio relative to ``root``) over ``existing`` (None: a new index,
    every clip encoded)."""
    if existing is None:
        return BuildPlan(list(clips))
    rows = existing.tables.live_rows()
    plan = BuildPlan([])
    for clip in clips:
        row = rows.get(clip.id)
        if row is None:
            plan.new.append(clip)
            continue
        why = existing.stale(row)
        if why == "deleted" and not clip.audio_path(root).exists():
            plan.drop[clip.id] = row
            plan.deleted.append(clip.id)
        elif why is not None:
            plan.drop[clip.id] = row
            plan.changed.append(clip.id)
            plan.new.append(clip)
    listed = {clip.id for clip in clips}
    for cid, row in rows.items():
        if cid not in listed and existing.stale(row) == "deleted":
            plan.drop[cid] = row
            plan.deleted.append(cid)
    return plan
