"""The Milvus backend (milvus-lite): built, added to, deleted from, searched and served as a user does, each
command in a process of its own, and ranked as the local exact index ranks (sound, captions, hybrid)."""

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request

import numpy as np
import pytest

from fusion_reference import brute_force
from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.search import Index
from mlatr.search import milvus as mv
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.hybrid import TextRanker, rank_candidates
from toydata import train_toy_model

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from test_serve import start_cli_server, stop_cli_server  # noqa: E402

QUERIES = (("a single low tone", "eng"), ("deux sons aigus", "fra"), ("high tone", "eng"))


#: Runs the ``mlatr`` commands given as JSON (a list of argument lists) one after the other in one process,
#: and prints each one's exit status, stdout and stderr as JSON.
RUN_COMMANDS = """
import contextlib, io, json, sys
from mlatr.cli import main
said = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    said.append([rc, out.getvalue(), err.getvalue()])
print(json.dumps(said))
"""


def mlatr(*commands: list[str]) -> list[tuple[int, str, str]]:
    """``(exit status, stdout, stderr)`` of each ``mlatr`` command (argument lists), run in order in a process
    of their own (a fresh process finds milvus-lite's collections released)."""
    proc = subprocess.run([sys.executable, "-c", RUN_COMMANDS, json.dumps(commands)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [tuple(r) for r in json.loads(proc.stdout.splitlines()[-1])]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """A toy model; its library built into a Milvus target (first 12 clips, then ``--add`` of the rest, then a
    delete: each its own process) and into a local index the same way; the Milvus target searched and served
    from other processes (their answers kept: the test process opens the file itself only afterwards,
    milvus-lite letting one process hold it)."""
    root = tmp_path_factory.mktemp("milvus")
    manifest_path, ckpt = train_toy_model(root)
    manifest = Manifest.load(manifest_path)
    first = manifest_path.parent / "first12.jsonl"
    Manifest(clips=manifest.clips[:12], root=manifest.root, path=manifest.path).save(first)
    target, local = f"milvus:{root / 'lib.db'}", root / "lib.idx"
    base = ["index", "build", "--model", str(ckpt), "--caption-langs", "eng,fra", "--no-progress"]
    gone = ["clip003", "clip010", "clip017"]
    steps = {"build": base + ["--manifest", str(first), "--to", target],
             "add": base + ["--manifest", str(manifest_path), "--to", target, "--add"],
             "delete": ["index", "delete", target, *gone]}
    done = {name: mlatr(args)[0] for name, args in steps.items()}  # each step a process of its own
    for name, (rc, _, err) in done.items():
        assert rc == 0, (name, err[-2000:])
    assert "20 clips (8 encoded" in done["add"][1]
    assert main(base + ["--manifest", str(first), "--to", str(local)]) == 0
    assert main(base + ["--manifest", str(manifest_path), "--to", str(local), "--add"]) == 0
    assert main(["index", "delete", str(local), *gone]) == 0
    asked = [(rank, query, lang) for rank in ("audio", "captions", "hybrid") for query, lang in QUERIES]
    said = mlatr(["index", "info", target, "--json"], *[["search", target, query, "--lang", lang, "--rank", rank,
                                                          "-k", "10", "--json"] for rank, query, lang in asked])
    for rc, _, err in said:
        assert rc == 0 and "Traceback" not in err, err[-2000:]
    searched = {(rank, query): json.loads(out) for (rank, query, _), (_, out, _) in zip(asked, said[1:], strict=True)}
    proc, url, lines = start_cli_server([target])
    try:
        assert url, "".join(lines)
        with urllib.request.urlopen(f"{url}/search?" + urllib.parse.urlencode(
                {"q": "a single low tone", "lang": "eng", "rank": "hybrid", "k": 10}), timeout=60) as answer:
            served = json.loads(answer.read())
    finally:
        stop_cli_server(proc)
    return {"target": target, "local": local, "gone": gone, "searched": searched, "served": served,
            "info": json.loads(said[0][1])}


def by_id(index: Index) -> Index:
    """``index``'s live clips in id order (a Milvus target's rows are in id order: equal scores tie alike)."""
    live = index.live()
    return live.take(np.argsort(live.ids, kind="stable"))


def overlap(a, b, k=10) -> float:
    return len({h["id"] if isinstance(h, dict) else h.id for h in a[:k]}
               & {h["id"] if isinstance(h, dict) else h.id for h in b[:k]}) / max(min(k, len(a), len(b)), 1)


def test_commands_in_separate_processes_rank_as_the_local_index(library):
    exact = by_id(Index.load(library["local"], backend="numpy"))
    assert library["info"]["clips"] == len(exact) == 17 and library["info"]["format"] == mv.FORMAT
    for (rank, query), said in library["searched"].items():
        lang = dict(QUERIES)[query]
        want = exact.search_text(query, lang, k=10, rank=rank)
        got = said["results"]
        assert not set(library["gone"]) & {h["id"] for h in got}
        if rank == "audio":  # sound only: the local exact index's ids and scores
            assert [h["id"] for h in got] == [h.id for h in want]
            assert np.allclose([h["score"] for h in got], [h.score for h in want], atol=1e-5)
        assert overlap(got, want) >= 0.9, (rank, query)
        assert [h["id"] for h in got] == [h.id for h in want], (rank, query)  # the windows hold every clip
        assert np.allclose([h["relevance"] for h in got], [h.relevance for h in want], atol=1e-4)
        assert said["relevance"] == pytest.approx(want.relevance, abs=1e-4)
    served = library["served"]["results"]
    want = exact.search_text("a single low tone", "eng", k=10, rank="hybrid")
    assert [h["id"] for h in served] == [h.id for h in want]
    assert [e["source"] for e in served[0]["evidence"]] == [e.source for e in want[0].evidence]


def test_loaded_in_this_process_equals_local_exact_index(library):
    """The test process opens the target the first time (a fresh process): every ranking and sound search."""
    remote = Index.load(library["target"])
    exact = by_id(Index.load(library["local"], backend="numpy"))
    assert remote.ids == exact.ids
    for query, lang in QUERIES:
        for rank in ("audio", "captions", "hybrid"):
            a, b = remote.search_text(query, lang, k=17, rank=rank), exact.search_text(query, lang, k=17, rank=rank)
            assert [h.id for h in a] == [h.id for h in b]
            assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-4)
            assert [[e.source for e in h.evidence] for h in a] == [[e.source for e in h.evidence] for h in b]
    clips, clips_x = remote.search_audio(exact.paths[3], k=8), exact.search_audio(exact.paths[3], k=8)
    caps, caps_x = clips.caption_hits, clips_x.caption_hits
    assert [h.id for h in clips] == [h.id for h in clips_x]
    assert np.allclose([h.relevance for h in clips], [h.relevance for h in clips_x], atol=1e-4)
    assert [(round(c.score, 5), c.text, c.lang) for c in caps] == [(round(c.score, 5), c.text, c.lang) for c in caps_x]
    similar = remote.search_similar(2, k=5)  # "more like this": the clip's vector read from Milvus
    assert [h.id for h in similar] == [h.id for h in exact.search_similar(2, k=5)]


def synthetic(n=300, d=16, clusters=12, seed=0):
    """A library of ``n`` clips in ``clusters`` sound kinds: clustered audio and caption vectors (unit), two
    captions per clip from the kind's words and a few others; and one query per kind."""
    rng = np.random.default_rng(seed)
    words = ["dog", "rain", "door", "bell", "engine", "bird", "wind", "glass", "clock", "water", "crowd", "train"]
    centre = rng.standard_normal((clusters, d))
    kind = rng.integers(0, clusters, n)

    def unit(x):
        return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)

    audio = unit(centre[kind] + 0.9 * rng.standard_normal((n, d)))
    texts, langs, clip, cap_vecs = [], [], [], []
    for i in range(n):
        for j in range(2):
            extra = " ".join(rng.choice(words, 2))
            texts.append(f"{words[kind[i]]} {extra}" if j == 0 else f"a {extra} sound")
            langs.append("eng")
            clip.append(i)
            cap_vecs.append(centre[kind[i]] + (0.6 if j == 0 else 1.5) * rng.standard_normal(d))
    ids = [f"c{i:04d}" for i in range(n)]
    clips = ClipColumns(audio, ids, {"path": [f"/lib/{c}.wav" for c in ids],
                                     "captions": [{"eng": [texts[2 * i]]} for i in range(n)], "state": [None] * n})
    captions = CaptionColumns(unit(np.asarray(cap_vecs)), np.asarray(clip), {"lang": langs, "text": texts})
    queries = unit(centre + 0.5 * rng.standard_normal((clusters, d)))
    return clips, captions, queries, [f"{w} sound" for w in words]


