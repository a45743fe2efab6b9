"""Load a local Hugging Face folder (tokenizer + model) with ``local_files_only``: nothing is downloaded.

Shared by the hf translation backend (a sequence-to-sequence model) and the back-translation check's
sentence encoder (an encoder such as RoBERTa-large). ``transformers`` is imported here, when a model is
built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlatr.errors import MlatrError


def load_local(folder: str | Path, auto_class: str, owner: str, hint: str = "") -> tuple[Any, Any]:
    """``(tokenizer, model)`` of ``folder`` through ``transformers.AutoTokenizer`` and ``transformers.<auto_class>``
    (e.g. ``AutoModelForSeq2SeqLM``), the model in eval mode; a failure is an :class:`MlatrError` naming
    ``owner`` and the folder, followed by ``hint``."""
    try:
        import transformers  # optional extra (mlatr[hf])
    except ImportError as exc:
        raise MlatrError(f"{owner} needs transformers: pip install 'mlatr[hf]'") from exc
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = getattr(transformers, auto_class).from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, KeyError, ImportError) as exc:
        raise MlatrError(f"{owner}: cannot load {folder} ({type(exc).__name__}: {exc}). {hint}".rstrip()) from exc
    return tokenizer, model.eval()
