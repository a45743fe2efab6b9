"""The JSONL manifest: one clip per line, captions per language aligned by index.

Format (``docs/architecture.md``, "Manifest")::

    {"id": "Y7fmOlUlwoNg", "audio": "audio/Y7fmOlUlwoNg.wav", "split": "test",
     "captions": {"eng": ["A man talks", "Speech"], "fra": ["Un homme parle", null]},
     "labels": ["speech"], "duration": 10.0}

Rules checked here (each broken rule is one :class:`Problem` naming line and field):

- ``id`` and ``audio`` are non-empty strings; ids are unique in the file.
- ``captions`` (optional; a clip of a classification set may have none) maps ISO 639-3 codes
  (:mod:`mlatr.languages`) to lists of caption strings. ``captions[L][j]`` translates
  ``captions["eng"][j]``, so English is the anchor of the alignment: a clip with captions in another
  language must have an English list, that list may not contain ``null``, and no other language's list may
  be longer than it. ``null`` in another language marks a missing translation; a shorter list means the
  trailing translations are missing. Caption strings may not be empty or whitespace.
- ``split`` is one of :data:`SPLITS` or ``foldN`` (a cross-validation fold), exactly: ``Train`` is refused
  (a split is matched exactly, so ``Train`` and ``train`` would silently be two splits), and so is any other
  name (``validation``: did you mean ``val``?). ``labels`` is a list of non-empty strings, ``duration`` a
  finite number >= 0 (seconds).
- ``id``, ``audio`` and ``split`` hold no control character (escape, newline, ...). An ``id`` names a
  file under a folder in several places (the store, shards, an index): it is relative (no leading ``/``) and
  has no ``..`` part.
- The source times :data:`TIME_KEYS` (AudioCaps' ``start_time``, UrbanSound8K's ``start`` / ``end``), where
  present, are numbers of seconds in ``[0, MAX_SOURCE_SECONDS]`` (a day), an end after its start.
- What a file says about itself (:data:`METADATA_KEYS`, optional, kept in :attr:`Clip.extra`; written by the
  folder importer, :mod:`mlatr.data.file_metadata`): ``caption_sources`` maps a caption language to one source
  per caption of that language (``{"eng": ["sidecar", "bext", "name"]}``: aligned with ``captions[L]``, as
  long); ``facets`` is an object (duration, sample rate, loudness, folder, UCS category, keywords ...);
  ``tag_problems`` a list of strings (the tags skipped, and why).
- Any other key is kept in :attr:`Clip.extra` and written back by :meth:`Manifest.save`.

Every importer checks its clips against these rules before writing (``importers._finish``), so the rules
hold for every format.
"""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from mlatr import languages as _languages
from mlatr.audio.integrity import audio_file_problem
from mlatr.data import utf8
from mlatr.errors import InputError, MlatrError
from mlatr.io_utils import atomic_write_jsonl, atomic_write_with
from mlatr.json_input import parse_json

PIVOT = _languages.PIVOT
KNOWN_KEYS = ("id", "audio", "split", "captions", "labels", "duration")
#: The split names a manifest may use, besides ``foldN``.
SPLITS = ("train", "val", "test")
_FOLD = re.compile(r"fold[0-9]+")
#: Names people give splits, and the one mlatr uses.
SPLIT_ALIASES = {"training": "train", "validation": "val", "valid": "val", "dev": "val", "testing": "test",
                 "eval": "test", "evaluation": "test"}
#: Keys of what a file says about itself, kept in :attr:`Clip.extra` and checked (see the module docstring).
METADATA_KEYS = ("caption_sources", "facets", "tag_problems")
#: Times into the source recording (seconds) kept in ``extra``, and their largest allowed value: a day.
TIME_KEYS = (("start_time", "end_time"), ("start", "end"))
MAX_SOURCE_SECONDS = 86400.0
#: Longest caption accepted (a paragraph is a few hundred characters; a 66 MB caption made the text encoder's
#: tokenizer take gigabytes and abort the process).
MAX_CAPTION_CHARS = 100_000


@dataclass(frozen=True)
class Problem:
    """One problem in an input file: ``file:line: field: message``."""

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.line is not None else f"{self.file}: "
        if self.field:
            where += f"{self.field}: "
        return where + self.message

    def to_error(self) -> InputError:
        return InputError(self.message, self.file, self.line, self.field)


