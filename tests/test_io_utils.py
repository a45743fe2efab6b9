import json

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
