"""A truncated, damaged or hand-edited index, one file kind at a time: loading it and searching it (text in every
ranking, sound, a hit's captions and path, index info --check) either works or stops with one MlatrError naming
the file; never another exception, never a wrong answer (a shard listed twice), never a read that fills memory
(an .npz member that expands a thousand times)."""

import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from clitools import run_cli
from mlatr.errors import MlatrError
from mlatr.search import Index
from mlatr.search.columns import MAX_ROW_BYTES

faiss = pytest.importorskip("faiss", reason="the approximate-search files need faiss-cpu")


@pytest.fixture(scope="module")
def built(served_toy, tmp_path_factory):
    """(folder index with HNSW structures over clips and captions, its shard's name, the .npz index)."""
    manifest, ckpt, npz = served_toy
    out = tmp_path_factory.mktemp("damage") / "lib.idx"
    from mlatr.cli import main

    assert main(["index", "build", "--manifest", str(manifest), "--model", str(ckpt), "-o", str(out), "--ann", "hnsw",
                 "--caption-langs", "eng,fra", "--no-progress"]) == 0
    shard = next(p.name for p in out.iterdir() if p.name.startswith("shard-"))
    return out, shard, npz


def _use(path: Path) -> list[str]:
    """Everything a reader does with an index; the ids of the first text search."""
    index = Index.load(path)
    hits = index.search_text("a low tone", None, 5)
    index.search_text("a low tone", None, 5, rank="audio")
    index.search_text("un son", None, 5, rank="captions")
    [(h.captions, h.path) for h in hits]
    index.search_audio(index.paths[0], k=3)
    index.summary(check=True)
    return [h.id for h in hits]


def _outcome(path: Path) -> str:
    try:
        _use(path)
    except MlatrError as exc:
        return str(exc)
    return "OK"


FILES = ["index.json", "embeddings.npy", "ids.json", "clips.jsonl", "clips.offsets.npy", "caption_embeddings.npy",
         "caption_clip.npy", "captions.jsonl", "captions.offsets.npy", "ann.faiss", "caption_ann.faiss",
         "moments.npz", "keywords.json", "keywords.indptr.npy", "keywords.docs.npy", "keywords.tf.npy",
         "keywords.length.npy"]
