"""Index build + search: exact ranking, FAISS = numpy, incremental add, atomic write, --audio, CLI JSON."""

import json
import shutil

import numpy as np
import pytest
import torch

from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import load_model
from mlatr.search import Index, build_index
from mlatr.search.backends import FaissBackend, top_k_numpy
from toydata import train_toy_model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_toy_model(tmp_path_factory.mktemp("search"))


def _model(ckpt):
    return load_model(ckpt)


def test_build_and_text_search_equal_brute_force(trained, tmp_path):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    model = _model(ckpt)
    out = tmp_path / "toy.idx.npz"
    rep = build_index(model, manifest, out, caption_languages=["eng", "fra"])
    assert rep.added == len(manifest) == 20 and rep.kept == 0
    index = Index.load(out)
    assert index.ids == [c.id for c in manifest.clips]
    assert index.paths[3] == str((manifest_path.parent / "audio/clip003.wav").resolve())
    assert np.allclose(np.linalg.norm(index.embeddings, axis=1), 1, atol=1e-5)
    assert len(index.caption_text) == 20 * 2 * 2 and set(index.caption_lang) == {"eng", "fra"}
    # the stored embedding of clip 5 is the model's own encoding of that file
    from mlatr.audio.io import load_audio
    wave = torch.from_numpy(load_audio(manifest.clips[5].audio_path(manifest.root), 16000))[None]
    with torch.no_grad():
        own = model.model.encode_audio(wave, torch.tensor([wave.shape[1]])).pooled[0].numpy()
    assert np.allclose(index.embeddings[5], own, atol=1e-5)
    # text search = brute-force ranking of cosines with the model's query embedding
    hits = index.search_text("un son aigu double", lang="fra", k=7, rank="audio")
    with torch.no_grad():
        q = model.model.encode_text(["un son aigu double"], ["fra"]).pooled[0].numpy()
    cos = index.embeddings @ q
    expected = sorted(range(len(cos)), key=lambda i: (-cos[i], i))[:7]
    assert [h.id for h in hits] == [index.ids[i] for i in expected]
    assert [h.rank for h in hits] == list(range(1, 8))
    assert np.allclose([h.score for h in hits], cos[expected], atol=1e-6)
    assert hits[0].captions == manifest[expected[0]].captions["eng"]


def test_top_k_ties_and_faiss_equals_numpy():
    emb = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], np.float32)
    scores, rows = top_k_numpy(emb, np.array([[1, 0]], np.float32), 3)
    assert rows.tolist() == [[0, 2, 3]] and np.allclose(scores, [[1, 1, 0.6]])
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((500, 24)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    queries = emb[:7] + 0.3 * rng.standard_normal((7, 24)).astype(np.float32)
    s_np, r_np = top_k_numpy(emb, queries, 10)
    s_fa, r_fa = FaissBackend(emb).top_k(queries, 10)
    assert np.array_equal(r_np, r_fa) and np.allclose(s_np, s_fa, atol=1e-5)
    full = queries @ emb.T
    assert np.array_equal(r_np, np.argsort(-full, axis=1, kind="stable")[:, :10])
    assert top_k_numpy(emb, queries, 1000)[1].shape == (7, 500)


def test_faiss_index_search_equals_numpy(trained, tmp_path):
    manifest_path, ckpt = trained
    out = tmp_path / "toy.idx.npz"
    build_index(_model(ckpt), Manifest.load(manifest_path), out, caption_languages=["eng"])
    a = Index.load(out).search_text("a single low tone", k=20, rank="audio")
    b = Index.load(out, backend="faiss").search_text("a single low tone", k=20, rank="audio")
    assert [h.id for h in a] == [h.id for h in b]
    assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-5)


def test_incremental_add_encodes_only_new_clips(trained, tmp_path):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    model = _model(ckpt)
    calls = []
    original = model.model.encode_audio
    model.model.encode_audio = lambda w, lens=None: (calls.append(w.shape[0]), original(w, lens))[1]
    out = tmp_path / "inc.idx.npz"
    first = Manifest(clips=manifest.clips[:12], root=manifest.root, path=manifest.path)
    build_index(model, first, out, batch_size=5, caption_languages=["eng"])
    assert sum(calls) == 12
    calls.clear()
    rep = build_index(model, manifest, out, add=True, batch_size=5)
    assert sum(calls) == 8 and rep.added == 8 and rep.kept == 12
    inc = Index.load(out)
    calls.clear()
    full = build_index(model, manifest, tmp_path / "full.idx.npz", caption_languages=["eng"]).index
    assert inc.ids == full.ids and np.allclose(inc.embeddings, full.embeddings, atol=1e-5)
    assert inc.caption_text == full.caption_text and np.array_equal(inc.caption_clip, full.caption_clip)
    # nothing new: no encoder call at all
    calls.clear()
    assert build_index(model, manifest, out, add=True).added == 0 and calls == []
    # another checkpoint: --add refused
    other = tmp_path / "other.pt"
    shutil.copy(ckpt, other)
    with open(other, "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(MlatrError, match="another model"):
        build_index(load_model(other), manifest, out, add=True)


def test_failed_build_leaves_no_partial_index(trained, tmp_path):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    model = _model(ckpt)
    out = tmp_path / "a.idx.npz"
    build_index(model, Manifest(clips=manifest.clips[:4], root=manifest.root, path=manifest.path), out,
                caption_languages=["eng"])
    before = out.read_bytes()
    original = model.model.encode_audio
    seen = []

    def failing(w, lens=None):
        seen.append(1)
        if len(seen) == 2:
            raise RuntimeError("disk on fire")
        return original(w, lens)

    model.model.encode_audio = failing
    with pytest.raises(RuntimeError):
        build_index(model, manifest, out, add=True, batch_size=4)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".a.idx.npz.lock", "a.idx.npz"]  # the writer lock
    seen.clear()
    with pytest.raises(RuntimeError):
        build_index(model, manifest, tmp_path / "b.idx.npz", batch_size=4)
    assert not (tmp_path / "b.idx.npz").exists()


