"""The sharded index folder: equal to the single-file index, appends without rewriting, tombstones and
compaction, concurrent writers keep both's clips, staleness, and readers that refuse bad files by name."""

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import load_model
from mlatr.search import Index, build_index
from mlatr.search.ann import AnnBuild
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.storage import Tables
from mlatr.writer_lock import writer_lock
from toydata import train_toy_model

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_toy_model(tmp_path_factory.mktemp("folder"))


def _part(manifest, lo, hi):
    return Manifest(clips=manifest.clips[lo:hi], root=manifest.root, path=manifest.path)


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def test_folder_equals_single_file_and_add_writes_only_a_new_shard(trained, tmp_path):
    manifest_path, ckpt = trained
    manifest, model = Manifest.load(manifest_path), load_model(ckpt)
    full = build_index(model, manifest, tmp_path / "full.idx.npz", caption_languages=["eng", "fra"]).index
    out = tmp_path / "lib.idx"
    build_index(model, _part(manifest, 0, 12), out, caption_languages=["eng", "fra"])
    before = _files(out)
    rep = build_index(model, manifest, out, add=True)
    assert rep.added == 8 and rep.kept == 12
    after = _files(out)
    # every file of the first shard is untouched; only a new shard and the manifest were written
    assert all(after[name] == stat for name, stat in before.items() if name.startswith("shard-"))
    new = {n for n in after if n not in before}
    assert new and all(n.startswith("shard-000001-") for n in new)
    assert rep.bytes_written == sum(after[n][0] for n in new) + after["index.json"][0] - before["index.json"][0]
    index = Index.load(out)
    assert len(index.storage.shards) == 2 and index.ids == full.ids
    assert np.allclose(np.asarray(index.embeddings), full.embeddings, atol=1e-6)
    assert list(index.caption_text) == full.caption_text and list(index.caption_lang) == full.caption_lang
    assert np.array_equal(index.caption_clip, full.caption_clip)
    assert list(index.paths) == full.paths and list(index.captions) == full.captions
    for query in ("a single low tone", "deux sons aigus"):
        a, b = index.search_text(query, "fra", k=20), full.search_text(query, "fra", k=20)
        assert [h.id for h in a] == [h.id for h in b] and np.allclose([h.score for h in a], [h.score for h in b])
    clips, clips_f = index.search_audio(full.paths[4], k=6), full.search_audio(full.paths[4], k=6)
    assert [h.id for h in clips] == [h.id for h in clips_f]
    assert [c.text for c in clips.caption_hits] == [c.text for c in clips_f.caption_hits]
    assert isinstance(index.storage.shards[0].clips.embeddings, np.memmap)  # mapped, not read


