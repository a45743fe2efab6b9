"""Hostile round 3, output paths: every writer refuses to replace a device node, a FIFO, a socket, or a folder
where it writes a file (one check, :mod:`mlatr.output_paths`, in ``atomic_open`` and before each command's work).
Was: every ``-o`` / ``--json`` writer replaced a FIFO or a device by a regular file (as root, ``-o /dev/null``
replaced the system's null device)."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from clitools import assert_user_error, run_cli
from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.output_paths import check_output_path, output_problem


def _fifo(path):
    os.mkfifo(path)
    return path


def _device(path):
    """A character device like /dev/null (1, 3) at ``path``: needs root."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def _socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


#: (argv with OUT for the refused output, M manifest, CK checkpoint, IDX index, E embeddings file)
WRITERS = [
    ["embed", "A", "--model", "CK", "-o", "OUT"],
    ["embed", "--text", "un chien", "--model", "CK", "-o", "OUT"],
    ["encode", "--checkpoint", "CK", "--manifest", "M", "--split", "all", "-o", "OUT"],
    ["eval", "--checkpoint", "CK", "--manifest", "M", "--json", "OUT"],
    ["index", "build", "--checkpoint", "CK", "--manifest", "M", "-o", "OUT"],
    ["index", "compact", "IDX", "-o", "OUT"],
    ["data", "import", "--format", "folder", "AUDIO", "-o", "OUT"],
    ["data", "export", "--format", "webdataset", "M", "-o", "OUT"],
    ["plot", "RUN", "-o", "OUT"],
    ["export", "CK", "-o", "OUT"],
    ["eval-embeddings", "E", "--json", "OUT"],
    ["import-checkpoint", "CK", "--from", "mlclap", "-o", "OUT"],
]


def _argv(template, out, served_toy, tmp_path):
    manifest, ckpt, index = served_toy
    names = {"OUT": str(out), "M": str(manifest), "CK": str(ckpt), "IDX": str(index),
             "A": str(manifest.parent / "audio" / "clip000.wav"), "AUDIO": str(manifest.parent / "audio"),
             "E": str(tmp_path / "e.npz"), "RUN": str(ckpt.parent)}
    return [names.get(a, a) for a in template]


@pytest.mark.parametrize("template", WRITERS, ids=[" ".join(w[:2]) for w in WRITERS])
@pytest.mark.parametrize("kind", ["fifo", "device", "socket", "folder"])
def test_every_writer_refuses_a_special_file_or_a_folder(template, kind, served_toy, tmp_path, capsys):
    if kind == "folder" and template[0] in ("export", "index"):
        pytest.skip("writes a folder (or an index folder) there")
    out = tmp_path / "out-0.x"  # data export writes its shards by the pattern out-%d.x
    held = None
    if kind == "fifo":
        _fifo(out)
    elif kind == "device":
        _device(out)
    elif kind == "socket":
        held = _socket(out)
    else:
        out.mkdir()
    before = os.stat(out)
    given = tmp_path / "out-%d.x" if template[:2] == ["data", "export"] else out
    try:
        r = run_cli(capsys, *_argv(template, given, served_toy, tmp_path))
    finally:
        if held is not None:
            held.close()
    expected = {"fifo": "a FIFO", "device": "a character device", "socket": "a socket", "folder": "is a folder"}
    assert_user_error(r, expected[kind])
    after = os.stat(out)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))


def test_a_link_to_a_device_is_refused_as_the_device(tmp_path):
    link = tmp_path / "null.json"
    link.symlink_to(os.devnull)
    with pytest.raises(MlatrError, match="character device"):
        atomic_write_json(link, {"a": 1})
    assert link.is_symlink() and os.readlink(link) == os.devnull


def test_the_python_writers_refuse_too(tmp_path):
    fifo = _fifo(tmp_path / "f.txt")
    with pytest.raises(MlatrError, match="a FIFO, not a regular file"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    (tmp_path / "d").mkdir()
    with pytest.raises(MlatrError, match="is a folder"):
        atomic_write_text(tmp_path / "d", "x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(MlatrError, match="not a folder to write into"):
        atomic_write_text(tmp_path / "file" / "inner.txt", "x")


def test_output_problem_allows_new_paths_and_files_of_the_kind_written(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    assert output_problem(tmp_path / "new" / "deeper.txt") is None
    assert output_problem(tmp_path / "f") is None and output_problem(tmp_path / "d", folder=True) is None
    assert output_problem(tmp_path / "f", folder=None) is None and output_problem(tmp_path / "d", folder=None) is None
    assert "is a file" in output_problem(tmp_path / "f", folder=True)
    assert check_output_path(tmp_path / "f") == tmp_path / "f"
