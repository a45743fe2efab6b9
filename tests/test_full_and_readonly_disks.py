"""An index on a full disk or a read-only filesystem: a write stops with one error naming the output and the cause,
the previous index stays as it was (nothing half-written, no empty folder, no temporary file), and reading (search,
index info, the server) works there.

A full disk and a read-only filesystem are real where this process may mount a tmpfs (root with
CAP_SYS_ADMIN: ``mount -t tmpfs -o size=...``, then ``remount,ro``); elsewhere those tests are skipped, and a full
disk is also simulated everywhere by making numpy's and the atomic writer's writes raise ENOSPC (monkeypatched)."""

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clitools import assert_user_error, run_cli, temp_files
from mlatr.errors import DiskFullError
from mlatr.search import Index
from mlatr.serve.live_index import LiveIndex
from servetools import build_toy_index


def _mount(where: Path, size_kb: int) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                          capture_output=True)
    return done.returncode == 0


@pytest.fixture
def disk(tmp_path):
    """A function ``disk(size_kb) -> folder`` mounting a tmpfs of that size (skips where none can be mounted);
    every mount is undone after the test."""
    mounted = []

    def make(size_kb: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        if not _mount(where, size_kb):
            pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): the monkeypatched test covers it")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(folder: Path) -> None:
    """Take every free byte of ``folder``'s filesystem."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _build(served_toy, out: Path, *extra: str, capsys) -> "object":
    manifest, ckpt, _ = served_toy
    return run_cli(capsys, "index", "build", "--manifest", manifest, "--model", ckpt, "-o", out, "--no-progress",
                   *extra)


@pytest.mark.parametrize("name", ["lib.idx", "lib.idx.npz"])
def test_a_new_index_on_a_full_disk(served_toy, disk, name, capsys):
    where = disk(48)
    r = _build(served_toy, where / name, capsys=capsys)
    assert_user_error(r, str(where / name), "No space left on device", "the disk or your quota is full")
    assert not (where / name).exists() and not temp_files(where)


def test_adding_to_an_index_on_a_full_disk_keeps_it(served_toy, disk, capsys):
    where = disk(1024)
    manifest, ckpt, _ = served_toy
    out = build_toy_index(manifest, ckpt, where / "lib.idx", first=6)
    before = sorted(Index.load(out).ids)
    _fill(where)
    r = _build(served_toy, out, "--add", capsys=capsys)
    assert_user_error(r, "No space left on device")
    index = Index.load(out)
    assert sorted(index.ids) == before and [h.id for h in index.search_text("a tone", None, 3)]
    assert not temp_files(where) and not [p for p in out.iterdir() if p.name.startswith(".shard-")]
    # reading on a full disk: search, index info, the server's index
    assert run_cli(capsys, "search", out, "a tone", "--json").code == 0
    assert run_cli(capsys, "index", "info", out, "--check").code == 0
    live = LiveIndex(out)
    assert len(live.reload().index) == 6


def test_an_index_on_a_read_only_filesystem(served_toy, disk, capsys):
    where = disk(1024)
    manifest, ckpt, _ = served_toy
    folder = build_toy_index(manifest, ckpt, where / "lib.idx", first=6)
    npz = build_toy_index(manifest, ckpt, where / "lib.idx.npz", first=6)
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    for out in (folder, npz):
        assert run_cli(capsys, "search", out, "a tone", "--json").code == 0  # reading needs no write
        assert run_cli(capsys, "index", "info", out, "--check").code == 0
        assert len(LiveIndex(out).reload().index) == 6
        for argv in (["index", "build", "--manifest", manifest, "--model", ckpt, "-o", out, "--add", "--no-progress"],
                     ["index", "delete", out, Index.load(out).ids[0]], ["index", "compact", out, "--no-progress"]):
            assert_user_error(run_cli(capsys, *argv), "Read-only file system", str(where))
    assert_user_error(_build(served_toy, where / "new.idx", capsys=capsys), "new.idx", "Read-only file system")


def test_a_full_disk_simulated_names_the_index_and_keeps_the_previous_one(served_toy, tmp_path, monkeypatch, capsys):
    """Everywhere (no mount needed): numpy's writes of a new shard raise ENOSPC, as a full disk makes them."""
    manifest, ckpt, _ = served_toy
    out = build_toy_index(manifest, ckpt, tmp_path / "lib.idx", first=6)
    before = sorted(Index.load(out).ids)
    real = np.save

    def full(file, *args, **kwargs):
        if ".shard-" in str(file):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(file, *args, **kwargs)

    monkeypatch.setattr(np, "save", full)
    r = _build(served_toy, out, "--add", capsys=capsys)
    assert_user_error(r, f"{out}: No space left on device", "the index is as it was before this write")
    assert sorted(Index.load(out).ids) == before and not [p for p in out.iterdir() if p.name.startswith(".shard-")]
    r = _build(served_toy, tmp_path / "new.idx", capsys=capsys)
    assert_user_error(r, "new.idx: No space left on device")
    assert not (tmp_path / "new.idx").exists()


def test_an_atomic_write_on_a_full_disk_simulated(tmp_path, monkeypatch):
    from mlatr import io_utils

    target = tmp_path / "m.jsonl"
    target.write_text("previous\n")

    def no_room(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io_utils.os, "fsync", no_room)
    with pytest.raises(DiskFullError, match="m.jsonl: No space left on device.*previous version, if any, is intact"):
        io_utils.atomic_write_text(target, "new\n")
    assert target.read_text() == "previous\n" and not temp_files(tmp_path)
