"""What a model is pointed at: a sound library, given the same way to every command and to the Python API.

A library is any of, or a list mixing (shards apart):

- a folder of sounds: every sound file under it, captions from sidecars, tags or names and facets from the
  headers (:func:`~mlatr.data.importers.folder.import_folder`, without its loudness: an index build measures
  the clips it encodes, :func:`~mlatr.data.file_metadata.measure_clips`); ids are the paths under the folder
  without extension;
- a manifest (``.jsonl``; ``split`` picks its clips, ``all`` every clip): its ids;
- sound files: ids are their paths under their deepest common folder, without extension, as if that folder
  were given (:func:`~mlatr.data.importers.folder.import_files`);
- webdataset shards: a ``.tar`` file, a brace range (``shards/shard-{000000..000009}.tar``) or a folder holding
  shards (what ``mlatr data export`` writes): the samples' ids (:mod:`mlatr.data.webdataset_shards`).

``mlatr embed``, ``mlatr classify`` and ``mlatr index build`` take these as their INPUT arguments;
``LoadedModel.embed_audio`` / ``classify`` / ``embed_library`` and ``mlatr.Index.build`` take them as
``audio`` / ``source``: the same clips with the same ids (relative to the library's root) everywhere.
The errors say what to do: a folder given where a manifest was expected names the forms above; a split
asked of a manifest without splits names ``--split all``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mlatr.data.importers.folder import import_files, import_folder
from mlatr.data.manifest import Clip, Manifest, Skip
from mlatr.data.pipeline.source import Source
from mlatr.data.pipeline.source_choice import open_source
from mlatr.data.webdataset_shards import ShardIndex, index_shards, is_shard_spec
from mlatr.errors import MissingFileError, MlatrError

#: A library as the API takes it: one item (a path, a shard spec, a :class:`Manifest`) or a list of items.
LibrarySource = str | os.PathLike | Manifest | Sequence[str | os.PathLike]


@dataclass
class Library:
    """The clips of a library (``manifest``: ids relative to the library's root, audio paths absolute or under
    its ``root``) and, for webdataset shards, where their audio is (``shards``; else the clips' files)."""

    manifest: Manifest
    shards: ShardIndex | None = None

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.manifest.clips]

    def path(self, row: int) -> str:
        """Where clip ``row``'s audio is: an absolute file path, or a shard member's address ``SHARD#MEMBER``."""
        clip = self.manifest[row]
        return clip.audio if self.shards is not None else str(clip.audio_path(self.manifest.root).resolve())

    def skips(self, unreadable: dict[str, str]) -> list[Skip]:
        """Every input left out: the files and lines refused while listing, then the clips whose audio could not be
        read (``unreadable``: id -> why, a source's ``bad``), each with its file."""
        rows = {clip.id: row for row, clip in enumerate(self.manifest.clips)}
        found = [Skip.of_problem(p) for p in self.manifest.problems]
        for ident, why in unreadable.items():
            row = rows.get(ident)
            file = self.path(row) if row is not None else ident
            found.append(Skip(file, why.removeprefix(f"{file}: "), ident))
        return found

    def source(self, sample_rate: int, skip_bad: bool = False) -> Source:
        """The clips' audio, read at ``sample_rate`` (the shards' members or the files)."""
        return open_source(self.manifest, sample_rate, skip_bad=skip_bad, shards=self.shards)


def manifest_split(path: str | os.PathLike, split: str = "all", skip_bad: bool = False) -> Manifest:
    """The clips of split ``split`` (``all``: every clip) of the manifest file ``path``."""
    if Path(path).is_dir():
        raise MlatrError(f"{path} is a folder, not a manifest: give it as a library (mlatr index build {path} -o "
                         "INDEX; Python: mlatr.Index.build(model, folder)), or make a manifest with `mlatr data "
                         f"import --format folder {path} -o manifest.jsonl`")
    manifest = Manifest.load(path, skip_bad=skip_bad)
    return _split(manifest, split, str(path))


def _split(manifest: Manifest, split: str, where: str) -> Manifest:
    if split == "all":
        return manifest
    if set(manifest.splits()) == {None}:
        raise MlatrError(f"{where} has no splits (no clip has a 'split' field): use --split all (split='all') "
                         "to take every clip, or make splits with mlatr data split")
    return manifest.split(split)


