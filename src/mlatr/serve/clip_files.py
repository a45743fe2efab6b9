"""Which files ``GET /audio/{id}`` may serve: regular files whose real path lies inside the library roots.

The roots are the directories given with ``mlatr serve --allow-root`` or, without it, the directories
of the clips the index recorded when the server first served it (the index file the operator started
the server with), with symlinks resolved. They are fixed for the server's life: a reload (or an index
file edited after start) cannot widen them. ``mlatr index build`` records absolute, resolved paths, so a
recorded path that is relative or not in normal form (``lib/../../etc/passwd``, ``lib/./x``) was edited:
it neither adds a root nor is served. Each request resolves the clip's recorded path again and checks it
is a regular file inside a root, so a symlink placed in the library, a recorded path pointed elsewhere
after start or a file swapped for a link after start answers 404. What the index recorded at start-up
is trusted (it is the operator's file; ``--allow-root`` narrows it). Hard links cannot be told from the
file they link to: a library holding a hard link to a secret serves it.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path


def recorded_as_built(path: str) -> bool:
    """Whether ``path`` has the form ``mlatr index build`` records: absolute and in normal form."""
    return os.path.isabs(path) and os.path.normpath(path) == path and not path.startswith("//")


def library_roots(paths: Iterable[str]) -> list[Path]:
    """The real directories holding ``paths`` (those :func:`recorded_as_built`), without directories that
    lie inside another of them."""
    dirs = sorted({Path(os.path.realpath(os.path.dirname(p))) for p in paths if recorded_as_built(p)})
    roots: list[Path] = []
    for d in dirs:  # sorted: a parent comes before its subdirectories
        if not any(d.is_relative_to(r) for r in roots):
            roots.append(d)
    return roots


def confined_file(path: str, roots: Sequence[Path]) -> Path | None:
    """The real path of ``path`` when it is :func:`recorded_as_built` and a regular file inside one of
    ``roots``, else ``None``."""
    if not recorded_as_built(path):
        return None
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(r) for r in roots):
        return None
    try:
        if not stat.S_ISREG(os.stat(real).st_mode):
            return None
    except OSError:
        return None
    return real


class ClipRoots:
    """The library roots of one server: the ``--allow-root`` directories, else the first served index's."""

    def __init__(self, allowed: Sequence[str | os.PathLike] = ()):
        self._allowed = [Path(os.path.realpath(a)) for a in allowed]
        self._derived: list[Path] | None = None
        self._lock = threading.Lock()

    def roots(self, paths: Sequence[str]) -> list[Path]:
        """The roots; without ``allowed``, ``paths`` (the recorded clip paths of the index now served) set
        them on the first call only."""
        if self._allowed:
            return self._allowed
        with self._lock:
            if self._derived is None:
                self._derived = library_roots(paths)
            return self._derived
