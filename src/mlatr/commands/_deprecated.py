"""Old spellings, kept for one release: accepted, hidden from the help, and named in a warning that gives the
new spelling. Every visible option has one spelling across the commands (tests/test_cli_help.py walks them).

A command module lists its renamed options in ``OLD_SPELLINGS = {"--out": "--output"}``; every command with
``--model`` also takes ``--checkpoint`` (:data:`MODEL_OLD_SPELLINGS`). :func:`new_spellings` rewrites a
command's arguments before argparse reads them, so a required option given by its old name is still found.
A positional that became an option (``mlatr export CKPT``) is an :class:`OldSpelling` positional.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from mlatr.commands._notices import warn

#: Every command with a ``--model`` option: its old spelling.
MODEL_OLD_SPELLINGS = {"--checkpoint": "--model"}


def new_spellings(args: Sequence[str], spellings: Mapping[str, str]) -> list[str]:
    """``args`` (a command's arguments, after its name) with each old option (``--out``, ``--out=X``) replaced by
    its new spelling, warning once per old option; arguments after ``--`` are left as they are."""
    out, said = [], set()
    for i, arg in enumerate(args):
        if arg == "--":
            return out + list(args[i:])
        name, eq, value = arg.partition("=")
        new = spellings.get(name) if name.startswith("--") else None
        if new is None:
            out.append(arg)
            continue
        if name not in said:
            said.add(name)
            warn([f"{name} is deprecated and will be removed in the next release: use {new}"])
        out.append(new + eq + value)
    return out


class OldSpelling(argparse.Action):
    """An optional positional that an option replaced: stores its value into ``target`` and warns, naming the
    new spelling (``new``)."""

    def __init__(self, option_strings, dest, new: str, target: str, **kwargs):
        self.new, self.target = new, target
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if values is None:  # left out
            return
        warn([f"the positional {self.metavar} is deprecated and will be removed in the next release: use "
              f"{self.new} {values}"])
        setattr(namespace, self.target, values)


def add_old_positional(parser, name: str, dest: str, new: str, metavar: str) -> None:
    """Accept an optional positional ``name`` (hidden) for option ``dest``, warning that ``new`` replaces it."""
    parser.add_argument(name, nargs="?", action=OldSpelling, new=new, target=dest, default=None, metavar=metavar,
                        help=argparse.SUPPRESS)