@dataclass(frozen=True)
class Skip:
    """One bad input a command or the API left out under ``skip_bad``: the ``file`` (a sound file, a sidecar, the
    manifest or table of a bad line, a shard member's ``SHARD#MEMBER``), its ``line`` when the problem is one line
    of it, the clip's ``id`` when it had been listed, and the ``reason`` (a listed clip's names its manifest line)."""

    file: str
    reason: str
    id: str | None = None
    line: int | None = None

    def to_dict(self) -> dict:
        """The JSON of a report line; a name that is not UTF-8 has its bytes written as ``\\xNN``."""
        return {"file": utf8.printable(self.file), "id": self.id, "line": self.line, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}" if self.line is not None else f"{self.file}: {self.reason}"

    @classmethod
    def of_problem(cls, problem: Problem) -> Skip:
        """A file or line refused while it was read (a FIFO, a name that is not UTF-8, a malformed line)."""
        return cls(problem.file, (f"{problem.field}: " if problem.field else "") + problem.message,
                   line=problem.line)


@dataclass
class Clip:
    """One sound clip and its captions (see the module docstring for the rules)."""

    id: str
    audio: str
    captions: dict[str, list[str | None]] = field(default_factory=dict)
    split: str | None = None
    labels: list[str] = field(default_factory=list)
    duration: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: Line of the manifest this clip was read from (not written back; not part of equality).
    line: int | None = field(default=None, compare=False, repr=False)

    def audio_path(self, root: str | os.PathLike) -> Path:
        """The audio file: ``audio`` itself when absolute, else ``root / audio``."""
        p = Path(self.audio).expanduser()
        return p if p.is_absolute() else Path(root) / p

    def caption_count(self, lang: str) -> int:
        """Number of non-null captions in ``lang``."""
        return sum(c is not None for c in self.captions.get(lang, []))

    def to_json(self) -> dict[str, Any]:
        """The manifest line of this clip as a JSON object (optional fields omitted when empty)."""
        obj: dict[str, Any] = {"id": self.id, "audio": self.audio}
        if self.split is not None:
            obj["split"] = self.split
        if self.captions:
            obj["captions"] = {lang: list(caps) for lang, caps in self.captions.items()}
        if self.labels:
            obj["labels"] = list(self.labels)
        if self.duration is not None:
            obj["duration"] = self.duration
        for key, value in self.extra.items():
            if key not in obj:
                obj[key] = value
        return obj


class CaptionRow(NamedTuple):
    """One caption of a manifest: ``captions[lang][index]`` of clip number ``clip``."""

    clip: int
    lang: str
    index: int
    text: str


def language_order(codes: Iterable[str]) -> list[str]:
    """Codes sorted pivot first, then in :data:`mlatr.languages.DEFAULT_LANGUAGES` order, then by name."""
    default = {c: i for i, c in enumerate(_languages.DEFAULT_LANGUAGES)}
    return sorted(set(codes), key=lambda c: (c != PIVOT, default.get(c, len(default)), c))


