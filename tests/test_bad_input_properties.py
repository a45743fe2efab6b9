"""Property-based bad inputs (Hypothesis): generated malformed manifest lines, CSV rows and NPZ contents.

For each: exit code 2 (``data validate``: 1, its documented "problems found"), or under ``--skip-bad``
the documented skip with its count; a message naming the file, the line and the field; no traceback;
no output file changed. Examples are bounded and derandomized so the suite stays fast and repeatable.
"""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clitools import assert_user_error, digest, run_cli

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

GOOD = {"id": "c", "audio": "audio/c.wav", "split": "test", "captions": {"eng": ["a dog barks"],
        "fra": ["un chien aboie"]}, "labels": ["dog"], "duration": 2.5}

#: (field the problem is reported at, how to break a good clip). A value of ``...`` deletes the key.
MUTATIONS = [
    ("id", {"id": ...}), ("id", {"id": 7}), ("id", {"id": "  "}), ("id", {"id": ["c"]}),
    ("audio", {"audio": ...}), ("audio", {"audio": 3.5}), ("audio", {"audio": ""}),
    ("split", {"split": 1}), ("split", {"split": ""}),
    ("labels", {"labels": "dog"}), ("labels[0]", {"labels": [""]}), ("labels[1]", {"labels": ["dog", 2]}),
    ("duration", {"duration": "2.5"}), ("duration", {"duration": -1}), ("duration", {"duration": True}),
    ("captions", {"captions": ["a dog"]}), ("captions.xx", {"captions": {"eng": ["a"], "xx": ["b"]}}),
    ("captions.fr", {"captions": {"eng": ["a"], "fr": ["b"]}}), ("captions", {"captions": {"fra": ["b"]}}),
    ("captions.eng[0]", {"captions": {"eng": [None]}}), ("captions.eng[1]", {"captions": {"eng": ["a", ""]}}),
    ("captions.eng", {"captions": {"eng": "a dog"}}), ("captions.fra", {"captions": {"eng": ["a"], "fra": ["b", "c"]}}),
    ("captions.fra[0]", {"captions": {"eng": ["a"], "fra": [5]}}),
]


def _mutated(mutation: dict) -> dict:
    obj = json.loads(json.dumps(GOOD))
    for k, v in mutation.items():
        if v is ...:
            obj.pop(k, None)
        else:
            obj[k] = v
    return obj


def _not_json_object(text: str) -> bool:
    if not text.strip():
        return False
    try:
        return not isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return True


def _latin1_line(field: str) -> tuple[str, bytes]:
    obj = json.loads(json.dumps(GOOD))
    marker = "\u00e9t\u00e9"
    if field == "split":
        obj["split"] = marker
    elif field == "labels[0]":
        obj["labels"] = [marker]
    else:
        lang = field.split(".")[1][:3]
        obj["captions"][lang][0] = marker
    text = json.dumps(obj, ensure_ascii=False)
    return field, text.encode("utf-8").replace(marker.encode("utf-8"), marker.encode("latin-1"))


bad_lines = st.one_of(
    st.sampled_from(MUTATIONS).map(lambda m: (m[0], json.dumps(_mutated(m[1])).encode())),
    st.text(alphabet="{}[]:,\"abc 0", min_size=1, max_size=12).filter(lambda t: _not_json_object(t))
    .map(lambda t: ("json", t.encode())),
    st.sampled_from(["[1, 2]", "\"text\"", "3", "null"]).map(lambda t: ("json", t.encode())),
    st.sampled_from(["captions.eng[0]", "captions.fra[0]", "split", "labels[0]"]).map(_latin1_line),
)


def _good_line(i: int) -> bytes:
    return json.dumps(dict(GOOD, id=f"c{i}")).encode()


@SETTINGS
@given(bad=bad_lines, before=st.integers(0, 3), after=st.integers(0, 3))
def test_malformed_manifest_line(capsys, bad, before, after):
    field, line = bad
    with tempfile.TemporaryDirectory() as d:
        m = Path(d) / "m.jsonl"
        lines = [_good_line(i) for i in range(before)] + [line] + [_good_line(100 + i) for i in range(after)]
        m.write_bytes(b"\n".join(lines) + b"\n")
        unchanged = digest(m)
        where = f"{m}:{before + 1}: {field}: "
        r = run_cli(capsys, "data", "validate", m)
        assert r.code == 1 and "Traceback" not in r.err
        assert any(x.startswith(where) for x in r.out.splitlines()), (where, r.out)
        assert_user_error(run_cli(capsys, "data", "stats", m), where)
        if before + after:
            r = run_cli(capsys, "data", "stats", m, "--skip-bad", "--json")
            assert r.code == 0 and json.loads(r.out)["skipped_lines"] == 1
            assert "mlatr: skipped" in r.err and where in r.err
        else:
            assert_user_error(run_cli(capsys, "data", "stats", m, "--skip-bad"), "no usable clip")
        assert digest(m) == unchanged


# ---------------------------------------------------------------- CSV rows

