"""One writer per output: every command that writes an output holds its writer lock; a second writer
refuses (exit 2, naming the holder) or, with --wait, waits; an output of the wrong kind is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from clitools import assert_user_error, digest, run_cli
from mlatr.writer_lock import LockedError, writer_lock
from toydata import make_toy_manifest, tiny_config

HOLD = """
import sys, time
from mlatr.writer_lock import writer_lock
with writer_lock(sys.argv[1], what="thing", folder=sys.argv[3] == "folder"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(target, seconds, folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target), str(seconds), "folder" if folder else "file"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_toy_manifest(tmp_path_factory.mktemp("toy"), n_train=8, n_val=2, n_test=2)


#: (argv with OUT for the output and M for the manifest, the output's name under tmp_path, is it a folder)
COMMANDS = [
    (["data", "prepare", "M", "-o", "OUT"], "store", True),
    (["data", "import", "--format", "folder", "SRC", "-o", "OUT"], "out.jsonl", False),
    (["data", "split", "OUT"], "split.jsonl", False),
    (["data", "recaption", "OUT", "--in-place"], "recaption.jsonl", False),
    (["data", "recaption", "M", "-o", "OUT"], "recaption-new.jsonl", False),
    (["data", "translate", "M", "--to", "fra", "--backend", "apertium", "-o", "OUT"], "t.jsonl", False),
    (["data", "synth", "-o", "OUT", "--train", "4"], "synth", True),
    (["encode", "--checkpoint", "CK", "--manifest", "M", "-o", "OUT"], "emb.npz", False),
    (["eval-demo", "--out", "OUT"], "evaldemo", True),
    (["experiment", "supclap", "--size", "small", "--out", "OUT", "--report-only"], "exp", True),
    (["eval-embeddings", "E.npz", "--report", "OUT"], "report", True),
]


def _argv(argv, out, manifest, tmp_path):
    names = {"OUT": str(out), "M": str(manifest), "SRC": str(manifest.parent / "audio"), "CK": str(tmp_path / "c.pt"),
             "E.npz": str(tmp_path / "e.npz")}
    return [names.get(a, a) for a in argv]


@pytest.mark.parametrize("argv,name,folder", COMMANDS, ids=[" ".join(c[0][:2]) for c in COMMANDS])
def test_a_second_writer_of_an_output_is_refused_naming_the_first(argv, name, folder, manifest, tmp_path, capsys):
    out = tmp_path / name
    if name.endswith(".jsonl"):
        out.write_bytes(manifest.read_bytes())
    before = digest(out) if out.is_file() else None
    holder = _hold(out, 60, folder)
    try:
        result = run_cli(capsys, *_argv(argv, out, manifest, tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert_user_error(result, str(out), f"being written by process {holder.pid}")
    if before is not None:
        assert digest(out) == before


def test_wait_waits_for_the_first_writer_then_writes(manifest, tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    out.write_bytes(manifest.read_bytes())
    holder = _hold(out, 1.5, False)
    start = time.monotonic()
    result = run_cli(capsys, "data", "split", str(out), "--wait")
    waited = time.monotonic() - start
    holder.wait()
    assert result.code == 0, result.err
    assert "waiting for process" in result.err
    assert waited >= 0.5  # it did wait for the holder's end (1.5 s after it started)
    assert {json.loads(line)["split"] for line in out.read_text().splitlines()} <= {"train", "val", "test"}


def test_wait_with_seconds_gives_up_after_them(manifest, tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    out.write_bytes(manifest.read_bytes())
    holder = _hold(out, 60, False)
    try:
        result = run_cli(capsys, "data", "recaption", str(out), "--in-place", "--wait=0.5")
    finally:
        holder.kill()
        holder.wait()
    assert_user_error(result, "being written by process")


@pytest.mark.parametrize("argv,name", [
    (["data", "prepare", "M", "-o", "OUT"], "store"),
    (["data", "synth", "-o", "OUT", "--train", "4"], "synth"),
    (["eval-demo", "--out", "OUT"], "evaldemo"),
    (["experiment", "finegrained", "--size", "small", "--out", "OUT"], "exp"),
    (["data", "translation-qa", "M", "--backend", "apertium", "--out", "OUT"], "qa"),
])
def test_a_folder_output_that_is_a_file_is_refused(argv, name, manifest, tmp_path, capsys):
    out = tmp_path / name
    out.write_text("not a folder")
    result = run_cli(capsys, *_argv(argv, out, manifest, tmp_path))
    assert_user_error(result, str(out), "is a file, but the command writes a folder")
    assert out.read_text() == "not a folder"


@pytest.mark.parametrize("argv", [
    ["encode", "--checkpoint", "CK", "--manifest", "M", "-o", "OUT"],
    ["data", "import", "--format", "folder", "SRC", "-o", "OUT"],
    ["import-checkpoint", "--from", "mlclap", "X.pt", "--sonar", "S", "-o", "OUT"],
])
def test_a_file_output_that_is_a_folder_is_refused(argv, manifest, tmp_path, capsys):
    out = tmp_path / "dir"
    out.mkdir()
    result = run_cli(capsys, *_argv(argv, out, manifest, tmp_path))
    assert_user_error(result, str(out), "is a folder")


def test_a_training_run_holds_its_out_dir_until_fit_returns(manifest, tmp_path):
    from mlatr.training.trainer import Trainer

    seen = []

    def try_second(trainer, info):
        if not seen:
            with pytest.raises(LockedError, match=f"being written by process {os.getpid()} "):
                with writer_lock(tmp_path / "run", folder=True):
                    pass
            seen.append(info["step"])

    Trainer(tiny_config(manifest, tmp_path / "run", "train.batch_size=4", epochs=1), callbacks=[try_second]).fit()
    assert seen
    with writer_lock(tmp_path / "run", folder=True):  # released once fit returned
        pass


def test_a_second_train_into_one_out_dir_refuses(manifest, tmp_path, capsys):
    holder = _hold(tmp_path / "run", 60, True)
    try:
        result = run_cli(capsys, "train", f"data.manifest={manifest}", f"out_dir={tmp_path / 'run'}",
                         "train.epochs=1")
    finally:
        holder.kill()
        holder.wait()
    assert_user_error(result, "training run", f"being written by process {holder.pid}")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".mlatr-lock"]


def test_a_failed_trainer_releases_its_lock(manifest, tmp_path):
    from mlatr.errors import MlatrError
    from mlatr.training.trainer import Trainer

    with pytest.raises(MlatrError):
        Trainer(tiny_config(manifest, tmp_path / "run", "data.train_split=nothing"))
    with writer_lock(tmp_path / "run", folder=True):
        pass