@dataclass
class Manifest:
    """A list of clips plus where they came from; ``root`` is the folder relative audio paths start at."""

    clips: list[Clip] = field(default_factory=list)
    root: Path = field(default_factory=Path.cwd)
    path: Path | None = None
    #: Problems skipped by ``load(..., skip_bad=True)`` or by an importer run with ``skip_bad``.
    problems: list[Problem] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.clips)

    def __iter__(self) -> Iterator[Clip]:
        return iter(self.clips)

    def __getitem__(self, i: int) -> Clip:
        return self.clips[i]

    # ---- reading and writing -------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike, skip_bad: bool = False) -> Manifest:
        """Read a JSONL manifest.

        On the first problem raise :class:`~mlatr.errors.InputError` naming ``file:line: field``; with
        ``skip_bad`` drop every line that has a problem instead, and list the problems in
        :attr:`problems` (a line may have several; :meth:`skipped_lines` counts the lines). A file with
        no clip (empty, or every line skipped) is an error either way.
        """
        path = Path(path)
        clips, problems = _parse_file(path, stop_at_first=not skip_bad)
        if problems and not skip_bad:
            raise problems[0].to_error()
        if not clips:
            if problems:
                lines = len({p.line for p in problems})
                raise InputError(f"no usable clip: every line has a problem ({lines} line(s) skipped; first: "
                                 f"{problems[0]})", str(path))
            raise InputError("no clip: the manifest is empty", str(path))
        return cls(clips=clips, root=path.resolve().parent, path=path, problems=problems)

    def skipped_lines(self) -> int:
        """Number of distinct source lines (or files) behind :attr:`problems`."""
        return len({(p.file, p.line) for p in self.problems})

    def save(self, path: str | os.PathLike) -> None:
        """Write the manifest as JSONL, atomically (a reader never sees a half-written file)."""
        atomic_write_jsonl(path, (clip.to_json() for clip in self.clips))

    def rewrite(self) -> None:
        """Write the clips back to :attr:`path` (atomically), and the lines of that file skipped while reading it
        (:attr:`problems`, ``load(..., skip_bad=True)``) as they were, each before the first clip read from a later
        line: a command that rewrites a manifest in place after skipping its bad lines loses none of them."""
        if self.path is None:
            raise MlatrError("this manifest was not read from a file: give save() a path")
        bad = {p.line for p in self.problems if p.file == str(self.path) and p.line is not None}
        kept: list[tuple[int, str]] = []
        if bad:
            with open(self.path, encoding="utf-8-sig", errors=utf8.ERRORS) as fh:  # read as load() reads it
                kept = [(n, text.rstrip("\r\n")) for n, text in enumerate(fh, start=1) if n in bad]
        lines: list[str] = []
        for clip in self.clips:
            while kept and clip.line is not None and kept[0][0] < clip.line:
                lines.append(kept.pop(0)[1])
            lines.append(json.dumps(clip.to_json(), ensure_ascii=False))
        lines.extend(text for _, text in kept)
        data = "".join(line + "\n" for line in lines).encode("utf-8", errors=utf8.ERRORS)
        atomic_write_with(self.path, lambda fh: fh.write(data))

    def rebase(self, new_root: str | os.PathLike) -> None:
        """Rewrite relative audio paths (relative to :attr:`root`) relative to ``new_root``, which becomes the
        root: for writing the manifest into another folder. Absolute paths are kept."""
        old, new = os.path.abspath(self.root), os.path.abspath(new_root)
        if old != new:
            for clip in self.clips:
                if not os.path.isabs(clip.audio):
                    clip.audio = Path(os.path.relpath(os.path.join(old, clip.audio), new)).as_posix()
        self.root = Path(new)

    # ---- views ---------------------------------------------------------------------------------
    def splits(self) -> dict[str | None, int]:
        """Number of clips per split (``None`` for clips without one), in order of first appearance."""
        out: dict[str | None, int] = {}
        for clip in self.clips:
            out[clip.split] = out.get(clip.split, 0) + 1
        return out

    def split(self, name: str) -> Manifest:
        """The clips of split ``name`` (same root and path; the file's :attr:`problems` kept: lines skipped while
        reading it, whose split cannot be known). Raise ``MlatrError`` if no clip has it."""
        clips = [c for c in self.clips if c.split == name]
        if not clips:
            have = ", ".join(sorted(str(s) for s in self.splits())) or "none"
            where = f" in {self.path}" if self.path else ""
            raise MlatrError(f"no clip has split {name!r}{where} (splits: {have})")
        return Manifest(clips=clips, root=self.root, path=self.path, problems=list(self.problems))

    def languages(self) -> list[str]:
        """Languages with at least one caption, English first, then the default order, then by code."""
        present = {lang for c in self.clips for lang, caps in c.captions.items() if any(caps)}
        return language_order(present)

    def captions_table(self, languages: Iterable[str] | None = None) -> list[CaptionRow]:
        """Every non-null caption as ``(clip index, lang, caption index j, text)``.

        Ordered by clip, then language (``languages`` order, default :meth:`languages`), then ``j``.
        The translations of one source caption share ``(clip, j)``: that pair is the ``text_group`` of
        the evaluation contract (ATRI §5.4 consistency metrics, eq. 14-16).
        """
        langs = list(languages) if languages is not None else self.languages()
        rows: list[CaptionRow] = []
        for i, clip in enumerate(self.clips):
            for lang in langs:
                for j, text in enumerate(clip.captions.get(lang, [])):
                    if text is not None:
                        rows.append(CaptionRow(i, lang, j, text))
        return rows

    def caption_arrays(self, languages: Iterable[str] | None = None) -> dict[str, Any]:
        """The caption table as evaluation inputs: ``texts`` (list of str) and numpy arrays
        ``text_audio`` (clip index, int64), ``text_lang`` (str), ``text_group`` (int64, one id per
        ``(clip, j)`` numbered in order of first appearance), as ``evaluate_embeddings`` expects."""

        rows = self.captions_table(languages)
        groups: dict[tuple[int, int], int] = {}
        group_ids = [groups.setdefault((r.clip, r.index), len(groups)) for r in rows]
        return {
            "texts": [r.text for r in rows],
            "text_audio": np.asarray([r.clip for r in rows], dtype=np.int64),
            "text_lang": np.asarray([r.lang for r in rows], dtype=str),
            "text_group": np.asarray(group_ids, dtype=np.int64),
        }


