"""Memory of long clips: they are encoded as windows in bounded batches (mlatr.inference.audio).

`index build --max-seconds 300` over ten-minute clips fed 16 x 300 s to the encoder at once. Now the
encoder never sees more than --batch-size windows of the model's evaluation crop; clips no longer than
that encode exactly as before; a sound query is encoded the way the index was.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from clitools import manifest_lines, run_cli, write_tone
from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.inference.audio import SourceClips, Windowing, embed, pool_windows, window_bounds
from mlatr.inference.checkpoint import load_model
from mlatr.search import Index, build_index
from mlatr.search.segments import Segmenting


def test_windows_cover_the_clip_in_equal_parts():
    assert window_bounds(100, 100) == [(0, 100)] and window_bounds(30, 100) == [(0, 30)]
    b = window_bounds(1_000_001, 160_000)
    assert len(b) == 7 and b[0][0] == 0 and b[-1][1] == 1_000_001
    assert all(e == s for (_, e), (s, _) in zip(b, b[1:], strict=False))
    lengths = [e - s for s, e in b]
    assert max(lengths) <= 160_000 and max(lengths) - min(lengths) <= 1
    with pytest.raises(ValueError):
        window_bounds(10, 0)


def test_pooled_windows_are_the_weighted_mean_renormalised():
    e = np.asarray([[1.0, 0.0], [0.0, 1.0]], np.float32)
    np.testing.assert_allclose(pool_windows(e, [3, 1]), np.asarray([3, 1]) / np.sqrt(10), rtol=1e-6)


def test_short_clips_encode_exactly_as_without_windows(served_toy):
    manifest, ckpt, _ = served_toy
    loaded = load_model(ckpt)
    m = Manifest.load(manifest)
    found = embed(loaded.model.encode_audio, SourceClips(AudioSource(m), 2.0), Windowing.of(2.0, 16, 16000),
                  loaded.device)  # one window each
    rows, plain = found.rows, found.vectors
    index = Index.load(served_toy[2])  # built by mlatr index build (windows of the model's 2 s crop)
    assert index.meta["window_seconds"] == 2.0 and index.ids == [m[i].id for i in rows]
    assert np.array_equal(index.embeddings, plain)


def test_long_clips_stream_in_bounded_batches(served_toy, tmp_path, monkeypatch, capsys):
    manifest, ckpt, _ = served_toy
    rows = [{"id": f"long{i}", "audio": str(write_tone(tmp_path / f"long{i}.wav", 5.0 + i)),
             "captions": {"eng": [f"a long tone {i}"]}} for i in range(3)]
    m = manifest_lines(tmp_path / "long.jsonl", rows)
    loaded = load_model(ckpt)
    seen = []
    encode = loaded.model.encode_audio

    def recording(wave, lengths):
        seen.append(tuple(wave.shape))
        return encode(wave, lengths)

    monkeypatch.setattr(loaded.model, "encode_audio", recording)
    report = build_index(loaded, Manifest.load(m), tmp_path / "long.idx.npz", max_seconds=300.0, batch_size=3,
                         segments=Segmenting(above=None))  # the pooled path alone (segments: test_moments.py)
    # 5, 6 and 7 s in windows of at most 2 s (the model's eval crop): 3 + 3 + 4 windows, 3 per call
    assert len(seen) == 4 and all(b <= 3 and t <= 32_000 for b, t in seen)
    assert report.index.meta["window_seconds"] == 2.0 and report.index.meta["max_seconds"] == 300.0
    norms = np.linalg.norm(report.index.embeddings, axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
    r = run_cli(capsys, "search", tmp_path / "long.idx.npz", "--audio", tmp_path / "long1.wav", "--json", "-k", "1")
    assert r.code == 0 and json.loads(r.out)["results"][0]["id"] == "long1"
    assert json.loads(r.out)["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
