"""What a derived artefact was built from: a file's size and modification time, and what changed since.

A store of decoded audio (:mod:`mlatr.data.pipeline.store`) and a search index (:mod:`mlatr.search.index`)
record :func:`file_state` of each clip's audio when they read it; a training checkpoint records the
manifest's. A reader compares with the file now (:func:`state_change`) and says what changed instead of
serving what it holds as if it were current. Size and mtime (nanoseconds) are what ``make`` trusts: a rewrite
that keeps both (``touch -r``) goes unseen, which hashing every clip on every read would catch at a cost no
reader can pay.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime


def file_state(path: str | os.PathLike) -> dict | None:
    """``{"size", "mtime_ns"}`` of the file at ``path`` (None when it cannot be stat-ed)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def file_signature(path: str | os.PathLike) -> tuple[int, int, int] | None:
    """``(inode, size, mtime_ns)`` of the file at ``path``: what an atomic replacement (``os.replace``) changes,
    for a reader that polls it (a server reloading its index); None when it cannot be stat-ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def file_sha256(*paths: str | os.PathLike) -> str:
    """Hex SHA-256 of the bytes of ``paths``, one file after the other (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def _when(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def state_change(recorded: dict | None, now: dict | None) -> str | None:
    """What differs between a recorded :func:`file_state` and the current one, in words (``"deleted"``,
    ``"size 1,024 -> 2,048 bytes"``, ``"modified 2026-01-01 10:00:00 UTC -> ..."``); None when nothing did
    or nothing was recorded."""
    if not recorded:
        return None
    if now is None:
        return "deleted"
    parts = []
    if now.get("size") != recorded.get("size"):
        parts.append(f"size {recorded.get('size', 0):,} -> {now.get('size', 0):,} bytes")
    if now.get("mtime_ns") != recorded.get("mtime_ns"):
        parts.append(f"modified {_when(recorded.get('mtime_ns', 0))} -> {_when(now.get('mtime_ns', 0))}")
    return ", ".join(parts) or None