def test_window_fusion_on_a_larger_library(tmp_path):
    """A library larger than the windows: captions and hybrid top-10 overlap >= 0.9 with the exact fusion over
    every clip; with windows as large as the library, the same ranking and relevance."""
    clips, captions, queries, texts = synthetic()
    target = f"milvus:{tmp_path / 'syn.db'}"
    mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    ranker = mv.read_milvus(target).ranker
    local = TextRanker(clips.embeddings, captions.embeddings, captions.clip, captions.get("text"),
                       captions.get("lang"))
    n = len(queries)
    for window in (48, 1000):
        ranker.window = window
        if window >= len(clips):  # the fused ranking equals a reference computed apart (tests/fusion_reference.py)
            for q, text, hits in zip(queries, texts, ranker.rank_many(queries, texts, ["eng"] * n, [10] * n,
                                                                      ["hybrid"] * n), strict=True):
                ref = brute_force(np.asarray(clips.embeddings), np.asarray(captions.embeddings), captions.clip,
                                  captions.get("text"), captions.get("lang"), [], q, text, "eng", ranker.model)[:10]
                assert [h.row for h in hits] == [r for r, _ in ref], text
                assert np.allclose([h.score for h in hits], [sc for _, sc in ref], atol=1e-4)
        for rank in ("captions", "hybrid"):
            got = ranker.rank_many(queries, texts, ["eng"] * n, [10] * n, [rank] * n)
            want = local.rank_many(queries, texts, ["eng"] * n, [10] * n, [rank] * n)
            for g, w in zip(got, want, strict=True):
                rows_g, rows_w = [h.row for h in g], [h.row for h in w]
                assert len(set(rows_g) & set(rows_w)) >= 9, (window, rank)
                if window >= len(clips):
                    assert rows_g == rows_w
                    assert np.allclose([h.score for h in g], [h.score for h in w], atol=1e-4)
                    assert np.allclose([h.relevance for h in g], [h.relevance for h in w], atol=1e-4)
                    assert g.relevance == pytest.approx(w.relevance, abs=1e-4)
                    assert [h.evidence for h in g][0][-1].rank == [h.evidence for h in w][0][-1].rank
    # keyword scores: mlatr's BM25 (bm25s) from the stored terms, document counts and term total
    terms = ranker._doc_freq({"dog", "rain", "sound", "absent"})
    assert terms["absent"] == 0 and terms["dog"] == sum("dog" in t.split() for t in captions.get("text"))
    qc, = ranker.candidates(queries[:1], ["dog rain sound absent"], ["eng"], [10])
    words = qc.terms
    best = np.full(len(clips.ids), -np.inf)
    np.maximum.at(best, captions.clip, local.keywords.scores_of(words))  # each clip's best, from the local index
    assert np.allclose(qc.cands.keyword, best[qc.cands.rows], atol=1e-5) and qc.cands.keyword.max() > 0
    assert qc.stats.idf_mass == pytest.approx(local.keywords.idf_mass(words))


