"""What a model is pointed at: a manifest split, a folder of sounds or a list of files, as a :class:`Manifest`.

The errors say what to do: a folder given where a manifest was expected names ``mlatr data import --format
folder``; a split asked of a manifest without splits names ``--split all``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from mlatr.data.importers.folder import import_folder
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError


def manifest_split(path: str | os.PathLike, split: str = "all", skip_bad: bool = False) -> Manifest:
    """The clips of split ``split`` (``all``: every clip) of the manifest file ``path``."""
    if Path(path).is_dir():
        raise MlatrError(f"{path} is a folder, not a manifest: make one with `mlatr data import --format folder "
                         f"{path} -o manifest.jsonl` (the Python API takes the folder itself: mlatr.Index.build)")
    manifest = Manifest.load(path, skip_bad=skip_bad)
    if split == "all":
        return manifest
    if set(manifest.splits()) == {None}:
        raise MlatrError(f"{path} has no splits (no clip has a 'split' field): use --split all (split='all') "
                         "to take every clip, or make splits with mlatr data split")
    return manifest.split(split)


def library_manifest(source: str | os.PathLike | Manifest | Sequence[str | os.PathLike], split: str = "all",
                     skip_bad: bool = False) -> Manifest:
    """A sound library as a manifest: a :class:`Manifest` as it is, a folder (every sound file under it,
    captions from sidecars or names: :func:`~mlatr.data.importers.folder.import_folder`), a manifest file
    (``split``), or a list of audio files (id = the path as given, no captions)."""
    if isinstance(source, Manifest):
        return source
    if isinstance(source, (str, os.PathLike)):
        if Path(source).is_dir():
            return import_folder([source], skip_bad=skip_bad)
        return manifest_split(source, split, skip_bad)
    paths = [os.fspath(p) for p in source]
    if not paths:
        raise MlatrError("no audio file given")
    return Manifest(clips=[Clip(id=p, audio=str(Path(p).resolve())) for p in paths], root=Path.cwd())
