"""Audio encoded by worker processes gives one process's vectors; a killed index build resumes; windows with a hop.

Issue 48: ``mlatr index build`` (and ``embed``, ``classify``) read and encode in ``--workers`` processes (default:
every core), with a progress bar of clips, and resume after a kill; issue 46 item 4 builds on the path's
per-window vectors (overlapping windows, their start and end).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from audio_path_record import aisfx_model, make_clips, manifest_of, toy_model
from clitools import run_cli
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.inference import load_model
from mlatr.inference import vector_journal as journal_module
from mlatr.inference.audio import Waveforms, Windowing, embed, pool_windows, window_bounds
from mlatr.inference.worker_pool import ordered_map, threads_per_worker
from mlatr.search import Index, build_index
from mlatr.search.segments import Segmenting

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return make_clips(tmp_path_factory.mktemp("clips"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_model(tmp_path_factory.mktemp("toy") / "toy.pt")


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_windows_with_a_hop_overlap_and_end_at_the_clip_end():
    assert window_bounds(100, 40, 30) == [(0, 40), (30, 70), (60, 100)]
    assert window_bounds(100, 40, 40) == [(0, 40), (40, 80), (60, 100)]
    assert window_bounds(30, 40, 10) == [(0, 30)]
    assert window_bounds(100, 40) == [(0, 33), (33, 67), (67, 100)]  # equal consecutive windows without a hop
    with pytest.raises(ValueError):
        window_bounds(100, 40, 0)


def test_window_vectors_carry_their_times_and_pool_to_the_clip_vector(toy):
    model = load_model(toy)
    rng = np.random.default_rng(0)
    waves = [0.3 * rng.standard_normal(int(16000 * s)).astype(np.float32) for s in (1.0, 5.0)]
    how = Windowing.of(2.0, 4, 16000, hop_seconds=1.0)
    found = embed(model.model.encode_audio, Waveforms(waves, 16000, 16000), how, "cpu", windows=True)
    short, long = found.windows
    assert short.bounds.tolist() == [[0.0, 1.0]]
    assert long.bounds.tolist() == [[0.0, 2.0], [1.0, 3.0], [2.0, 4.0], [3.0, 5.0]]  # 2 s every 1 s
    np.testing.assert_allclose(found.vectors[1], pool_windows(long.vectors, [2, 2, 2, 2]), rtol=1e-6, atol=1e-7)
    # each window is encoded as that part of the clip alone
    alone = model.embed_audio([waves[1][16000:48000]], sample_rate=16000)
    assert _cosines(long.vectors[1:2], alone).min() > 0.99999


def test_ordered_map_keeps_the_order_and_raises_a_workers_error():
    assert list(ordered_map(abs, [-3, 1, -2, 5], 2)) == [3, 1, 2, 5]
    with pytest.raises(MlatrError, match="bad item"):
        list(ordered_map(_refuse_two, [1, 2, 3], 2))
    assert threads_per_worker(16, 4) == 4 and threads_per_worker(2, 4) == 1


def _refuse_two(x: int) -> int:
    if x == 2:
        raise MlatrError("bad item 2")
    return x


@pytest.mark.parametrize("which", ["toy", "aisfx"])
def test_two_workers_give_one_process_vectors(which, clips, toy, tmp_path):
    if which == "aisfx":
        pytest.importorskip("aisfx", reason="aisfx wheel not installed")
        ckpt = aisfx_model(tmp_path / "aisfx.pt")
    else:
        ckpt = toy
    model = load_model(ckpt)
    files = [str(p) for p in clips] + [str(tmp_path / "missing.wav")]
    one_skipped, two_skipped = {}, {}
    rows1, one = model.embed_audio_rows(files, window_seconds=1.0, batch_size=3, skipped=one_skipped)
    rows2, two = model.embed_audio_rows(files, window_seconds=1.0, batch_size=3, workers=2, skipped=two_skipped)
    assert rows1 == rows2 == list(range(len(clips))) and set(one_skipped) == set(two_skipped) == {files[-1]}
    assert _cosines(one, two).min() > 0.99999
    # an index built by two processes holds the same vectors
    manifest = Manifest.load(manifest_of(clips, tmp_path / "m.jsonl"))
    a = build_index(model, manifest, tmp_path / "one.idx", workers=1).index
    b = build_index(model, manifest, tmp_path / "two.idx", workers=2).index
    assert a.ids == b.ids and _cosines(np.asarray(a.embeddings), np.asarray(b.embeddings)).min() > 0.99999


def test_a_bad_file_stops_the_workers_with_its_name(clips, toy, tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not audio")
    with pytest.raises(MlatrError, match="bad.wav"):
        load_model(toy).embed_audio([str(p) for p in clips] + [str(bad)], workers=2, batch_size=2)


class Killed(BaseException):
    """The process stopping where it stands (as a kill would stop it)."""


def test_a_killed_build_resumes_with_what_it_had_encoded(clips, toy, tmp_path, monkeypatch):
    monkeypatch.setenv("MLATR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(journal_module, "FLUSH_SECONDS", 0.0)
    manifest = Manifest.load(manifest_of(clips, tmp_path / "m.jsonl"))
    model = load_model(toy)
    encode, calls, kill_at = model.model.encode_audio, [], [3]
    whole = Segmenting()  # clips only: a long clip's segments are encoded after the clips, on every run

    def crashing(wave, lengths):
        calls.append(wave.shape[0])
        if len(calls) == kill_at[0]:
            raise Killed  # a kill after two batches of two clips
        return encode(wave, lengths)

    monkeypatch.setattr(model.model, "encode_audio", crashing)
    with pytest.raises(Killed):
        build_index(model, manifest, tmp_path / "lib.idx", batch_size=2, segments=whole)
    assert not (tmp_path / "lib.idx").exists()
    assert len(list((tmp_path / "cache" / "partial-vectors").glob("*/part-*.npz"))) == 2
    calls.clear()
    kill_at[0] = 0  # no kill this time
    resumed = build_index(model, manifest, tmp_path / "lib.idx", batch_size=2, segments=whole).index
    assert sum(calls) == len(clips) - 4  # only the clips not encoded before the kill
    assert not list((tmp_path / "cache" / "partial-vectors").iterdir())  # the journal goes once the index is written
    monkeypatch.setattr(model.model, "encode_audio", encode)
    fresh = build_index(model, manifest, tmp_path / "fresh.idx", batch_size=2, segments=whole).index
    assert resumed.ids == fresh.ids
    assert _cosines(np.asarray(resumed.embeddings), np.asarray(fresh.embeddings)).min() > 0.99999


def test_index_build_resumes_after_sigkill_and_shows_its_rate(clips, toy, tmp_path):
    """The command, killed while its two workers encode, started again: the same index as an uninterrupted build."""
    many = []
    for k in range(6):  # 48 clips: enough work to kill part-way
        for p in clips:
            many.append(tmp_path / "lib" / f"{k}_{p.name}")
            many[-1].parent.mkdir(exist_ok=True)
            many[-1].write_bytes(p.read_bytes())
    env = {**os.environ, "MLATR_CACHE_DIR": str(tmp_path / "cache"), "MLATR_JOURNAL_SECONDS": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "mlatr", "index", "build", str(tmp_path / "lib"), "--model", str(toy), "-o",
            str(tmp_path / "lib.idx"), "--workers", "2", "--batch-size", "2"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    journal = tmp_path / "cache" / "partial-vectors"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(journal.glob("*/part-*.npz"))) < 2 and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    parts = list(journal.glob("*/part-*.npz"))
    assert parts, "the build finished or wrote nothing before the kill"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "clip/s" in done.stderr
    resumed = re.search(r"resuming: (\d+) of (\d+) clips", done.stderr)
    assert resumed, done.stderr[-2000:]
    assert 0 < int(resumed.group(1)) < int(resumed.group(2)) == len(many)  # killed part-way, its vectors kept
    again = subprocess.run([*argv[:-6], "-o", str(tmp_path / "fresh.idx"), "--workers", "1", "--no-progress"],
                           env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    a, b = Index.load(tmp_path / "lib.idx"), Index.load(tmp_path / "fresh.idx")
    assert a.ids == b.ids and len(a.ids) == len(many)
    assert _cosines(np.asarray(a.embeddings), np.asarray(b.embeddings)).min() > 0.99999


def test_embed_and_classify_take_workers(clips, toy, tmp_path, capsys):
    files = [str(p) for p in clips[:4]]
    r = run_cli(capsys, "embed", *files, "--model", toy, "-o", tmp_path / "e.npz", "--workers", "2", "--no-progress")
    assert r.code == 0, r.err
    with np.load(tmp_path / "e.npz") as z:
        two = z["embeddings"]
    one = load_model(toy).embed_library(files)
    assert _cosines(two, one.embeddings).min() > 0.99999
    r = run_cli(capsys, "classify", *files, "--model", toy, "--labels", "tone,noise", "--workers", "2", "--json")
    assert r.code == 0, r.err
    assert len(json.loads(r.out)["results"]) == 4