def test_local_and_milvus_supply_the_same_candidates_to_one_ranking(tmp_path):
    """The same library in a local index and in Milvus: for the same candidate clips each source supplies the
    same scores, best captions, keyword matches and query statistics (the rare cutoff included), and the shared
    ranking (rank_candidates) gives both the same hits, relevance and evidence."""
    clips, captions, queries, texts = synthetic(n=120)
    target = f"milvus:{tmp_path / 'same.db'}"
    mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    ranker = mv.read_milvus(target).ranker
    ranker.window = 16  # windows smaller than the library: the candidates are a part of it
    local = TextRanker(clips.embeddings, captions.embeddings, captions.clip, captions.get("text"),
                       captions.get("lang"))
    n = len(queries)
    texts = [f"{t} dog" for t in texts]
    for b, remote in enumerate(ranker.candidates(queries, texts, ["eng"] * n, [10] * n)):
        assert 0 < len(remote.cands.rows) < len(clips.ids)
        mine = local._windowed(queries[b], texts[b], "eng", given=remote.cands.rows)
        a, c = remote.cands, mine.cands
        assert np.array_equal(a.rows, c.rows) and remote.terms == mine.terms
        for name in ("sound", "caption", "keyword"):
            np.testing.assert_allclose(getattr(a, name), getattr(c, name), atol=1e-5, err_msg=name)
        for name in ("caption_row", "keyword_row"):
            has = getattr(a, name.split("_")[0]) > (0 if name == "keyword_row" else -np.inf)
            assert [remote.caption_text[r] for r in getattr(a, name)[has]] == \
                [mine.caption_text[r] for r in getattr(c, name)[has]]
        for field in ("sound_mean", "sound_std", "caption_mean", "caption_std", "idf_mass", "caption_cutoff"):
            assert getattr(remote.stats, field) == pytest.approx(getattr(mine.stats, field), abs=1e-5), field
        for rank in ("hybrid", "captions", "audio"):
            got, want = (rank_candidates(qc, 10, rank, ranker.model, ranker.answer) for qc in (remote, mine))
            assert [h.row for h in got] == [h.row for h in want]
            np.testing.assert_allclose([h.relevance for h in got], [h.relevance for h in want], atol=1e-5)
            assert [[e.to_dict() | {"score": None} for e in h.evidence] for h in got] == \
                [[e.to_dict() | {"score": None} for e in h.evidence] for h in want]
    # a sound ranking's hits described by both (the hits their own candidates, as a windowed local index has them)
    local.window = ranker.window
    scores, rows = ranker.audio.top_k(queries[:1], 8)
    got, want = (r.describe(queries[0], texts[0], "eng", rows[0], scores[0], "hybrid") for r in (ranker, local))
    assert [h.row for h in got] == [h.row for h in want] == rows[0].tolist()
    np.testing.assert_allclose([h.score for h in got], [h.score for h in want], atol=1e-5)
    assert [[e.to_dict() | {"score": None} for e in h.evidence] for h in got] == \
        [[e.to_dict() | {"score": None} for e in h.evidence] for h in want]
    assert got.relevance == pytest.approx(want.relevance, abs=1e-5)


