"""Named registries of audio and text encoders.

A factory is registered under an explicit name and called with keyword options::

    @register_audio_encoder("small-cnn")
    def small_cnn(**options) -> AudioEncoder: ...

    encoder = build_audio_encoder("small-cnn", width=64)

Every built encoder has ``config() -> dict`` holding ``name`` and the options that rebuild it, so a
checkpoint can recreate the model with ``build_audio_encoder(**cfg)`` / ``build_text_encoder(**cfg)``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from torch import nn

from mlatr.errors import MlatrError

Factory = Callable[..., nn.Module]

_AUDIO: dict[str, Factory] = {}
_TEXT: dict[str, Factory] = {}


def _register(table: dict[str, Factory], kind: str, name: str) -> Callable[[Factory], Factory]:
    def decorator(factory: Factory) -> Factory:
        if name in table and table[name] is not factory:
            raise MlatrError(f"{kind} encoder {name!r} is already registered")
        table[name] = factory
        return factory

    return decorator


def register_audio_encoder(name: str) -> Callable[[Factory], Factory]:
    return _register(_AUDIO, "audio", name)


def register_text_encoder(name: str) -> Callable[[Factory], Factory]:
    return _register(_TEXT, "text", name)


def _factory(table: dict[str, Factory], kind: str, name: Any, options: dict[str, Any]) -> Factory:
    """The factory of encoder ``name``, after checking that its signature takes ``options`` (by name)."""
    _load_builtin_encoders()
    if not isinstance(name, str):
        raise MlatrError(f"{kind} encoder name: expected a string, got {name!r}"[:200])
    if name not in table:
        raise MlatrError(f"unknown {kind} encoder {name!r}; available: {', '.join(sorted(table))}")
    factory = table[name]
    try:
        inspect.signature(factory).bind(**options)
    except TypeError as exc:
        taken = [p for p in inspect.signature(factory).parameters if p not in ("self", "args", "kwargs")]
        raise MlatrError(f"{kind} encoder {name!r}: {exc} (its options: {', '.join(taken) or 'none'})") from None
    return factory


def _build(table: dict[str, Factory], kind: str, name: str, options: dict[str, Any]) -> nn.Module:
    factory = _factory(table, kind, name, options)
    try:
        return factory(**options)
    except (TypeError, ValueError, OverflowError, AssertionError, RuntimeError) as exc:  # torch's refusals of an
        # option of the wrong type or range (an AssertionError for heads that do not divide a width)
        if isinstance(exc, MlatrError):
            raise
        raise MlatrError(f"{kind} encoder {name!r}: options {options!r}: {exc}"[:500]) from None


def build_audio_encoder(name: str, **options: Any) -> nn.Module:
    return _build(_AUDIO, "audio", name, options)


def build_text_encoder(name: str, **options: Any) -> nn.Module:
    return _build(_TEXT, "text", name, options)


def text_encoder_takes_corpus(name: str) -> bool:
    """True when the text encoder's factory has a ``corpus`` keyword: it learns its vocabulary from the
    training captions (the trainer passes them), as the small transformer's tokenizer does."""

    _load_builtin_encoders()
    factory = _TEXT.get(name)
    return factory is not None and "corpus" in inspect.signature(factory).parameters


def audio_encoder_names() -> list[str]:
    _load_builtin_encoders()
    return sorted(_AUDIO)


def text_encoder_names() -> list[str]:
    _load_builtin_encoders()
    return sorted(_TEXT)


#: Modules whose import registers the built-in encoders (imported on first use).
BUILTIN_MODULES: list[str] = [
    "mlatr.models.small_audio",
    "mlatr.models.small_text",
    "mlatr.models.aisfx",
    "mlatr.models.frozen_text",
    "mlatr.models.ced",
    "mlatr.models.hf_text",
    "mlatr.models.htsat",
    "mlatr.models.hf_clap",
]


def _load_builtin_encoders() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
