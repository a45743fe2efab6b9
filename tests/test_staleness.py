"""Derived artefacts say what changed since they were built: a prepared store whose clip
was rewritten, a run resumed on a changed manifest, an index whose clip was deleted (``index build --add``
from a source that no longer lists it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from clitools import assert_user_error, run_cli, write_tone
from mlatr.audio.io import load_audio
from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.store import StoreSource, prepare_store
from mlatr.errors import MlatrError
from mlatr.file_state import file_state, state_change
from mlatr.training.trainer import Trainer
from toydata import TINY_MODEL, make_toy_manifest, tiny_config


def test_state_change_says_what_differs(tmp_path):
    f = write_tone(tmp_path / "a.wav", 0.1)
    before = file_state(f)
    assert state_change(before, file_state(f)) is None and state_change(None, None) is None
    write_tone(f, 0.2)
    os.utime(f, ns=(before["mtime_ns"], before["mtime_ns"]))
    assert state_change(before, file_state(f)).startswith(f"size {before['size']:,} -> ")
    os.utime(f, ns=(before["mtime_ns"] + 10**9,) * 2)
    assert "modified" in state_change(before, file_state(f))
    f.unlink()
    assert state_change(before, file_state(f)) == "deleted"


@pytest.fixture
def toy(tmp_path):
    return make_toy_manifest(tmp_path / "toy", n_train=6, n_val=3, n_test=2)


def test_store_refuses_a_rewritten_clip_and_prepare_renews_it(toy, tmp_path, capsys):
    manifest = Manifest.load(toy)
    store = tmp_path / "store"
    prepare_store(manifest, store)
    StoreSource(store, manifest)  # fresh: fine
    # rewritten with another sound (another size), and one only touched (same bytes, new mtime)
    rewritten, touched = manifest[1].audio_path(manifest.root), manifest[4].audio_path(manifest.root)
    write_tone(rewritten, manifest[1].duration, subtype="PCM_24")  # same length, another sound and size
    st = os.stat(touched)
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    with pytest.raises(MlatrError) as info:
        StoreSource(store, manifest)
    text = str(info.value)
    assert "2 clip(s)" in text and "'clip001'" in text and "size" in text and "'clip004'" in text
    assert "modified" in text and "mlatr data prepare" in text
    # training from the store refuses before any work, with the same message
    with pytest.raises(MlatrError, match="changed since `mlatr data prepare`"):
        Trainer(tiny_config(toy, tmp_path / "run", "train.batch_size=4", f"data.store={store}"))
    # preparing again renews exactly the changed clips; the store then serves the new audio
    result = run_cli(capsys, "data", "prepare", toy, "-o", store, "--no-progress")
    assert result.code == 0, result.err
    assert "2 clip(s) prepared now, 9 already there" in result.out
    assert "2 clip(s) changed since they were stored (size or mtime) and were prepared again: clip001, clip004" \
        in result.out
    source = StoreSource(store, manifest)
    assert np.allclose(source.load(1), load_audio(rewritten), atol=1e-3)


def test_store_keeps_serving_a_clip_whose_source_was_deleted(toy, tmp_path):
    manifest = Manifest.load(toy)
    store = tmp_path / "store"
    prepare_store(manifest, store)
    expected = StoreSource(store, manifest).load(2)
    manifest[2].audio_path(manifest.root).unlink()
    assert np.array_equal(StoreSource(store, manifest).load(2), expected)  # the store is the copy


def _edit(manifest: Path, change) -> None:
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    kept = [r for r in (change(r) for r in rows) if r is not None]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in kept))


def test_resume_on_a_changed_manifest_is_refused_saying_what_changed(toy, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train.batch_size=4", "train.eval_every=1"]
    Trainer(tiny_config(toy, out, *args, epochs=1)).fit()
    # the test split is not read by training: editing it changes nothing
    _edit(toy, lambda r: {**r, "labels": ["edited"]} if r["split"] == "test" else r)
    Trainer(tiny_config(toy, out, *args, epochs=1), resume=True).close()
    _edit(toy, lambda r: {**r, "captions": {**r["captions"], "eng": ["another caption", "and another"]}}
          if r["id"] == "clip003" else None if r["id"] == "clip007" else r)
    with pytest.raises(MlatrError) as info:
        Trainer(tiny_config(toy, out, *args, epochs=1), resume=True)
    text = str(info.value)
    assert "the run's data changed" in text and "--allow-data-change" in text
    assert "split 'train': 6 -> 6 clips, 1 changed ('clip003')" in text
    assert "split 'val': 3 -> 2 clips, 1 removed ('clip007')" in text
    # the override goes on, warning with the difference; the CLI refuses with exit 2 without it
    run = ["train", f"data.manifest={toy}", f"out_dir={out}", "data.languages=[eng,fra,deu]", "train.epochs=1",
           "train.batch_size=4", "data.max_seconds=1.0", "optim.warmup_steps=1", "train.log_every=1",
           "train.eval_every=1", *TINY_MODEL, "--resume", "--no-progress"]
    assert_user_error(run_cli(capsys, *run), "the run's data changed", "1 changed ('clip003')")
    result = run_cli(capsys, *run, "--allow-data-change")
    assert result.code == 0, result.err
    assert "warning: resuming on changed data (--allow-data-change): split 'train'" in result.err
