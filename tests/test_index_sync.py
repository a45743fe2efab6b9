"""A folder kept in sync with its index (mlatr index sync, mlatr.search.sync): files added, deleted, renamed,
moved to a subfolder, changed under the same name, touched; a rename or a move is followed by the file's bytes
without encoding its audio again (the encoder's calls are counted); the write waits for another writer."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time

import numpy as np
import pytest
import soundfile as sf

from clitools import assert_user_error, run_cli, truncate_wav
from mlatr.inference.checkpoint import load_model
from mlatr.models.dual_encoder import DualEncoder
from mlatr.search import Index
from mlatr.search.sync import sync_folder
from mlatr.writer_lock import writer_lock

SR = 16000


def tone(path, freq: float, seconds: float = 1.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * SR)) / SR
    sf.write(path, (0.3 * np.sin(2 * np.pi * freq * t) * np.exp(-t)).astype(np.float32), SR)


@pytest.fixture
def counted(monkeypatch):
    """The waveforms the audio encoder receives, counted (one per window encoded)."""
    seen = []
    encode = DualEncoder.encode_audio

    def counting(self, waveform, lengths=None):
        seen.append(int(waveform.shape[0]))
        return encode(self, waveform, lengths)

    monkeypatch.setattr(DualEncoder, "encode_audio", counting)
    return seen


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "Sounds"
    for name, freq in (("a", 220), ("b", 330), ("c", 440), ("d", 550), ("e", 660)):
        tone(root / f"{name}.wav", freq)
    tone(root / "long.wav", 880, seconds=5.0)  # longer than the toy model's 2 s window: segments
    return root


def test_a_changed_folder_is_followed_and_a_rename_or_move_is_not_encoded_again(served_toy, folder, tmp_path,
                                                                                counted):
    loaded = load_model(served_toy[1])
    out = tmp_path / "lib.idx"
    first = sync_folder(loaded, folder, out, loudness=False)
    assert sorted(first.added) == ["a", "b", "c", "d", "e", "long"] and len(first.index) == 6
    before = Index.load(out)
    old = {cid: np.asarray(before.embeddings[r]) for cid, r in before.tables.live_rows().items()}
    seg_rows = np.flatnonzero(before.segment_columns.clip == before.tables.live_rows()["long"])
    old_segments = (before.segment_columns.times[seg_rows], np.asarray(before.segment_columns.embeddings)[seg_rows])
    assert len(seg_rows) == 4  # 5 s in 2 s segments every 1 s

    tone(folder / "f.wav", 770)  # new
    (folder / "b.wav").unlink()  # deleted
    (folder / "c.wav").rename(folder / "c_renamed.wav")  # renamed
    (folder / "sub").mkdir()
    (folder / "d.wav").rename(folder / "sub" / "d.wav")  # moved to a subfolder
    (folder / "long.wav").rename(folder / "sub" / "field recording.wav")  # a long one moved and renamed
    time.sleep(0.01)
    tone(folder / "e.wav", 990, seconds=1.2)  # other content under the same name
    stat = os.stat(folder / "a.wav")
    os.utime(folder / "a.wav", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: same bytes
    counted.clear()
    report = sync_folder(loaded, folder, out, loudness=False)
    assert sum(counted) == 2  # f and e encoded: nothing else (no window of a renamed or moved file)
    assert report.added == ["f"] and report.changed == ["e"] and report.deleted == ["b"]
    assert report.moved == {"c": "c_renamed", "d": "sub/d", "long": "sub/field recording"}
    assert report.touched == ["a"] and report.encoded == 2
    after = Index.load(out)
    rows = after.tables.live_rows()
    assert sorted(rows) == ["a", "c_renamed", "e", "f", "sub/d", "sub/field recording"]
    for new, was in (("c_renamed", "c"), ("sub/d", "d"), ("a", "a"), ("sub/field recording", "long")):
        assert np.array_equal(np.asarray(after.embeddings[rows[new]]), old[was]), new  # reused, not re-encoded
    assert not np.allclose(np.asarray(after.embeddings[rows["e"]]), old["e"])
    assert after.paths[rows["sub/d"]] == str(folder / "sub" / "d.wav")
    assert all(after.stale(r) is None for r in rows.values())  # paths and file states are the files' now
    assert "c renamed" in " ".join(after.captions[rows["c_renamed"]]["eng"]).lower()  # captions from the new name
    moved = np.flatnonzero(after.segment_columns.clip == rows["sub/field recording"])
    assert np.array_equal(after.segment_columns.times[moved], old_segments[0])
    assert np.array_equal(np.asarray(after.segment_columns.embeddings)[moved], old_segments[1])
    live_segments = np.isin(after.segment_columns.clip, list(rows.values()))
    assert live_segments.sum() == 4  # the old row's segments went with it (its tombstone keeps the old ones)
    hits = after.search_text("c renamed", k=6)
    assert {h.id for h in hits} == set(rows)  # searchable under the new names only

    counted.clear()
    signature = after.storage.signature()
    again = sync_folder(loaded, folder, out, loudness=False)
    assert not again.wrote() and again.unchanged == 6 and sum(counted) == 0
    assert Index.load(out).storage.signature() == signature  # nothing written


def test_a_sidecar_edit_is_recaptioned_and_a_copy_reuses_its_source(served_toy, folder, tmp_path, counted):
    loaded = load_model(served_toy[1])
    out = tmp_path / "lib.idx.npz"
    sync_folder(loaded, folder, out, loudness=False)
    (folder / "a.txt").write_text("a low hum in a cellar\n", encoding="utf-8")
    shutil.copy(folder / "b.wav", folder / "b_copy.wav")
    counted.clear()
    report = sync_folder(loaded, folder, out, loudness=False)
    assert sum(counted) == 0 and report.recaptioned == ["a"] and report.copied == {"b_copy": "b"}
    index = Index.load(out)
    rows = index.tables.live_rows()
    assert index.captions[rows["a"]]["eng"][0] == "a low hum in a cellar"
    assert np.array_equal(index.embeddings[rows["b_copy"]], index.embeddings[rows["b"]])


def test_sync_waits_for_another_writer_and_says_what_changed(served_toy, folder, tmp_path, capsys):
    out = tmp_path / "lib.idx"
    r = run_cli(capsys, "index", "sync", folder, out, "--model", served_toy[1], "--no-progress", "--no-loudness")
    assert r.code == 0, r.err
    assert "6 added" in r.out and "6 clips" in r.out
    (folder / "c.wav").rename(folder / "c2.wav")
    done = threading.Event()
    with writer_lock(out, "index", folder=True):  # another writer holds the index: the sync's write waits
        worker = threading.Thread(target=lambda: (run_cli(capsys, "index", "sync", folder, out, "--no-progress",
                                                          "--no-loudness"), done.set()))
        worker.start()
        time.sleep(3.0)
        assert not done.is_set()
    worker.join(timeout=120)
    assert done.is_set()
    index = Index.load(out)
    assert "c2" in index.tables.live_rows() and "c" not in index.tables.live_rows()


def test_a_served_index_follows_its_watched_folder(served_toy, folder, tmp_path):
    pytest.importorskip("fastapi")
    from mlatr.serve.folder_watch import FolderWatch
    from mlatr.serve.live_index import LiveIndex

    out = folder / "lib.idx"  # inside the folder it follows: its own files are not the folder's changes
    sync_folder(load_model(served_toy[1]), folder, out, loudness=False)
    live = LiveIndex(out)
    live.reload()
    watch = FolderWatch(live, folder, every=0.1)
    assert not watch.poll().wrote()  # the first look: in sync already
    assert watch.poll() is None  # nothing changed: no sync at all
    tone(folder / "g.wav", 1200)
    (folder / "a.wav").rename(folder / "a2.wav")
    report = watch.poll()
    assert report.added == ["g"] and report.moved == {"a": "a2"}
    assert {"g", "a2"} <= set(live.current().rows) and "a" not in live.current().rows  # reloaded
    watch.start()  # the thread polls on its own
    (folder / "e.wav").unlink()
    deadline = time.time() + 60
    while "e" in live.current().rows and time.time() < deadline:
        time.sleep(0.2)
    watch.stop()
    assert "e" not in live.current().rows and watch.syncs == 3


def test_bad_files_in_the_folder_are_skipped_listed_and_the_rest_followed(served_toy, folder, tmp_path, capsys):
    """Hostile input (main's skip reports): a truncated WAV, a text file named .wav and a FIFO in the folder are
    skipped and listed with their reasons beside the index (exit 3; 0 with --skip-bad), the good changes
    followed; --strict stops at the first and writes nothing; the watcher follows the good changes too."""
    pytest.importorskip("fastapi")
    from mlatr.serve.folder_watch import FolderWatch
    from mlatr.serve.live_index import LiveIndex

    out = tmp_path / "lib.idx"
    ckpt = served_toy[1]
    assert run_cli(capsys, "index", "sync", folder, out, "--model", ckpt, "--no-progress", "--no-loudness").code == 0
    tone(folder / "cut.wav", 500, seconds=1.0)
    truncate_wav(folder / "cut.wav", 1000)
    (folder / "notes.wav").write_text("not a sound\n" * 50, encoding="utf-8")
    os.mkfifo(folder / "pipe.wav")
    tone(folder / "good.wav", 1500)
    signature = Index.load(out).storage.signature()
    r = run_cli(capsys, "index", "sync", folder, out, "--no-progress", "--no-loudness", "--strict")
    assert_user_error(r)
    assert Index.load(out).storage.signature() == signature  # nothing written
    r = run_cli(capsys, "index", "sync", folder, out, "--no-progress", "--no-loudness")
    assert r.code == 3, r.err
    assert "skipped 3 bad file(s)" in r.err and "1 added" in r.out
    listed = [json.loads(line) for line in (tmp_path / "lib.idx.skipped.jsonl").read_text().splitlines()]
    assert sorted(os.path.basename(x["file"]) for x in listed) == ["cut.wav", "notes.wav", "pipe.wav"]
    assert all(x["reason"] for x in listed)
    rows = Index.load(out).tables.live_rows()
    assert "good" in rows and not {"cut", "notes", "pipe"} & set(rows)
    assert run_cli(capsys, "index", "sync", folder, out, "--no-progress", "--no-loudness", "--skip-bad").code == 0
    # serving with --watch-folder: a new good file is followed in spite of the bad ones
    live = LiveIndex(out)
    live.reload()
    watch = FolderWatch(live, folder, every=0.1)
    tone(folder / "later.wav", 1700)
    report = watch.poll()
    assert report.added == ["later"] and len(report.skips) == 3 and "later" in live.current().rows
