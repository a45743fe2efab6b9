"""One way to use a model: the inference layer, the Python API (``mlatr.load`` ...), model folders,
``mlatr embed`` / ``classify`` / ``export``, portable indexes.

The model is the session's tiny trained toy model (``served_toy``: small-cnn + small-transformer on tones,
evaluation crop 2 s, clips of 1-1.5 s); every comparison below is against another path through the code
(``mlatr index build``, ``mlatr encode``, ``mlatr eval``, the checkpoint) on the same files.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import mlatr
from clitools import assert_user_error, manifest_lines, run_cli
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.inference.loaded_model import prompts_for
from mlatr.search.index import Index

ROOT = Path(__file__).resolve().parents[1]


def _tone(path: Path, f0: float, seconds: float = 1.2, sr: int = 16000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(path, (0.3 * np.sin(2 * np.pi * f0 * t)).astype(np.float32), sr)
    return path


def _toy_files(served_toy) -> list[Path]:
    manifest = Manifest.load(served_toy[0])
    return [c.audio_path(manifest.root) for c in manifest.clips]


def readme_api_block() -> str:
    """The first ```python block of the README's "## Python API" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Python API\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_api_block_runs_as_written(served_toy, tmp_path, monkeypatch):
    manifest_path, ckpt, _ = served_toy
    (tmp_path / "runs" / "demo-real").mkdir(parents=True)
    shutil.copy(ckpt, tmp_path / "runs" / "demo-real" / "model.pt")
    _tone(tmp_path / "dog.wav", 220.0)
    _tone(tmp_path / "rain.ogg", 1760.0)
    for i, (f0, seconds) in enumerate(((220.0, 1.2), (1760.0, 1.2), (440.0, 0.5))):
        _tone(tmp_path / "my-sounds" / f"tone-{i}.wav", f0, seconds)
    toy = Manifest.load(manifest_path)
    manifest_lines(tmp_path / "manifest.jsonl", [
        {"id": c.id, "audio": str(c.audio_path(toy.root)), "captions": c.captions, "split": c.split} for c in toy])
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(readme_api_block(), "README.md", "exec"), scope)
    t, a, s, labels, index, metrics = (scope[k] for k in ("t", "a", "s", "labels", "index", "metrics"))
    assert t.shape == (2, 16) and a.shape == (2, 16) and t.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(np.concatenate([t, a]), axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(s, t @ a.T, rtol=1e-5, atol=1e-6)
    assert labels.classes == ["chien", "pluie", "cloche"] and len(labels.labels) == 1
    assert len(index) == 3 and Index.load(tmp_path / "lib.idx").ids == index.ids
    hits = scope["hits"]
    assert len(hits) == 3 and all(0.0 <= h.relevance <= 1.0 for h in hits) and isinstance(hits.nothing_relevant, bool)
    assert [h.id for h in scope["short"]] == ["tone-2"]  # the one clip under 1 s: filtered inside the ranking
    like = scope["like"]  # a sound query: the same list, its nearest captions beside it
    assert type(like) is type(hits) and len(like) == 3 and like.caption_hits is not None and hits.caption_hits is None
    assert like[0].rank == 1 and like[0].evidence[0].source == "sound"
    np.testing.assert_allclose(labels.probabilities.sum(axis=1), 1.0)
    assert set(metrics["t2a"]) >= {"eng", "fra", "deu"}


def test_embed_audio_equals_the_index_and_mlatr_encode(served_toy, tmp_path, capsys):
    manifest_path, ckpt, index_path = served_toy
    model = mlatr.load(ckpt, device="cpu")
    files = _toy_files(served_toy)
    emb = model.embed_audio(files, batch_size=16)  # index build's batch size
    index = Index.load(index_path)
    assert index.ids == [c.id for c in Manifest.load(manifest_path)]
    assert np.array_equal(emb, index.embeddings)
    r = run_cli(capsys, "encode", "--model", ckpt, "--manifest", manifest_path, "--split", "all",
                "--batch-size", "16", "--device", "cpu", "-o", tmp_path / "enc.npz")
    assert r.code == 0, r.err
    with np.load(tmp_path / "enc.npz") as z:
        assert np.array_equal(z["audio"], emb)
    # same file -> same vector: again, and as in-memory waveforms with their sample rate
    assert np.array_equal(model.embed_audio(files, batch_size=16), emb)
    waves = [sf.read(f, dtype="float32")[0] for f in files]
    assert np.array_equal(model.embed_audio(waves, sample_rate=16000, batch_size=16), emb)
    # alone or in another batch: the same vector up to float summation order
    np.testing.assert_allclose(model.embed_audio([files[3]])[0], emb[3], atol=1e-5)


def test_embed_text_is_the_query_embedding_and_checks_languages(served_toy):
    model = mlatr.load(served_toy[1], device="cpu")
    index = Index.load(served_toy[2], model=model)
    from mlatr.search.query import TextQuery

    one = model.embed_text("un son aigu", "fr")
    query = index.embed_queries([TextQuery("un son aigu", "fra")])[0]
    assert one.shape == (1, 16) and np.array_equal(one[0], query)
    t = model.embed_text(["un son aigu", "ein tiefer Ton"], lang=["fra", "deu"])  # a padded batch
    np.testing.assert_allclose(t[0], one[0], atol=1e-6)
    with pytest.raises(MlatrError, match="2 languages for 1 texts"):
        model.embed_text(["x"], lang=["fra", "eng"])
    with pytest.raises(MlatrError, match="empty text"):
        model.embed_text(["ok", " "], lang="eng")


def test_long_waveforms_are_windows_of_the_evaluation_crop(served_toy):
    model = mlatr.load(served_toy[1], device="cpu")
    sr = 16000
    rng = np.random.default_rng(0)
    long = (0.1 * rng.standard_normal(5 * sr)).astype(np.float32)  # 5 s: three windows of 2 s at most
    from mlatr.inference.audio import pool_windows, window_bounds

    bounds = window_bounds(long.shape[0], 2 * sr)
    parts = model.embed_audio([long[a:b] for a, b in bounds], sample_rate=sr, batch_size=1)
    want = pool_windows(parts, [b - a for a, b in bounds])
    np.testing.assert_allclose(model.embed_audio([long], sample_rate=sr)[0], want, atol=1e-5)
    # a 48 kHz recording is resampled to the model's rate first
    at48 = model.embed_audio([np.repeat(long[:sr], 3)], sample_rate=48000)
    assert at48.shape == (1, 16)


def test_classify_is_the_argmax_of_similarity(served_toy):
    model = mlatr.load(served_toy[1], device="cpu")
    files = _toy_files(served_toy)[:6]
    labels = ["low tone", "high tone", "silence"]
    result = model.classify(files, labels, lang="eng")
    scores = model.similarity(model.embed_audio(files), model.embed_text(prompts_for(labels, "eng"), "eng"))
    np.testing.assert_allclose(result.scores, scores, rtol=1e-5, atol=1e-6)
    assert result.labels == [labels[i] for i in scores.argmax(axis=1)]
    assert result.top(2)[0][0] == (result.labels[0], pytest.approx(float(scores[0].max())))
    assert model.classify(files[:1], "low tone, high tone").classes == ["low tone", "high tone"]


def test_evaluate_returns_what_mlatr_eval_writes(served_toy, tmp_path, capsys):
    manifest_path, ckpt, _ = served_toy
    metrics = mlatr.evaluate(mlatr.load(ckpt, device="cpu"), manifest_path, split="test", progress=False)
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", manifest_path, "--split", "test",
                "--device", "cpu", "--json", tmp_path / "m.json")
    assert r.code == 0, r.err
    assert json.loads((tmp_path / "m.json").read_text()) == json.loads(json.dumps(metrics))


def test_exported_folder_gives_the_checkpoints_embeddings(served_toy, tmp_path, capsys):
    manifest_path, ckpt, _ = served_toy
    r = run_cli(capsys, "export", "--model", ckpt, "-o", tmp_path / "model")
    assert r.code == 0, r.err
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["README.md", "config.json", "model.safetensors"]
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["format"] == "mlatr-model-1" and config["matching_head"] == {"name": "cosine"}
    assert config["train_config"]["data"]["eval_max_seconds"] == 2.0
    from safetensors.torch import load_file

    from mlatr.inference import read_checkpoint

    stored = load_file(str(tmp_path / "model" / "model.safetensors"))
    state = read_checkpoint(ckpt)["model"]
    assert stored.keys() == state.keys() and all(np.array_equal(stored[k], state[k]) for k in state)
    a, b = mlatr.load(ckpt, device="cpu"), mlatr.load(tmp_path / "model", device="cpu")
    files = _toy_files(served_toy)
    assert np.array_equal(a.embed_audio(files), b.embed_audio(files))
    assert np.array_equal(a.embed_text(["un son grave"], "fra"), b.embed_text(["un son grave"], "fra"))
    kept = ("sample_rate", "eval_max_seconds", "languages", "max_seconds")  # not the training machine's paths
    assert b.data == {k: v for k, v in a.data.items() if k in kept} and b.head.config() == a.head.config()
    # a folder is read wherever a checkpoint is: mlatr eval --model DIR
    r = run_cli(capsys, "eval", "--model", tmp_path / "model", "--manifest", manifest_path, "--device", "cpu",
                "--json", tmp_path / "m.json")
    assert r.code == 0, r.err


def test_a_folder_that_is_not_a_model_says_so(tmp_path, capsys):
    _tone(tmp_path / "sounds" / "a.wav", 440.0)
    with pytest.raises(MlatrError, match="not a model folder"):
        mlatr.load(tmp_path / "sounds")
    assert_user_error(run_cli(capsys, "classify", tmp_path / "sounds", "--labels", "a,b", "--model",
                              tmp_path / "sounds"), "not a model folder")


def test_index_build_keeps_paths_relative_and_follows_a_moved_model(served_toy, tmp_path, capsys):
    model_file = tmp_path / "model.pt"
    shutil.copy(served_toy[1], model_file)
    library = tmp_path / "library"
    for i, f0 in enumerate((220.0, 1760.0, 330.0, 1500.0)):
        _tone(library / "tones" / f"tone-{i}.wav", f0)
    model = mlatr.load(model_file, device="cpu")
    index = mlatr.Index.build(model, library, progress=False)
    np.testing.assert_array_equal(index.embeddings, model.embed_audio(sorted((library / "tones").iterdir())))
    index.save(library / "lib.idx.npz")
    with np.load(library / "lib.idx.npz") as z:
        assert json.loads(str(z["meta"]))["paths"][0] == "tones/tone-0.wav"
    moved = tmp_path / "moved"
    library.rename(moved)
    model_file.rename(tmp_path / "elsewhere.pt")
    again = Index.load(moved / "lib.idx.npz")
    assert again.paths[0] == str(moved / "tones" / "tone-0.wav") and Path(again.paths[0]).is_file()
    r = run_cli(capsys, "search", moved / "lib.idx.npz", "tone", "--lang", "eng", "--json")
    assert_user_error(r, "is gone", "--model")
    r = run_cli(capsys, "search", moved / "lib.idx.npz", "--audio", moved / "tones" / "tone-1.wav", "--json",
                "-k", "1", "--model", tmp_path / "elsewhere.pt")
    assert r.code == 0, r.err
    assert json.loads(r.out)["results"][0]["id"] == "tones/tone-1"


def test_a_model_of_another_space_is_refused_for_an_index(served_toy, tmp_path, capsys):
    from mlatr.models.registry import build_text_encoder
    from servetools import untrained_checkpoint

    other = untrained_checkpoint(tmp_path / "other.pt", build_text_encoder(
        "small-transformer", corpus=["a low tone", "a high tone"], vocab_size=300, dim=32, num_layers=1, num_heads=2,
        ff_dim=64))
    r = run_cli(capsys, "search", served_toy[2], "tone", "--model", other)
    assert_user_error(r, "was built with the model", "its config differs", "--allow-other-model")


def test_manifest_errors_carry_the_hint(served_toy, tmp_path, capsys):
    manifest_path, ckpt, _ = served_toy
    toy = Manifest.load(manifest_path)
    plain = manifest_lines(tmp_path / "nosplit.jsonl", [
        {"id": c.id, "audio": str(c.audio_path(toy.root)), "captions": c.captions} for c in toy])
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", plain, "--device", "cpu")
    assert_user_error(r, "has no splits", "--split all")
    r = run_cli(capsys, "encode", "--model", ckpt, "--manifest", toy.root, "-o", tmp_path / "x.npz")
    assert_user_error(r, "is a folder, not a manifest", "mlatr data import --format folder")
    assert not (tmp_path / "x.npz").exists()
    build = ["index", "build", "--model", ckpt, "--no-progress", "-o", tmp_path / "x.idx"]
    r = run_cli(capsys, *build, "--manifest", plain, "--split", "test")
    assert_user_error(r, "has no splits", "--split all")
    r = run_cli(capsys, *build, "--manifest", toy.root)
    assert_user_error(r, "is a folder, not a manifest", "mlatr data import --format folder")
    assert not (tmp_path / "x.idx").exists()


def test_embed_and_classify_commands(served_toy, tmp_path, capsys):
    pa = pytest.importorskip("pyarrow.parquet")
    model = mlatr.load(served_toy[1], device="cpu")
    files = _toy_files(served_toy)[:5]
    r = run_cli(capsys, "embed", *files, "--model", served_toy[1], "--device", "cpu", "-o", tmp_path / "e.parquet",
                "--no-progress")
    assert r.code == 0, r.err
    table = pa.read_table(tmp_path / "e.parquet").to_pydict()
    # ids as the index gives them: the paths under the files' common folder, without extension
    assert table["id"] == [f.stem for f in files] == Index.load(served_toy[2]).ids[:5]
    assert table["path"] == [str(f.resolve()) for f in files]
    np.testing.assert_array_equal(np.asarray(table["embedding"], np.float32), model.embed_audio(files))
    r = run_cli(capsys, "embed", "--text", "un son aigu", "un son grave", "--lang", "fr", "--model", served_toy[1],
                "--device", "cpu", "-o", tmp_path / "t.npz", "--no-progress")
    assert r.code == 0, r.err
    with np.load(tmp_path / "t.npz") as z:
        assert list(z["texts"]) == ["un son aigu", "un son grave"] and list(z["langs"]) == ["fra", "fra"]
        np.testing.assert_array_equal(z["embeddings"], model.embed_text(["un son aigu", "un son grave"], "fra"))
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not audio")
    r = run_cli(capsys, "embed", files[0], bad, "--model", served_toy[1], "-o", tmp_path / "b.npz", "--strict")
    assert_user_error(r, str(bad))
    assert not (tmp_path / "b.npz").exists()
    r = run_cli(capsys, "embed", files[0], bad, "--model", served_toy[1], "-o", tmp_path / "b.npz", "--skip-bad",
                "--no-progress")
    assert r.code == 0 and "skipped 1 bad file(s)" in r.err
    r = run_cli(capsys, "classify", *files, "--labels", "low tone,high tone", "--model", served_toy[1], "--json",
                "--device", "cpu")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [x["label"] for x in out["results"]] == model.classify(files, ["low tone", "high tone"]).labels
    assert [x["id"] for x in out["results"]] == [f.stem for f in files]


def test_encode_writes_parquet(served_toy, tmp_path, capsys):
    pa = pytest.importorskip("pyarrow.parquet")
    manifest_path, ckpt, index_path = served_toy
    r = run_cli(capsys, "encode", "--model", ckpt, "--manifest", manifest_path, "--split", "all",
                "--batch-size", "16", "--device", "cpu", "-o", tmp_path / "enc.parquet")
    assert r.code == 0, r.err
    table = pa.read_table(tmp_path / "enc.parquet").to_pydict()
    index = Index.load(index_path)
    assert table["id"] == index.ids and table["path"] == index.paths
    np.testing.assert_array_equal(np.asarray(table["embedding"], np.float32), index.embeddings)


def test_search_imports_no_training_or_loss_module():
    code = "from mlatr.search import Index; import sys; print(sorted(m for m in sys.modules if m.startswith('mlatr.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    modules = eval(out)  # a printed list of module names
    assert "mlatr.search.index" in modules and "mlatr.inference.checkpoint" in modules
    assert not [m for m in modules if m.startswith(("mlatr.training", "mlatr.losses"))]
    bare = subprocess.run([sys.executable, "-c", "import mlatr, sys; print('torch' in sys.modules)"],
                          capture_output=True, text=True, check=True).stdout
    assert bare.strip() == "False"  # the public names are imported on first use
    light = "import mlatr.search.ann, mlatr.search.shards, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # what the command parsers read (mlatr --help) loads no torch


def test_a_frame_scoring_head_classifies_on_frames(served_toy, tmp_path):
    import torch

    from mlatr.audio.io import load_audio
    from mlatr.inference import read_checkpoint, save_checkpoint
    from mlatr.matching import build_matching_head

    state = read_checkpoint(served_toy[1])
    state.pop("format")
    save_checkpoint(tmp_path / "lgmm.pt", dict(state, matching_head={"name": "lgmm", "tau_w": 0.25, "lam": 10.0}))
    model = mlatr.load(tmp_path / "lgmm.pt", device="cpu")
    assert model.head.name == "lgmm"
    files = _toy_files(served_toy)[:3]
    labels = ["low tone", "high tone"]
    result = model.classify(files, labels)
    head = build_matching_head("lgmm", tau_w=0.25, lam=10.0)
    with torch.no_grad():
        text = model.model.encode_text(prompts_for(labels, "eng"), ["eng"] * 2)
        for row, f in enumerate(files):  # one clip at a time: no padding, scored unchunked
            wave = torch.from_numpy(load_audio(f, 16000))[None]
            audio = model.model.encode_audio(wave, torch.tensor([wave.shape[1]]))
            np.testing.assert_allclose(result.scores[row], head.scores(audio, text)[0].numpy(), atol=1e-5)
    with pytest.raises(MlatrError, match="scores frames and tokens"):
        model.similarity(np.ones((1, 16), np.float32), np.ones((1, 16), np.float32))
