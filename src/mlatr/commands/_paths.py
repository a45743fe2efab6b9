"""Outputs that would overwrite a command's own inputs are refused before anything is read or written."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mlatr.errors import MlatrError
from mlatr.output_paths import check_output_path


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when ``a`` and ``b`` name one file (the same path once links are resolved, or the same inode)."""
    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_output_over_input(outputs: Iterable[tuple[str, str | os.PathLike | None]],
                             inputs: Iterable[tuple[str, str | os.PathLike | None]]) -> None:
    """Raise :class:`~mlatr.errors.MlatrError` when an output (``(option, path)``) is one of the input files
    (``(role, path)``); ``None`` paths are not given and not checked. An output that is a folder, a device, a
    FIFO or a socket is refused too (:func:`mlatr.output_paths.check_output_path`): the command writes a file."""
    ins = [(role, Path(p)) for role, p in inputs if p is not None and Path(p).is_file()]
    for option, out in outputs:
        if out is None:
            continue
        check_output_path(out, option)
        for role, src in ins:
            if same_file(out, src):
                raise MlatrError(f"{option} {out} is the {role} {src}: the command would replace its own input; "
                                 "write to another file")


def model_inputs(args) -> list[tuple[str, str | None]]:
    """The input files of a command that encodes ``--manifest`` with ``--checkpoint``."""
    return [("--manifest", args.manifest), ("--checkpoint", args.checkpoint)]