# ---- validation -------------------------------------------------------------------------------


def validate_manifest(
    path: str | os.PathLike, check_audio: bool = False, languages: Iterable[str] | None = None
) -> list[Problem]:
    """Every problem of a manifest file, in line order, each with its line number and field.

    ``check_audio`` also decodes every clip's audio (relative paths start at the manifest's folder) and
    reports files that are missing, unreadable, truncated or far from the stated ``duration``
    (:func:`mlatr.audio.integrity.audio_file_problem`). An empty manifest is a problem. ``languages``
    restricts the allowed caption languages further (any code :func:`mlatr.languages.normalize` accepts:
    ``fr`` allows ``fra``). A file that cannot be read at all gives one problem at line None.
    """
    path = Path(path)
    allowed = set(_languages.normalize_all(languages, "languages")) if languages is not None else None
    clips, problems = _parse_file(path, stop_at_first=False, allowed_languages=allowed, keep_all=True)
    if not clips and not problems:
        problems.append(Problem(str(path), None, None, "no clip: the manifest is empty"))
    if check_audio:
        root = path.resolve().parent
        for clip in clips:
            found = audio_file_problem(clip.audio_path(root), clip.duration)
            if found:
                problems.append(Problem(str(path), clip.line, *found))
        problems.sort(key=lambda p: (p.line or 0))
    return problems


def _parse_file(
    path: Path,
    stop_at_first: bool,
    allowed_languages: set[str] | None = None,
    keep_all: bool = False,
) -> tuple[list[Clip], list[Problem]]:
    """Parse every line; return the good clips and the problems. With ``keep_all``, clips whose only
    problem is a duplicate id are still returned (so audio checks can look at them)."""
    name = str(path)
    try:
        fh = open(path, encoding="utf-8-sig", errors=utf8.ERRORS)
    except OSError as exc:
        reason = "file not found (a manifest)" if isinstance(exc, FileNotFoundError) else \
            f"cannot read manifest: {exc.strerror or exc}"
        return [], [Problem(name, None, None, reason)]
    clips: list[Clip] = []
    problems: list[Problem] = []
    first_line: dict[str, int] = {}
    with fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            clip, line_problems = parse_line(text, name, lineno, allowed_languages)
            if clip is not None:
                if clip.id in first_line:
                    line_problems.append(Problem(name, lineno, "id",
                                                 f"duplicate id {clip.id!r} (first at line "
                                                 f"{first_line[clip.id]})"))
                else:
                    first_line[clip.id] = lineno
            if line_problems:
                problems.extend(line_problems)
                if stop_at_first:
                    break
                if clip is not None and keep_all and not any(p.field != "id" for p in line_problems):
                    clips.append(clip)
            elif clip is not None:
                clips.append(clip)
    return clips, problems


def parse_line(
    text: str, file: str, line: int, allowed_languages: set[str] | None = None
) -> tuple[Clip | None, list[Problem]]:
    """One manifest line -> (clip or None, problems). The clip is returned when it could be built
    (id and audio usable); it is only valid when the problem list is empty."""
    try:
        obj = parse_json(text, file, line)
    except InputError as exc:
        return None, [Problem(file, line, exc.field, exc.message)]
    if not isinstance(obj, dict):
        return None, [Problem(file, line, "json", f"expected a JSON object, got {type(obj).__name__}")]
    found = utf8.first_bad_field(obj)
    if found:
        return None, [Problem(file, line, found[0], utf8.message(found[1]))]
    return clip_from_json(obj, file, line, allowed_languages)


