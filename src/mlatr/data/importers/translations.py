"""Merge captions of other languages into a manifest, keyed by (clip id, caption index).

Accepted files (the language comes from a ``lang`` column/key, else from the ``lang`` argument):

- CSV, long: ``id,index,caption[,lang]`` (``text`` is accepted for ``caption``); ``index`` is the
  0-based position ``j`` of the English caption it translates (``captions["eng"][j]``).
- CSV, wide: ``id,caption_1,...,caption_N[,lang]``: ``caption_k`` translates English caption ``k-1``
  (the Clotho layout); an empty cell is a missing translation.
- JSONL: ``{"id", "index", "caption", "lang"?}`` per line, or ``{"id", "captions": [...], "lang"?}``
  with a list aligned to the English captions (``null`` = missing).

The alignment by index is kept: translation ``j`` lands at ``captions[L][j]``, and the list of L is padded
with ``null`` to the length of the English list. A row naming a clip id the manifest lacks, an index
beyond the clip's English captions, English itself as target, an unknown language, an empty caption, the
same (id, index, lang) twice, or a slot that already holds another text (unless ``overwrite``) is
reported with its file and line.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mlatr import languages as _languages
from mlatr.data import utf8
from mlatr.data.importers._common import BadRows, header_of, parse_int, read_csv_rows
from mlatr.data.importers.clotho import caption_columns
from mlatr.data.manifest import PIVOT, Manifest
from mlatr.errors import InputError
from mlatr.json_input import parse_json


def merge_translations(
    manifest: Manifest,
    sources: Sequence[str | os.PathLike],
    *,
    lang: str | None = None,
    overwrite: bool = False,
    skip_bad: bool = False,
) -> Manifest:
    """A copy of ``manifest`` with the translations of ``sources`` merged in (see the module docstring).

    The returned manifest's ``problems`` lists the rows skipped with ``skip_bad``.
    """
    bad = BadRows(skip_bad)
    out = Manifest(clips=copy.deepcopy(manifest.clips), root=manifest.root, path=manifest.path)
    by_id = {clip.id: clip for clip in out.clips}
    default_lang = _languages.normalize(lang) if lang else None
    first: dict[tuple[str, int, str], tuple[str, int]] = {}
    touched: set[str] = set()
    for src in sources:
        file = str(src)
        for line, ident, index, lng, text in _rows(src, bad):
            if not isinstance(ident, str) or not ident:
                bad.report(file, line, "id", f"missing or empty id ({ident!r})")
                continue
            clip = by_id.get(ident)
            if clip is None:
                bad.report(file, line, "id", f"no clip with id {ident!r} in the manifest")
                continue
            lng = lng if lng is not None else default_lang
            if lng is None:
                bad.report(file, line, "lang", "no language: add a lang column/key or pass --lang")
                continue
            try:
                lng = _languages.normalize(str(lng))
            except ValueError as exc:
                bad.report(file, line, "lang", str(exc))
                continue
            if lng == PIVOT:
                bad.report(file, line, "lang", "English captions are the source of the alignment; "
                                               "import them with the clip, not as a translation")
                continue
            n_eng = len(clip.captions.get(PIVOT, []))
            if index is None:
                continue  # already reported
            if not 0 <= index < n_eng:
                bad.report(file, line, "index", f"clip {ident!r} has {n_eng} English caption(s) "
                                                f"(indices 0..{n_eng - 1}); index {index} does not exist")
                continue
            if not isinstance(text, str) or not text.strip():
                bad.report(file, line, "caption", f"empty or non-text caption ({text!r})")
                continue
            key = (ident, index, lng)
            if key in first:
                f0, l0 = first[key]
                bad.report(file, line, "index", f"a second {lng} translation of {ident!r} caption {index} "
                                                f"(first at {f0}:{l0})")
                continue
            caps = clip.captions.setdefault(lng, [])
            caps.extend([None] * (n_eng - len(caps)))
            if caps[index] is not None and caps[index] != text and not overwrite:
                bad.report(file, line, "caption", f"clip {ident!r} already has {lng} caption {index} "
                                                  f"{caps[index]!r} (use --overwrite to replace it)")
                continue
            first[key] = (file, line)
            caps[index] = text
            touched.add(ident)
    for clip in out.clips:
        if clip.id in touched:
            n_eng = len(clip.captions.get(PIVOT, []))
            for caps in clip.captions.values():
                caps.extend([None] * (n_eng - len(caps)))
    out.problems = bad.problems
    return out


Row = tuple[int, Any, int | None, Any, Any]  # line, id, index, lang, text


def _rows(src: str | os.PathLike, bad: BadRows) -> Iterator[Row]:
    suffix = Path(src).suffix.lower()
    if suffix in (".jsonl", ".json", ".ndjson"):
        yield from _jsonl_rows(src, bad)
    elif suffix in (".csv", ".tsv", ".txt"):
        yield from _csv_rows(src, bad)
    else:
        raise InputError("unknown translation file type (expected .csv or .jsonl)", str(src))


def _csv_rows(src: str | os.PathLike, bad: BadRows) -> Iterator[Row]:
    file = str(src)
    header = header_of(src) if Path(src).is_file() else []
    wide = caption_columns(header)
    if wide and "index" not in header:
        for line, row in read_csv_rows(src, ("id", *wide), bad):
            for k, col in enumerate(wide):
                if row[col]:
                    yield line, row["id"], k, row.get("lang") or None, row[col]
        return
    text_col = "text" if "text" in header and "caption" not in header else "caption"
    for line, row in read_csv_rows(src, ("id", "index", text_col), bad):
        index = parse_int(row["index"], file, line, "index", bad)
        if index is None:
            continue
        yield line, row["id"], index, row.get("lang") or None, row[text_col]


def _jsonl_rows(src: str | os.PathLike, bad: BadRows) -> Iterator[Row]:
    file = str(src)
    try:
        fh = open(src, encoding="utf-8-sig", errors=utf8.ERRORS)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file) from exc
    with fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                obj = parse_json(text, file, line)
            except InputError as exc:
                bad.report(file, line, exc.field, exc.message)
                continue
            if not isinstance(obj, dict):
                bad.report(file, line, "json", f"expected a JSON object, got {type(obj).__name__}")
                continue
            found = utf8.first_bad_field(obj)
            if found:
                bad.report(file, line, found[0], utf8.message(found[1]))
                continue
            lng = obj.get("lang")
            if "captions" in obj:
                caps = obj["captions"]
                if not isinstance(caps, list):
                    bad.report(file, line, "captions", "must be a list aligned to the English captions")
                    continue
                for j, cap in enumerate(caps):
                    if cap is not None:
                        yield line, obj.get("id"), j, lng, cap
                continue
            index = obj.get("index")
            if isinstance(index, bool) or not isinstance(index, int):
                bad.report(file, line, "index", f"must be an integer caption index, got {index!r}")
                continue
            yield line, obj.get("id"), index, lng, obj.get("caption", obj.get("text"))
