"""``mlatr serve INDEX --watch-folder DIR``: the served index kept in sync with a folder while it is served.

Every ``every`` seconds a daemon thread lists the folder (each file's path, size and mtime: no file is read) and,
when the listing differs from the last sync's, syncs the index with it (:func:`mlatr.search.sync.sync_folder`:
new files encoded, deleted ones removed, renamed and moved ones followed without encoding their audio) with the
served index's own model, then reloads the index (:meth:`~mlatr.serve.live_index.LiveIndex.reload_if_changed`).
The model encodes the new files outside :attr:`LiveIndex.lock <mlatr.serve.live_index.LiveIndex.lock>` (queries go on;
a forward pass in eval mode reads the weights only), and the write takes the index's writer lock as any writer's
does. A failed sync is logged and tried again at the next change; the server keeps serving what it has.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from mlatr.errors import MlatrError
from mlatr.search.sync import SyncReport, sync_folder, sync_summary
from mlatr.serve.live_index import LiveIndex

log = logging.getLogger("mlatr.serve")


def listing(folder: Path, skip: Path | None = None) -> tuple:
    """``(relative path, size, mtime_ns)`` of every regular file under ``folder`` (hidden ones and ``skip``, the
    index when it lies inside the folder, left out), sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")
                       and (skip is None or Path(dirpath, d).resolve() != skip)]
        for name in filenames:
            path = Path(dirpath, name)
            if name.startswith(".") or (skip is not None and path.resolve() == skip):
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            out.append((str(path.relative_to(folder)), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


class FolderWatch:
    """Keeps ``live``'s index in sync with ``folder`` (module docstring)."""

    def __init__(self, live: LiveIndex, folder: str | os.PathLike, every: float):
        self.live, self.folder, self.every = live, Path(folder).resolve(), float(every)
        self.last: tuple | None = None
        self.syncs = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        path = live.storage.path
        self._skip = path.resolve() if path is not None else None

    def poll(self) -> SyncReport | None:
        """One look at the folder: a sync (and a reload) when it changed since the last one; its report, or None."""
        now = listing(self.folder, self._skip)
        if now == self.last:
            return None
        try:
            model = self.live.current().index.model()
            # skip_bad: one bad file must not stop the folder's other changes from being followed
            report = sync_folder(model, self.folder, self.live.storage.where, skip_bad=True)
        except MlatrError as exc:
            log.warning("syncing %s with %s failed: %s", self.live.path, self.folder, exc)
            return None
        self.last, self.syncs = now, self.syncs + 1
        if report.skips:
            log.warning("syncing %s with %s skipped %d bad file(s): %s", self.live.path, self.folder,
                        len(report.skips), "; ".join(str(x) for x in report.skips[:5]))
        if report.wrote():
            log.info("synced %s with %s: %s", self.live.path, self.folder, sync_summary(report))
            self.live.reload_if_changed()
        return report

    def start(self) -> None:
        """Poll in a daemon thread until :meth:`stop` (the first poll at once)."""
        if self._thread is not None:
            return
        self._stop.clear()

        def run():
            while True:
                try:
                    self.poll()
                except Exception:  # a bug must not end the watch: logged, and the next change is tried again
                    log.exception("watching %s failed", self.folder)
                if self._stop.wait(self.every):
                    return

        self._thread = threading.Thread(target=run, name="mlatr-folder-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=60)
            self._thread = None
