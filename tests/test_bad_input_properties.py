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
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clitools import assert_user_error, digest, run_cli
from mlatr.data.importers import (
    import_audiocaps_csv,
    import_clotho_csv,
    import_esc50_csv,
    import_mlclap_json,
    merge_translations,
)
from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.store import read_index
from mlatr.errors import MlatrError
from mlatr.inference import load_model
from mlatr.inference.checkpoint import export_model, read_checkpoint
from mlatr.search.index import Index
from mlatr.training.config import load_config

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


# ---------------------------------------------------------------- every reader of a user's file
# For arbitrary bytes, arbitrary JSON / YAML values, and good documents with one field replaced by an arbitrary
# value or removed, each reader returns or raises MlatrError: never another exception.

READER_SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)


def _paths(value, prefix=()) -> list[tuple]:
    """Every key path into a JSON value (object keys and array positions), outermost first."""
    out = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        out.append((*prefix, key))
        if len(out) < 400:
            out.extend(_paths(child, (*prefix, key)))
    return out


def _replaced(doc, path: tuple, value):
    """A deep copy of ``doc`` with the value at ``path`` replaced (``...``: removed)."""
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is ...:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def documents(good):
    """Arbitrary JSON values, and ``good`` with one field replaced by one (or removed)."""
    paths = _paths(good)
    return st.one_of(json_values, st.tuples(st.sampled_from(paths), json_values | st.just(...)).map(
        lambda pv: _replaced(good, *pv)))


def _returns_or_refuses(read, *args) -> None:
    try:
        read(*args)
    except MlatrError:
        pass


def _with_file_replaced(file: Path, good: dict, data, read, *args) -> None:
    """``read(*args)`` returns or refuses while JSON file ``file`` holds a drawn document (or bytes) instead of
    ``good``, which is written back after."""
    raw = data.draw(documents(good).map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40))
    try:
        file.write_bytes(raw)
        _returns_or_refuses(read, *args)
    finally:
        file.write_text(json.dumps(good))


@pytest.fixture(scope="module")
def stored(served_toy, tmp_path_factory):
    """The toy library's good files: index (npz meta and a folder's manifest), checkpoint state, model folder."""
    manifest, ckpt, npz = served_toy
    root = tmp_path_factory.mktemp("stored")
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    folder = Index.load(npz).save(root / "lib.idx")
    state = read_checkpoint(ckpt)
    state = {k: state[k] for k in ("format", "model_config", "model", "matching_head", "train_config")}
    model_folder = export_model(ckpt, root / "model")
    return {"manifest": manifest, "npz_arrays": arrays, "folder": folder, "folder_manifest":
            json.loads((folder / "index.json").read_text()), "state": state,
            "model_folder": model_folder, "model_config": json.loads((model_folder / "config.json").read_text())}


@READER_SETTINGS
@given(data=st.data())
def test_index_npz_meta_reader_returns_or_refuses(stored, tmp_path, data):
    good = json.loads(str(stored["npz_arrays"]["meta"]))
    meta = data.draw(documents(good) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
    text = meta if isinstance(meta, str) else json.dumps(meta)
    np.savez(tmp_path / "x.npz", **dict(stored["npz_arrays"], meta=np.asarray(text)))
    _returns_or_refuses(Index.load, tmp_path / "x.npz")


@READER_SETTINGS
@given(data=st.data())
def test_index_folder_manifest_reader_returns_or_refuses(stored, data):
    _with_file_replaced(stored["folder"] / "index.json", stored["folder_manifest"], data, Index.load,
                        stored["folder"])


GOOD_STORE = {"format": "mlatr-audio-store-1", "sample_rate": 16000, "dtype": "int16", "shards": ["shard-00000.npy"],
              "clips": {"a": {"audio": "a.wav", "shard": 0, "offset": 0, "length": 10, "scale": 1.0}},
              "bad": {"b": {"audio": "b.wav", "error": "not audio"}}}


@READER_SETTINGS
@given(raw=documents(GOOD_STORE).map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40))
def test_store_index_reader_returns_or_refuses(tmp_path, raw):
    (tmp_path / "index.json").write_bytes(raw)
    _returns_or_refuses(read_index, tmp_path)


