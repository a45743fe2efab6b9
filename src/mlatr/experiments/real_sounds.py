"""Real sound libraries: deterministic splits of an imported folder manifest.

``scripts/get-real-sounds.sh`` unpacks the Debian sound packages and imports them with the folder
importer; :func:`assign_hash_splits` then gives every clip a split from a hash of its id, so that the
split of a clip never depends on which other files are present (adding a library keeps old splits).
The demo itself (train the projections over frozen aisfx + e5-small) is
:mod:`mlatr.experiments.real_demo`.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    """``python -m mlatr.experiments.real_sounds split MANIFEST``: rewrite MANIFEST with hash splits."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "split":
        print("usage: python -m mlatr.experiments.real_sounds split MANIFEST", file=sys.stderr)
        return 2
    path = Path(argv[1])
    manifest = Manifest.load(path)
    counts = assign_hash_splits(manifest)
    manifest.save(path)
    print(f"{path}: {len(manifest)} clips; " + ", ".join(f"{k} {counts[k]}" for k in ("train", "val", "test")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
