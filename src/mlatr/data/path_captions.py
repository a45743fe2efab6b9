"""English captions and a class label for a sound from its path (for libraries captioned by file names).

A sound library's paths say more than the last file name: ``minetest/default/dig_cracky.2`` is
"digging stone" in Minetest's words (``cracky`` = stone-like blocks), ``wesnoth/core/wolf-hit-3`` is a
wolf yelping when struck, ``scratch/Animal/Dog1`` is a dog, an animal. :func:`path_captions` turns a clip
id (its path under the library folder, as :mod:`mlatr.data.importers.folder` makes it) into

1. the file name's words (:func:`~mlatr.data.importers.folder.caption_from_name`), with numbering
   dropped wherever it stands (``bird1_00``, ``magic-missile-2-miss``), abbreviations and game jargon
   replaced word by word (``bd`` -> "bass drum", ``cracky`` -> "stone"; the ``words`` table) and a few
   phrase patterns rewritten (``X footstep`` -> "footsteps on X", ``X die`` -> "X dying", ``X hit`` ->
   "X hurt", ``dig X`` -> "digging X");
2. a second caption with the folder's meaning as context ("dog, animal") when the path has one;
3. the class label of that folder (the ``labels`` table: id prefix -> label), the classes of the
   zero-shot view (:mod:`mlatr.lab.experiments.unseen_library`).

A reviewed table (``captions``: id, or id with its numbering dropped, -> list of captions, or ``null`` to
leave the clip out) replaces the automatic captions where a person found them wrong. The shipped table,
``src/mlatr/data/real_sound_captions.json``, covers the Debian libraries of ``scripts/get-real-sounds.sh``;
its ``note`` says how it was reviewed.

:func:`recaption` never replaces what a person wrote: a clip with a sidecar caption file beside its audio
(``NAME.txt`` / ``NAME.eng.txt``, what :mod:`mlatr.data.importers.folder` reads) or whose English captions are
not the ones made from its path (:func:`made_from_path`) keeps its captions and stays in the manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from mlatr.data.manifest import Clip, Manifest
from mlatr.data.sound_names import AUDIO_EXTENSIONS, caption_from_name, name_caption, split_joined
from mlatr.errors import InputError
from mlatr.json_input import parse_json

#: The table shipped with mlatr (reviewed captions of the Debian sound libraries).
DEFAULT_TABLE = Path(__file__).resolve().parent / "real_sound_captions.json"

#: Folders (nearest first) whose words :func:`folder_words` gives.
CONTEXT_FOLDERS = 3
#: The caption sources (``extra["caption_sources"]``) of captions made from a path: what :func:`recaption` may
#: rewrite (``name``: the path's words; ``folder``: them with the folders' or the label's words).
PATH_SOURCES = ("name", "folder")

_NUMBERING = re.compile(r"(?:[-_. ]?\d+)+$")
#: Phrase patterns on the cleaned words: (pattern, replacement), first match wins.
PHRASES: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p), r) for p, r in (
    (r"^(.+) footsteps?$", r"footsteps on \1"),
    (r"^dig (.+)$", r"digging \1"),
    (r"^(.+) dig$", r"digging \1"),
    (r"^dug (.+)$", r"\1 dug out"),
    (r"^(.+) dug$", r"\1 dug out"),
    (r"^(.+) (?:die|critdie)$", r"\1 dying"),
    (r"^(.+) hit$", r"\1 hurt"),
    (r"^(.+) miss$", r"\1 missing its target"),
))


@dataclass
class CaptionRules:
    """The tables :func:`path_captions` reads (see the module docstring)."""

    words: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    #: id prefix -> a format string the automatic caption is put into ("a cartoon voice saying \"{}\"").
    templates: dict[str, str] = field(default_factory=dict)
    captions: dict[str, list[str] | None] = field(default_factory=dict)
    label_translations: dict[str, dict[str, str]] = field(default_factory=dict)
    note: str = ""

    @classmethod
    def load(cls, path: str | Path = DEFAULT_TABLE) -> CaptionRules:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the caption table: {exc}", str(path)) from exc
        data = parse_json(text, str(path))
        if not isinstance(data, dict):
            raise InputError(f"expected a JSON object, got {type(data).__name__}", str(path))
        for key in ("words", "labels", "templates", "captions", "label_translations"):
            if not isinstance(data.get(key, {}), dict):
                raise InputError(f"{key!r} must be an object", str(path), field=key)
        for key in ("words", "labels", "templates"):
            for name, value in data.get(key, {}).items():
                if not isinstance(value, str) or (key == "templates" and value.count("{}") != 1):
                    raise InputError(f"must be a string, got {type(value).__name__}", str(path), field=f"{key}.{name}")
        for label, langs in data.get("label_translations", {}).items():
            if not isinstance(langs, dict) or not all(isinstance(v, str) for v in langs.values()):
                raise InputError("must map language codes to strings", str(path), field=f"label_translations.{label}")
        if not isinstance(data.get("note", ""), str):
            raise InputError("must be a string", str(path), field="note")
        for key, caps in data.get("captions", {}).items():
            if caps is not None and (not isinstance(caps, list) or not caps
                                     or not all(isinstance(c, str) and c.strip() for c in caps)):
                raise InputError("expected a non-empty list of captions or null", str(path), field=f"captions.{key}")
        return cls(words=data.get("words", {}), labels=data.get("labels", {}), templates=data.get("templates", {}),
                   captions=data.get("captions", {}),
                   label_translations=data.get("label_translations", {}), note=data.get("note", ""))

    def knows(self, clip_id: str) -> bool:
        """Whether the table covers the library of ``clip_id`` (its first folder): some label or caption key
        starts with it."""
        lib = clip_id.split("/", 1)[0] + "/"
        return any(k.startswith(lib) for k in (*self.labels, *self.captions))

    def label_of(self, clip_id: str) -> str | None:
        """The label of the longest ``labels`` prefix of ``clip_id`` (None without one)."""
        best = max((p for p in self.labels if clip_id.startswith(p)), key=len, default=None)
        return self.labels[best] if best is not None else None


def drop_numbering(clip_id: str) -> str:
    """``clip_id`` with the numbering at the end of its last part removed: ``wesnoth/core/wolf-hit-3`` ->
    ``wesnoth/core/wolf-hit``, ``widelands/animals/bird1_00`` -> ``widelands/animals/bird``."""
    head, _, name = clip_id.rpartition("/")
    stem = _NUMBERING.sub("", name) or name
    return f"{head}/{stem}" if head else stem


def clean_name(name: str, words: dict[str, str]) -> str:
    """The words of a file name with numbering dropped, ``words`` replaced and the phrase patterns applied."""
    tokens = [t for t in caption_from_name(name).split() if not t.isdigit()]
    tokens = [words.get(t, t) for t in tokens]
    text = " ".join(t for t in tokens if t)
    text = re.sub(r"\b(\w+) \1\b", r"\1", text)  # "dig dig immediate" -> "dig immediate"
    for pattern, repl in PHRASES:
        if pattern.match(text):
            return pattern.sub(repl, text)
    return text


def folder_words(clip_id: str) -> str:
    """The words of the folders a clip lies in (the nearest :data:`CONTEXT_FOLDERS`, from the top down), joined
    words split, each word once: ``"Animals/BirdSong/rec_0042"`` -> ``"animals bird song"``."""
    words: list[str] = []
    for folder in clip_id.split("/")[:-1][-CONTEXT_FOLDERS:]:
        for word in split_joined(caption_from_name(folder)).split():
            if word not in words:
                words.append(word)
    return " ".join(words)


def path_captions(clip_id: str, table: CaptionRules, folders: bool = False) -> tuple[list[str] | None, str | None]:
    """``(captions, label)`` of a clip from its id; captions None when the table leaves the clip out.
    ``folders``: a clip of a library the table does not know (:meth:`CaptionRules.knows`: a user's own
    library) has its joined words split (``blackcat`` -> "black cat") and its folders' words as the context
    a label gives (:func:`folder_words`: "rec, birds"); the label stays None."""
    label = table.label_of(clip_id)
    for key in (clip_id, drop_numbering(clip_id)):
        if key in table.captions:
            reviewed = table.captions[key]
            return (None if reviewed is None else with_context(list(reviewed), label)), label
    parts = clip_id.split("/")
    name = parts[-1]
    if Path(name).suffix.lower() in AUDIO_EXTENSIONS:  # two files differing only by extension keep it in the id
        name = name[: -len(Path(name).suffix)]
    text = clean_name(drop_numbering(name), table.words)
    for folder in reversed(parts[1:-1]):  # a name with no words takes its folder's (not the library's)
        if text:
            break
        text = clean_name(folder, table.words)
    template = max((p for p in table.templates if clip_id.startswith(p)), key=len, default=None)
    if text and template is not None:
        text = table.templates[template].format(text)
    context = label
    if folders and label is None and not table.knows(clip_id):
        text, context = split_joined(text), folder_words(clip_id) or None
    return (with_context([text], context) if text else []), label


def with_context(captions: list[str], label: str | None) -> list[str]:
    """Add "first caption, label" when the label says something the first caption does not."""
    if label and len(captions) == 1 and not set(label.split()) <= set(captions[0].split()):
        captions.append(f"{captions[0]}, {label}")
    return captions


def path_sources(captions: list[str]) -> list[str]:
    """The sources of captions :func:`path_captions` made: ``name``, and ``folder`` for the second when it is the
    first with context (``"rec"``, ``"rec, birds"``)."""
    sources = ["name"] * len(captions)
    if len(captions) == 2 and captions[1].startswith(f"{captions[0]}, "):
        sources[1] = "folder"
    return sources


@dataclass
class CaptionChange:
    """What :func:`recaption` changed in one clip: its English captions (``after`` None: the clip is left out)
    and its labels."""

    id: str
    before: list[str | None]
    after: list[str] | None
    labels_before: list[str]
    labels_after: list[str]


@dataclass
class Recaptioned:
    """What :func:`recaption` did: ``counts`` (``recaptioned``, ``reviewed``, ``removed``, ``kept_as_is`` for clips
    with captions in other languages, ``kept_own`` for captions a person wrote, ``labelled``) and the
    ``changes``, clip by clip."""

    counts: dict[str, int]
    changes: list[CaptionChange]


def has_sidecar(audio: Path) -> bool:
    """Whether an English sidecar caption file (``NAME.txt`` or ``NAME.eng.txt``) lies beside ``audio``."""
    return any(audio.with_suffix(suffix).is_file() for suffix in (".txt", ".eng.txt"))


#: The ``extra`` key :func:`recaption` marks its captions with: a digest of the captions it wrote, so a later
#: recaption (with another table) knows them for its own, and a caption a person edited since for theirs.
MARK = "captions_from_path"


def captions_digest(captions: list[str | None]) -> str:
    return hashlib.sha256(json.dumps(captions, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def _sources(clip: Clip) -> list | None:
    """The recorded sources of ``clip``'s English captions (``caption_sources``), or None."""
    sources = clip.extra.get("caption_sources")
    sources = sources.get("eng") if isinstance(sources, dict) else None
    return sources if isinstance(sources, list) else None


