"""Milvus targets and filters made from user strings: a target's port, credentials, query and collection name are
checked before any connection; a clip id with a quote, a backslash, a non-ASCII or a control character is written
into a filter as a literal of its own (it can neither add a condition nor break the query); a reader never makes
a milvus-lite file, and a FIFO is never handed to milvus-lite."""

import os

import pytest

from clitools import assert_user_error, run_cli
from mlatr.errors import MlatrError
from mlatr.search import milvus as mv
from mlatr.search.milvus_filter import in_filter, string_literal

TARGETS = [  # (target, a fragment of the error; None: accepted as (uri, collection))
    ("milvus://h:abc/c", "a port in 1..65535"),
    ("milvus://h:99999/c", "a port in 1..65535"),
    ("milvus://h:0/c", "a port in 1..65535"),
    ("milvus://h:-1/c", "a port in 1..65535"),
    ("milvus://user:secret@h:1/c", "without credentials"),
    ("milvus://h/c?x=1", "no query or fragment"),
    ("milvus://h/c#f", "no query or fragment"),
    ("milvus://h/caf\u00e9", "a collection name of at most 200 ASCII"),
    ("milvus://h/1abc", "not starting with a digit"),
    ("milvus://h/a-b", "a collection name"),
    ("milvus://h/../x", "a collection name"),
    ("milvus://h/" + "a" * 201, "a collection name"),
    ("milvus://h/a%20b", "a collection name"),
    ("milvus://", "expected milvus://HOST:PORT/COLLECTION"),
    ("milvus:", "expected milvus:PATH.db"),
    ("milvus:x.db?y", "expected milvus:PATH.db"),
    ("milvus://[::1]:19530/c", ("http://[::1]:19530", "c")),
    ("milvus://h/_sounds_2", ("http://h:19530", "_sounds_2")),
]


@pytest.mark.parametrize("target,expected", TARGETS)
def test_a_target_is_checked_before_any_connection(target, expected):
    if isinstance(expected, tuple):
        assert mv.parse_target(target) == expected
        return
    with pytest.raises(MlatrError, match=expected.replace("(", r"\(").replace(")", r"\)")) as caught:
        mv.parse_target(target)
    assert "secret" not in str(caught.value)


def test_a_bad_target_on_the_command_line_is_one_error(capsys):
    r = run_cli(capsys, "search", "milvus://h:abc/c", "a tone")
    assert_user_error(r, "a port in 1..65535")


@pytest.mark.parametrize("value,literal", [
    ("plain", '"plain"'),
    ('x" || id != "', '"x\\" || id != \\""'),
    ("back\\slash", '"back\\\\slash"'),
    ("caf\u00e9", '"caf\u00e9"'),
    ("new\nline\ttab", '"new\\nline\\ttab"'),
    ("esc\x1b[0m\x7f", '"esc\x1b[0m\x7f"'),
])
def test_a_string_literal_cannot_end_early(value, literal):
    assert string_literal(value) == literal
    assert in_filter("id", [value, "b"]) == f'id in [{literal}, "b"]'


ODD_IDS = ['x" || id != "', "back\\slash", "caf\u00e9", "new\nline", "rtl\u202eevil", "emoji\U0001f600",
           "esc\x1b[0m", "a'b"]


def test_odd_ids_are_fetched_and_deleted_alone(tmp_path):
    """On milvus-lite: every odd id is found as itself, and deleting the one that looks like a condition deletes
    that clip only (was: any non-ASCII id made every fetch and delete fail)."""
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from mlatr.search.columns import ClipColumns
    from test_index_milvus import synthetic

    clips, captions, _, _ = synthetic(n=12)
    ids = ODD_IDS + list(clips.ids[len(ODD_IDS):])
    clips = ClipColumns(clips.embeddings, ids, {"path": [f"/lib/{i}.wav" for i in range(12)],
                                                "captions": [{"eng": ["x"]}] * 12, "state": [None] * 12})
    target = f"milvus:{tmp_path / 'odd.db'}"
    mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    mc, collection = mv.client(target)
    for i in ODD_IDS:
        assert [r["id"] for r in mv._fetch(mc, collection, "id", [i], ["id"])] == [i]
    _, _, gone = mv._remove(mc, collection, ['x" || id != "', "caf\u00e9"], clips.dim)
    left = sorted(r["id"] for r in mv._all(mc, collection, ["id"]))
    assert sorted(gone) == sorted(['x" || id != "', "caf\u00e9"]) and left == sorted(set(ids) - set(gone))
    assert len(mv._fetch(mc, f"{collection}_captions", "clip", ids, ["row"])) == 2 * len(left)  # theirs gone too


def test_a_reader_makes_no_milvus_lite_file_and_never_opens_a_fifo(tmp_path, capsys):
    pytest.importorskip("pymilvus")
    r = run_cli(capsys, "search", f"milvus:{tmp_path / 'gone.db'}", "a tone")
    assert_user_error(r, "gone.db: file not found")
    assert not (tmp_path / "gone.db").exists()
    os.mkfifo(tmp_path / "pipe.db")
    pipe = f"milvus:{tmp_path / 'pipe.db'}"
    for argv in (["search", pipe, "a tone"], ["index", "info", pipe]):
        r = run_cli(capsys, *argv)
        assert_user_error(r, "pipe.db is not a regular file but a FIFO")
        assert "Traceback" not in r.err and r.err.count("\n") == 1
