import json
import os
import stat

import pytest

from mlatr.io_utils import atomic_write_json, atomic_write_text


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "sub" / "out.json"
    atomic_write_json(p, {"a": 1})
    atomic_write_json(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert [f.name for f in p.parent.iterdir()] == ["out.json"]


def test_atomic_write_failure_keeps_previous_file(tmp_path):
    p = tmp_path / "out.txt"
    atomic_write_text(p, "old")

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(TypeError):
        atomic_write_text(p, Boom())  # fh.write(non-str) fails mid-write
    assert p.read_text() == "old"
    assert [f.name for f in tmp_path.iterdir()] == ["out.txt"]


def test_an_atomic_write_gets_the_permissions_open_would_give(tmp_path):
    """Was: mkstemp's 0600 for every manifest, index and checkpoint (a server under another account could not read
    them). Now 0666 less the umask for a new file, and the replaced file's own permissions."""
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.txt", "x")
        assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o640
        (tmp_path / "kept.txt").write_text("y")
        os.chmod(tmp_path / "kept.txt", 0o604)
        atomic_write_text(tmp_path / "kept.txt", "z")
        assert stat.S_IMODE(os.stat(tmp_path / "kept.txt").st_mode) == 0o604
    finally:
        os.umask(old)