def files_on_disk(items: Sequence[str | os.PathLike]) -> bool:
    """Whether library items are folders of sounds and sound files only (no manifest, no shards): files as found on
    a disk, some of which do not decode in any large collection (the CLI skips those by default)."""
    texts = [os.fspath(i) for i in items]
    return bool(texts) and not any(_is_manifest(t) or is_shard_spec(t) for t in texts)


def _is_manifest(item: str) -> bool:
    return item.lower().endswith((".jsonl", ".json")) and not Path(item).is_dir()


def _items(source: LibrarySource) -> list[str | Manifest]:
    if isinstance(source, Manifest | str | os.PathLike):
        return [source if isinstance(source, Manifest) else os.fspath(source)]
    items = [s if isinstance(s, Manifest) else os.fspath(s) for s in source]
    if not items:
        raise MlatrError("no library given: a folder of sounds, a manifest, sound files or webdataset shards")
    return items


def open_library(source: LibrarySource, split: str = "all", skip_bad: bool = False, progress: bool = False,
                 probe: bool = False) -> Library:
    """The :class:`Library` of ``source`` (see the module docstring); ``split`` applies to manifests and shards
    (a folder or sound files have none: ``all``); ``probe`` decodes a folder's files as they are listed (their
    ``duration``; else an unreadable file is found when it is read). Two clips of one id are refused, naming
    where both come from."""
    items = _items(source)
    shard_items = [i for i in items if isinstance(i, str) and is_shard_spec(i)]
    if shard_items:
        if len(shard_items) != len(items):
            raise MlatrError("webdataset shards are a library of their own: give them alone (the shards of several "
                             "sets: join their specs with '::')")
        shards = index_shards(shard_items if len(shard_items) > 1 else shard_items[0], progress=progress,
                              skip_bad=skip_bad)
        return Library(_split(shards.manifest, split, " ".join(shard_items)), shards)
    for item in items:
        if isinstance(item, str) and not os.path.lexists(item):
            raise MissingFileError(item, "a library: a folder of sounds, a manifest, a sound file or webdataset "
                                         "shards")
    parts: list[tuple[str, Manifest]] = []
    files = [i for i in items if isinstance(i, str) and not Path(i).is_dir() and not _is_manifest(i)]
    if split != "all" and (files or any(isinstance(i, str) and Path(i).is_dir() for i in items)):
        raise MlatrError(f"split {split!r}: a folder or a list of sound files has no splits; use split 'all' (or a "
                         "manifest with splits)")
    for item in items:
        if isinstance(item, Manifest):
            parts.append(("the manifest given", _split(item, split, "the manifest")))
        elif Path(item).is_dir():
            parts.append((item, import_folder([item], skip_bad=skip_bad, progress=progress, probe=probe,
                                              loudness=False)))
        elif _is_manifest(item):
            parts.append((item, manifest_split(item, split, skip_bad)))
    if files:
        parts.append((" ".join(files[:3]) + (" ..." if len(files) > 3 else ""),
                      import_files(files, skip_bad=skip_bad, progress=progress, probe=probe, loudness=False)))
    if len(parts) == 1:
        return Library(parts[0][1])
    return Library(_joined(parts))


def _joined(parts: list[tuple[str, Manifest]]) -> Manifest:
    """One manifest of several, audio paths made absolute; an id found twice is refused, naming both."""
    clips: list[Clip] = []
    seen: dict[str, str] = {}
    problems = []
    for where, manifest in parts:
        problems += manifest.problems
        for clip in manifest.clips:
            if clip.id in seen:
                raise MlatrError(f"clip id {clip.id!r} comes from both {seen[clip.id]} and {where}: give the "
                                 "libraries one at a time, or a manifest whose ids differ")
            seen[clip.id] = where
            clips.append(Clip(id=clip.id, audio=str(clip.audio_path(manifest.root).resolve()),
                              captions=clip.captions, split=clip.split, labels=clip.labels, duration=clip.duration,
                              extra=clip.extra))
    return Manifest(clips=clips, root=Path.cwd(), problems=problems)

