"""One set of index behaviour tests run over every storage an index may live in (:data:`STORAGES`: an index
folder, the single ``.npz``, Milvus through milvus-lite): written, added to with rows encoded again and rows
whose file is gone, deleted from, read back, searched by sound and by text, replaced; each against an
independent reference (the rows written, a brute-force top-k, the in-memory ranking of the live rows). Every
third clip is a long one with segments (the third table, :mod:`mlatr.search.segments`): they are written, read
back, deleted with their clip, and a clip's sound score is the higher of its vector's and its best segment's. A new
storage is one module plus its line in :data:`~mlatr.search.storage_choice.STORAGES`: these tests then run on it.

And the one choice: no module outside the storage modules looks at what kind of storage an index is.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from mlatr.errors import MlatrError
from mlatr.search import Index
from mlatr.search.build import delete_clips, write_rows
from mlatr.search.columns import CaptionColumns, ClipColumns, SegmentColumns
from mlatr.search.query import TextQuery
from mlatr.search.relevance import Calibration
from mlatr.search.storage import MemoryStorage, Tables
from mlatr.search.storage_choice import STORAGES, open_storage

D = 12
NAMES = {"FolderStorage": "lib.idx", "NpzStorage": "lib.idx.npz", "MilvusStorage": "milvus:{tmp}/lib.db"}
SRC = Path(__file__).resolve().parents[1] / "src" / "mlatr"
#: The modules that implement storages (and choose among them): the only ones that may name a kind.
STORAGE_MODULES = {"search/storage.py", "search/storage_choice.py", "search/shards.py", "search/npz_index.py",
                   "search/milvus.py"}


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def rows(ids: list[str], seed: int, meta: dict) -> Tables:
    """Clips ``ids`` with seeded unit vectors, one or two captions each (English words by id); every third clip
    has two to four segments (10 s every 5 s)."""
    rng = np.random.default_rng(seed)
    words = ["dog bark", "rain on a roof", "door slam", "bird song", "engine idle", "glass break"]
    clip_rows, texts = [], []
    for i, cid in enumerate(ids):
        for j in range(1 + i % 2):
            clip_rows.append(i)
            texts.append(f"{words[(i + j) % len(words)]} {cid}")
    clips = ClipColumns(_unit(rng.standard_normal((len(ids), D))), list(ids),
                        {"path": [f"/lib/{cid}.wav" for cid in ids],
                         "captions": [{"eng": [t for r, t in zip(clip_rows, texts, strict=True) if r == i]}
                                      for i in range(len(ids))]})
    captions = CaptionColumns(_unit(rng.standard_normal((len(texts), D))), np.asarray(clip_rows, np.int64),
                              {"lang": ["eng"] * len(texts), "text": texts})
    owners = [i for i in range(len(ids)) if i % 3 == 0 for _ in range(2 + i % 3 + (i // 3) % 3)]
    times = [(5.0 * j, 5.0 * j + 10) for i in sorted(set(owners)) for j in range(owners.count(i))]
    segments = SegmentColumns(_unit(rng.standard_normal((len(owners), D))), np.asarray(owners, np.int64), times)
    return Tables(clips, captions, dict(meta), segments=segments)


def where_of(kind: type, tmp_path: Path) -> str:
    return NAMES[kind.__name__].format(tmp=tmp_path) if kind.__name__ == "MilvusStorage" else \
        str(tmp_path / NAMES[kind.__name__])


@pytest.fixture(params=STORAGES, ids=lambda kind: kind.__name__)
def where(request, tmp_path):
    if request.param.__name__ == "MilvusStorage" and not (importlib.util.find_spec("pymilvus")
                                                          and importlib.util.find_spec("milvus_lite")):
        pytest.skip("Milvus needs the milvus extra: pip install 'mlatr[milvus]'")
    return where_of(request.param, tmp_path)


def live_reference(written: list[Tables], deleted_ids: set[str]) -> dict[str, tuple[np.ndarray, list[str]]]:
    """id -> (vector, caption texts) of the latest row of each id written and not deleted."""
    out = {}
    for part in written:
        for i, cid in enumerate(part.clips.ids):
            texts = [part.captions["text"][j] for j in np.flatnonzero(part.captions.clip == i)]
            mine = np.flatnonzero(part.segments.clip == i)
            out[cid] = (np.asarray(part.clips.embeddings[i]), texts,
                        [(tuple(part.segments.times[j]), np.asarray(part.segments.embeddings[j])) for j in mine])
    return {cid: v for cid, v in out.items() if cid not in deleted_ids}


def check_holds(index: Index, reference: dict) -> None:
    """The live clips of ``index`` are exactly the reference's, with their vectors (as a search reads them: a
    Milvus target keeps them there) and captions."""
    rows = index.tables.live_rows()
    assert sorted(rows) == sorted(reference)
    ranker = index.text_ranker()
    for cid, row in rows.items():
        assert np.allclose(ranker.clip_vector(row), reference[cid][0], atol=1e-6), cid
        texts = sorted(index.caption_text[j] for j in np.flatnonzero(np.asarray(index.caption_clip) == row))
        assert texts == sorted(reference[cid][1]), cid
        mine = np.flatnonzero(index.segment_columns.clip == row)  # its segments, their times and vectors
        assert sorted(map(tuple, index.segment_columns.times[mine])) == sorted(t for t, _ in reference[cid][2]), cid
        if len(mine):
            stored = dict(zip(map(tuple, index.segment_columns.times[mine]),
                              index.moments().vectors.take(mine), strict=True))
            assert all(np.allclose(stored[t], v, atol=1e-6) for t, v in reference[cid][2]), cid


def test_every_storage_writes_adds_deletes_and_reads_back_the_rows(where, vectors_meta):
    storage = open_storage(where)
    assert not storage.exists()
    first = rows([f"c{i}" for i in range(10)], 1, vectors_meta)
    write_rows(where, Index(first.clips, first.captions, first.meta, segment_columns=first.segments), add=False)
    assert storage.exists()
    before = storage.signature()
    # an add: c3 and c4 encoded again (new vectors), c7 dropped (its file gone), three new clips
    second = rows(["c3", "c4", "n0", "n1", "n2"], 2, vectors_meta)
    drop = {"c7": Index.load(where).tables.live_rows()["c7"]}
    write_rows(where, Index(second.clips, second.captions, second.meta, segment_columns=second.segments), add=True,
               drop=drop)
    assert storage.signature() != before  # a server polling it sees the write
    check_holds(Index.load(where), live_reference([first, second], {"c7"}))
    assert delete_clips(where, ["c0", "n1"]) == 2
    with pytest.raises(MlatrError, match="no clip 'zz'"):
        delete_clips(where, ["c1", "zz"])  # nothing deleted: c1 stays
    index = Index.load(where)
    check_holds(index, live_reference([first, second], {"c7", "c0", "n1"}))
    assert len(index) == 10 and index.summary()["format"] == storage.format and index.summary()["clips"] == 10


def test_every_storage_searches_as_brute_force_and_ranks_text_as_its_rows_in_memory(where, vectors_meta):
    first = rows([f"c{i}" for i in range(14)], 3, vectors_meta)
    write_rows(where, Index(first.clips, first.captions, first.meta, segment_columns=first.segments), add=False)
    delete_clips(where, ["c2", "c9"])
    index = Index.load(where, backend="numpy")
    live = first.take([i for i in range(14) if i not in (2, 9)])  # the rows written, those deleted left out
    vectors = np.asarray(live.clips.embeddings)
    queries = _unit(np.random.default_rng(4).standard_normal((3, D)))
    for q in queries:
        sound = vectors @ q  # each clip's sound: its vector's cosine, or its best segment's where higher
        for s, c in zip(np.asarray(live.segments.embeddings) @ q, live.segments.clip, strict=True):
            sound[c] = max(sound[c], s)
        want = np.argsort(-sound, kind="stable")[:5]
        hits = index.search_vector(q, k=5)
        assert [h.id for h in hits] == [live.clips.ids[i] for i in want]
        assert np.allclose([h.score for h in hits], sound[want], atol=1e-5)
        for h, i in zip(hits, want, strict=True):  # a long clip's hit says where: its best segment
            mine = np.flatnonzero(live.segments.clip == i)
            best = mine[np.argmax(np.asarray(live.segments.embeddings)[mine] @ q)] if len(mine) else None
            assert h.segment == (None if best is None else tuple(live.segments.times[best]))
    # a text query ranked by this storage's ranker as an index of the live rows in memory ranks it
    memory = Index(live.clips, live.captions, live.meta, backend="numpy", segment_columns=live.segments)
    assert isinstance(memory.storage, MemoryStorage)
    for one in (index, memory):  # no model to carry a calibration (a stand-in checkpoint): the same one given
        one.use_calibration(Calibration.default())
    for rank in ("hybrid", "captions", "audio"):
        query = TextQuery("dog bark", "eng", 6, rank)
        got, want = index.rank_texts(queries[:1], [query])[0], memory.rank_texts(queries[:1], [query])[0]
        assert [h.id for h in got] == [h.id for h in want], rank
        assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5), rank
        assert np.allclose([h.relevance for h in got], [h.relevance for h in want], atol=1e-5), rank
        assert [[e.source for e in h.evidence] for h in got] == [[e.source for e in h.evidence] for h in want]


def test_every_storage_is_replaced_whole_by_a_save(where, vectors_meta):
    first = rows([f"c{i}" for i in range(6)], 5, vectors_meta)
    write_rows(where, Index(first.clips, first.captions, first.meta, segment_columns=first.segments), add=False)
    other = rows(["x0", "x1", "x2"], 6, vectors_meta)
    Index(other.clips, other.captions, other.meta, segment_columns=other.segments).save(where)
    check_holds(Index.load(where), live_reference([other], set()))


#: Names only a storage module uses: the storages, the tests of a name's kind, a format's own readers and writers.
KIND_NAMES = {"FolderStorage", "NpzStorage", "MilvusStorage", "is_milvus", "is_index_folder", "read_milvus",
              "read_npz", "read_folder", "write_milvus", "write_npz", "write_folder", "shard_files"}


def kind_checks(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that name a storage kind (:data:`KIND_NAMES`, as a name, an attribute or an import), test
    a string for ``milvus:`` or compare with ``"milvus"``."""
    lines = []
    for node in ast.walk(tree):
        named = {getattr(node, "id", None), getattr(node, "attr", None)}
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            named |= {a.name.split(".")[-1] for a in node.names} | {a.asname for a in node.names}
        constants = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        compares = isinstance(node, ast.Compare) and any(c == "milvus" or c.startswith("milvus:") for c in constants)
        tests_name = isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("startswith", "endswith") \
            and any(c.startswith("milvus") or c.endswith(".npz") for c in constants)
        if named & KIND_NAMES or compares or tests_name:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_but_the_storages_looks_at_what_kind_an_index_is():
    """The kind of an index is chosen once (open_storage): no other module names a storage class, asks whether a
    name is a Milvus target or an index folder, or reads a format's files itself."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name not in STORAGE_MODULES:
            source = path.read_text(encoding="utf-8")
            found += [f"{name}:{n}: {source.splitlines()[n - 1].strip()}" for n in kind_checks(ast.parse(source))]
    assert not found, "\n".join(found)


def test_the_kind_check_sees_each_way_of_asking():
    """What the test above looks for is found: a storage class, a kind test, a format reader, a prefix test."""
    for code in ("from mlatr.search.shards import FolderStorage", "x = is_milvus(p)", "read_npz(p)",
                 "if p.startswith('milvus:'): pass", "if index.backend == 'milvus': pass", "p.endswith('.npz')"):
        assert kind_checks(ast.parse(code)), code
    assert not kind_checks(ast.parse('"""see FolderStorage, milvus: targets"""\nx = p.endswith(".wav")'))
