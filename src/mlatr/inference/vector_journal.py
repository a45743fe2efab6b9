"""Vectors a long encoding run has made so far, kept on disk so that a killed run resumes where it was.

A :class:`VectorJournal` is a folder in the cache (:func:`mlatr.models.use_prepared.cache_dir` /
``partial-vectors/KEY``) named by what makes a vector (the model's weights, the audio settings, the runtime):
the same command run again finds it. It holds parts written atomically, each ``{name: vector}`` of the clips
encoded since the last part (at most :data:`FLUSH_SECONDS` of work) and the clips skipped as unreadable; a
clip's name says which file it was (its id, path, size and modification time), so a file changed since is
encoded again. The writer removes the journal once its output is written; one left by a run never started
again is removed by the next run after :data:`KEEP_DAYS`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from mlatr.io_utils import atomic_write_with
from mlatr.models.use_prepared import cache_dir

#: Seconds of encoding between two parts written (what a kill loses at most; ``$MLATR_JOURNAL_SECONDS`` sets it).
FLUSH_SECONDS = float(os.environ.get("MLATR_JOURNAL_SECONDS", "30"))
#: Days after which a journal no run has touched is removed.
KEEP_DAYS = 7


def journal_key(**what) -> str:
    """A short hash of what makes the vectors (JSON-able keyword values)."""
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:20]


class VectorJournal:
    """The parts of one run's vectors in ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._names: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._bad: dict[str, str] = {}
        self._since = time.monotonic()

    @classmethod
    def in_cache(cls, key: str, root: str | Path | None = None) -> VectorJournal:
        """The journal of ``key`` under ``root`` (default the cache folder); old journals of other keys removed."""
        base = Path(root) if root is not None else cache_dir() / "partial-vectors"
        if base.is_dir():
            for old in base.iterdir():
                if old.name != key and time.time() - old.stat().st_mtime > KEEP_DAYS * 86400:
                    shutil.rmtree(old, ignore_errors=True)
        return cls(base / key)

    def load(self) -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """``({name: vector}, {name: why skipped})`` of the parts written so far (a torn part is ignored)."""
        vectors: dict[str, np.ndarray] = {}
        bad: dict[str, str] = {}
        for part in sorted(self.folder.glob("part-*.npz")) if self.folder.is_dir() else []:
            try:
                with np.load(part, allow_pickle=False) as z:
                    names, vecs = json.loads(str(z["names"])), z["vectors"]
                    bad.update(json.loads(str(z["bad"])))
            except (OSError, ValueError, KeyError):  # a part cut short by a kill during its write: encoded again
                continue
            vectors.update((n, v) for n, v in zip(names, vecs, strict=True) if np.isfinite(v).all())
        return vectors, bad

    def add(self, names: list[str], vectors: np.ndarray, bad: dict[str, str]) -> None:
        """Record clips encoded (``names`` with ``vectors [n, d]``) and skipped; written every :data:`FLUSH_SECONDS`.
        A vector that is not finite is not recorded: the run refuses it (the index's check names the clip), and
        the next run, whatever its output, encodes that clip again rather than resume a NaN."""
        finite = np.isfinite(vectors).all(axis=1) if len(names) else []
        self._names += [n for n, ok in zip(names, finite, strict=True) if ok]
        self._vectors += [v for v, ok in zip(vectors, finite, strict=True) if ok]
        self._bad.update(bad)
        if time.monotonic() - self._since >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write what was added since the last part as a new part."""
        self._since = time.monotonic()
        if not self._names and not self._bad:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        number = len(list(self.folder.glob("part-*.npz")))
        names, vectors, bad = json.dumps(self._names), np.stack(self._vectors) if self._vectors else np.zeros((0, 0)), \
            json.dumps(self._bad)
        atomic_write_with(self.folder / f"part-{number:06d}.npz",
                          lambda fh: np.savez(fh, names=np.asarray(names), vectors=vectors, bad=np.asarray(bad)))
        self._names, self._vectors, self._bad = [], [], {}

    def remove(self) -> None:
        """Delete the journal (its output is written)."""
        shutil.rmtree(self.folder, ignore_errors=True)
