"""Search a sound library in any language: an index of a model's audio embeddings (numpy | FAISS).

Python API::

    from mlatr.search import Index
    index = Index.load("library.idx.npz")            # backend="faiss" for FAISS
    for hit in index.search_text("un chien aboie", lang="fra", k=10):
        print(hit.rank, hit.score, hit.id, hit.path)
    clips = index.search_audio("query.wav", k=5)     # the same list; clips.caption_hits: captions

``build_index(load_model(checkpoint), manifest, output, add=...)`` writes one (``mlatr index build``).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name -> module, imported on first access: ``mlatr.search.ann``, ``.fusion`` and the other
#: light submodules (read by the ``mlatr`` command's parsers) load without torch.
_LAZY = {"BuildReport": "mlatr.search.build", "Index": "mlatr.search.index", "build_index": "mlatr.search.build",
         "CaptionHit": "mlatr.search.results", "Evidence": "mlatr.search.evidence", "Hit": "mlatr.search.results",
         "Results": "mlatr.search.results"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mlatr.search' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
