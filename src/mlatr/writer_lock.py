"""One writer per output: an advisory file lock that a second process sees and a killed one releases.

Every command that writes an output another process could write at the same time (a training run's
``out_dir``, an index, a ``data prepare`` store, ...) holds :func:`writer_lock` on it for as long as it
writes. The lock is ``flock`` on a small file (``.mlatr-lock`` inside an output folder, ``.NAME.lock``
beside an output file). The kernel drops an ``flock`` when its process dies, however it dies, so a lock
left by a killed process is stale by construction: the next writer takes it over at once and says whose
it was. The file records the holder (pid, host, command, start time) so a refusal can name it.

A second writer either refuses at once (``wait=False``, the default: :class:`LockedError`, exit 2 on the
CLI) or waits (``wait=True``, or a number of seconds), saying once that it waits and for whom.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mlatr.errors import MlatrError

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks; writers are not serialised there
    fcntl = None

#: The lock file inside an output folder.
FOLDER_LOCK = ".mlatr-lock"
#: Seconds between two tries while waiting for a lock.
POLL_S = 0.2


class LockedError(MlatrError):
    """Another live process holds the writer lock of an output."""


#: File descriptors of the locks this process holds. A child forked while one is held (a data loader's worker
#: processes) shares the lock's open file, and an ``flock`` lasts until every process sharing it has let go:
#: a training run killed with SIGKILL would stay locked until its orphaned workers noticed and exited. So a
#: forked child points those descriptors at /dev/null at once; the lock stays its parent's alone.
_HELD: set[int] = set()


def _drop_inherited_locks() -> None:
    if not _HELD:
        return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in _HELD:
        os.dup2(null, fd)  # the number stays valid (the child's copy of the file object may close it)
    os.close(null)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited_locks)


def lock_path(output: str | os.PathLike, folder: bool | None = None) -> Path:
    """The lock file of ``output``: inside it when it is (or will be) a folder, beside it when a file.

    ``folder`` says which it is; when None, an output that does not exist yet is a folder when its name has
    no suffix (``runs/x``) and a file otherwise (``lib.idx.npz``). The folder (or the file's parent folder)
    is created so the lock can be taken before anything else.
    """
    output = Path(output)
    if _is_folder(output, folder):
        output.mkdir(parents=True, exist_ok=True)
        return output / FOLDER_LOCK
    output.parent.mkdir(parents=True, exist_ok=True)
    return output.parent / f".{output.name}.lock"


def _is_folder(output: Path, folder: bool | None) -> bool:
    """``folder`` when given, else whether ``output`` is (or, not existing, will be by its name) a folder."""
    if folder is not None:
        return folder
    return output.is_dir() or (not output.exists() and not output.suffix)


def _holder(handle) -> dict:
    handle.seek(0)
    try:
        found = json.loads(handle.read() or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _describe(holder: dict) -> str:
    if not holder:
        return "another process"
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')} "
            f"(`{holder.get('command', '?')}`, since {holder.get('since', '?')})")


@contextmanager
def writer_lock(output: str | os.PathLike, what: str = "output", wait: bool | float = False,
                folder: bool | None = None) -> Iterator[Path]:
    """Hold the single-writer lock of ``output`` for the body of a ``with``.

    Args:
        output: The file or folder being written.
        what: What the output is, for messages ("training run", "index", ...).
        wait: False to refuse at once when another live process holds the lock; True to wait for it;
            a number of seconds to wait at most, then refuse.
        folder: Whether ``output`` is a folder (see :func:`lock_path`; None guesses from its name).

    Yields:
        The lock file's path.

    Raises:
        LockedError: Another live process holds the lock (and waiting was not asked for or timed out).
    """
    created = _first_missing_folder(output, folder)
    path = lock_path(output, folder)
    try:
        with _held(path, output, what, wait) as held:
            yield held
    finally:
        if created is not None:
            _remove_if_only_lock(created, path)


def _first_missing_folder(output: str | os.PathLike, folder: bool | None) -> Path | None:
    """The outermost folder :func:`lock_path` will create for ``output`` (None if none): removed again when
    the writer left nothing but its lock there (a command refused before any work leaves nothing behind)."""
    output = Path(output).absolute()
    place = output if _is_folder(output, folder) else output.parent
    missing = None
    while not place.exists():
        missing, place = place, place.parent
    return missing


def _remove_if_only_lock(created: Path, lock: Path) -> None:
    try:
        if lock.exists() and {p.name for p in lock.parent.iterdir()} == {lock.name}:
            lock.unlink()
        for place in [lock.parent.absolute(), *lock.parent.absolute().parents]:  # empty folders it created
            if not place.is_relative_to(created):
                break
            place.rmdir()
    except OSError:
        pass  # something was written there after all: keep it


@contextmanager
def _held(path: Path, output, what: str, wait: bool | float) -> Iterator[Path]:
    if fcntl is None:
        yield path
        return
    with open(path, "a+", encoding="utf-8") as handle:
        deadline = None if wait is True else time.monotonic() + (0.0 if wait is False else float(wait))
        said = False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _describe(_holder(handle))
                if deadline is not None and time.monotonic() >= deadline:
                    raise LockedError(f"{output}: the {what} is being written by {holder}; wait for it to "
                                      f"finish (or stop it), or write to another place") from None
                if not said:
                    print(f"mlatr: waiting for {holder}, which is writing the {what} {output}",
                          file=sys.stderr)
                    said = True
                time.sleep(POLL_S)
        previous = _holder(handle)
        if previous.get("open") and previous.get("pid") != os.getpid():
            print(f"mlatr: taking over the {what} {output} from {_describe(previous)}, which ended without "
                  f"releasing it", file=sys.stderr)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "open": True,
                  "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:300],
                  "since": time.strftime("%Y-%m-%dT%H:%M:%S")}
        _record(handle, record)
        _HELD.add(handle.fileno())
        try:
            yield path
        finally:
            _HELD.discard(handle.fileno())
            _record(handle, {**record, "open": False})
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _record(handle, record: dict) -> None:
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(record))
    handle.flush()
