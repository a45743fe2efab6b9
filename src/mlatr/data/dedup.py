"""Identical audio kept once: clips whose decoded samples are the same, found by a hash (issue 35).

Game and sound packages reuse each other's recordings (a desktop theme's bell in a game, a drum kit in two
packages). Two copies of one recording in two libraries would put the same sound in a held-out library's
test set and in its training set (:mod:`mlatr.experiments.unseen_library`). :func:`dedup_manifest` hashes
each clip's decoded audio (:func:`audio_hash`: SHA-256 of the sample rate, the channel count and the int16
samples, so a copy with other tags or another container of the same PCM is found too) and keeps, of every
group of equal hashes, the copies in the library that comes first in ``order`` (then alphabetically); the
copies in other libraries leave the manifest and are named in the first kept clip's ``duplicates`` field.
Copies inside one library stay (they sit in one fold; a theme's named links to one sound are clips of
their own there). Hashes are cached per
file state (``.audio-hashes.json`` beside the manifest), so a rerun decodes only new or changed files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf
from tqdm import tqdm

from mlatr.data.manifest import Manifest
from mlatr.io_utils import atomic_write_json

HASH_CACHE = ".audio-hashes.json"


def audio_hash(path: str | Path) -> str:
    """SHA-256 of a file's decoded audio (sample rate, channels, int16 samples)."""
    data, rate = sf.read(str(path), dtype="int16", always_2d=True)
    h = hashlib.sha256(f"{rate}:{data.shape[1]}:".encode())
    h.update(data.tobytes())
    return h.hexdigest()


def library_of(clip_id: str) -> str:
    return clip_id.split("/", 1)[0]


@dataclass
class DedupReport:
    clips: int
    removed: dict[str, str]  # removed clip id -> kept clip id


def dedup_manifest(manifest: Manifest, order: Sequence[str] = (), progress: bool = False) -> DedupReport:
    """Remove the clips whose audio another clip already has (in place); see the module docstring. Libraries
    not in ``order`` come after those in it, alphabetically."""
    cache_path = manifest.root / HASH_CACHE
    cache = json.loads(cache_path.read_text(encoding="utf-8")) if cache_path.is_file() else {}
    rank = {lib: k for k, lib in enumerate(order)}
    hashes = {}
    for clip in tqdm(manifest.clips, desc="audio hashes", unit="clip", disable=not progress):
        path = clip.audio_path(manifest.root)
        st = path.stat()
        key = f"{clip.audio}:{st.st_size}:{st.st_mtime_ns}"
        if key not in cache:
            cache[key] = audio_hash(path)
        hashes[clip.id] = cache[key]
    atomic_write_json(cache_path, cache, indent=None)
    ranked = sorted(manifest.clips, key=lambda c: (rank.get(library_of(c.id), len(rank)), library_of(c.id), c.id))
    first: dict[str, object] = {}
    removed: dict[str, str] = {}
    for clip in ranked:
        kept = first.setdefault(hashes[clip.id], clip)
        if library_of(kept.id) != library_of(clip.id):
            removed[clip.id] = kept.id
            kept.extra.setdefault("duplicates", []).append(clip.id)
    manifest.clips = [c for c in manifest.clips if c.id not in removed]
    return DedupReport(len(manifest.clips), removed)
