"""An index as two tables of columns (mlatr.search.columns): take / concat / stack / save / load, and a per-clip
column added in one place travelling through every format (.npz, folder with adds, deletes and compaction,
Milvus), read back as its default from an index written before it existed."""

import importlib.util
import json

import numpy as np
import pytest

from mlatr.data.manifest import Clip, Manifest
from mlatr.file_state import file_sha256
from mlatr.search import milvus
from mlatr.search.build import delete_clips, write_rows
from mlatr.search.columns import CaptionColumns, ClipColumns, Column
from mlatr.search.index import Index

D = 8


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _library(tmp_path, n=6, first=0, seed=0):
    """Clips ``c{first}..`` (no audio file needed) with seeded unit vectors, two captions each but the last."""
    rng = np.random.default_rng(seed)
    clips = [Clip(id=f"c{first + i}", audio=f"a/c{first + i}.wav", duration=1.0 + first + i,
                  captions={"eng": [f"sound {first + i}", f"noise {first + i}"]} if i < n - 1 else {})
             for i in range(n)]
    manifest = Manifest(clips=clips, root=tmp_path)
    arrays = manifest.caption_arrays(["eng"])
    table = ClipColumns.of_clips(clips, tmp_path, _unit(rng.standard_normal((n, D))))
    return table, CaptionColumns.of_arrays(arrays, _unit(rng.standard_normal((len(arrays["texts"]), D))))


def _meta(tmp_path):
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"not loaded: no query is encoded here")
    return {"checkpoint": {"path": str(ckpt), "sha256": file_sha256(ckpt)}, "sample_rate": 16000,
            "max_seconds": 10.0, "caption_languages": ["eng"], "manifest": None}


def _rows(index):
    """Every clip's and caption's values (vectors rounded: a folder may store float16)."""
    vectors = np.round(np.asarray(index.embeddings, np.float32), 3).tolist()
    clips = [(index.ids[i], index.clip_columns.row(i), vectors[i]) for i in range(len(index.ids))]
    captions = [(index.ids[int(c)], index.caption_columns.row(j)) for j, c in enumerate(index.caption_clip)]
    return clips, captions


def test_take_concat_and_stack_keep_rows_and_caption_links(tmp_path):
    a_clips, a_caps = _library(tmp_path, 5, 0, seed=1)
    b_clips, b_caps = _library(tmp_path, 4, 5, seed=2)
    joined = ClipColumns.concat([a_clips, b_clips], D)
    caps = CaptionColumns.concat([a_caps, b_caps], [len(a_clips)], D)
    assert joined.ids == [f"c{i}" for i in range(9)] and joined["path"][6] == b_clips["path"][1]
    assert [joined.ids[c] for c in caps.clip] == [a_clips.ids[c] for c in a_caps.clip] + [b_clips.ids[c]
                                                                                          for c in b_caps.clip]
    stacked = ClipColumns.stack([a_clips, b_clips], D)
    assert np.array_equal(np.asarray(stacked.embeddings), joined.embeddings)
    assert [stacked.row(i) for i in range(9)] == [joined.row(i) for i in range(9)]
    assert np.array_equal(CaptionColumns.stack([a_caps, b_caps], [5], D).clip, caps.clip)
    # an index's take: the clips asked for, their captions only, links renumbered
    index = Index(joined, caps)
    part = index.take([7, 2])
    assert part.ids == ["c7", "c2"] and np.array_equal(part.embeddings, joined.embeddings[[7, 2]])
    assert [(part.ids[c], t) for c, t in zip(part.caption_clip, part.caption_text, strict=True)] == [
        ("c2", "sound 2"), ("c2", "noise 2"), ("c7", "sound 7"), ("c7", "noise 7")]


