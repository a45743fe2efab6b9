"""What a command that reads a whole library does with a bad file: skip it, count it, list it with its reason in a
report file beside the output and say so in its exit status; or, with ``--strict``, stop at the first one.

Who skips by default: a library given as folders of sounds and sound files (files as found on a disk: a
collection of 50,000 always holds some that are truncated, empty or not audio at all, and one of them should not
cost the other 49,999). A manifest or webdataset shards stop at the first bad line or clip unless ``--skip-bad``:
a person or a program wrote each line, and a bad one is a mistake to fix (or an evaluation set that silently
shrinks), not noise to count.

Exit status (``EXIT_SKIPPED``, documented in docs/architecture.md, "The error contract"):

- 0: done, nothing skipped; or done, and the bad inputs skipped were asked to be (``--skip-bad``);
- 3: done, the output written, but bad inputs were skipped by default: a script sees it without reading stderr,
  ``|| [ $? -eq 3 ]`` accepts it, ``--skip-bad`` says up front that skips are expected (0) and ``--strict``
  that none is allowed (2);
- 2: an error; nothing written (``--strict``'s first bad file included).

The report (``OUTPUT.skipped.jsonl`` beside the output, or ``--skip-report FILE``) holds one JSON object per
skipped input (:meth:`mlatr.inference.library.Skip.to_dict`: ``file``, ``id``, ``line``, ``reason``), written
atomically; a run that skips nothing removes the report a previous run left at that name, so the file always
describes the last run.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mlatr.commands._notices import SHOWN
from mlatr.io_utils import atomic_write_jsonl
from mlatr.output_paths import check_output_path
from mlatr.terminal_text import shown

#: Exit status of a command that did its work but skipped bad inputs it was not told to skip (see above).
EXIT_SKIPPED = 3

#: The report's name beside an output: ``OUTPUT`` + this.
REPORT_SUFFIX = ".skipped.jsonl"


def add_skip_options(parser: argparse.ArgumentParser, what: str = "file") -> None:
    """``--skip-bad`` / ``--strict`` (exclusive) and ``--skip-report FILE``; ``what`` names a bad input."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--skip-bad", action="store_true",
                       help=f"skip every bad {what} (unreadable, truncated, not audio, a bad manifest line), count "
                            f"it and list it in the report, exit status 0 (the default for folders and sound files: "
                            f"the same, with exit status {EXIT_SKIPPED} when something was skipped)")
    group.add_argument("--strict", action="store_true",
                       help=f"stop at the first bad {what}, writing nothing (the default for a manifest or shards)")
    parser.add_argument("--skip-report", metavar="FILE", default=None,
                        help=f"where to list the skipped inputs, one JSON object each (default: OUTPUT{REPORT_SUFFIX} "
                             "beside the output)")


def skip_bad(args: argparse.Namespace, items: Sequence[str | os.PathLike]) -> bool:
    """Whether this run skips bad inputs: ``--skip-bad``, or by default when the library ``items`` are folders and
    sound files only (never with ``--strict``)."""
    from mlatr.inference.library import files_on_disk  # loads torch: not paid by every command's parser

    return bool(args.skip_bad or (not args.strict and files_on_disk(items)))


def report_path(args: argparse.Namespace, output: str | os.PathLike | None) -> Path | None:
    """The report file of this run: ``--skip-report``, else beside ``output`` (None without an output file, e.g. a
    remote Milvus collection or ``classify``'s stdout), checked as every output is (no device, FIFO or folder)."""
    given = getattr(args, "skip_report", None)
    if given is not None:
        path = Path(given)
    elif output is None:
        return None
    else:
        path = Path(os.fspath(output).removesuffix("/") + REPORT_SUFFIX)
    check_output_path(path, "--skip-report", folder=False)
    return path


def finish_skips(args: argparse.Namespace, skips: Sequence, report: Path | None, what: str = "bad file(s)") -> int:
    """Say what was skipped (the count and the first few on stderr, every one in ``report``) and return the exit
    status (see the module docstring). ``skips``: :class:`~mlatr.inference.library.Skip` objects."""
    if not skips:
        if report is not None and report.is_file() and getattr(args, "skip_report", None) is None:
            report.unlink()  # a previous run's list, which this run's output no longer matches
        return 0
    if report is not None:
        atomic_write_jsonl(report, [s.to_dict() for s in skips])
    where = f", each listed with its reason in {report}" if report is not None else \
        ", give --skip-report FILE to list every one" if len(skips) > SHOWN else ""
    print(f"mlatr: skipped {len(skips)} {what}{where} (--strict stops at the first instead):", file=sys.stderr)
    for skip in skips[:SHOWN]:  # one line each: a newline in a file name or id is shown as \n
        print(f"  {shown(str(skip), 2000)}", file=sys.stderr)
    if len(skips) > SHOWN:
        print(f"  ... and {len(skips) - SHOWN} more", file=sys.stderr)
    return 0 if args.skip_bad else EXIT_SKIPPED
