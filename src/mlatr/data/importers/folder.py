"""A folder of sound files -> manifest (captions from sidecar text files, the files' tags and their names).

- Sound files: ``.wav .flac .ogg .oga .opus .mp3 .aiff .aif`` (any case), found recursively, in sorted order.
- English captions, in this order, each caption's source in ``extra["caption_sources"]``
  (:mod:`mlatr.data.file_metadata` says it all): the sidecar ``NAME.txt`` (or ``NAME.eng.txt``) beside
  ``NAME.wav``, one caption per line (blank lines ignored; a sidecar over 1 MiB, or a caption over the
  manifest's limit, is a bad row); the descriptions in the file's tags (BWF bext, iXML, RIFF INFO, ID3, Vorbis
  comments, MP4: :mod:`mlatr.audio.file_tags`; a tag too large or unreadable is skipped and listed in
  ``extra["tag_problems"]``, the clip kept); a UCS file name's FXName and category
  (``DOORWood_Creaky door_ACME_LIB.wav``: :mod:`mlatr.data.ucs`); else the path's words as ``mlatr data
  recaption`` makes them (:func:`~mlatr.data.path_captions.path_captions`; ``Effects/CarPassing.wav`` -> "car
  passing", ``wolf-die-4.ogg`` -> "wolf die", joined words split: ``blackcat`` -> "black cat"; a name with no
  words, ``01.wav``, takes the nearest folder's words); and that caption with its folders' words ("rec,
  birds") so a folder's name finds its files (not with ``folder_words=False`` or ``labels_from_folder=False``).
- Other languages: sidecars ``NAME.fra.txt`` etc., line ``j`` translating English caption ``j``.
- ``labels``: the parent folder's name in caption form (``Animal Sounds/`` -> "animal sounds") for files
  in a subfolder; none at the top level.
- ``extra["facets"]``: duration, sample rate, bit depth, channels, format, codec, file size, loudness (LUFS),
  true peak, silence, folder, library, UCS category and the tags' keywords, creator ... (see
  :mod:`mlatr.data.file_metadata`); loudness, peaks and silence come from the decode ``probe`` makes anyway
  (``loudness=False`` leaves them out; without ``probe`` and ``loudness`` only the header is read).
- A FIFO, socket or device file with a sound file's name is never opened (it is refused unopened; opening a
  FIFO would block the import for ever): a bad row (raise, or skip and count).
- ``duration``: the decoded length (:func:`mlatr.audio.integrity.probe_audio` decodes every file): a file
  that does not decode, decodes to nothing or to fewer frames than its header declares is a bad row
  (raise, or skip and count).
- A file whose name is not valid UTF-8 (bytes Python holds as surrogates) is a bad row naming its bytes: a
  manifest is UTF-8 and could not hold the name.
- ``id``: the path under the folder without extension (``Effects/CarPassing``); when two files differ
  only by extension both keep it. ``audio``: the path relative to ``relative_to`` (the manifest's folder),
  or absolute without it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from mlatr import languages as _languages
from mlatr.audio.file_tags import read_file_tags
from mlatr.data import utf8
from mlatr.data.file_metadata import decoded_facets, describe, header_facets
from mlatr.data.importers._common import AUDIO_EXTENSIONS, BadRows
from mlatr.data.importers._finish import checked_clips
from mlatr.data.manifest import Clip, Manifest
from mlatr.data.path_captions import CaptionRules
from mlatr.data.sound_names import caption_from_name
from mlatr.errors import InputError, MlatrError
from mlatr.file_kinds import special_file

#: Largest sidecar caption file read (a few captions; a 66 MB one aborted index build at 5.6 GB).
MAX_SIDECAR_BYTES = 1 << 20


def sound_files(folder: Path) -> list[Path]:
    """Sound files under ``folder``, recursively, sorted by their relative path (hidden ones skipped)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in filenames:
            if not f.startswith(".") and Path(f).suffix.lower() in AUDIO_EXTENSIONS:
                found.append(Path(dirpath) / f)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _read_lines(path: Path, bad: BadRows) -> list[str] | None:
    """The non-blank lines of a sidecar; ``None`` (reported to ``bad``) when one is not UTF-8, or the file is
    larger than :data:`MAX_SIDECAR_BYTES` (refused from its size, before it is read)."""
    size = path.stat().st_size
    if size > MAX_SIDECAR_BYTES:
        bad.report(str(path), None, None, f"a caption file of {size:,} bytes (at most {MAX_SIDECAR_BYTES:,}: a few "
                                          "captions, one per line)")
        return None
    text = path.read_text(encoding="utf-8-sig", errors=utf8.ERRORS)
    for number, line in enumerate(text.splitlines(), start=1):
        byte = utf8.bad_byte(line)
        if byte is not None:
            bad.report(str(path), number, None, utf8.message(byte))
            return None
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def import_folder(
    sources: Sequence[str | os.PathLike],
    *,
    relative_to: str | os.PathLike | None = None,
    split: str | None = None,
    labels_from_folder: bool = True,
    skip_bad: bool = False,
    progress: bool = False,
    probe: bool = True,
    loudness: bool = True,
    folder_words: bool = True,
    tag_captions: bool = True,
) -> Manifest:
    """Make a manifest of every sound file under the folders ``sources`` (see the module docstring); ``probe``:
    decode each file for its ``duration`` (a file that does not decode whole is a bad row here; without it,
    when it is read); ``loudness``: measure loudness, peaks and silence in that decode (a decode of its own
    without ``probe``); ``folder_words`` (and ``labels_from_folder``): split joined words and add the folders'
    words to the path's caption; ``tag_captions``: captions from the files' tags."""
    entries: list[tuple[Path, Path]] = []
    for src in sources:
        folder = Path(src)
        if not folder.is_dir():
            raise InputError("not a folder", str(folder))
        entries += [(folder, f) for f in sound_files(folder)]
    return _import_entries(entries, relative_to, split, labels_from_folder, skip_bad, progress, probe, loudness,
                           folder_words, tag_captions)


