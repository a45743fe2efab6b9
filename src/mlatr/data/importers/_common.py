"""Shared pieces of the importers: CSV rows with line numbers, bad-row handling, audio paths, ids."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from mlatr.data import utf8
from mlatr.data.manifest import Problem
from mlatr.data.sound_names import AUDIO_EXTENSIONS
from mlatr.errors import InputError, MlatrError


class BadRows:
    """Raise on the first malformed source row, or, with ``skip_bad``, record it and go on."""

    def __init__(self, skip_bad: bool):
        self.skip_bad = skip_bad
        self.problems: list[Problem] = []

    def report(self, file: str | os.PathLike, line: int | None, field: str | None, message: str) -> None:
        problem = Problem(str(file), line, field, message)
        if not self.skip_bad:
            raise problem.to_error()
        self.problems.append(problem)


def read_csv_rows(
    path: str | os.PathLike, required: Sequence[str], bad: BadRows
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line number, row)`` of a CSV file with a header (UTF-8, BOM allowed).

    Tab-separated when the name ends in ``.tsv``. A missing required column or a header that is not UTF-8
    is fatal (``InputError`` at line 1, never skipped); a row with a wrong number of fields or a byte that
    is not UTF-8 (:mod:`mlatr.data.utf8`) goes to ``bad``, naming the column. Blank lines are ignored.
    Values are stripped of surrounding spaces.
    """
    path = Path(path)
    try:
        fh = open(path, encoding="utf-8-sig", errors=utf8.ERRORS, newline="")
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", str(path)) from exc
    with fh:
        reader = csv.reader(fh, delimiter=_delimiter(path))
        try:
            header = next(reader)
        except StopIteration:
            raise InputError("empty file (expected a CSV header)", str(path), 1) from None
        header = [h.strip() for h in header]
        byte = utf8.bad_byte("".join(header))
        if byte is not None:
            raise InputError(f"header: {utf8.message(byte)}", str(path), 1)
        missing = [c for c in required if c not in header]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}; the header has: {', '.join(header)}",
                             str(path), 1)
        previous_end = reader.line_num
        try:
            for row in reader:
                start, previous_end = previous_end + 1, reader.line_num
                if not row or all(not v.strip() for v in row):
                    continue
                if len(row) != len(header):
                    bad.report(path, start, None, f"{len(row)} fields but the header has {len(header)}")
                    continue
                encoded = [(h, b) for h, v in zip(header, row, strict=True) if (b := utf8.bad_byte(v)) is not None]
                if encoded:
                    bad.report(path, start, encoded[0][0], utf8.message(encoded[0][1]))
                    continue
                yield start, {k: v.strip() for k, v in zip(header, row, strict=True)}
        except csv.Error as exc:
            raise InputError(f"malformed CSV: {exc}", str(path), reader.line_num) from exc


def header_of(path: str | os.PathLike) -> list[str]:
    """The header row of a CSV file, stripped."""
    with open(path, encoding="utf-8-sig", errors=utf8.ERRORS, newline="") as fh:
        return [h.strip() for h in next(csv.reader(fh, delimiter=_delimiter(path)), [])]


def _delimiter(path: str | os.PathLike) -> str:
    return "\t" if Path(path).suffix.lower() == ".tsv" else ","


def join_audio(audio_dir: str | None, name: str, file: str | os.PathLike, line: int | None,
               bad: BadRows) -> str | None:
    """``audio_dir/name`` as a POSIX path (``name`` alone without ``audio_dir``), for a ``name`` made from a
    source row (a pattern over its fields). ``name`` must stay inside ``audio_dir`` (or the manifest's
    folder): an absolute name or a ``..`` part (an AudioCaps ``youtube_id`` of ``../../etc/x``) goes to
    ``bad`` and gives None."""
    posix = name.replace("\\", "/")
    if posix.startswith("/") or ".." in posix.split("/"):
        inside = f"--audio-dir {audio_dir}" if audio_dir else "the manifest's folder"
        bad.report(file, line, "audio", f"audio name {name!r} (from the row's fields) leads outside {inside}")
        return None
    if not audio_dir:
        return name
    return str(PurePosixPath(Path(audio_dir).as_posix()) / name)


def format_pattern(pattern: str, values: dict[str, Any], file: str | os.PathLike, line: int) -> str:
    """Fill an audio file name pattern like ``Y{youtube_id}.wav``; a bad pattern is a user error."""
    try:
        return pattern.format(**values)
    except KeyError as exc:
        raise MlatrError(f"audio pattern {pattern!r} names {exc} but only these fields exist: "
                         f"{', '.join(sorted(values))}") from None
    except (ValueError, IndexError) as exc:
        raise InputError(f"cannot apply audio pattern {pattern!r}: {exc}", str(file), line) from None


def id_from_name(name: str) -> str:
    """A clip id from an audio file name: the POSIX path without a known audio extension."""
    p = PurePosixPath(name.replace("\\", "/"))
    if p.suffix.lower() in AUDIO_EXTENSIONS:
        p = p.with_suffix("")
    return str(p)


def parse_int(value: str, file: str | os.PathLike, line: int, field: str, bad: BadRows) -> int | None:
    try:
        return int(value)
    except ValueError:
        try:
            f = float(value)
        except ValueError:
            f = None
        if f is not None and f.is_integer():
            return int(f)
        bad.report(file, line, field, f"expected an integer, got {value!r}")
        return None


def parse_float(value: str, file: str | os.PathLike, line: int, field: str, bad: BadRows) -> float | None:
    try:
        f = float(value)
    except ValueError:
        bad.report(file, line, field, f"expected a number, got {value!r}")
        return None
    if f != f or f in (float("inf"), float("-inf")):
        bad.report(file, line, field, f"expected a finite number, got {value!r}")
        return None
    return f


class SeenIds:
    """Remembers where each clip id was first produced, to report duplicates with that place."""

    def __init__(self) -> None:
        self.first: dict[str, tuple[str, int | None]] = {}

    def claim(self, ident: str, file: str | os.PathLike, line: int | None, bad: BadRows) -> bool:
        """True if ``ident`` is new; else report a duplicate (raise, or record with ``skip_bad``)."""
        if ident in self.first:
            f0, l0 = self.first[ident]
            bad.report(file, line, "id", f"duplicate clip id {ident!r} (first at {f0}:{l0})")
            return False
        self.first[ident] = (str(file), line)
        return True


def fold_split(fold: int, test_fold: int | None, val_fold: int | None) -> str:
    """The split of a cross-validation fold: ``test``/``val``/``train`` when those folds are named,
    else ``foldN``."""
    if test_fold is None and val_fold is None:
        return f"fold{fold}"
    if fold == test_fold:
        return "test"
    if fold == val_fold:
        return "val"
    return "train"