#: (field, a bad row of the AudioCaps CSV ``audiocap_id,youtube_id,start_time,caption``)
BAD_ROWS = st.one_of(
    st.sampled_from([("youtube_id", ["9", "", "0", "x"]), ("caption", ["9", "vid", "0", ""]),
                     ("start_time", ["9", "vid", "abc", "x"]), ("start_time", ["9", "vid", "nan", "x"]),
                     ("start_time", ["9", "vid", "inf", "x"])]),
    st.integers(1, 3).map(lambda n: (None, ["9", "vid", "0", "x", *["extra"] * n])),
    st.integers(1, 2).map(lambda n: (None, ["9", "vid"][:n])),
    st.sampled_from(["youtube_id", "caption"]).map(lambda f: (f, "latin1")),
)


def _csv_bytes(rows: list) -> bytes:
    out = io.BytesIO()
    for row in rows:
        if row == "latin1":
            continue
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerow(row)
        out.write(text.getvalue().encode())
    return out.getvalue()


@SETTINGS
@given(bad=st.lists(st.tuples(st.integers(0, 5), BAD_ROWS), min_size=1, max_size=3), n_good=st.integers(0, 5))
def test_malformed_csv_rows(capsys, bad, n_good):
    rows: list[tuple] = [(None, f"{i},vid{i},{i * 10},a sound {i}\n".encode()) for i in range(n_good)]
    for pos, (field, row) in sorted(bad, key=lambda x: x[0]):
        if row == "latin1":
            line = f"{90 + pos},vid{90 + pos},{pos},caf\xe9\n" if field == "caption" else f"{90 + pos},v\xe9,0,x\n"
            data = line.encode("latin-1")
        else:
            data = _csv_bytes([row])
        rows.insert(min(pos, len(rows)), ("bad", field, data))
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "captions.csv", Path(d) / "m.jsonl"
        src.write_bytes(b"audiocap_id,youtube_id,start_time,caption\n" + b"".join(r[-1] for r in rows))
        out.write_text('{"id": "previous", "audio": "p.wav"}\n')
        unchanged = digest(src, out)
        bad_at = [(i + 2, r[1]) for i, r in enumerate(rows) if r[0] == "bad"]
        line, field = bad_at[0]
        r = run_cli(capsys, "data", "import", "--format", "audiocaps-csv", src, "-o", out)
        assert_user_error(r, f"{src}:{line}: " + (f"{field}: " if field else ""))
        assert digest(src, out) == unchanged
        r = run_cli(capsys, "data", "import", "--format", "audiocaps-csv", src, "-o", out, "--skip-bad")
        if n_good:
            assert r.code == 0 and f"skipped {len(bad_at)} bad row(s)" in r.out, (r.out, r.err)
            assert f"{src}:{line}: " in r.err and "Traceback" not in r.err
            assert len(out.read_text().splitlines()) == n_good
        else:
            assert_user_error(r, "nothing to write", f"({len(bad_at)} bad rows skipped)")
            assert digest(src, out) == unchanged


# ---------------------------------------------------------------- NPZ contents


def _arrays(n_audio: int, dim: int, rng: np.random.Generator) -> dict:
    langs = np.asarray(["eng", "fra"] * n_audio, dtype=str)
    return {"audio": rng.standard_normal((n_audio, dim)), "text": rng.standard_normal((2 * n_audio, dim)),
            "text_audio": np.repeat(np.arange(n_audio), 2), "text_lang": langs,
            "text_group": np.repeat(np.arange(n_audio), 2)}


def _break(kind: str, a: dict, rng: np.random.Generator) -> str:
    """Damage ``a`` in place; returns the array the error must name."""
    if kind == "nan":
        a["text"][rng.integers(len(a["text"])), 0] = np.nan
        return "text"
    if kind == "inf-audio":
        a["audio"][0, -1] = np.inf
        return "audio"
    if kind == "ndim":
        a["audio"] = a["audio"][:, 0]
        return "audio"
    if kind == "length":
        a["text_lang"] = a["text_lang"][:-1]
        return "text_lang"
    if kind == "range":
        a["text_audio"] = a["text_audio"].copy()
        a["text_audio"][-1] = len(a["audio"]) + 3
        return "text_audio"
    if kind == "float-group":
        a["text_group"] = a["text_group"].astype(float) + 0.5
        return "text_group"
    if kind == "zero-row":
        a["audio"][0] = 0.0
        return "audio"
    if kind == "empty":
        a["audio"] = np.zeros((0, a["audio"].shape[1]))
        return "audio"
    if kind == "strings":
        a["text"] = np.asarray([["x"] * a["text"].shape[1]] * len(a["text"]))
        return "text"
    if kind == "dim":
        a["text"] = a["text"][:, :-1]
        return "text"
    del a["text_group"]
    return "text_group"


@SETTINGS
@given(kind=st.sampled_from(["nan", "inf-audio", "ndim", "length", "range", "float-group", "zero-row", "empty",
                             "strings", "dim", "missing"]),
       n_audio=st.integers(1, 6), dim=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_malformed_npz(capsys, kind, n_audio, dim, seed):
    rng = np.random.default_rng(seed)
    a = _arrays(n_audio, dim, rng)
    field = _break(kind, a, rng)
    with tempfile.TemporaryDirectory() as d:
        path, out = Path(d) / "emb.npz", Path(d) / "metrics.json"
        np.savez(path, **a)
        r = run_cli(capsys, "eval-embeddings", path, "--json", out)
        assert_user_error(r, str(path), field)
        assert not out.exists()