@READER_SETTINGS
@given(data=st.data())
def test_checkpoint_metadata_reader_returns_or_refuses(stored, tmp_path, data):
    state = stored["state"]
    meta = {k: v for k, v in state.items() if k != "model"}
    mutated = data.draw(documents(meta))
    if isinstance(mutated, dict):
        mutated = dict(mutated, model=state["model"])
    torch.save(mutated, tmp_path / "m.pt")
    _returns_or_refuses(load_model, tmp_path / "m.pt")


@READER_SETTINGS
@given(data=st.data())
def test_model_folder_config_reader_returns_or_refuses(stored, data):
    _with_file_replaced(stored["model_folder"] / "config.json", stored["model_config"], data, load_model,
                        stored["model_folder"])


GOOD_CONFIG = {"data": {"manifest": "m.jsonl", "languages": ["eng", "fra"], "max_seconds": 2.0},
               "model": {"audio": {"name": "small-cnn", "dim": 32}, "text": {"name": "small-transformer"},
                         "embed_dim": 16},
               "optim": {"lr": 1e-3, "betas": [0.9, 0.98]}, "train": {"epochs": 1, "batch_size": 4}, "out_dir": "r"}


@READER_SETTINGS
@given(raw=documents(GOOD_CONFIG).map(lambda v: yaml.safe_dump(v).encode()) | st.binary(max_size=60)
       | st.text(alphabet="[]{}:,-&*ab 1\n", max_size=40).map(str.encode))
def test_yaml_config_reader_returns_or_refuses(tmp_path, raw):
    (tmp_path / "c.yaml").write_bytes(raw)
    _returns_or_refuses(load_config, tmp_path / "c.yaml")


@READER_SETTINGS
@given(lines=st.lists(documents(GOOD).map(lambda v: json.dumps(v).encode()) | st.binary(max_size=30), min_size=1,
                      max_size=3))
def test_manifest_reader_returns_or_refuses(tmp_path, lines):
    (tmp_path / "m.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    _returns_or_refuses(Manifest.load, tmp_path / "m.jsonl")
    _returns_or_refuses(lambda p: Manifest.load(p, skip_bad=True), tmp_path / "m.jsonl")


csv_text = st.lists(st.lists(st.text(alphabet='ab,"\n0.5-\xe9\x00', max_size=6), min_size=1, max_size=6), max_size=4)


@READER_SETTINGS
@given(rows=csv_text, raw=st.binary(max_size=30), header=st.sampled_from(["audiocaps", "clotho", "translations",
                                                                           "esc50", "none"]))
def test_caption_table_readers_return_or_refuse(tmp_path, rows, raw, header):
    heads = {"audiocaps": "audiocap_id,youtube_id,start_time,caption", "clotho": "file_name,caption_1,caption_2",
             "translations": "id,index,caption,lang", "esc50": "filename,fold,target,category", "none": ""}
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    body = (heads[header] + "\n").encode() + text.getvalue().encode() + raw
    for name in ("t.csv", "t.jsonl", "t.json"):
        (tmp_path / name).write_bytes(body)
    target = Manifest.load(stored_manifest(tmp_path))
    for read in (import_audiocaps_csv, import_clotho_csv, import_esc50_csv):
        _returns_or_refuses(read, [tmp_path / "t.csv"])
    _returns_or_refuses(import_mlclap_json, [tmp_path / "t.json"])
    for name in ("t.csv", "t.jsonl"):
        _returns_or_refuses(merge_translations, target, [tmp_path / name])


def stored_manifest(folder: Path) -> Path:
    """A one-clip manifest for the translation imports to merge into."""
    path = folder / "target.jsonl"
    path.write_text(json.dumps(dict(GOOD, id="a")) + "\n")
    return path
