"""The one interface every machine-translation backend implements.

ATRI §5.1 builds its multilingual AudioCaps / Clotho by machine-translating the English captions into
seven languages (Deepseek through its API) and Appendix A re-translates them into English to check them.
A backend turns a batch of captions in one language into the same number of captions in another:

* :meth:`TranslationBackend.check_pair` raises :class:`~mlatr.errors.MlatrError` naming the pair when the
  backend cannot translate it at all (before any work starts);
* :meth:`TranslationBackend.translate_batch` returns one translation per input, ``None`` where that one
  caption failed, and raises :class:`TranslationFailure` when the whole batch failed (the driver then
  reports those captions and leaves them missing; it never substitutes the source text).

``name`` and :meth:`TranslationBackend.model_for` identify the backend in the translation cache key
(:mod:`mlatr.translation.cache`), so translations of two models never mix. ``batch_size`` is how many
captions one call takes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from mlatr.errors import MlatrError


class TranslationFailure(Exception):
    """A batch (or one caption) could not be translated; the message says why (kept in the report).

    Not a :class:`MlatrError`: it is caught by the driver, which leaves the captions missing and goes on.
    """


class TranslationBackend(ABC):
    """A machine-translation engine: ``translate_batch(texts, source, target) -> [str | None]``."""

    #: Registry name ("openai", "hf", "apertium"): part of the cache key.
    name: str = ""

    def __init__(self, model: str, batch_size: int = 16):
        if batch_size < 1:
            raise MlatrError(f"translation backend {self.name!r}: batch size must be >= 1, got {batch_size}")
        #: What produced the translations (a model id, a folder, an Apertium mode): part of the cache key.
        self.model = model
        self.batch_size = int(batch_size)

    def check_pair(self, source: str, target: str) -> None:  # noqa: B027 (optional: most backends do every pair)
        """Raise :class:`MlatrError` naming ``source -> target`` when this backend cannot translate it."""

    @abstractmethod
    def translate_batch(self, texts: Sequence[str], source: str, target: str) -> list[str | None]:
        """One translation per text (ISO 639-3 ``source`` -> ``target``), ``None`` for a text that failed;
        raise :class:`TranslationFailure` when the batch as a whole failed."""

    def model_for(self, source: str, target: str) -> str:
        """The model that translates ``source -> target`` (the cache key's ``model``); ``model`` by default."""
        return self.model

    def describe(self) -> str:
        return f"{self.name} ({self.model})"


def single_line(text: str) -> str:
    """A caption on one line (line breaks become spaces): backends that frame captions by lines need it."""
    return " ".join(text.split())


def clean_output(text: str | None) -> str | None:
    """A backend's output for one caption, stripped; ``None`` when empty (an empty caption is no translation)."""
    if text is None:
        return None
    text = single_line(text)
    return text or None