def clip_from_json(
    obj: dict[str, Any], file: str, line: int | None, allowed_languages: set[str] | None = None
) -> tuple[Clip | None, list[Problem]]:
    """Check one manifest object against the rules of this module; build the clip if possible."""
    problems: list[Problem] = []

    def bad(fld: str, msg: str) -> None:
        problems.append(Problem(file, line, fld, msg))

    ident = _required_string(obj, "id", bad)
    audio = _required_string(obj, "audio", bad)

    split = obj.get("split")
    if split is not None and (not isinstance(split, str) or not split.strip()):
        bad("split", f"must be a non-empty string, got {split!r}")
        split = None
    elif split is not None and (found := control_character(split) or split_problem(split)):
        bad("split", found)
        split = None
    if ident is not None and (found := id_problem(ident)):
        bad("id", found)
    if audio is not None and (found := control_character(audio)):
        bad("audio", found)
    _check_times(obj, bad)

    labels = obj.get("labels")
    if labels is None:
        labels = []
    elif not isinstance(labels, list):
        bad("labels", f"must be a list of strings, got {type(labels).__name__}")
        labels = []
    else:
        for k, lab in enumerate(labels):
            if not isinstance(lab, str) or not lab.strip():
                bad(f"labels[{k}]", f"must be a non-empty string, got {lab!r}")

    duration = obj.get("duration")
    if duration is not None:
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            bad("duration", f"must be a number of seconds, got {duration!r}")
            duration = None
        elif not math.isfinite(duration) or duration < 0:
            bad("duration", f"must be finite and >= 0, got {duration!r}")
            duration = None
        else:
            duration = float(duration)

    captions = _check_captions(obj.get("captions"), bad, allowed_languages)
    _check_metadata(obj, captions, bad)

    if ident is None or audio is None:
        return None, problems
    extra = {k: v for k, v in obj.items() if k not in KNOWN_KEYS}
    clip = Clip(id=ident, audio=audio, captions=captions, split=split, labels=list(labels),
                duration=duration, extra=extra, line=line)
    return clip, problems


def _check_metadata(obj: dict[str, Any], captions: dict[str, list], bad) -> None:
    """The rules of :data:`METADATA_KEYS` (see the module docstring)."""
    sources = obj.get("caption_sources")
    if sources is not None:
        if not isinstance(sources, dict):
            bad("caption_sources", f"must be an object {{language: [source, ...]}}, got {type(sources).__name__}")
        for lang, values in sources.items() if isinstance(sources, dict) else ():
            fld = f"caption_sources.{lang}"
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                bad(fld, "must be a list of non-empty strings (one source per caption)")
            elif len(values) != len(captions.get(lang) or []):
                bad(fld, f"{len(values)} source(s) for {len(captions.get(lang) or [])} caption(s): they are aligned "
                         "(edit both, or remove caption_sources)")
    if "facets" in obj and not isinstance(obj["facets"], dict):
        bad("facets", f"must be an object {{name: value}}, got {type(obj['facets']).__name__}")
    problems = obj.get("tag_problems")
    if problems is not None and (not isinstance(problems, list) or not all(isinstance(p, str) for p in problems)):
        bad("tag_problems", "must be a list of strings")


def split_problem(name: str) -> str | None:
    """Why ``name`` is no split name (see the module docstring), or None when it is one."""
    if name in SPLITS or _FOLD.fullmatch(name):
        return None
    lower = name.strip().lower()
    if lower in SPLITS or _FOLD.fullmatch(lower):
        return (f"split {name!r} is not lower case: write {lower!r} (splits are matched exactly, so {name!r} "
                f"would be a split of its own, left out of {lower!r})")
    hint = f"did you mean {SPLIT_ALIASES[lower]!r}? " if lower in SPLIT_ALIASES else ""
    return f"unknown split {name!r} ({hint}a split is one of {', '.join(SPLITS)} or foldN)"


def control_character(text: str) -> str | None:
    """A message naming the first control character of ``text`` (C0, DEL, C1, line / paragraph separator),
    or None when it has none."""
    for k, ch in enumerate(text):
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return f"control character U+{ord(ch):04X} at position {k}"
    return None