DAMAGE = {"truncated": lambda b: b[: len(b) // 2], "garbage": lambda b: os.urandom(len(b)), "missing": None}
#: Files a reader can do without (it recomputes what they store): missing, the index still answers.
OPTIONAL = {"moments.npz", "keywords.json"}


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("name", FILES)
def test_each_file_kind_damaged_is_refused_naming_it(built, tmp_path, name, damage):
    src, shard, _ = built
    out = tmp_path / "lib.idx"
    shutil.copytree(src, out)
    target = out / name if name == "index.json" else out / shard / name
    if DAMAGE[damage] is None:
        target.unlink()
    else:
        target.write_bytes(DAMAGE[damage](target.read_bytes()))
    found = _outcome(out)
    if damage == "missing" and name in OPTIONAL:
        assert found == "OK"
    else:
        assert found != "OK" and (name in found or (name == "index.json" and "no index.json" in found)), found
        assert "\n" not in found


def _edit_json(path: Path, change):
    value = json.loads(path.read_text())
    path.write_text(json.dumps(change(value) or value))


def _edit_rows(path: Path, change):
    """Rewrite a rows file (and its offsets, so that only the edit is wrong)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    change(rows)
    lines = [(json.dumps(r) + "\n").encode() for r in rows]
    path.write_bytes(b"".join(lines))
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in lines])]).astype(np.uint64)
    np.save(path.with_suffix(".offsets.npy"), offsets)


def _edit_array(path: Path, change):
    np.save(path, change(np.load(path)))


def _entry(out: Path, change):
    _edit_json(out / "index.json", lambda m: change(m["shards"][0]))


EDITS = {  # name: (edit(folder, shard folder), a fragment of the error; None: still answers rightly)
    "ids fewer than rows": (lambda o, s: _edit_json(s / "ids.json", lambda a: a[:-1]), "20 rows for 19 clips"),
    "ids not strings": (lambda o, s: _edit_json(s / "ids.json", lambda a: [1] * len(a)), "list of id strings"),
    "caption row out of range": (lambda o, s: _edit_array(s / "caption_clip.npy", lambda a: a + 10**6), "outside"),
    "caption rows negative": (lambda o, s: _edit_array(s / "caption_clip.npy", lambda a: a * 0 - 1), "outside"),
    "caption rows floats": (lambda o, s: _edit_array(s / "caption_clip.npy", lambda a: a + 0.5), "expected integers"),
    "offsets past the file": (lambda o, s: _edit_array(s / "clips.offsets.npy", lambda a: a + 10**9),
                              "do not fit clips.jsonl"),
    "offsets negative": (lambda o, s: _edit_array(s / "clips.offsets.npy", lambda a: a.astype(np.int64) - 10**6),
                         "do not fit clips.jsonl"),
    "offsets decreasing": (lambda o, s: _edit_array(s / "clips.offsets.npy", lambda a: a[::-1].copy()),
                           "do not fit clips.jsonl"),
    "offsets of a giant row": (lambda o, s: _edit_array(s / "captions.offsets.npy",
                                                        lambda a: np.where(a > 0, a + MAX_ROW_BYTES, a)),
                               "captions.offsets.npy"),
    "vectors of another dim": (lambda o, s: _edit_array(s / "embeddings.npy", lambda a: a[:, :8].copy()),
                               "expected [n, 16]"),
    "vectors NaN": (lambda o, s: _edit_array(s / "embeddings.npy", lambda a: a * np.nan), "non-finite"),
    "vectors integers": (lambda o, s: _edit_array(s / "embeddings.npy", lambda a: (a * 9).astype(np.int32)),
                         "expected floats"),
    "vectors pickled objects": (lambda o, s: np.save(s / "embeddings.npy", np.array([{}] * 20, object),
                                                     allow_pickle=True), "embeddings.npy: not a readable .npy"),
    "a row of wrong types": (lambda o, s: _edit_rows(s / "clips.jsonl",
                                                     lambda r: r.__setitem__(0, {"path": 5, "captions": [1]})),
                             "row 0: path: a int"),
    "a row's captions nested": (lambda o, s: _edit_rows(s / "clips.jsonl",
                                                        lambda r: r[0].__setitem__("captions", {"eng": [[1]]})),
                                "row 0: captions"),
    "a row's file state": (lambda o, s: _edit_rows(s / "clips.jsonl",
                                                   lambda r: r[0].__setitem__("state", {"size": "x"})), "row 0: state"),
    "a caption text null": (lambda o, s: _edit_rows(s / "captions.jsonl", lambda r: r[0].__setitem__("text", None)),
                            "row 0: text"),
    "rows of the manifest": (lambda o, s: _entry(o, lambda e: e.__setitem__("rows", 10**9)), "the manifest says"),
    "deleted rows outside": (lambda o, s: _entry(o, lambda e: e.__setitem__("deleted", [10**6])), "deleted"),
    "shard name ..": (lambda o, s: _entry(o, lambda e: e.__setitem__("name", "../../etc")), "shards[0]"),
    "ann kind unknown": (lambda o, s: _entry(o, lambda e: e["ann"].__setitem__("kind", "bogus")), "shards[0].ann"),
    "ann of the captions": (lambda o, s: shutil.copy(s / "caption_ann.faiss", s / "ann.faiss"), "80 vectors"),
    "a shard listed twice": (lambda o, s: _edit_json(o / "index.json", lambda m: m["shards"].append(m["shards"][0])),
                             "listed twice"),
    "keyword postings reversed": (lambda o, s: _edit_array(s / "keywords.indptr.npy", lambda a: a[::-1].copy()),
                                  "keyword postings"),
    "keyword terms not strings": (lambda o, s: _edit_json(s / "keywords.json",
                                                          lambda k: k.__setitem__("terms", [1] * len(k["terms"]))),
                                  "keyword postings"),
    "moments of another shape": (lambda o, s: np.savez(s / "moments.npz", **{
        k: np.zeros((2, 2)) for k in np.load(s / "moments.npz").files}), "moments.npz: audio_total"),
    "index.json 100,000 deep": (lambda o, s: (o / "index.json").write_text("[" * 100000 + "]" * 100000),
                                "nested too deeply"),
    "index.json a 5,000-digit number": (lambda o, s: (o / "index.json").write_text('{"dim": 1' + "0" * 5000 + "}"),
                                        "index.json"),
    "index.json a FIFO": (lambda o, s: ((o / "index.json").unlink(), os.mkfifo(o / "index.json")), "no index.json"),
    "ids.json a link to /dev/zero": (lambda o, s: ((s / "ids.json").unlink(), os.symlink("/dev/zero", s / "ids.json")),
                                     "ids.json: not a regular file but a character device"),
    "embeddings a link to /dev/zero": (lambda o, s: ((s / "embeddings.npy").unlink(),
                                                     os.symlink("/dev/zero", s / "embeddings.npy")), "embeddings.npy"),
    "the shard folder a file": (lambda o, s: (shutil.rmtree(s), s.write_text("x")), "ids.json"),
    "an id with ..": (lambda o, s: _edit_json(s / "ids.json", lambda a: ["../../etc/passwd"] + a[1:]), None),
}


@pytest.mark.parametrize("case", list(EDITS))
def test_hand_edits_are_refused_naming_the_file(built, tmp_path, case):
    src, shard, _ = built
    out = tmp_path / "lib.idx"
    shutil.copytree(src, out)
    edit, fragment = EDITS[case]
    edit(out, out / shard)
    found = _outcome(out)
    if fragment is None:  # an id is looked up, never joined to a path: harmless
        assert found == "OK"
    else:
        assert fragment in found and "\n" not in found, found


def _npz(arrays: dict, compress: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for key, value in arrays.items():
            member = io.BytesIO()
            np.save(member, value)
            zf.writestr(f"{key}.npy", member.getvalue())
    return buf.getvalue()


@pytest.mark.parametrize("case", ["truncated", "garbage", "empty", "meta not JSON", "meta nested", "zip bomb",
                                  "vectors pickled"])
def test_a_damaged_npz_index_is_refused_naming_it(built, tmp_path, case):
    _, _, npz = built
    data = npz.read_bytes()
    arrays = dict(np.load(npz))
    made = {"truncated": lambda: data[: len(data) // 2], "garbage": lambda: os.urandom(len(data)),
            "empty": lambda: b"",
            "meta not JSON": lambda: _npz({**arrays, "meta": np.array("{not json")}),
            "meta nested": lambda: _npz({**arrays, "meta": np.array("[" * 100000)}),
            # 64 MiB of zeros stored in about 65 kB: refused from the zip directory, before it is inflated
            "zip bomb": lambda: _npz({**arrays, "embeddings": np.zeros((2**20, 16), np.float32)}, compress=True),
            "vectors pickled": lambda: _npz({**arrays, "embeddings": np.array([{}] * 20, object)})}[case]()
    out = tmp_path / "lib.idx.npz"
    out.write_bytes(made)
    found = _outcome(out)
    assert found != "OK" and str(out) in found and "\n" not in found, found
    if case == "zip bomb":
        assert "would expand from" in found


def test_search_of_a_damaged_index_is_one_line(built, tmp_path, capsys):
    src, shard, _ = built
    out = tmp_path / "lib.idx"
    shutil.copytree(src, out)
    (out / shard / "moments.npz").write_bytes(b"PK\x03\x04 not a zip")
    r = run_cli(capsys, "search", out, "a low tone")
    assert r.code == 2 and r.err.count("\n") == 1 and "moments.npz" in r.err, r.err