def test_delete_compact_and_convert(trained, tmp_path, capsys):
    manifest_path, ckpt = trained
    manifest, model = Manifest.load(manifest_path), load_model(ckpt)
    out = tmp_path / "lib.idx"
    build_index(model, _part(manifest, 0, 10), out, caption_languages=["eng"])
    build_index(model, manifest, out, add=True)
    ref = Index.load(out)
    # exact ranking by sound: compaction must not move it (hybrid ranking's keyword statistics depend on the
    # corpus, which compaction shrinks)
    top = [h.id for h in ref.search_text("a single low tone", k=20, rank="audio")]
    first_hybrid = [h.id for h in ref.search_text("a single low tone", k=2)]
    gone = [top[0], next(c for c in first_hybrid if c != top[0])]  # the first by sound and one of the first two
    assert main(["index", "delete", str(out), *gone]) == 0
    assert main(["index", "delete", str(out), "no-such-clip"]) == 2
    assert "no clip 'no-such-clip'" in capsys.readouterr().err
    index = Index.load(out)
    assert len(index) == 18 and len(index.ids) == 20
    hits = [h.id for h in index.search_text("a single low tone", k=20, rank="audio")]
    assert hits == [c for c in top if c not in gone]
    # the text ranker knows the tombstones: the deleted clips that ranked first take no slot, k hits come back
    hybrid = {k: index.search_text("a single low tone", k=k) for k in (2, 20)}
    assert len(hybrid[2]) == 2 and len(hybrid[20]) == 18 and set(gone).isdisjoint(h.id for h in hybrid[20])
    # sound-to-caption skips the deleted clips' captions too
    caps = index.search_audio(ref.paths[ref.ids.index(top[0])], k=50).caption_hits
    assert {c.id for c in caps}.isdisjoint(gone)
    assert main(["index", "compact", str(out), "--no-progress"]) == 0
    compact = Index.load(out)
    assert len(compact.storage.shards) == 1 and len(compact.ids) == 18 and len(compact.deleted_rows) == 0
    assert [h.id for h in compact.search_text("a single low tone", k=20, rank="audio")] == hits
    # every ranking of the tombstoned index is the compacted one's (ranks and keyword statistics without them;
    # a cosine may differ in its last bit: another matrix shape, another BLAS blocking)
    for rank in ("hybrid", "captions"):
        a, b = (x.search_text("a single low tone", k=20, rank=rank) for x in (compact, index))
        assert [(h.id, [(e.source, e.rank, e.text, e.lang, e.terms) for e in h.evidence]) for h in a] == \
            [(h.id, [(e.source, e.rank, e.text, e.lang, e.terms) for e in h.evidence]) for h in b]
        assert np.allclose([s for h in a for s in [h.score] + [e.score for e in h.evidence]],
                           [s for h in b for s in [h.score] + [e.score for e in h.evidence]], rtol=1e-6, atol=1e-6)
    shard_names = sorted(p.name for p in out.iterdir() if p.name.startswith("shard-"))
    assert shard_names == [compact.storage.shards[0].folder.name]
    # an old single-file index converts to a folder with one command, and back
    npz = tmp_path / "old.idx.npz"
    build_index(model, manifest, npz, caption_languages=["eng"])
    assert main(["index", "compact", str(npz), "-o", str(tmp_path / "conv.idx"), "--dtype", "float16"]) == 0
    conv = Index.load(tmp_path / "conv.idx")
    old = Index.load(npz)
    assert conv.meta["dtype"] == "float16" and conv.embeddings.dtype == np.float16
    a, b = (x.search_text("a single low tone", k=5, rank="audio") for x in (conv, old))  # cosine scores
    assert np.allclose([h.score for h in a], [h.score for h in b], atol=2e-3)
    capsys.readouterr()
    assert main(["index", "info", str(tmp_path / "conv.idx"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "mlatr-index-2" and info["clips"] == 20 and info["dtype"] == "float16"


def _build_cmd(ckpt, manifest, out):
    return [sys.executable, "-m", "mlatr", "index", "build", "--model", str(ckpt), "--manifest", str(manifest),
            "-o", str(out), "--add", "--caption-langs", "eng", "--no-progress"]


@pytest.mark.parametrize("name", ["lib.idx", "lib.idx.npz"])
def test_two_concurrent_adds_keep_every_clip(trained, tmp_path, name):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    out = tmp_path / name
    halves = []
    for i, (lo, hi) in enumerate([(0, 10), (10, 20)]):
        path = manifest_path.parent / f"half{i}-{name}.jsonl"  # beside the audio (its paths are relative)
        _part(manifest, lo, hi).save(path)
        halves.append(path)
    env = dict(os.environ, PYTHONPATH=SRC, OMP_NUM_THREADS="1")
    if name.endswith(".idx"):
        out.mkdir()
    errs = [tmp_path / f"err{i}.txt" for i in range(2)]
    # hold the lock until both runs have encoded their clips and wait to write, then let them go
    with writer_lock(out, "index"):
        procs = [subprocess.Popen(_build_cmd(ckpt, h, out), env=env, stdout=subprocess.DEVNULL,
                                  stderr=open(e, "w")) for h, e in zip(halves, errs, strict=True)]
        deadline = time.monotonic() + 180
        while not all("waiting for" in e.read_text() for e in errs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [e.read_text() for e in errs]
            time.sleep(0.2)
    assert [p.wait(timeout=180) for p in procs] == [0, 0], [e.read_text() for e in errs]
    index = Index.load(out)
    assert sorted(index.ids) == sorted(c.id for c in manifest.clips) and len(index) == 20


def test_stale_clips_are_reported_and_add_says_what_changed(trained, tmp_path, capsys):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    lib = tmp_path / "lib"
    lib.mkdir()
    for clip in manifest.clips:  # a private copy of the audio, to change and delete
        (lib / Path(clip.audio).name).write_bytes(clip.audio_path(manifest.root).read_bytes())
    local = Manifest(clips=[c.__class__(**{**c.__dict__, "audio": Path(c.audio).name}) for c in manifest.clips],
                     root=lib, path=lib / "m.jsonl")
    local.save(lib / "m.jsonl")
    out = tmp_path / "lib.idx"
    assert main(["index", "build", "--model", str(ckpt), "--manifest", str(lib / "m.jsonl"), "-o", str(out),
                 "--caption-langs", "eng", "--no-progress"]) == 0
    capsys.readouterr()
    index = Index.load(out)
    changed_id, deleted_id = index.ids[2], index.ids[5]
    changed = Path(index.paths[2])
    changed.write_bytes(manifest.clips[7].audio_path(manifest.root).read_bytes())  # another sound, same name
    os.utime(changed, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    Path(index.paths[5]).unlink()
    assert index.stale(2) == "changed" and index.stale(5) == "deleted" and index.stale(0) is None
    hits = {h.id: h for h in index.search_text("a single low tone", k=20)}
    assert hits[changed_id].stale == "changed" and hits[deleted_id].stale == "deleted"
    assert main(["search", str(out), "a single low tone", "-k", "20"]) == 0
    text = capsys.readouterr().out
    assert "its audio was deleted since it was indexed" in text and "its audio was changed" in text
    assert main(["index", "info", str(out), "--check", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stale"] == {"deleted": [deleted_id], "changed": [changed_id]}
    assert main(["index", "build", "--model", str(ckpt), "--manifest", str(lib / "m.jsonl"), "-o", str(out),
                 "--add", "--no-progress", "--skip-bad"]) == 0
    said = capsys.readouterr().out
    assert f"1 clip(s) changed since they were indexed (size or mtime) and were encoded again: {changed_id}" in said
    assert f"1 indexed clip(s) whose audio file is gone were deleted from the index: {deleted_id}" in said
    after = Index.load(out)
    assert len(after) == 19 and deleted_id not in {h.id for h in after.search_text("a tone", k=50)}
    row = max(i for i, c in enumerate(after.ids) if c == changed_id)
    assert after.stale(row) is None and row >= 20  # encoded again, in the new shard
    fresh = build_index(load_model(ckpt), Manifest(clips=[local.clips[2]], root=lib), tmp_path / "x.idx.npz",
                        caption_languages=["eng"]).index
    assert np.allclose(np.asarray(after.embeddings[row]), fresh.embeddings[0], atol=1e-5)


@pytest.mark.parametrize("suffix", ["idx", "idx.npz"])
def test_add_from_a_source_that_no_longer_lists_a_deleted_clip_tombstones_it(trained, tmp_path, capsys, suffix):
    """A file deleted from a library is not listed by the folder (or manifest) it is added from next time: the
    index still tombstones it, counting it, instead of ranking it for ever."""
    manifest_path, ckpt = trained
    manifest, model = Manifest.load(manifest_path), load_model(ckpt)
    lib = tmp_path / "lib"
    lib.mkdir()
    for clip in manifest.clips[:6]:  # a private copy of the audio, to delete
        (lib / Path(clip.audio).name).write_bytes(clip.audio_path(manifest.root).read_bytes())
    local = Manifest(clips=[c.__class__(**{**c.__dict__, "audio": Path(c.audio).name}) for c in manifest.clips[:6]],
                     root=lib)
    out = tmp_path / f"lib.{suffix}"
    build_index(model, _part(local, 0, 4), out, caption_languages=["eng"])
    gone = local.clips[1]
    (lib / gone.audio).unlink()
    report = build_index(model, _part(local, 4, 6), out, add=True, caption_languages=["eng"])
    assert report.deleted == [gone.id] and report.added == 2
    after = Index.load(out)
    assert len(after) == 5 and gone.id not in {h.id for h in after.search_text("a tone", k=50)}
    # the CLI says it with the count
    (lib / local.clips[0].audio).unlink()
    local.save(lib / "m.jsonl")
    Manifest(clips=local.clips[2:6], root=lib).save(lib / "rest.jsonl")
    assert main(["index", "build", "--model", str(ckpt), "--manifest", str(lib / "rest.jsonl"), "-o",
                 str(out), "--add", "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert f"1 indexed clip(s) whose audio file is gone were deleted from the index: {local.clips[0].id}" in said
    assert len(Index.load(out)) == 4


# ---- readers refuse bad files, naming the file and the field ------------------------------------------
def _npz_with(src: Path, dst: Path, meta_edit=None, arrays_edit=None) -> Path:
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    if meta_edit:
        meta_edit(meta)
    arrays["meta"] = np.asarray(json.dumps(meta))
    if arrays_edit:
        arrays_edit(arrays)
    np.savez(dst, **arrays)
    return dst


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.__setitem__("checkpoint", "model.pt"), "checkpoint"),
    (lambda m: m.__setitem__("sample_rate", "16000"), "sample_rate"),
    (lambda m: m.__setitem__("max_seconds", None), "max_seconds"),
    (lambda m: m.__setitem__("ids", {"a": 1}), "ids"),
    (lambda m: m.__setitem__("captions", [1] * len(m["captions"])), "captions"),
    (lambda m: m["checkpoint"].__setitem__("sha256", 7), "checkpoint.sha256"),
    (lambda m: m.pop("caption_text"), "caption_text"),
])
def test_npz_meta_of_wrong_type_is_refused_naming_file_and_field(trained, tmp_path, capsys, edit, field):
    manifest_path, ckpt = trained
    good = build_index(load_model(ckpt), _part(Manifest.load(manifest_path), 0, 4), tmp_path / "g.idx.npz",
                       caption_languages=["eng"]).index.path
    bad = _npz_with(good, tmp_path / "bad.idx.npz", edit)
    assert main(["search", str(bad), "a tone"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: {field}: " in err and "Traceback" not in err


@pytest.mark.parametrize("edit, field", [
    (lambda m: m["meta"].__setitem__("checkpoint", "model.pt"), "meta.checkpoint"),
    (lambda m: m.__setitem__("dim", "16"), "dim"),
    (lambda m: m.__setitem__("dtype", "int8"), "dtype"),
    (lambda m: m.__setitem__("shards", [{"name": "../../etc", "rows": 1}]), "shards[0]"),
    (lambda m: m["shards"][0].__setitem__("deleted", [99]), "shards[0].deleted"),
])
def test_folder_manifest_of_wrong_type_is_refused_also_by_reload(trained, tmp_path, capsys, edit, field):
    manifest_path, ckpt = trained
    out = tmp_path / "lib.idx"
    build_index(load_model(ckpt), _part(Manifest.load(manifest_path), 0, 4), out, caption_languages=["eng"])
    from mlatr.serve.live_index import LiveIndex

    live = LiveIndex(out)
    live.reload()
    manifest = json.loads((out / "index.json").read_text())
    edit(manifest)
    (out / "index.json").write_text(json.dumps(manifest))
    assert main(["search", str(out), "a tone"]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'index.json'}: {field}: " in err and "Traceback" not in err
    with pytest.raises(MlatrError, match=re.escape(f"index.json: {field}: ")):
        live.reload()
    assert len(live.current().index) == 4  # the previous index stays in service


def test_non_unit_missing_and_misshapen_arrays_are_refused_by_name(trained, tmp_path):
    manifest_path, ckpt = trained
    model = load_model(ckpt)
    part = _part(Manifest.load(manifest_path), 0, 4)
    good = build_index(model, part, tmp_path / "g.idx.npz", caption_languages=["eng"]).index.path

    def scale(a):
        a["embeddings"] = a["embeddings"] * 17

    with pytest.raises(MlatrError, match=r"g2.idx.npz: embeddings: 4 row\(s\) not of unit norm .*norm 17"):
        Index.load(_npz_with(good, tmp_path / "g2.idx.npz", arrays_edit=scale))
    with pytest.raises(MlatrError, match=r"g3.idx.npz: caption_clip: missing array"):
        Index.load(_npz_with(good, tmp_path / "g3.idx.npz", arrays_edit=lambda a: a.pop("caption_clip")))

    def wrong_dim(a):
        a["caption_embeddings"] = a["caption_embeddings"][:, :5]

    with pytest.raises(MlatrError, match=r"g4.idx.npz: caption_embeddings: shape \[8, 5\]"):
        Index.load(_npz_with(good, tmp_path / "g4.idx.npz", arrays_edit=wrong_dim))
    out = tmp_path / "lib.idx"
    build_index(model, part, out, caption_languages=["eng"])
    shard = next(out.glob("shard-*"))
    emb = np.load(shard / "embeddings.npy")
    np.save(shard / "embeddings.npy", emb * 3)
    with pytest.raises(MlatrError, match=rf"{shard / 'embeddings.npy'}: .*not of unit norm"):
        Index.load(out)
    np.save(shard / "embeddings.npy", emb[:, :7])
    with pytest.raises(MlatrError, match=rf"{shard / 'embeddings.npy'}: shape \[4, 7\], expected \[n, 16\]"):
        Index.load(out)
    (shard / "embeddings.npy").unlink()
    with pytest.raises(MlatrError, match=rf"{shard / 'embeddings.npy'}: missing"):
        Index.load(out)
    # building refuses a non-unit row before writing anything
    index = Index.load(good)
    index.embeddings = index.embeddings * 2
    with pytest.raises(MlatrError, match="not of unit norm"):
        index.save(tmp_path / "never.idx")
    assert not (tmp_path / "never.idx" / "index.json").exists()


def test_ann_shard_recall_is_measured_recorded_and_searched(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n, d = 6000, 32
    emb = rng.standard_normal((n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    from mlatr.file_state import file_sha256

    ckpt = tmp_path / "fake.pt"
    ckpt.write_bytes(b"not used: no query is encoded here")
    meta = {"checkpoint": {"path": str(ckpt), "sha256": file_sha256(ckpt)}, "sample_rate": 16000,
            "max_seconds": 10.0, "caption_languages": []}
    clips = ClipColumns(emb, [f"c{i}" for i in range(n)], {"path": [f"/x/{i}.wav" for i in range(n)],
                                                           "captions": [{} for _ in range(n)]})
    index = Index(clips, CaptionColumns.empty(d), meta)
    for kind, params, knob in (("hnsw", {"efSearch": 8, "target_recall_pct": 90}, "efSearch"),
                               ("ivfpq", {"nlist": 32, "nprobe": 1, "pq_bits": 6, "target_recall_pct": 90}, "nprobe")):
        out = tmp_path / f"{kind}.idx"
        index.save(out, ann=AnnBuild(kind, params))
        loaded = Index.load(out)
        entry = loaded.storage.shards[0].entry["ann"]
        assert entry["kind"] == kind and entry["params"]["target_recall_pct"] == 90
        # the search knob was doubled from its start until the measured recall reached the target or its cap
        # (IVF: every list visited; coarse 6-bit codes of random vectors keep it under the target)
        cap = 1024 if kind == "hnsw" else 32
        assert entry["params"][knob] > params[knob] and (entry["recall_at_10"] >= 0.9 or entry["params"][knob] == cap)
        # the recorded recall is what the structure gives on the same sample, computed independently
        from mlatr.search.ann import recall_sample

        queries = recall_sample(emb)
        truth = np.argsort(-(queries @ emb.T), axis=1, kind="stable")[:, :10]
        scores, rows = loaded.searcher("audio").top_k(queries, 10)
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows.tolist(), truth.tolist(), strict=True)])
        assert entry["recall_at_10"] == pytest.approx(recall, abs=1e-4)
        # scores are exact cosines of the rows returned
        assert np.allclose(scores, np.take_along_axis(queries @ emb.T, rows, axis=1), atol=1e-5)
        exact = Index.load(out, backend="numpy").searcher("audio").top_k(queries, 10)[1]
        assert np.array_equal(exact, truth)
        assert main(["index", "info", str(out)]) == 0
        assert f"recall@10 {entry['recall_at_10']:.3f}" in capsys.readouterr().out
    with pytest.raises(MlatrError, match="not a parameter of hnsw"):
        index.save(tmp_path / "bad.idx", ann=AnnBuild("hnsw", {"nprobe": 3}))


def test_server_watches_a_folder_and_refuses_a_bad_reload_cleanly(trained, tmp_path):
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import build_toy_index, request, running_server

    manifest_path, ckpt = trained
    path = build_toy_index(manifest_path, ckpt, tmp_path / "lib.idx", first=10)
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live, watch_seconds=0.1)) as base:
        build_toy_index(manifest_path, ckpt, path, add=True)  # one more shard, a new index.json
        deadline = time.monotonic() + 20
        while request(base + "/health").json()["clips"] != 20:
            assert time.monotonic() < deadline, "the watch did not pick up the new shard"
            time.sleep(0.1)
        assert request(base + "/audio/clip019").status == 200
        assert main(["index", "delete", str(path), "clip019"]) == 0  # a deleted clip is not served
        while request(base + "/health").json()["clips"] != 19:
            assert time.monotonic() < deadline + 20, "the watch did not pick up the deletion"
            time.sleep(0.1)
        assert request(base + "/audio/clip019").status == 404
        manifest = json.loads((path / "index.json").read_text())
        manifest["meta"]["checkpoint"] = "model.pt"
        (path / "index.json").write_text(json.dumps(manifest))
        r = request(base + "/reload", "POST")
        body = r.json()
        # the file named by its last parts (the server's folders are not the client's business)
        assert r.status == 500 and "…/lib.idx/index.json: meta.checkpoint: expected an object" in body["error"]
        assert "TypeError" not in body["error"] and "still serving the previous index (19 clips)" in body["error"]


def test_jsonl_rows_are_read_once_while_kept(tmp_path, monkeypatch):
    from mlatr.search import columns

    rows = [{"path": f"/a/{i}.wav", "captions": {"eng": [f"sound {i}"]}} for i in range(5)]
    lines = [json.dumps(r).encode() + b"\n" for r in rows]
    (tmp_path / "clips.jsonl").write_bytes(b"".join(lines))
    column = columns.JsonlRows(tmp_path / "clips.jsonl", np.cumsum([0] + [len(b) for b in lines]).astype(np.uint64))
    reads = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append(off) or pread(fd, n, off))
    monkeypatch.setattr(columns, "ROW_MEMO", 3)
    assert [column[i] for i in (1, 1, 2, 1, 0)] == [rows[i] for i in (1, 1, 2, 1, 0)]
    assert len(reads) == 3  # rows 1, 2, 0: each read once
    assert column[3] == rows[3] and column[1] == rows[1] and len(reads) == 5  # full at 3 rows: cleared, 1 read again


def test_live_rows_maps_each_id_to_its_latest_row_not_deleted():
    """id -> row of the clips a search can return, against the plain definition, with ids encoded again
    (their old rows deleted), deleted outright, and deleted at their latest row with an older row live."""
    def tables(ids, deleted):
        clips = ClipColumns(np.zeros((len(ids), 2), np.float32), ids, {"path": ids, "captions": [{}] * len(ids)})
        return Tables(clips, CaptionColumns.empty(2), {}, np.asarray(sorted(deleted), np.int64))

    rng = random.Random(0)
    for _ in range(200):
        ids = [f"c{rng.randrange(8)}" for _ in range(rng.randrange(0, 20))]
        deleted = {i for i in range(len(ids)) if rng.random() < 0.4}
        want = {cid: i for i, cid in enumerate(ids) if i not in deleted}
        assert tables(ids, deleted).live_rows() == want


def test_index_info_names_the_model_by_its_digests(trained, tmp_path, capsys):
    """``index info`` shows the model's file and weights SHA-256 (what a search checks the model against),
    equal to digests computed here from the checkpoint's bytes and from the loaded weights."""
    import hashlib

    manifest_path, ckpt = trained
    out = tmp_path / "lib.idx"
    assert main(["index", "build", "--model", str(ckpt), "--manifest", str(manifest_path), "-o", str(out),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["index", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    file_digest = hashlib.sha256(Path(ckpt).read_bytes()).hexdigest()
    weights_digest = load_model(ckpt).weights_sha256()
    assert (info["checkpoint_sha256"], info["weights_sha256"]) == (file_digest, weights_digest)
    assert main(["index", "info", str(out)]) == 0
    assert f"(file sha256 {file_digest[:12]}, weights sha256 {weights_digest[:12]})" in capsys.readouterr().out
