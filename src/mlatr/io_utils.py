"""Atomic file writes: a temporary file in the same folder, flushed, then ``os.replace``.

A reader never sees a half-written file, and an interrupted job leaves the previous version intact.

The temporary file is ``.NAME.XXXXXXXX.tmp`` beside ``NAME`` (the project's own pattern, nothing else is
touched), locked (``flock``) by the process writing it for as long as it writes. A process killed
mid-write leaves it behind, unlocked: :func:`remove_orphan_temps` deletes such orphans, and every atomic
write of ``NAME`` (and the commands that write it, at their start) calls it, so the next run in the same
place cleans up. A target that is not a regular file (a device, a FIFO, a socket, a folder) is never replaced
(:mod:`mlatr.output_paths`). A write that fails because the disk is full raises :class:`~mlatr.errors.DiskFullError`
saying so, the previous version intact.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from mlatr.errors import DISK_FULL, DiskFullError, describe_os_error
from mlatr.output_paths import check_output_path

try:
    import fcntl
except ImportError:  # not POSIX: no way to tell a live writer's temp file from an orphan
    fcntl = None

#: Free space below which a failed write is blamed on a full disk even without an errno (torch's
#: writer reports some write failures as a RuntimeError).
LOW_SPACE_BYTES = 1 << 20
#: :func:`atomic_open`'s temporary files: ``.NAME.`` + ``tempfile.mkstemp``'s 8 random characters + ``.tmp``.
_TEMP = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp")


def _temp_target(name: str) -> str | None:
    """``NAME`` when ``name`` is ``.NAME.XXXXXXXX.tmp`` (:func:`atomic_open`'s pattern), else ``None``."""
    m = _TEMP.fullmatch(name)
    return m.group(1) if m else None


def remove_orphan_temps(folder: str | os.PathLike, names: Iterable[str]) -> list[Path]:
    """Delete the temporary files interrupted atomic writes of ``folder/NAME`` (for each of ``names``) left:
    ``.NAME.XXXXXXXX.tmp`` files that no live process holds locked. One listing of the folder; files of
    other names or patterns are never touched. Returns those removed."""
    folder, wanted = Path(folder), set(names)
    if fcntl is None or not folder.is_dir():
        return []
    removed = []
    for cand in folder.iterdir():
        if _temp_target(cand.name) not in wanted:
            continue
        try:
            fd = os.open(cand, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # a live writer holds it
            os.close(fd)
            continue
        try:
            cand.unlink()
            removed.append(cand)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _disk_full(exc: BaseException, folder: Path) -> OSError | None:
    """The disk-full ``OSError`` behind ``exc`` (its cause / context chain), or one made up when the
    folder has almost no space left; ``None`` when the failure is something else."""
    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL:
            return seen
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, RuntimeError | OSError):
        try:
            if shutil.disk_usage(folder).free < LOW_SPACE_BYTES:
                return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            pass
    return None


def _umask() -> int:
    """The process's file creation mask (read from /proc where it can be: setting it to read it is not
    thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _new_file_mode(path: Path) -> int:
    """The permissions a file written atomically at ``path`` gets: those of the file it replaces, else what
    ``open()`` would give a new file (0666 less the umask)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8", sweep: bool = True):
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed.
    ``sweep`` first removes the orphans of earlier writes of ``path`` (one listing of the folder: a caller
    writing thousands of files into one folder sweeps once itself and passes ``sweep=False``). A ``path`` that is
    a folder, a device, a FIFO or a socket is refused before anything is written
    (:func:`mlatr.output_paths.check_output_path`)."""
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if sweep:
        remove_orphan_temps(path.parent, [path.name])
    binary = "b" in mode
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, _new_file_mode(path))  # mkstemp's 0600 would hide the file from everyone but its writer
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        full = _disk_full(exc, path.parent) if isinstance(exc, Exception) else None
        if full is not None:
            full.filename = full.filename or str(path)
            raise DiskFullError(f"{describe_os_error(full)}; {path.name} was not written "
                                "(its previous version, if any, is intact)") from exc
        raise


@contextmanager
def disk_full_named(path: str | os.PathLike, unchanged: str):
    """Inside the block, a failure for lack of room (ENOSPC, EDQUOT, EFBIG: the cause chain too) becomes a
    :class:`DiskFullError` naming ``path`` and saying what is ``unchanged`` (a write error of ``numpy.save`` or
    FAISS names no file)."""
    try:
        yield
    except Exception as exc:
        full = _disk_full(exc, Path(path).parent)
        if full is None:
            raise
        raise DiskFullError(f"{path}: {describe_os_error(full)}; {unchanged}") from exc


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=indent)
        fh.write("\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[Any]) -> None:
    with atomic_open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def atomic_write_with(path: str | os.PathLike, writer: Callable[[IO[bytes]], None], sweep: bool = True) -> None:
    """Atomic binary write through a callback, e.g. ``lambda f: torch.save(obj, f)`` (``sweep``: see
    :func:`atomic_open`)."""
    with atomic_open(path, "wb", encoding=None, sweep=sweep) as fh:
        writer(fh)