def test_a_table_refuses_columns_of_another_length_and_vectors_of_other_clips(tmp_path):
    table, _ = _library(tmp_path, 3)
    with pytest.raises(ValueError, match="2 'path' values for 3 rows"):
        ClipColumns(table.embeddings, table.ids, {"path": ["x", "y"], "captions": [{}] * 3})
    with pytest.raises(ValueError, match="no 'captions' column"):
        ClipColumns(table.embeddings, table.ids, {"path": ["x"] * 3})
    assert ClipColumns(table.embeddings, table.ids, {"path": ["x"] * 3, "captions": [{}] * 3})["state"] == [None] * 3
    with pytest.raises(ValueError, match="2 embeddings for 3 clips"):
        ClipColumns.of_clips([Clip(id=f"x{i}", audio="x.wav") for i in range(3)], tmp_path, table.embeddings[:2])


def test_a_column_added_in_one_place_travels_through_every_format(tmp_path, monkeypatch):
    meta = _meta(tmp_path)
    old_clips, old_caps = _library(tmp_path, 4, 0, seed=1)
    before = {"npz": tmp_path / "old.idx.npz", "folder": tmp_path / "old.idx"}
    for out in before.values():  # written before the column existed
        Index(old_clips, old_caps, meta).save(out)
    duration = Column("duration", "durations", (float, int, type(None)), "a list of numbers (seconds) or null",
                      default=None, of_clip=lambda clip, root: clip.duration)
    monkeypatch.setattr(ClipColumns, "columns", (*ClipColumns.columns, duration))
    for out in before.values():
        assert list(Index.load(out).clip_columns["duration"]) == [None] * 4

    first, first_caps = _library(tmp_path, 4, 0, seed=1)
    second, second_caps = _library(tmp_path, 3, 4, seed=2)
    assert first["duration"] == [1.0, 2.0, 3.0, 4.0]
    want = {f"c{i}": 1.0 + i for i in range(7)}
    for out in (tmp_path / "lib.idx.npz", tmp_path / "lib.idx"):
        write_rows(out, Index(first, first_caps, meta), add=False)
        write_rows(out, Index(second, second_caps, meta), add=True)  # .npz: concat; folder: one more shard
        delete_clips(out, ["c1"])  # .npz: take; folder: a tombstone
        index = Index.load(out)
        live = index.live()
        assert {cid: live.clip_columns["duration"][i] for i, cid in enumerate(live.ids)} == \
            {k: v for k, v in want.items() if k != "c1"}
        if hasattr(index.storage, "shards"):  # stored in each shard's clips.jsonl, read lazily
            line = (index.storage.shards[1].folder / "clips.jsonl").read_text().splitlines()[0]
            assert json.loads(line)["duration"] == 5.0
            live.save(tmp_path / "compact.idx")  # compaction rewrites the live rows into one shard
            assert _rows(Index.load(tmp_path / "compact.idx")) == _rows(live)
        else:
            with np.load(out) as z:
                assert json.loads(str(z["meta"]))["durations"] == [1.0, 3.0, 4.0, 5.0, 6.0, 7.0]
        assert _rows(live) == _rows(Index.load(tmp_path / "lib.idx.npz").live())
    if importlib.util.find_spec("milvus_lite") is not None:  # Milvus keeps the column in the clip's info
        target = f"milvus:{tmp_path / 'lib.db'}"
        milvus.write_milvus(target, first, first_caps, meta, [], replace=True)
        remote = Index.load(target)
        assert {cid: remote.clip_columns["duration"][i] for i, cid in enumerate(remote.ids)} == \
            {f"c{i}": 1.0 + i for i in range(4)}


def test_an_npz_column_of_the_wrong_kind_names_its_field(tmp_path, monkeypatch):
    from mlatr.errors import MlatrError

    clips, caps = _library(tmp_path, 3)
    out = Index(clips, caps, _meta(tmp_path)).save(tmp_path / "x.idx.npz")
    with np.load(out) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    for field, value, says in (("states", [1, 2, 3], "a list of file states"), ("paths", "p", "expected a list"),
                               ("caption_text", ["a"], "1 values for 4 caption rows")):
        np.savez(tmp_path / "bad.npz", **dict(arrays, meta=np.asarray(json.dumps(dict(meta, **{field: value})))))
        with pytest.raises(MlatrError, match=rf"bad.npz: {field}: .*{says}"):
            Index.load(tmp_path / "bad.npz")
