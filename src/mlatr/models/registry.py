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


def _build(table: dict[str, Factory], kind: str, name: str, options: dict[str, Any]) -> nn.Module:
    _load_builtin_encoders()
    if name not in table:
        raise MlatrError(f"unknown {kind} encoder {name!r}; available: {', '.join(sorted(table))}")
    return table[name](**options)


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