def test_write_failure_keeps_previous_index(trained, tmp_path, monkeypatch):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    model = _model(ckpt)
    out = tmp_path / "a.idx.npz"
    build_index(model, Manifest(clips=manifest.clips[:3], root=manifest.root, path=manifest.path), out,
                caption_languages=["eng"])
    before = out.read_bytes()

    def half_written(fh, **arrays):
        fh.write(b"PK\x03\x04 half an archive")
        raise OSError("no space left on device")

    monkeypatch.setattr(np, "savez", half_written)
    with pytest.raises(OSError):
        build_index(model, manifest, out, add=True)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".a.idx.npz.lock", "a.idx.npz"]
    monkeypatch.undo()
    assert len(Index.load(out)) == 3


def test_cli_build_and_search_json(trained, tmp_path, capsys):
    manifest_path, ckpt = trained
    out = tmp_path / "cli.idx.npz"
    assert main(["index", "build", "--checkpoint", str(ckpt), "--manifest", str(manifest_path), "-o", str(out),
                 "--caption-langs", "eng,deu", "--no-progress"]) == 0
    assert "20 clips (20 encoded" in capsys.readouterr().out
    assert main(["search", str(out), "ein doppelter hoher Ton", "--lang", "deu", "-k", "4", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["lang"] == "deu" and [r["rank"] for r in res["results"]] == [1, 2, 3, 4]
    scores = [r["score"] for r in res["results"]]
    assert scores == sorted(scores, reverse=True)
    api = Index.load(out).search_text("ein doppelter hoher Ton", "deu", 4)
    assert [r["id"] for r in res["results"]] == [h.id for h in api]
    # --audio with an indexed clip: the clip itself comes first, with cosine 1
    query = manifest_path.parent / "audio" / "clip007.wav"
    assert main(["search", str(out), "--audio", str(query), "-k", "3", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["results"][0]["id"] == "clip007" and res["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert res["results"][0]["path"] == str(query.resolve())
    assert len(res["captions"]) == 3 and {c["lang"] for c in res["captions"]} <= {"eng", "deu"}
    index = Index.load(out)
    cos = index.caption_embeddings @ index.embeddings[7]
    assert [c["text"] for c in res["captions"]] == [index.caption_text[i] for i in np.argsort(-cos, kind="stable")[:3]]
    # user errors: exit status 2
    assert main(["search", str(out)]) == 2
    assert main(["search", str(tmp_path / "missing.npz"), "dog"]) == 2
    assert main(["search", str(out), "dog", "--lang", "xx"]) == 2


def test_query_languages_say_which_encoders_read_the_language():
    from mlatr.models.protocols import query_languages
    from mlatr.models.registry import build_text_encoder

    class Fake:
        dim = 4

        def __init__(self, *_):
            pass

        def embed(self, texts):
            return np.ones((len(texts), 4), np.float32) / 2

    use = query_languages(build_text_encoder("use-multilingual", backend_factory=Fake))
    assert not use.required and "fra" in use.known and "cat" not in use.known and use.known[0] == "eng"
    opted_in = build_text_encoder("use-multilingual", backend_factory=Fake, allow_unsupported_languages=True)
    assert query_languages(opted_in).known is None and "cat" in query_languages(opted_in).choices()
    assert not query_languages(build_text_encoder("e5-small", backend_factory=Fake)).required
    small = dict(corpus=["a dog", "un chien"], vocab_size=50, dim=8, num_layers=1, num_heads=2, ff_dim=16)
    plain = query_languages(build_text_encoder("small-transformer", **small))
    assert plain.required is False and plain.known is None
    with_lang = query_languages(build_text_encoder("small-transformer", languages=["fra", "eng"], **small))
    assert with_lang.required and with_lang.known == ("fra", "eng")


def test_text_search_without_language(trained, tmp_path):
    """lang=None: the same ranking where the encoder ignores the language; refused where it reads it."""
    manifest_path, ckpt = trained
    out = tmp_path / "toy.idx.npz"
    build_index(_model(ckpt), Manifest.load(manifest_path), out, caption_languages=["eng"])
    index = Index.load(out)
    assert [h.id for h in index.search_text("un son aigu", None, 5)] == \
        [h.id for h in index.search_text("un son aigu", "fra", 5)]
    index.model().model.text_encoder.languages = ["eng"]  # as if trained with a language embedding
    with pytest.raises(MlatrError, match="reads the query's language: give one of eng"):
        index.search_text("un son aigu", None, 5)
