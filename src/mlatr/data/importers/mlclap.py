"""The JSON of the ML-CLAP baseline -> manifest.

Layout (the AudioCaps test file of ML-CLAP has 957 entries like this)::

    {"data": [{"id": "Y7fmOlUlwoNg.wav",
               "audio": "/path/audiocaps/16k/Y7fmOlUlwoNg.wav",      # absolute path on their machine
               "wav": "AudioCaps/waveforms/test/Y7fmOlUlwoNg.wav",   # path under their data root
               "caption_1": "...", ..., "caption_5": "...",
               "source_lang_1": "eng_Latn", ..., "source_lang_5": "eng_Latn",
               "duration": 10.0, "duration_sample": 160000}, ...],
     "num_captions_per_audio": 5}

How the keys are read:

- ``caption_k`` is caption ``k-1`` of the clip; ``source_lang_k`` is its language as an NLLB /
  FLORES-200 code (``eng_Latn``, ``fra_Latn``, ``zho_Hans``), mapped to ISO 639-3 by the part before the
  underscore. A caption without ``source_lang_k`` is in ``lang`` (default English); ``force_lang``
  overrides every ``source_lang_k`` (for files whose codes say something else).
- Several files (e.g. the English file and its translations) merge by clip id: ``caption_k`` of language
  L fills ``captions[L][k-1]``, keeping the alignment by index; two different texts for one slot are an
  error.
- The id loses its audio extension (``Y7fmOlUlwoNg``, as the ``audiocaps-csv`` importer names it); the
  original is kept in ``extra["mlclap_id"]``.
- ``audio``: with ``audio_dir``, ``audio_dir / pattern`` where the pattern (default ``{name}``) sees
  ``name`` (file name of ``wav`` or ``audio``), ``stem`` and ``id``; without it, ``wav`` (relative, so it
  can point into a copy of their data tree) or else ``audio``. The keys not used are kept in ``extra``
  as ``mlclap_wav`` / ``mlclap_audio``.
- ``duration`` (seconds) is the clip's duration; ``duration_sample`` (its length in samples at 16 kHz:
  160000 for 10 s) and any other key are kept in ``extra`` under their own names.
- The top-level ``num_captions_per_audio`` is the caption count per clip that ML-CLAP's evaluation uses to
  map caption ``i`` to clip ``i // n``; a manifest keeps each clip's captions with the clip instead, so it
  is not needed (not stored).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from mlatr import languages as _languages
from mlatr.data import utf8
from mlatr.data.importers._common import BadRows, format_pattern, id_from_name, join_audio
from mlatr.data.importers._finish import checked_clips
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import InputError
from mlatr.json_input import parse_json

CAPTION_KEY = re.compile(r"^caption_(\d+)$")
LANG_KEY = re.compile(r"^source_lang_(\d+)$")
CONSUMED = ("id", "audio", "wav", "duration")


def nllb_to_iso(code: str) -> str:
    """``fra_Latn`` -> ``fra`` (also accepts plain ISO 639-1/3 codes); ``ValueError`` if unknown."""
    return _languages.normalize(code.split("_", 1)[0])


def entries_with_lines(path: str | os.PathLike) -> tuple[list[tuple[int, Any]], dict[str, Any]]:
    """The ``data`` entries of an ML-CLAP JSON file, each with the line it starts on, and the other
    top-level keys. Any JSON error is an ``InputError`` with its line."""
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig", errors=utf8.ERRORS)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file) from exc
    top = parse_json(text, file)
    if isinstance(top, list):
        data, rest = top, {}
    elif isinstance(top, dict) and isinstance(top.get("data"), list):
        data, rest = top["data"], {k: v for k, v in top.items() if k != "data"}
    else:
        raise InputError('expected {"data": [...]} (or a list of entries)', file, 1)
    return list(zip(_element_lines(text, isinstance(top, list)), data, strict=True)), rest


def _element_lines(text: str, top_is_list: bool) -> list[int]:
    """Line numbers where the elements of the entries array start (the text is known to be valid JSON)."""
    dec = json.JSONDecoder()
    ws = re.compile(r"\s*")

    def skip(i: int) -> int:
        return ws.match(text, i).end()

    i = skip(0)
    if text.startswith("\ufeff", i):
        i = skip(i + 1)
    if not top_is_list:  # walk the top-level object to the value of "data"
        i = skip(i + 1)
        while True:
            key, i = dec.raw_decode(text, i)
            i = skip(skip(i) + 1)  # past ':'
            if key == "data":
                break
            _, i = dec.raw_decode(text, i)
            i = skip(skip(i) + 1)  # past ','
    i = skip(i + 1)  # past '['
    starts = []
    line, pos = 1, 0
    while text[i] != "]":
        line += text.count("\n", pos, i)
        pos = i
        starts.append(line)
        _, i = dec.raw_decode(text, i)
        i = skip(i)
        if text[i] == ",":
            i = skip(i + 1)
    return starts


def import_mlclap_json(
    sources: Sequence[str | os.PathLike],
    *,
    audio_pattern: str | None = None,
    audio_dir: str | None = None,
    split: str | None = None,
    lang: str = "eng",
    force_lang: str | None = None,
    skip_bad: bool = False,
) -> Manifest:
    """Read one or more ML-CLAP JSON files into one manifest (see the module docstring)."""
    bad = BadRows(skip_bad)
    default_lang = _languages.normalize(force_lang or lang)
    clips: dict[str, Clip] = {}
    origin: dict[str, tuple[str, int | None]] = {}
    slots: dict[tuple[str, str, int], tuple[str, int]] = {}
    for src in sources:
        file = str(src)
        entries, _rest = entries_with_lines(src)
        in_file: dict[str, int] = {}
        for line, entry in entries:
            clip = _entry_clip(entry, file, line, bad, audio_dir, audio_pattern, split)
            if clip is None:
                continue
            if clip.id in in_file:
                bad.report(file, line, "id",
                           f"duplicate clip id {clip.id!r} (first at line {in_file[clip.id]})")
                continue
            in_file[clip.id] = line
            captions = _entry_captions(entry, file, line, bad, default_lang, force_lang is not None)
            if captions is None:
                continue
            have = clips.get(clip.id)
            if have is None:
                have = clips[clip.id] = clip
                origin[clip.id] = (file, line)
            pending = []
            for (lng, j), text in captions.items():
                caps = have.captions.get(lng, [])
                old = caps[j] if j < len(caps) else None
                if old is not None and old != text:
                    f0, l0 = slots[(have.id, lng, j)]
                    bad.report(file, line, f"caption_{j + 1}",
                               f"clip {have.id!r} already has another {lng} caption {j + 1} (from {f0}:{l0})")
                    pending = None
                    break
                pending.append((lng, j, text))
            if pending is None:
                continue
            for lng, j, text in pending:
                caps = have.captions.setdefault(lng, [])
                caps.extend([None] * (j + 1 - len(caps)))
                caps[j] = text
                slots.setdefault((have.id, lng, j), (file, line))
            for key, value in clip.extra.items():
                have.extra.setdefault(key, value)
            if have.duration is None:
                have.duration = clip.duration
    for clip in clips.values():
        clip.captions = {k: clip.captions[k] for k in sorted(clip.captions, key=lambda c: c != "eng")}
    return Manifest(clips=checked_clips(list(clips.values()), origin, bad), root=Path.cwd(),
                    problems=bad.problems)


def _entry_clip(entry: Any, file: str, line: int, bad: BadRows, audio_dir: str | None,
                audio_pattern: str | None, split: str | None) -> Clip | None:
    if not isinstance(entry, dict):
        bad.report(file, line, None, f"entry must be an object, got {type(entry).__name__}")
        return None
    found = utf8.first_bad_field(entry)
    if found:
        bad.report(file, line, found[0], utf8.message(found[1]))
        return None
    raw_id = entry.get("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        bad.report(file, line, "id", f"missing or empty id ({raw_id!r})")
        return None
    paths = {k: entry[k] for k in ("wav", "audio") if isinstance(entry.get(k), str) and entry[k].strip()}
    if not paths:
        bad.report(file, line, "audio", 'no "wav" or "audio" path')
        return None
    source = paths.get("wav") or paths["audio"]
    ident = id_from_name(raw_id)
    if audio_dir is not None or audio_pattern is not None:
        name = PurePosixPath(source.replace("\\", "/")).name
        values = {"name": name, "stem": id_from_name(name), "id": ident}
        audio = join_audio(audio_dir, format_pattern(audio_pattern or "{name}", values, file, line), file, line,
                           bad)
        if audio is None:
            return None
        used = None
    else:
        audio, used = source, ("wav" if "wav" in paths else "audio")
    duration = entry.get("duration")
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, int | float)):
        bad.report(file, line, "duration", f"must be a number, got {duration!r}")
        return None
    extra: dict[str, Any] = {}
    if ident != raw_id:
        extra["mlclap_id"] = raw_id
    for key in ("wav", "audio"):
        if key in entry and key != used:
            extra[f"mlclap_{key}"] = entry[key]
    for key, value in entry.items():
        if key not in CONSUMED and not CAPTION_KEY.match(key) and not LANG_KEY.match(key):
            extra[key] = value
    return Clip(id=ident, audio=audio, split=split, duration=None if duration is None else float(duration),
                extra=extra, line=line)


def _entry_captions(entry: dict, file: str, line: int, bad: BadRows, default_lang: str,
                    forced: bool) -> dict[tuple[str, int], str] | None:
    out: dict[tuple[str, int], str] = {}
    for key, text in entry.items():
        m = CAPTION_KEY.match(key)
        if not m:
            continue
        k = int(m.group(1))
        if k < 1:
            bad.report(file, line, key, "caption numbers start at 1")
            return None
        if not isinstance(text, str) or not text.strip():
            bad.report(file, line, key, f"empty or non-text caption ({text!r})")
            return None
        lang = default_lang
        code = entry.get(f"source_lang_{k}")
        if code is not None and not forced:
            try:
                lang = nllb_to_iso(str(code))
            except ValueError as exc:
                bad.report(file, line, f"source_lang_{k}", str(exc))
                return None
        out[(lang, k - 1)] = text
    return out
