"""What an interrupted run leaves behind, and a full disk.

- killed while ``last.pt`` is written, then ``--resume``: the weights were already bit-exact, but
  ``log.jsonl`` held that epoch's records twice; now the log agrees with the checkpoint;
- orphan temporary files (``.last.pt.XXXXXXXX.tmp``, ``.manifest.jsonl.XXXXXXXX.tmp``) are removed by the
  next run in the same place, and only those;
- a full disk while training is said plainly, the previous checkpoint intact, and ``--resume`` finishes.

Real SIGKILLs at random points: tests/test_fault_kill.py.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os

import pytest
import torch

import mlatr.training.epoch_loop as loop_module
from clitools import assert_user_error, run_cli, temp_files
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.io_utils import atomic_write_text, remove_orphan_temps
from mlatr.training.config import load_config
from mlatr.training.run_log import reconcile_log
from mlatr.training.trainer import Trainer
from toydata import TINY_MODEL, make_toy_manifest


def _overrides(manifest, out):
    return [f"data.manifest={manifest}", f"out_dir={out}", "data.languages=[eng,fra]", "train.epochs=2",
            "train.batch_size=4", "data.max_seconds=1.0", "train.eval_every=0", "train.progress=false",
            "train.log_every=1", "optim.warmup_steps=1", *TINY_MODEL]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(manifest, the last.pt and log of an uninterrupted 2-epoch run)."""
    root = tmp_path_factory.mktemp("recovery")
    manifest = make_toy_manifest(root / "toy", n_train=8, n_val=2, n_test=2)
    Trainer(load_config(None, _overrides(manifest, root / "full"))).fit()
    return manifest, read_checkpoint(root / "full" / "last.pt"), _records(root / "full" / "log.jsonl")


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _assert_same_run(out, reference):
    _, ref_state, ref_log = reference
    state = read_checkpoint(out / "last.pt")
    for k, v in ref_state["model"].items():
        assert torch.equal(v, state["model"][k]), k
    log = _records(out / "log.jsonl")
    strip = [{k: v for k, v in r.items() if k not in ("epoch_time_s", "peak_memory_mb")} for r in log]
    ref = [{k: v for k, v in r.items() if k not in ("epoch_time_s", "peak_memory_mb")} for r in ref_log]
    assert strip == ref  # each step and epoch once, in order, with the same numbers
    assert temp_files(out) == []


def test_kill_while_last_pt_is_written_then_resume(tmp_path, reference, monkeypatch):
    manifest = reference[0]
    out = tmp_path / "run"
    real_save = loop_module.save_checkpoint

    def dies_writing_epoch_2(path, state):
        if path.name == "last.pt" and state["epoch"] == 2:
            (path.parent / ".last.pt.k1ll3d00.tmp").write_bytes(b"PK\x03\x04 half a checkpoint")
            raise KeyboardInterrupt  # the process is gone; its temporary file stays
        real_save(path, state)

    monkeypatch.setattr(loop_module, "save_checkpoint", dies_writing_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        Trainer(load_config(None, _overrides(manifest, out))).fit()
    assert read_checkpoint(out / "last.pt")["epoch"] == 1
    assert sum(r["type"] == "epoch" for r in _records(out / "log.jsonl")) == 2  # epoch 2 logged, not saved
    monkeypatch.setattr(loop_module, "save_checkpoint", real_save)
    Trainer(load_config(None, _overrides(manifest, out)), resume=True).fit()
    _assert_same_run(out, reference)


def test_full_disk_during_training_is_said_plainly(tmp_path, reference, monkeypatch, capsys):
    manifest = reference[0]
    out = tmp_path / "run"
    real_fsync = os.fsync
    writes = []

    def full_at_second_checkpoint(fd):
        if ".last.pt." in os.readlink(f"/proc/self/fd/{fd}"):
            writes.append(fd)
            if len(writes) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_at_second_checkpoint)
    r = run_cli(capsys, "train", *_overrides(manifest, out))
    assert_user_error(r, "training stopped:", "No space left on device", "the disk or your quota is full",
                      "last.pt was not written (its previous version, if any, is intact)", "--resume")
    assert read_checkpoint(out / "last.pt")["epoch"] == 1 and temp_files(out) == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert run_cli(capsys, "train", *_overrides(manifest, out), "--resume").code == 0
    _assert_same_run(out, reference)


def test_a_log_without_checkpoint_is_emptied(tmp_path):
    """A run killed in its first epoch left log lines (the last one cut) and no last.pt: none is kept."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "log.jsonl").write_text('{"type": "step", "step": 1, "epoch": 1, "loss": 2.0}\n{"type": "st')
    assert reconcile_log(out / "log.jsonl", 0, 0) == 2 and (out / "log.jsonl").read_text() == ""


def test_only_orphans_of_the_project_pattern_are_removed(tmp_path):
    target = tmp_path / "manifest.jsonl"
    orphan = tmp_path / ".manifest.jsonl.a1b2c3d4.tmp"
    live = tmp_path / ".manifest.jsonl.livewrit.tmp"
    others = [tmp_path / ".manifest.jsonl.tmp", tmp_path / ".manifest.jsonl.toolongname.tmp",
              tmp_path / "x.manifest.jsonl.a1b2c3d4.tmp", tmp_path / ".other.jsonl.a1b2c3d4.tmp",
              tmp_path / "notes.tmp"]
    for p in (orphan, live, *others):
        p.write_bytes(b"x")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer in another process holds it
    try:
        assert remove_orphan_temps(tmp_path, [target.name]) == [orphan]
        atomic_write_text(target, "{}\n")
    finally:
        os.close(fd)
    assert not orphan.exists() and live.exists() and all(p.exists() for p in others)
    assert target.read_text() == "{}\n"


def test_import_and_index_build_clean_up_after_a_killed_run(tmp_path, capsys, served_toy):
    src = tmp_path / "c.csv"
    src.write_text("file_name,caption_1\na.wav,a dog\n", encoding="utf-8")
    (tmp_path / ".m.jsonl.k1ll3d00.tmp").write_bytes(b"{half a line")
    assert run_cli(capsys, "data", "import", "--format", "clotho-csv", src, "-o", tmp_path / "m.jsonl").code == 0
    (tmp_path / ".lib.idx.npz.k1ll3d00.tmp").write_bytes(b"PK\x03\x04")
    r = run_cli(capsys, "index", "build", "--checkpoint", served_toy[1], "--manifest", served_toy[0],
                "-o", tmp_path / "lib.idx.npz", "--split", "test", "--no-progress")
    assert r.code == 0 and temp_files(tmp_path) == []
