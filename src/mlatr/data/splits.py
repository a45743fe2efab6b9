"""Deterministic train/val/test splits from a hash of each clip id.

A clip's split depends on its id only (never on which other files are present), so adding a library
to a manifest keeps the splits of the clips already there. ``scripts/get-real-sounds.sh`` applies it
with ``mlatr data split MANIFEST``.
"""

from __future__ import annotations

import hashlib
from collections import Counter

from mlatr.data.manifest import Manifest

#: Default fractions (the rest is train).
VAL_FRACTION = 0.1
TEST_FRACTION = 0.25


def hash_unit(text: str) -> float:
    """A number in ``[0, 1)`` from the first 8 bytes of ``sha256(text)``: stable across runs/machines."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2.0 ** 64


def split_of(clip_id: str, val: float = VAL_FRACTION, test: float = TEST_FRACTION) -> str:
    """``test`` if ``hash_unit(id) < test``, ``val`` if below ``test + val``, else ``train``."""
    u = hash_unit(clip_id)
    return "test" if u < test else "val" if u < test + val else "train"


def assign_hash_splits(manifest: Manifest, val: float = VAL_FRACTION, test: float = TEST_FRACTION) -> Counter:
    """Set every clip's ``split`` by :func:`split_of` (in place); returns the count per split."""
    counts: Counter = Counter()
    for clip in manifest.clips:
        clip.split = split_of(clip.id, val, test)
        counts[clip.split] += 1
    return counts
