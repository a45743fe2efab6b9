"""Seeds derived from tuples: every random generator of a run is seeded by what it is for.

``derive_seed(seed, epoch, "order")`` names the generator of epoch ``epoch``'s clip order, so a resumed run
draws exactly what an uninterrupted one would (the randomness contract: ``docs/architecture.md``,
"Randomness and resume"). This module imports nothing from mlatr.
"""

from __future__ import annotations

import hashlib


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from a tuple (stable across runs and Python versions, unlike ``hash``)."""

    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
