"""What a command writes, declared once: the CLI checks each output's kind and holds its writer lock.

A command module lists its outputs in ``OUTPUTS`` (the argparse dest of the option naming it, what it is
for messages, and whether it is a folder). :mod:`mlatr.cli` then gives the command a ``--wait`` option,
refuses an output of the wrong kind (a folder given where a file is written, a file where a folder is)
before anything runs, and holds :func:`mlatr.writer_lock.writer_lock` on every given output for the whole
run: a second process writing the same output refuses at once (exit 2, naming the holder), or with
``--wait`` waits for it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple

from mlatr.commands._arg_types import positive_float
from mlatr.output_paths import check_output_path
from mlatr.writer_lock import writer_lock


class Output(NamedTuple):
    """One output of a command: ``args.<dest>`` names it (None when not given)."""

    dest: str
    what: str
    folder: bool


def add_wait_option(parser: argparse.ArgumentParser) -> None:
    """``--wait [SECONDS]``: wait for another process writing the same output instead of refusing."""
    parser.add_argument("--wait", nargs="?", const=True, default=False, type=positive_float, metavar="SECONDS",
                        help="when another process is writing the same output, wait for it (at most SECONDS) "
                             "instead of refusing")


def check_output_kind(option: str, path: str | Path, folder: bool) -> None:
    """Refuse an output that exists as the other kind (a file where a folder is written, or the reverse) or is
    a device, FIFO or socket (:func:`mlatr.output_paths.check_output_path`)."""
    check_output_path(path, option, folder)


def _option(parser: argparse.ArgumentParser | None, dest: str) -> str:
    for action in getattr(parser, "_actions", ()):
        if action.dest == dest:
            return action.option_strings[-1] if action.option_strings else action.metavar or dest
    return "--" + dest.replace("_", "-")


def hold_output(path: str | Path, what: str, folder: bool = False, wait: bool | float = False,
                option: str = "") -> ExitStack:
    """Check one output's kind and take its writer lock (a context manager): for an output a command decides
    itself (a default name, ``--in-place``), which ``OUTPUTS`` cannot declare."""
    check_output_kind(option, path, folder)
    stack = ExitStack()
    stack.enter_context(writer_lock(path, what, wait=wait, folder=folder))
    return stack


@contextmanager
def hold_outputs(args: argparse.Namespace, outputs: Iterable[Output]) -> Iterator[None]:
    """Check the kind of every given output, then hold their writer locks for the body of a ``with``."""
    parser = getattr(args, "_parser", None)
    given = [(o, getattr(args, o.dest, None)) for o in outputs]
    given = [(o, p) for o, p in given if p is not None]
    for out, path in given:
        check_output_kind(_option(parser, out.dest), path, out.folder)
    with ExitStack() as stack:
        for out, path in given:
            stack.enter_context(writer_lock(path, out.what, wait=getattr(args, "wait", False), folder=out.folder))
        yield
