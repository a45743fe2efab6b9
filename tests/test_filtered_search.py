"""Filters inside the ranking (issue 46, items 2 and 7), on every path, against an independent reference: the
unfiltered exact ranking of every clip restricted to the clips the filter allows (its predicate written here in
Python over the facet objects), cut to k. Paths: the exact ranking (an index in memory, a folder), the windowed
ranking over an approximate (HNSW) index, the sound ranking through the searcher (FAISS with an ID selector, or the
allowed rows searched exactly), Milvus (milvus-lite: its filter expression, and its search among allowed keys). The
answer's relevance is read from the allowed candidates; the library's statistics are the whole library's. Silent
clips are left out of a text query unless asked."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from mlatr.search import Index, ann, columns, milvus
from mlatr.search.ann import AnnBuild
from mlatr.search.build import delete_clips, write_rows
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.filters import parse_filter
from mlatr.search.hybrid import rank_candidates
from mlatr.search.query import TextQuery

#: These indexes are of vectors alone: their relevance is read with the default ranking's models (conftest).
pytestmark = pytest.mark.usefixtures("default_calibration")

WORDS = "rain dog bark door creak wind storm engine car horn bird song water drip glass break bell ring".split()
FORMATS = ["wav", "WAV", "flac", "mp3"]
LIBRARIES = ["castle", "wesnoth", "foley"]

#: filter -> the clips it allows, written over one facet object (None: a clip without facets).
FILTERS = {
    "duration<5 and channels=1": lambda f: bool(f) and f["duration"] < 5 and f["channels"] == 1,
    "format in (wav, flac)": lambda f: bool(f) and f["format"].lower() in ("wav", "flac"),
    "library=castle or keywords has door": lambda f: bool(f) and (f["library"] == "castle" or "door" in f["keywords"]),
    "duration < 800ms": lambda f: bool(f) and f["duration"] < 0.8,
    "not format=mp3": lambda f: not (f and f["format"] == "mp3"),
}


def make_library(n: int, d: int = 16, seed: int = 0, clusters: int = 12):
    """``n`` clips around ``clusters`` centres, each with 0-2 captions of its cluster's words, facets (a tenth
    without any, some silent) and ids ``c0`` ..."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    label = rng.integers(0, clusters, n)
    emb = centres[label] + rng.standard_normal((n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    clip, texts, vecs, facets = [], [], [], []
    for i in range(n):
        for _ in range(int(rng.integers(0, 3))):
            clip.append(i)
            texts.append(" ".join([WORDS[label[i] % len(WORDS)], *rng.choice(WORDS, size=int(rng.integers(1, 4)))]))
            vecs.append(emb[i] + 0.8 * rng.standard_normal(d).astype(np.float32) / np.sqrt(d))
        facets.append(None if rng.random() < 0.1 else {
            "duration": float(np.round(rng.uniform(0.1, 20), 3)), "channels": int(rng.integers(1, 3)),
            "format": FORMATS[int(rng.integers(0, 4))], "library": LIBRARIES[int(rng.integers(0, 3))],
            "silent": bool(rng.random() < 0.05), "keywords": list(rng.choice(["door", "wood", "metal"],
                                                                            size=int(rng.integers(0, 3)))),
        })
    cap = np.asarray(vecs, np.float32).reshape(-1, d)
    cap /= np.linalg.norm(cap, axis=1, keepdims=True)
    ids = [f"c{i}" for i in range(n)]
    clips = ClipColumns(emb, ids, {"path": [f"/x/{c}.wav" for c in ids], "captions": [{} for _ in ids],
                                   "facets": facets})
    return clips, CaptionColumns(cap, np.asarray(clip, np.int64), {"lang": ["eng"] * len(clip), "text": texts})


def queries(index: Index, count: int, seed: int = 3) -> tuple[np.ndarray, list[str]]:
    """Query vectors near stored clips and texts of the library's words."""
    rng = np.random.default_rng(seed)
    vecs = np.asarray(index.embeddings)[rng.choice(len(index.ids), count, replace=False)]
    vecs = vecs + 0.5 * rng.standard_normal(vecs.shape).astype(np.float32) / np.sqrt(vecs.shape[1])
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32), [" ".join(rng.choice(WORDS, size=2)) for _ in range(count)]


def allowed_ids(index: Index, text: str, include_silent: bool = True) -> set[str]:
    """The live clips the filter ``text`` allows (and, unless ``include_silent``, not silent), from their facets."""
    gone = set(np.asarray(index.deleted_rows).tolist())
    out = set()
    for row, cid in enumerate(index.ids):
        f = index.clip_columns["facets"][row]
        if row not in gone and FILTERS[text](f) and (include_silent or not (f and f["silent"])):
            out.add(cid)
    return out


def reference(index: Index, vec: np.ndarray, query: str, k: int, rank: str, allowed: set[str]) -> list[tuple]:
    """``(id, score, relevance)`` of the ``k`` best allowed clips in the unfiltered exact ranking of every clip."""
    every = index.rank_texts(vec[None], [TextQuery(query, "eng", len(index.ids), rank, include_silent=True)])[0]
    return [(h.id, h.score, h.relevance) for h in every if h.id in allowed][:k]


def check_same(found, expected) -> None:
    assert [h.id for h in found] == [e[0] for e in expected]
    np.testing.assert_allclose([h.score for h in found], [e[1] for e in expected], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([h.relevance for h in found], [e[2] for e in expected], atol=1e-6)


@pytest.mark.parametrize("where", list(FILTERS))
def test_the_exact_ranking_filters_before_the_cut(where, tmp_path, vectors_meta):
    """In memory and as a folder with tombstones: each ranking's hits are the unfiltered ranking's allowed clips,
    scores and relevance unchanged (the library's statistics are the whole library's), the page full."""
    clips, captions = make_library(200)
    out = tmp_path / "lib.idx"
    Index(clips, captions, vectors_meta).save(out)
    delete_clips(out, ["c3", "c40"])
    for index in (Index(clips, captions, vectors_meta, backend="numpy"), Index.load(out, backend="numpy")):
        assert index.text_ranker().window is None
        vecs, texts = queries(index, 4)
        allowed = allowed_ids(index, where, include_silent=True)
        for rank in ("hybrid", "captions", "audio"):
            for vec, text in zip(vecs, texts, strict=True):
                query = TextQuery(text, "eng", 12, rank, where=parse_filter(where), include_silent=True)
                found = index.rank_texts(vec[None], [query])[0]
                check_same(found, reference(index, vec, text, 12, rank, allowed))
                assert len(found) == min(12, len(allowed))


def test_the_answer_relevance_is_read_from_the_allowed_candidates(vectors_meta):
    """A filter that leaves out the clip the query describes lowers the answer's relevance to what the allowed
    candidates alone give (computed here from the unfiltered candidates, restricted)."""
    clips, captions = make_library(120, seed=4)
    index = Index(clips, captions, vectors_meta)
    ranker = index.text_ranker()
    target = int(captions.clip[0])
    vec = np.asarray(captions.embeddings[0])
    text = captions["text"][0]
    qc = ranker._exact(vec, ranker.audio.scores(vec[None])[0], ranker.captions.scores(vec[None])[0], text, "eng")
    every = index.rank_texts(vec[None], [TextQuery(text, "eng", 5, include_silent=True)])[0]
    assert every[0].id == f"c{target}"
    facets = list(clips["facets"])
    facets[target] = {"duration": 99.0, "channels": 2, "format": "mp3", "library": "x", "silent": False,
                      "keywords": []}
    clips.set("facets", facets)
    index = Index(clips, captions, vectors_meta)
    found = index.rank_texts(vec[None], [TextQuery(text, "eng", 5, where=parse_filter("duration<50"),
                                                    include_silent=True)])[0]
    keep = np.flatnonzero([bool(f) and f["duration"] < 50 for f in np.asarray(facets, object)[qc.cands.rows]])
    qc.cands = qc.cands.take(keep)
    expected = rank_candidates(qc, 5, "hybrid", ranker.model, ranker.answer)
    assert found.relevance == pytest.approx(expected.relevance, abs=1e-9) and found.relevance < every.relevance
    assert [h.id for h in found] == [f"c{r.row}" for r in expected]


def test_windowed_and_approximate_paths_filter_before_the_cut(tmp_path, vectors_meta, monkeypatch):
    """An HNSW index: a window covering the library ranks as the exact filtered ranking; the recorded window
    returns only allowed clips, a full page; the sound ranking through the approximate searcher is the exact top k
    of the allowed clips (few allowed: searched exactly), and through the wider unfiltered search (forced here)
    finds them with a recall measured against it, falling back to the exact search where its candidates hold
    fewer than k allowed rows (a filter that leaves out the query's whole neighbourhood)."""
    out = tmp_path / "ann.idx"
    clips, captions = make_library(1200, seed=1, clusters=30)
    Index(clips, captions, vectors_meta).save(out, ann=AnnBuild("hnsw", {"efSearch": 16}, exact_below=400))
    index = Index.load(out)
    exact = Index.load(out, backend="numpy")
    assert index.text_ranker().window is not None and exact.text_ranker().window is None
    vecs, texts = queries(index, 6, seed=5)
    where = "library=castle or keywords has door"
    allowed = allowed_ids(index, where)
    covering = index.text_ranker(window=len(index.ids))
    for vec, text in zip(vecs, texts, strict=True):
        a = index.allowed(parse_filter(where))
        for rank in ("hybrid", "captions"):
            got = covering.rank(vec, text, "eng", 10, rank, allowed=a)
            want = exact.text_ranker().rank(vec, text, "eng", 10, rank, allowed=a)
            assert [h.row for h in got] == [h.row for h in want]
            check_same([_Hit(f"c{h.row}", h.score, h.relevance) for h in got],
                       reference(exact, vec, text, 10, rank, allowed))
        windowed = index.rank_texts(vec[None], [TextQuery(text, "eng", 10, where=parse_filter(where),
                                                          include_silent=True)])[0]
        assert len(windowed) == 10 and {h.id for h in windowed} <= allowed
        by_sound = index.rank_texts(vec[None], [TextQuery(text, "eng", 10, "audio", where=parse_filter(where),
                                                          include_silent=True)])[0]
        check_same(by_sound, reference(exact, vec, text, 10, "audio", allowed))
    # the wider unfiltered search, forced (at this size a filter is searched exactly)
    monkeypatch.setattr(ann, "FILTER_EXACT_BELOW", 0)
    monkeypatch.setattr(ann, "FILTER_ANN_FRACTION", 0.0)
    searcher = Index.load(out).searcher("audio")
    emb = np.asarray(index.embeddings)
    a = index.allowed(parse_filter(where))
    rows = np.flatnonzero(a.mask)
    truth = (vecs @ emb[rows].T).argsort(axis=1)[:, ::-1][:, :10]
    scores, found = searcher.top_k(vecs, 10, allowed=a)
    assert np.isin(found, rows).all()
    recall = np.mean([len(set(f) & set(rows[t])) / 10 for f, t in zip(found.tolist(), truth, strict=True)])
    assert recall >= 0.9
    far = np.zeros(len(emb), bool)
    far[np.argsort(emb @ vecs[0])[:300]] = True  # the rows farthest from the query: none among its candidates
    scores, found = searcher.top_k(vecs[:1], 10, allowed=far)
    want = np.flatnonzero(far)[np.argsort(-(emb[far] @ vecs[0]), kind="stable")[:10]]
    assert found[0].tolist() == want.tolist()
    np.testing.assert_allclose(scores[0], emb[want] @ vecs[0], rtol=1e-5)


class _Hit:
    def __init__(self, id, score, relevance):
        self.id, self.score, self.relevance = id, score, relevance


def test_silent_clips_are_left_out_of_a_text_query_unless_asked(vectors_meta):
    """A silent clip whose sound and caption are the query's ("dog") is not in the top 10, with or without a
    filter; include_silent or a filter on silent brings it back; a sound query keeps it."""
    clips, captions = make_library(60, seed=2)
    facets = [dict(f or {}, silent=False) for f in clips["facets"]]
    facets[7]["silent"] = True
    clips.set("facets", facets)
    texts = list(captions["text"])
    texts[int(np.flatnonzero(captions.clip == 7)[0]) if (captions.clip == 7).any() else 0] = "dog"
    captions.set("text", texts)
    index = Index(clips, captions, vectors_meta)
    vec = np.asarray(index.embeddings)[7][None]
    for rank in ("hybrid", "audio", "captions"):
        assert "c7" not in [h.id for h in index.rank_texts(vec, [TextQuery("dog", "eng", 10, rank)])[0]]
        assert "c7" not in [h.id for h in index.rank_texts(vec, [TextQuery("dog", "eng", 10, rank,
                                                                             where=parse_filter("channels>=1"))])[0]]
    assert index.rank_texts(vec, [TextQuery("dog", "eng", 10, "audio", include_silent=True)])[0][0].id == "c7"
    only = index.rank_texts(vec, [TextQuery("dog", "eng", 10, "audio", where=parse_filter("silent"))])[0]
    assert [h.id for h in only] == ["c7"]
    assert index.search_encoded_audio(np.zeros(16000, np.float32), vec[0], 3, None)[0].id == "c7"
    facets[7]["silent"] = False  # no silent clip: the unfiltered search, number for number
    clips.set("facets", facets)
    assert Index(clips, captions, vectors_meta).query_allowed(TextQuery("dog", "eng")) is None


# ---- Milvus ------------------------------------------------------------------------------------------------------
HAS_MILVUS = bool(importlib.util.find_spec("pymilvus") and importlib.util.find_spec("milvus_lite"))


@pytest.mark.skipif(not HAS_MILVUS, reason="Milvus needs the milvus extra: pip install 'mlatr[milvus]'")
def test_milvus_filters_inside_its_searches(tmp_path, vectors_meta, monkeypatch):
    """A Milvus target ranks filtered queries as the same rows in memory do (windows covering the library), by its
    search among allowed keys and by its filter expression (forced); NOT and phrases find their clips in Milvus."""
    clips, captions = make_library(80, seed=6)
    texts = list(captions["text"])
    texts[0] = "a rooster crowing"
    texts[1] = "door slam in a hall"
    texts[2] = "slam the door"
    captions.set("text", texts)
    memory = Index(clips, captions, vectors_meta, backend="numpy")
    target = f"milvus:{tmp_path}/lib.db"
    write_rows(target, memory, add=False)
    index = Index.load(target)
    vecs, qtexts = queries(memory, 3, seed=7)
    for forced in (False, True):
        if forced:
            monkeypatch.setattr(milvus, "FILTER_IN", 0)
        for where in ("format in (wav, flac)", "library=castle or keywords has door", "not format=mp3"):
            allowed = allowed_ids(memory, where, include_silent=False)
            for rank in ("hybrid", "audio"):
                for vec, text in zip(vecs, qtexts, strict=True):
                    query = TextQuery(text, "eng", 8, rank, where=parse_filter(where))
                    found = index.rank_texts(vec[None], [query])[0]
                    check_same(found, reference(memory, vec, text, 8, rank, allowed))
    vec = np.asarray(captions.embeddings[0])[None]
    gone = index.rank_texts(vec, [TextQuery("crowing -rooster", "eng", 80, include_silent=True)])[0]
    assert f"c{captions.clip[0]}" not in {h.id for h in gone} and len(gone) == 79
    vec = np.asarray(captions.embeddings[2])[None]
    phrase = index.rank_texts(vec, [TextQuery('"door slam"', "eng", 80, include_silent=True)])[0]
    holders = {f"c{captions.clip[j]}" for j, t in enumerate(texts) if "door slam" in t}
    assert {h.id for h in phrase} == holders and f"c{captions.clip[1]}" in holders


def test_silence_is_found_in_a_folder_by_a_scan_of_its_rows_files(tmp_path, vectors_meta, monkeypatch):
    """The default ``not silent`` on an index folder parses only the rows whose line says ``"silent": true`` (a
    caption saying so in its text is escaped, and a row found is checked), and equals the full reading."""
    clips, captions = make_library(300, seed=8)
    captions_of = list(clips["captions"])
    captions_of[5] = {"eng": ['he wrote "silent": true']}  # in the row's JSON: \"silent\": true
    clips.set("captions", captions_of)
    facets = list(clips["facets"])
    facets[6] = {"silent": False, "note": '"silent": true'}
    clips.set("facets", facets)
    out = tmp_path / "lib.idx"
    Index(clips, captions, vectors_meta).save(out)
    parsed = []
    read = columns.JsonlRows._read
    monkeypatch.setattr(columns.JsonlRows, "_read", lambda self, i: parsed.append(i) or read(self, i))
    index = Index.load(out)
    parsed.clear()  # loading checks a sample of rows
    mask = index.query_allowed(TextQuery("dog", "eng")).mask
    silent = {i for i, f in enumerate(facets) if f and f.get("silent") is True}
    assert silent and set(np.flatnonzero(~mask).tolist()) == silent
    assert set(parsed) <= silent | {6}  # no other row parsed
    assert (index.facets().true_rows("silent") == (index.facets().flags("silent") == 1)).all()
    more, more_captions = make_library(40, seed=9)
    more.set("ids", [f"n{i}" for i in range(40)])
    write_rows(out, Index(more, more_captions, vectors_meta), add=True)  # a second shard
    column = Index.load(out).clip_columns["facets"]
    assert list(columns.every_value(column)) == [column[i] for i in range(len(column))] == facets + list(more["facets"])