def id_problem(ident: str) -> str | None:
    """Why ``ident`` cannot be a clip id (a control character; an absolute path or a ``..`` part: ids name
    files under a folder), or None."""
    found = control_character(ident)
    if found:
        return found
    if ident.startswith(("/", "\\")):
        return f"id {ident!r} starts with a path separator: an id is a relative name"
    if ".." in re.split(r"[/\\]", ident):
        return f"id {ident!r} has a '..' part: an id may not name a path outside its folder"
    return None


def _check_times(obj: dict[str, Any], bad) -> None:
    """The rule of :data:`TIME_KEYS`: numbers of seconds in ``[0, MAX_SOURCE_SECONDS]``, end after start."""
    for pair in TIME_KEYS:
        values = {}
        for key in pair:
            if key not in obj:
                continue
            v = obj[key]
            if isinstance(v, bool) or not isinstance(v, int | float):
                bad(key, f"must be a number of seconds, got {v!r}")
            elif not math.isfinite(v) or not 0 <= v <= MAX_SOURCE_SECONDS:
                bad(key, f"must be a time in seconds from 0 to {MAX_SOURCE_SECONDS:g} (a day), got {v!r}")
            else:
                values[key] = v
        if len(values) == 2 and values[pair[1]] <= values[pair[0]]:
            bad(pair[1], f"{pair[1]} {values[pair[1]]!r} is not after {pair[0]} {values[pair[0]]!r}")


def _required_string(obj: dict[str, Any], key: str, bad) -> str | None:
    if key not in obj or obj[key] is None:
        bad(key, "missing")
        return None
    value = obj[key]
    if not isinstance(value, str):
        bad(key, f"must be a string, got {type(value).__name__} {value!r}")
        return None
    if not value.strip():
        bad(key, "empty")
        return None
    return value


def _check_captions(raw: Any, bad, allowed_languages: set[str] | None) -> dict[str, list[str | None]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        bad("captions", f"must be an object mapping language codes to lists, got {type(raw).__name__}")
        return {}
    captions: dict[str, list[str | None]] = {}
    for lang, caps in raw.items():
        fld = f"captions.{lang}"
        if not _languages.is_known(lang):
            hint = ""
            try:
                hint = f" (did you mean {_languages.normalize(lang)!r}? codes are ISO 639-3)"
            except ValueError:
                hint = " (codes are ISO 639-3, see mlatr.languages)"
            bad(fld, f"unknown language code {lang!r}{hint}")
        elif allowed_languages is not None and lang not in allowed_languages:
            allowed = ", ".join(sorted(allowed_languages))
            bad(fld, f"language {lang!r} is not among the allowed ones ({allowed})")
        if not isinstance(caps, list):
            bad(fld, f"must be a list of strings (null for a missing translation), got {type(caps).__name__}")
            continue
        ok = True
        for j, cap in enumerate(caps):
            if cap is None:
                if lang == PIVOT:
                    bad(f"{fld}[{j}]", "null English caption (English is the source of the alignment)")
                    ok = False
            elif not isinstance(cap, str):
                bad(f"{fld}[{j}]", f"must be a string or null, got {type(cap).__name__}")
                ok = False
            elif not cap.strip():
                bad(f"{fld}[{j}]", "empty caption")
                ok = False
            elif len(cap) > MAX_CAPTION_CHARS:
                bad(f"{fld}[{j}]", f"a caption of {len(cap):,} characters (at most {MAX_CAPTION_CHARS:,})")
                ok = False
        if ok:
            captions[lang] = list(caps)
    others = [lang for lang, caps in raw.items() if lang != PIVOT and isinstance(caps, list) and caps]
    if others and PIVOT not in raw:
        bad("captions", f"captions in {', '.join(others)} but no {PIVOT!r} list: captions[L][j] "
                        f"translates captions[{PIVOT!r}][j], so the English list is required")
    pivot = raw.get(PIVOT)
    if isinstance(pivot, list):
        for lang, caps in raw.items():
            if lang != PIVOT and isinstance(caps, list) and len(caps) > len(pivot):
                bad(f"captions.{lang}", f"{len(caps)} captions but {PIVOT!r} has {len(pivot)}: "
                                        f"translations are aligned to English by index")
    return captions
