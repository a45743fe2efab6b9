"""Errors a user can cause, with the place they come from.

Every user-facing failure (a bad manifest line, unreadable audio, an unknown language, a bad array)
raises :class:`MlatrError` or a subclass; the CLI prints its message and exits non-zero.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager


class MlatrError(ValueError):
    """A problem in the user's input or an invalid argument, with a message that says where and what.

    A :class:`ValueError`, so callers of the Python API that catch ``ValueError`` keep working.
    """


class InputError(MlatrError):
    """A problem located in a file: ``file:line: field: message``."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.file, self.line, self.field, self.message = file, line, field, message
        where = ""
        if file is not None:
            where = f"{file}:{line}: " if line is not None else f"{file}: "
        if field is not None:
            where += f"{field}: "
        super().__init__(where + message)


class MissingFileError(MlatrError, FileNotFoundError):
    """A file or folder the user named does not exist: ``PATH: file not found (what it was to be)``.

    Also a :class:`FileNotFoundError`, so Python callers may catch it as the standard library's error.
    """

    def __init__(self, path: str | os.PathLike, what: str = ""):
        super().__init__(f"{os.fspath(path)}: file not found" + (f" ({what})" if what else ""))
        self.filename = os.fspath(path)

    def __str__(self) -> str:  # the message, not OSError's "[Errno ...]" form
        return str(self.args[0])


#: errno values that mean there is no room to write: the disk, the user's quota, the file size limit.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFullError(MlatrError):
    """A file could not be written for lack of space (the previous version of it is intact)."""


def describe_os_error(exc: OSError) -> str:
    """``file: reason`` for an :class:`OSError`, saying plainly when there is no room to write."""
    where = f"{exc.filename}: " if exc.filename else ""
    reason = exc.strerror or str(exc)
    if exc.errno == errno.ENOENT:
        reason = "file not found"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += " (the disk or your quota is full: free some space and run the command again)"
    elif exc.errno == errno.EFBIG:
        reason += " (larger than the system lets one file grow: see ulimit -f)"
    return where + reason


@contextmanager
def panic_as_error(what: str) -> Iterator[None]:
    """Turn a panic inside Rust code (a tokenizer's: ``pyo3_runtime.PanicException``, which derives from
    :class:`BaseException`, so ``except Exception`` lets it through with its backtrace) into one
    :class:`MlatrError` saying ``what`` failed and the panic's first line."""
    try:
        yield
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        first = (str(exc).strip().splitlines() or ["a panic"])[0]
        raise MlatrError(f"{what}: the tokenizer failed inside its Rust code ({first[:200]}); its files may be "
                         "damaged or hostile (a regular expression that backtracks without end)") from None