def import_files(files: Sequence[str | os.PathLike], *, split: str | None = None, skip_bad: bool = False,
                 progress: bool = False, probe: bool = True, loudness: bool = True) -> Manifest:
    """A manifest of the sound files ``files`` as :func:`import_folder` makes one of a folder whose root is their
    deepest common folder: ``dog.wav rain.ogg`` -> ids ``dog``, ``rain``; ``a/x.wav b/y.wav`` -> ``a/x``,
    ``b/y`` (captions from sidecars or names, labels from their folders below that root)."""
    paths = [Path(os.path.abspath(f)) for f in files]
    if not paths:
        raise MlatrError("no sound file given")
    root = Path(os.path.commonpath([str(p.parent) for p in paths]))
    return _import_entries([(root, p) for p in paths], None, split, True, skip_bad, progress, probe, loudness)


def _import_entries(entries: list[tuple[Path, Path]], relative_to: str | os.PathLike | None, split: str | None,
                    labels_from_folder: bool, skip_bad: bool, progress: bool, probe: bool,
                    loudness: bool = True, folder_words: bool = True, tag_captions: bool = True) -> Manifest:
    """The manifest of ``(root, file)`` entries: each file's id its path under its root (see the module
    docstring)."""
    bad = BadRows(skip_bad)
    rules = CaptionRules.load()
    stems: dict[str, int] = {}
    for folder, f in entries:
        key = f.relative_to(folder).with_suffix("").as_posix()
        stems[key] = stems.get(key, 0) + 1
    clips: list[Clip] = []
    origin: dict[str, tuple[str, int | None]] = {}
    seen: set[str] = set()
    for folder, f in tqdm(entries, desc="sound files", unit="file", disable=not progress):
        rel = f.relative_to(folder)
        if utf8.bad_byte(str(f)) is not None:
            bad.report(str(f), None, "path", f"the file name is not valid UTF-8 ({os.fsencode(f)!r}), so no manifest "
                                             "can hold it: rename the file as UTF-8 (e.g. convmv -f latin1 -t utf8)")
            continue
        ident = rel.with_suffix("").as_posix()
        if stems[ident] > 1:
            ident = rel.as_posix()
        if ident in seen:
            bad.report(str(f), None, "id",
                       f"a file with id {ident!r} was already imported from another folder")
            continue
        duration = None
        try:
            if special_file(f):  # never opened, not even for its header
                raise MlatrError(f"{f}: not a regular file but {special_file(f)} (not opened)")
            if not f.is_file():
                raise MlatrError(f"{f}: no such sound file")
            facets = _audio_facets(f, probe, loudness)
            if probe:
                duration = facets["duration"]
        except MlatrError as exc:
            bad.report(str(f), None, "audio", str(exc).removeprefix(f"{f}: "))
            continue
        sidecars = _sidecar_captions(f, bad)
        if sidecars is None:
            continue
        meta = describe(ident, rel, read_file_tags(f), sidecars.get("eng", []), rules,
                        folder_words and labels_from_folder, tag_captions)
        captions = _aligned(f, meta.captions, sidecars, bad)
        if captions is None:
            continue
        extra = {"facets": {**facets, **meta.facets}}
        if meta.captions:
            extra["caption_sources"] = {"eng": meta.sources}
        if meta.problems:
            extra["tag_problems"] = meta.problems
        labels = []
        if labels_from_folder and len(rel.parts) > 1:
            label = caption_from_name(rel.parent.name)
            labels = [label] if label else []
        audio = Path(os.path.abspath(f))
        if relative_to is not None:
            audio_s = Path(os.path.relpath(audio, os.path.abspath(relative_to))).as_posix()
        else:
            audio_s = audio.as_posix()
        seen.add(ident)
        clips.append(Clip(id=ident, audio=audio_s, captions=captions, split=split, labels=labels,
                          duration=duration, extra=extra))
        origin[ident] = (str(f), None)
    return Manifest(clips=checked_clips(clips, origin, bad),
                    root=Path(relative_to).resolve() if relative_to is not None else Path.cwd(),
                    problems=bad.problems)


