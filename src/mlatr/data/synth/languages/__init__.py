"""Hand-written grammars and lexicons of the synthetic benchmark, one module per language.

``GRAMMARS[code]`` is the module of an ISO 639-3 code; see :mod:`.base` for what a module provides.
"""

from __future__ import annotations

from types import ModuleType

from mlatr.data.synth.languages import cat, deu, eng, fra, jpn, nld, spa, zho
from mlatr.data.synth.languages.base import N_VARIANTS, Mention

GRAMMARS: dict[str, ModuleType] = {m.CODE: m for m in (eng, fra, deu, spa, nld, cat, jpn, zho)}
SUPPORTED: tuple[str, ...] = tuple(GRAMMARS)

__all__ = ["GRAMMARS", "SUPPORTED", "N_VARIANTS", "Mention"]
