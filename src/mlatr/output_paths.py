"""Where mlatr may write: the one check every writer makes on the path it is about to create or replace.

An atomic write ends with ``os.replace(temporary, path)``, which replaces whatever ``path`` is: run as root,
``-o /dev/null`` replaced the system's null device by a regular file, and a FIFO or a socket someone left
under an output's name became a file too. :func:`output_problem` says what is wrong with a path a command
writes, before anything is written: a file is written only over a regular file or a new name, a folder
only into a folder or a new name; a device node, FIFO or socket is never replaced, a folder never stands
where a file is written (and the reverse), and the folder above must be a folder. :func:`check_output_path`
raises it as :class:`~mlatr.errors.MlatrError` naming the option.

Every writer reaches it: :func:`mlatr.io_utils.atomic_open` (every file mlatr writes: manifests, embeddings,
``--json`` results, checkpoints, index files, shards, audio an import writes) checks its target, and the
command line checks each declared output (:mod:`mlatr.commands._outputs`) and every ``-o`` before a command
starts its work, so a refused output costs nothing.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from mlatr.errors import MlatrError

#: ``stat`` tests and names of the kinds of file a writer never replaces.
_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
            (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str | None:
    return next((name for test, name in _SPECIAL if test(mode)), None)


def output_problem(path: str | os.PathLike, folder: bool | None = False) -> str | None:
    """What stops a command from writing ``path`` (``folder``: True for an output folder, False for a file,
    None for either), or None when it may: the path is new, or already of the kind written. Links are
    followed (a link to ``/dev/null`` is refused as the device it points at)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        mode = None  # a part of the path above is a file: the parent check below says which
    except (OSError, ValueError) as exc:  # a path too long, a permission on the way, a NUL byte
        return f"cannot be checked ({getattr(exc, 'strerror', None) or exc})"
    if mode is not None:
        special = _kind(mode)
        if special:
            return (f"is {special}, not a regular file: mlatr writes only regular files and folders, and would "
                    "replace it; give another path")
        if stat.S_ISDIR(mode) and folder is False:
            return "is a folder; give the file to write"
        if not stat.S_ISDIR(mode) and folder is True:
            return "is a file, but the command writes a folder here; give a folder (new or existing)"
        return None
    for parent in path.absolute().parents:  # the nearest existing folder above must be a folder
        try:
            parent_mode = os.stat(parent).st_mode
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            continue
        except (OSError, ValueError) as exc:
            return f"cannot be checked ({getattr(exc, 'strerror', None) or exc})"
        if not stat.S_ISDIR(parent_mode):
            return f"{parent} is {_kind(parent_mode) or 'a file'}, not a folder to write into"
        return None
    return None


def check_output_path(path: str | os.PathLike, option: str = "", folder: bool | None = False) -> Path:
    """``path`` when a command may write it (:func:`output_problem`), else :class:`MlatrError` ``OPTION PATH:
    problem``."""
    problem = output_problem(path, folder)
    if problem:
        raise MlatrError(f"{option + ' ' if option else ''}{path}: {problem}")
    return Path(path)