def _audio_facets(f: Path, probe: bool, loudness: bool) -> dict:
    """The technical facets of ``f``: from one decode (``probe`` or ``loudness``; it raises
    :class:`MlatrError` when the file does not decode whole, which is a bad row only with ``probe``), else
    from its header."""
    if probe or loudness:
        try:
            return decoded_facets(f, loudness)[1]
        except MlatrError:
            if probe:
                raise
    return header_facets(f)


def _sidecar_captions(f: Path, bad: BadRows) -> dict[str, list[str]] | None:
    """Captions of one sound file's sidecars, by language; None (reported) if a sidecar is bad."""
    captions: dict[str, list[str]] = {}
    stem = f.with_suffix("")
    for side in sorted(f.parent.glob(f"{_glob_escape(stem.name)}.*txt")):
        middle = side.name[len(stem.name):-len(".txt")]
        if side.suffix != ".txt" or not side.is_file():
            continue
        if middle == "":
            lang = "eng"
        elif middle.startswith(".") and "." not in middle[1:]:
            try:
                lang = _languages.normalize(middle[1:])
            except ValueError:
                continue  # "name.notes.txt" and the like are not caption files
        else:
            continue
        lines = _read_lines(side, bad)
        if lines is None:
            return None
        if lines:
            if lang in captions:
                bad.report(str(side), None, None, f"second {lang} caption file for {f.name}")
                return None
            captions[lang] = list(lines)
    return captions


def _aligned(f: Path, english: list[str], sidecars: dict[str, list[str]],
             bad: BadRows) -> dict[str, list[str | None]] | None:
    """``{"eng": english, other languages: their sidecar lines padded with None}``, English first; None
    (reported) when a translation sidecar has more lines than the English sidecar has (without one, than
    there are English captions: line ``j`` translates English caption ``j``)."""
    stem = f.with_suffix("")
    captions: dict[str, list[str | None]] = {"eng": list(english)} if english else {}
    limit = len(sidecars["eng"]) if "eng" in sidecars else len(english)
    for lang, caps in sidecars.items():
        if lang == "eng":
            continue
        if len(caps) > limit:
            bad.report(str(f.with_name(f"{stem.name}.{lang}.txt")), None, f"captions.{lang}",
                       f"{len(caps)} lines but there are {limit} English caption(s) to translate")
            return None
        captions[lang] = list(caps) + [None] * (len(english) - len(caps))
    return captions


def _glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)
