"""What a file actually is, for the message when it is not what a command expected.

A text file given as a checkpoint made torch say "pickled data / weights_only", a truncated index gave
``BadZipFile``, an empty one ``EOFError``: true, but no help. :func:`sniff` looks at the bytes (empty,
text, a zip archive and what it holds, a truncated zip, a NumPy ``.npy`` array, a pickle) and
:func:`unreadable` turns that into one :class:`~mlatr.errors.MlatrError` naming the file, what was
expected and what was found.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from mlatr.errors import MlatrError

#: Bytes read from the start of a file to recognise it.
HEAD_BYTES = 512
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class FileKind:
    """What :func:`sniff` found: ``kind`` (one of ``missing folder special unreadable empty torch npz zip
    truncated-zip npy pickle text binary``) and a phrase for messages."""

    kind: str
    description: str


def _zip_kind(path: Path) -> FileKind:
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, EOFError):
        size = path.stat().st_size
        return FileKind("truncated-zip", f"a truncated or damaged zip archive ({size:,} bytes; its directory "
                                         "at the end is missing or unreadable: an interrupted copy or write?)")
    if any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
        return FileKind("torch", "a PyTorch file (torch.save)")
    arrays = [n[:-4] for n in names if n.endswith(".npy")]
    if arrays and len(arrays) == len(names):
        shown = ", ".join(sorted(arrays)[:8]) + (", ..." if len(arrays) > 8 else "")
        return FileKind("npz", f"a NumPy .npz archive of the arrays {shown}")
    return FileKind("zip", f"a zip archive of {len(names)} file(s)")


def _text_start(head: bytes) -> str | None:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:60] + ("..." if len(first) > 60 else "")


def special_file(path: str | os.PathLike) -> str | None:
    """``"a FIFO"``, ``"a socket"``, ``"a character device"`` or ``"a block device"`` when ``path`` (links
    followed) is one of those, else None. Checked before opening a user's file: opening a FIFO blocks
    until something writes to it, so a FIFO in an imported folder would hang the import."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return None


def folder_file(root: str | os.PathLike, name: str, what: str, required: bool = False) -> Path | None:
    """``root/name`` to read from a folder a user gave (a model folder), when it is a regular file inside
    ``root``: ``name`` relative with no ``..`` part, its real path (links followed) inside ``root``'s, not a
    folder, FIFO, socket or device (never opened to find out); None when it does not exist and not
    ``required``. Else :class:`MlatrError` ``WHAT: PATH: what it is``."""
    root = Path(root)
    posix = str(name).replace("\\", "/")
    if not posix or posix.startswith("/") or ".." in posix.split("/") or "\0" in posix:
        raise MlatrError(f"{what}: {name!r} names a file outside {root} (only files inside the folder are read)")
    path = root / posix
    if not path.exists() and not path.is_symlink():
        if required:
            raise MlatrError(f"{what}: {path} is missing")
        return None
    real, base = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([real, base]) != base:
        raise MlatrError(f"{what}: {path} leads outside {root} (to {real}); only files inside the folder are read")
    special = special_file(path)
    if special or not path.is_file():
        raise MlatrError(f"{what}: {path} is {special or 'not a regular file'}, not a file to read")
    return path


def sniff(path: str | os.PathLike) -> FileKind:
    """What the file at ``path`` holds, from its first bytes (and a zip archive's directory); a FIFO, socket
    or device is named without being opened."""
    p = Path(path)
    if not p.exists():
        return FileKind("missing", "missing")
    if p.is_dir():
        return FileKind("folder", "a folder")
    special = special_file(p)
    if special:
        return FileKind("special", f"{special}, not a regular file (not opened)")
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError as exc:
        return FileKind("unreadable", f"unreadable ({exc.strerror or exc})")
    if size == 0:
        return FileKind("empty", "empty (0 bytes)")
    if head.startswith(_ZIP_MAGIC):
        return _zip_kind(p)
    if head.startswith(_NPY_MAGIC):
        return FileKind("npy", "a single NumPy .npy array (np.save), not an .npz archive (np.savez)")
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return FileKind("pickle", "a Python pickle (an older torch.save format or another program's file)")
    text = _text_start(head)
    if text is not None:
        return FileKind("text", f"a text file starting {text!r}")
    return FileKind("binary", f"binary data of another kind ({size:,} bytes starting {head[:8].hex(' ')})")


def unreadable(path: str | os.PathLike, expected: str, detail: object = None,
               expected_kinds: tuple[str, ...] = ()) -> MlatrError:
    """The error for a file that could not be read as ``expected`` (e.g. ``"an mlatr checkpoint"``): names
    the file and what it is instead. When the file is of one of ``expected_kinds`` (it looks right but its
    content failed), the reader's own ``detail`` is the useful part and is given instead."""
    found = sniff(path)
    if found.kind in expected_kinds and detail is not None:
        return MlatrError(f"{path}: cannot read {expected} ({detail})")
    return MlatrError(f"{path}: not {expected}: the file is {found.description}")