def made_from_path(clip: Clip, table: CaptionRules) -> bool:
    """Whether ``clip``'s English captions are what its path gives: none, the folder importer's caption from
    the file name (:func:`~mlatr.data.importers.folder.name_caption`), the ones an earlier :func:`recaption`
    wrote (marked :data:`MARK`, unchanged since) or :func:`path_captions` with ``table``. False: a person (or
    another program) wrote them."""
    captions = clip.captions.get("eng") or []
    if not captions or clip.extra.get(MARK) == captions_digest(captions):
        return True
    sources = _sources(clip)
    if sources is not None and len(sources) == len(captions):
        return all(s in PATH_SOURCES for s in sources)
    ident = clip.id
    rel = Path(ident) if Path(ident).suffix.lower() in AUDIO_EXTENSIONS else Path(ident + Path(clip.audio).suffix)
    return captions in ([name_caption(rel)], path_captions(ident, table)[0], path_captions(ident, table, True)[0])


def recaption(manifest: Manifest, table: CaptionRules) -> Recaptioned:
    """Rewrite, in place, the English captions and the labels of ``manifest``'s English-only clips from their
    ids (with the folders' words and joined words split, :func:`path_captions`' ``folders``, where the folder
    importer made the clip's captions so: a ``folder`` among its ``caption_sources``, or recorded sources of a
    clip in no folder); clips the table leaves out are removed. Captions a person wrote are never replaced: a clip
    with a sidecar caption beside its audio, or whose captions were not made from its path (:func:`made_from_path`),
    keeps them and is never removed (counted ``kept_own``). A clip of a library the table does not know keeps the
    labels it has (the folder importer's) unless a label prefix matches.
    """
    counts = {"recaptioned": 0, "reviewed": 0, "removed": 0, "kept_as_is": 0, "kept_own": 0, "labelled": 0}
    changes: list[CaptionChange] = []
    kept = []
    for clip in manifest.clips:
        if set(clip.captions) - {"eng"}:
            counts["kept_as_is"] += 1
            kept.append(clip)
            continue
        before, labels_before = list(clip.captions.get("eng", [])), list(clip.labels)
        own = has_sidecar(clip.audio_path(manifest.root)) or not made_from_path(clip, table)
        sources = _sources(clip)  # the folder importer's way, where it made the captions with the folders' words
        folders = sources is not None and ("folder" in sources or "/" not in clip.id)
        captions, label = path_captions(clip.id, table, folders=folders)
        if own:
            counts["kept_own"] += 1
        elif captions is None:
            counts["removed"] += 1
            changes.append(CaptionChange(clip.id, before, None, labels_before, []))
            continue
        else:
            counts["reviewed"] += clip.id in table.captions or drop_numbering(clip.id) in table.captions
            if captions:
                clip.captions = {"eng": list(captions)}
                clip.extra[MARK] = captions_digest(list(captions))
                if "caption_sources" in clip.extra:  # a manifest that records them (the folder importer's)
                    clip.extra["caption_sources"] = {"eng": path_sources(captions)}
                counts["recaptioned"] += 1
        if label or table.knows(clip.id):  # a library the table does not know keeps its folder labels
            clip.labels = [label] if label else []
        counts["labelled"] += bool(clip.labels)
        after = list(clip.captions.get("eng", []))
        if after != before or clip.labels != labels_before:
            changes.append(CaptionChange(clip.id, before, after, labels_before, list(clip.labels)))
        kept.append(clip)
    manifest.clips = kept
    return Recaptioned(counts, changes)
