"""mlatr: multilingual audio-text retrieval.

Train an audio encoder and a multilingual text encoder into one embedding space, measure how well
and how consistently across languages they retrieve, and search a sound library in any language.

The Python API (docs/python-api.md)::

    import mlatr
    model = mlatr.load("runs/demo-real/model.pt")          # a checkpoint file or a model folder
    t = model.embed_text(["un chien aboie"], lang="fra")    # numpy [n, d], unit norm
    a = model.embed_audio(["dog.wav"])                      # paths, or 1-D arrays with sample_rate=
    s = model.similarity(t, a)                              # the model's matching head
    labels = model.classify(["dog.wav"], ["dog", "rain"])   # zero-shot
    index = mlatr.Index.build(model, "my-sounds/")          # a folder, a manifest, sound files or shards
    metrics = mlatr.evaluate(model, "manifest.jsonl", split="test")

``load``, ``Index`` and ``evaluate`` are imported on first use (module ``__getattr__``): ``import mlatr``
and the ``mlatr`` command's start-up stay free of torch until a model is needed.
"""

from __future__ import annotations

import importlib
from typing import Any

from mlatr.version import __version__

#: Public name -> (module, attribute), imported on first access.
_LAZY = {
    "load": ("mlatr.inference", "load"),
    "LoadedModel": ("mlatr.inference", "LoadedModel"),
    "Classification": ("mlatr.inference", "Classification"),
    "Index": ("mlatr.search.index", "Index"),
    "evaluate": ("mlatr.inference.model_evaluation", "evaluate"),
    "export": ("mlatr.inference", "export_model"),
    "Hit": ("mlatr.search.results", "Hit"),
    "Results": ("mlatr.search.results", "Results"),
    "Evidence": ("mlatr.search.evidence", "Evidence"),
    "LibraryEmbeddings": ("mlatr.inference.loaded_model", "LibraryEmbeddings"),
}

__all__ = ["Classification", "Evidence", "Hit", "Index", "LibraryEmbeddings", "LoadedModel", "Results", "__version__",
           "evaluate", "export", "load"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mlatr' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
    """The public names (:data:`__all__`) and the subpackages already imported, not this module's own imports."""
    return sorted(set(__all__) | {k for k, v in globals().items() if isinstance(v, type(importlib))} - {"importlib"})
