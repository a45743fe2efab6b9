"""Sound-classification metadata CSVs -> manifests with ``labels`` (for zero-shot classification).

- ESC-50 ``meta/esc50.csv``: ``filename,fold,target,category[,esc10,src_file,take]``; the label is
  ``category``; audio ``audio_dir / pattern`` with the pattern over the row's columns (default
  ``{filename}``).
- UrbanSound8K ``metadata/UrbanSound8K.csv``:
  ``slice_file_name,fsID,start,end,salience,fold,classID,class``; the label is ``class``, the duration
  ``end - start``; default pattern ``fold{fold}/{slice_file_name}`` (the dataset's layout).

The split comes from the cross-validation fold: ``foldN`` by default; with ``test_fold`` (and optionally
``val_fold``) that fold is ``test`` (``val``) and the others ``train``; ``split`` sets one split for all.
The other columns are kept in ``extra`` (integers as numbers). No captions are made.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mlatr.data.importers._common import (
    BadRows,
    SeenIds,
    fold_split,
    format_pattern,
    id_from_name,
    join_audio,
    parse_float,
    parse_int,
    read_csv_rows,
)
from mlatr.data.importers._finish import checked_clips
from mlatr.data.manifest import Clip, Manifest


def import_esc50_csv(
    sources: Sequence[str | os.PathLike],
    *,
    audio_pattern: str | None = None,
    audio_dir: str | None = None,
    split: str | None = None,
    test_fold: int | None = None,
    val_fold: int | None = None,
    skip_bad: bool = False,
) -> Manifest:
    """Read ESC-50 metadata CSVs (see the module docstring)."""
    return _import(sources, name_col="filename", label_col="category",
                   int_cols=("fold", "target"), float_cols=(), pattern=audio_pattern or "{filename}",
                   audio_dir=audio_dir, split=split, test_fold=test_fold, val_fold=val_fold,
                   skip_bad=skip_bad)


def import_urbansound8k_csv(
    sources: Sequence[str | os.PathLike],
    *,
    audio_pattern: str | None = None,
    audio_dir: str | None = None,
    split: str | None = None,
    test_fold: int | None = None,
    val_fold: int | None = None,
    skip_bad: bool = False,
) -> Manifest:
    """Read UrbanSound8K metadata CSVs (see the module docstring)."""
    return _import(sources, name_col="slice_file_name", label_col="class",
                   int_cols=("fsID", "salience", "fold", "classID"), float_cols=("start", "end"),
                   pattern=audio_pattern or "fold{fold}/{slice_file_name}", audio_dir=audio_dir,
                   split=split, test_fold=test_fold, val_fold=val_fold, skip_bad=skip_bad)


def _import(sources, *, name_col, label_col, int_cols, float_cols, pattern, audio_dir, split, test_fold,
            val_fold, skip_bad) -> Manifest:
    bad = BadRows(skip_bad)
    seen = SeenIds()
    clips: list[Clip] = []
    origin: dict[str, tuple[str, int | None]] = {}
    required = (name_col, label_col, *int_cols, *float_cols)
    for src in sources:
        file = str(src)
        for line, row in read_csv_rows(src, required, bad):
            empty = [c for c in (name_col, label_col) if not row[c]]
            if empty:
                bad.report(file, line, empty[0], "empty")
                continue
            extra: dict = {}
            ok = True
            for col in int_cols:
                value = parse_int(row[col], file, line, col, bad)
                ok = ok and value is not None
                extra[col] = value
            for col in float_cols:
                value = parse_float(row[col], file, line, col, bad)
                ok = ok and value is not None
                extra[col] = value
            if not ok:
                continue
            duration = None
            if "start" in extra and "end" in extra:
                duration = extra["end"] - extra["start"]
                if duration < 0:
                    bad.report(file, line, "end", f"end {extra['end']} is before start {extra['start']}")
                    continue
            for col, value in row.items():
                if col not in required and col:
                    extra[col] = _csv_value(value)
            ident = id_from_name(row[name_col])
            if not seen.claim(ident, file, line, bad):
                continue
            clip_split = split or fold_split(extra["fold"], test_fold, val_fold)
            audio = join_audio(audio_dir, format_pattern(pattern, row, file, line), file, line, bad)
            if audio is None:
                continue
            clips.append(Clip(id=ident, audio=audio, split=clip_split, labels=[row[label_col]],
                              duration=duration, extra=extra))
            origin[ident] = (file, line)
    return Manifest(clips=checked_clips(clips, origin, bad), root=Path.cwd(), problems=bad.problems)


def _csv_value(value: str):
    """CSV text to a JSON value: integers and booleans as such, the rest as text."""
    if value in ("True", "False"):
        return value == "True"
    try:
        return int(value)
    except ValueError:
        return value