def test_add_and_delete_keep_library_statistics(tmp_path):
    """The statistics batches of a build, an add that re-encodes clips and a delete add up to those of a build
    of the live clips alone."""
    clips, captions, _, _ = synthetic(n=40)
    meta = {"checkpoint": {"path": "none", "sha256": ""}}
    a, b = f"milvus:{tmp_path / 'a.db'}", f"milvus:{tmp_path / 'b.db'}"
    first, rest = np.arange(25), np.arange(20, 40)  # 20-24 written twice (re-encoded)

    def part(rows):
        new_row = np.full(40, -1)
        new_row[rows] = np.arange(len(rows))
        cap_rows = np.flatnonzero(new_row[captions.clip] >= 0)
        return clips.take(rows), captions.take(cap_rows, new_row)

    mv.write_milvus(a, *part(first), meta, [], replace=True)
    mv.write_milvus(a, *part(rest), meta, [], replace=False)
    assert mv.delete_milvus(a, ["c0003", "c0031"]) == 2
    live = np.setdiff1d(np.arange(40), [3, 31])
    mv.write_milvus(b, *part(live), meta, [], replace=True)
    sa, sb = mv.read_milvus(a).ranker, mv.read_milvus(b).ranker
    assert sa.caption_count == sb.caption_count == 2 * len(live) and sa.avgdl == pytest.approx(sb.avgdl)
    for which in ("audio", "captions"):
        ma, mb = getattr(sa.stats, which), getattr(sb.stats, which)
        assert ma.count == mb.count and np.allclose(ma.mean, mb.mean, atol=1e-6) and np.allclose(ma.cov, mb.cov,
                                                                                                   atol=1e-6)


def test_milvus_errors_are_one_line(tmp_path, capsys):
    assert main(["search", f"milvus:{tmp_path / 'missing.db'}", "a tone"]) == 2  # a reader makes no file
    assert "missing.db: file not found" in capsys.readouterr().err and not (tmp_path / "missing.db").exists()
    (tmp_path / "empty.db").mkdir()
    assert main(["search", f"milvus:{tmp_path / 'empty.db'}", "a tone"]) == 2
    assert "holds no mlatr index" in capsys.readouterr().err
    assert main(["search", "milvus:nowhere", "a tone"]) == 2
    assert "expected milvus:PATH.db" in capsys.readouterr().err
    broken = f"milvus:{tmp_path / 'broken.db'}"
    clips, captions, _, _ = synthetic(n=10)
    mv.write_milvus(broken, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    mc, collection = mv.client(broken)
    mc.drop_collection(f"{collection}_captions")  # a damaged target: Milvus itself refuses
    for args in (["search", broken, "a tone", "--rank", "audio"], ["index", "info", broken],
                 ["index", "delete", broken, "c0001"]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"mlatr: error: {broken}: Milvus refused") and err.count("\n") == 1, err
        assert "Traceback" not in err


def test_clips_deleted_after_loading_are_not_returned(tmp_path):
    clips, captions, queries, texts = synthetic(n=30)
    target = f"milvus:{tmp_path / 'lib.db'}"
    mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
    ranker = mv.read_milvus(target).ranker
    before = [h.row for h in ranker.rank_many(queries[:1], texts[:1], ["eng"], [10], ["hybrid"])[0]]
    mv.delete_milvus(target, [clips.ids[before[0]]])  # another writer, while this index is loaded
    after = [h.row for h in ranker.rank_many(queries[:1], texts[:1], ["eng"], [10], ["hybrid"])[0]]
    assert before[0] not in after and len(after) == 10
    scores, rows = ranker.audio.top_k(queries[:1], 5)
    described = ranker.describe(queries[0], texts[0], "eng", rows[0], scores[0])
    assert clips.ids.index(clips.ids[before[0]]) not in [h.row for h in described]
