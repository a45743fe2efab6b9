"""Hybrid text search: BM25 against its formula, the fused ranking (a caption equal to the query first, names
that say nothing ranking as the sound), relevance and evidence in the API / CLI / server, tombstones,
shards, and the README's own-folder recipe with a French sidecar caption."""

import json
import math
import shutil
import urllib.parse

import numpy as np
import pytest
import soundfile as sf
import torch

from mlatr.cli import main
from mlatr.errors import MlatrError
from mlatr.models.protocols import ANY_LANGUAGE
from mlatr.search import Index
from mlatr.search.analysis import terms
from mlatr.search.columns import CaptionColumns, ClipColumns, RowStack
from mlatr.search.evidence import describe_evidence
from mlatr.search.hybrid import TextRanker
from mlatr.search.lexical import KeywordIndex
from mlatr.search.query import TextQuery, text_query
from mlatr.search.relevance import Calibration


def test_bm25_equals_the_lucene_formula():
    texts = ["dog barking loud", "cat meowing", "dog dog growling", "door slam", ""]
    index = KeywordIndex(texts, ["eng"] * 5)
    scores = index.scores("Dog growling", "eng")
    docs = [terms(t, "eng") for t in texts]
    n, avgdl, k1, b = len(docs), np.mean([len(d) or 1 for d in docs]), 1.5, 0.75  # bm25s counts "" as 1 token

    def bm25(doc, terms):
        total = 0.0
        for term in terms:
            df = sum(term in d for d in docs)
            tf = doc.count(term)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total += idf * tf / (tf + k1 * (1 - b + b * (len(doc) or 1) / avgdl))
        return total

    expected = [bm25(d, ["dog", "growl"]) for d in docs]
    assert np.allclose(scores, expected, rtol=1e-4)
    assert scores[2] > scores[0] > 0 and scores[1] == scores[3] == scores[4] == 0
    assert np.array_equal(index.scores("zebra", "eng"), np.zeros(5))
    assert index.matched_terms(index.terms("Dog growling", "eng"), 0) == ["dog"]
    n = 5  # idf mass: a term no caption holds counts with document frequency 0
    expected = math.log(1 + (n - 2 + .5) / 2.5) + math.log(1 + (n + .5) / .5)
    assert index.idf_mass(["dog", "zebra"]) == pytest.approx(expected)
    assert np.array_equal(KeywordIndex([]).scores("dog", "eng"), np.zeros(0))


def clip_best(scores, clip, n):
    """Brute force: ``[1, n]`` each clip's best of ``scores [1, M]`` (-inf without caption)."""
    return np.array([[max((s for s, c in zip(scores[0], clip, strict=True) if c == i), default=-np.inf)
                      for i in range(n)]], np.float32)


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_text_ranker_finds_the_caption_and_a_clip_without_caption():
    """A query equal to a clip's caption ranks it first (in a library of 30 clips, 28 captions: where a caption
    can stand out of the others), with the caption as evidence; clips without caption are still ranked."""
    rng = np.random.default_rng(2)
    audio = _unit(rng.standard_normal((30, 64)))  # 64-d: cosines of unrelated vectors spread as in a real model
    captions = _unit(rng.standard_normal((28, 64)))
    texts = ["a dog barking", "un chien qui aboie", "rain on a roof", "door"] + [f"sound {i}" for i in range(24)]
    langs = ["eng", "fra", "eng", "eng"] + ["eng"] * 24
    clip = np.array([1, 1, 3, 4] + list(range(6, 30)))
    ranker = TextRanker(audio, captions, clip, texts, langs)
    ranked = ranker.rank(captions[1], "un chien qui aboie", "fra", 10, "hybrid")
    row, score, relevance, evidence = ranked[0]
    assert row == 1  # a query equal to a clip's caption ranks it first
    assert 0 <= relevance <= 1 and all(r.relevance <= relevance for r in ranked)
    cap = next(e for e in evidence if e.source == "caption")
    assert cap.text == "un chien qui aboie" and cap.lang == "fra" and cap.score == pytest.approx(1.0)
    kw = next(e for e in evidence if e.source == "keyword")
    assert kw.terms == ("chien", "aboie") and kw.rank == 1  # "un", "qui": grammar words
    assert kw.to_dict() == {"source": "keyword", "text": kw.text, "lang": "fra", "terms": ["chien", "aboie"],
                            "score": kw.score, "rank": 1}
    assert evidence[-1].source == "sound" and evidence[-1].score == pytest.approx(float(audio[1] @ captions[1]))
    assert evidence[-1].to_dict() == {"source": "sound", "score": evidence[-1].score, "rank": evidence[-1].rank}
    assert {0, 2, 5} <= {r.row for r in ranker.rank(captions[1], "x", "eng", 30, "hybrid")}  # no caption: by sound
    assert "un chien qui aboie" in describe_evidence(evidence) and "[fra]" in describe_evidence(evidence)
    # captions-only: the clips by their best caption cosine, each showing the caption that ranked it
    cos = captions @ captions[1]
    best = {c: max(cos[i] for i in range(28) if clip[i] == c) for c in set(clip.tolist())}
    by_caption = ranker.rank(captions[1], "x", "eng", 3, "captions")
    assert [r.row for r in by_caption] == sorted(best, key=lambda c: -best[c])[:3]
    for r in by_caption:
        shown = next(e for e in r.evidence if e.source == "caption")
        assert shown.score == pytest.approx(best[r.row]) and r.score == pytest.approx(best[r.row])
        assert shown.text == texts[max((i for i in range(28) if clip[i] == r.row), key=lambda i: cos[i])]
    with pytest.raises(MlatrError, match="unknown ranking 'bm25'"):  # refused where the query enters
        text_query("x", "eng", 3, "bm25", ANY_LANGUAGE)


def test_grammar_words_alone_are_never_keyword_evidence():
    """A query of grammar words matches no caption by keyword, in any of the eight languages, and a query
    word that is a grammar word is never among a match's terms."""
    rng = np.random.default_rng(4)
    texts = ["une voix à la gare", "der Hund bellt", "the door of the car", "el sonido de la lluvia",
             "de kat en de hond", "el so de la pluja", "ドアの音", "狗的叫声"]
    langs = ["fra", "deu", "eng", "spa", "nld", "cat", "jpn", "zho"]
    audio = _unit(rng.standard_normal((8, 8)))
    ranker = TextRanker(audio, _unit(rng.standard_normal((8, 8))), np.arange(8), texts, langs)
    for query, lang in (("une", "fra"), ("der", "deu"), ("的", "zho"), ("the", "eng"), ("de", "spa"), ("de", "nld"),
                        ("の", "jpn"), ("la", "cat"), ("une la à", "fra"), ("of the", None)):
        for r in ranker.rank(_unit(rng.standard_normal(8)), query, lang, 8, "hybrid"):
            assert not [e for e in r.evidence if e.source == "keyword"], (query, lang, r.evidence)
    hits = ranker.rank(audio[0], "une explosion à la gare", "fra", 8, "hybrid")
    kw = [e for r in hits for e in r.evidence if e.source == "keyword"]
    assert kw and all(e.terms == ("gare",) for e in kw)


def test_names_that_say_nothing_rank_as_the_sound_does():
    """A library whose captions are recorder-style names (every clip "zoom", or five names in turn) ranks
    hybrid queries exactly as the sound does: no name stands out of the library's names."""
    rng = np.random.default_rng(5)
    n, d = 40, 64  # names unrelated to the query: cosines near 0, as in a real model
    audio = _unit(rng.standard_normal((n, d)))
    for names in (["zoom"] * n, [["zoom", "track", "audio", "rec", "take"][i % 5] for i in range(n)]):
        caps = {t: _unit(rng.standard_normal(d)) for t in set(names)}
        ranker = TextRanker(audio, np.stack([caps[t] for t in names]), np.arange(n), names, ["eng"] * n)
        for _ in range(5):
            q = _unit(rng.standard_normal(d))
            hybrid = [r.row for r in ranker.rank(q, "a dog barking", "eng", n, "hybrid")]
            assert hybrid == [r.row for r in ranker.rank(q, "a dog barking", "eng", n, "audio")]


def test_relevance_is_a_probability_monotone_in_the_fused_score():

    model = Calibration.default().text
    scores = np.linspace(-30, 30, 2001)
    rel = model.relevance(scores)
    assert rel.min() >= 0 and rel.max() <= 1 and np.all(np.diff(rel) >= 0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) * [0.2, 2, 0.3, 3, 0.5, 0]
    x[:, 5] = rng.random(500) < 0.5  # caption_rare
    for col in range(6):  # more evidence from any source never lowers the fused score
        up = x.copy()
        up[:, col] = 1.0 if col == 5 else up[:, col] + 0.5
        assert np.all(model.score(up) >= model.score(x) - 1e-12)


def test_index_rank_modes_and_cli(served_toy, tmp_path, capsys):
    _, _, index_path = served_toy
    index = Index.load(index_path)
    audio = index.search_text("un son aigu double", "fra", 5, rank="audio")
    assert audio[0].evidence[-1].source == "sound" and audio[0].evidence[-1].rank == 1
    assert all(0 <= h.relevance <= 1 for h in audio)
    hybrid = index.search_text("un son aigu double", "fra", 5)
    assert hybrid[0].evidence[0].source in ("caption", "keyword")
    with torch.no_grad():
        q = index.model().model.encode_text(["un son aigu double"], ["fra"]).pooled[0].numpy()
    cos = index.caption_embeddings @ q
    best = {}
    for i, c in enumerate(index.caption_clip.tolist()):
        best[c] = max(best.get(c, -9), cos[i])
    captions = index.search_text("un son aigu double", "fra", 5, rank="captions")
    assert [h.id for h in captions] == [index.ids[c] for c in sorted(best, key=lambda c: (-best[c], c))[:5]]
    assert main(["search", str(index_path), "un son aigu double", "--lang", "fra", "-k", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rank"] == "hybrid" and [r["id"] for r in out["results"]] == [h.id for h in hybrid[:3]]
    assert out["results"][0]["evidence"] == [e.to_dict() for e in hybrid[0].evidence]
    assert out["results"][0]["relevance"] == pytest.approx(hybrid[0].relevance)
    assert out["nothing_relevant"] == hybrid.nothing_relevant and out["min_relevance"] == hybrid.min_relevance
    assert out["relevance"] == pytest.approx(hybrid.relevance) and 0.0 <= hybrid.relevance < 1.0
    # --min-relevance: the line before the hits exactly when the answer's relevance is below it
    for level, said in ((1.0, True), (0.0, False)):
        assert main(["search", str(index_path), "un son aigu double", "--lang", "fra", "-k", "2",
                     "--min-relevance", str(level)]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.startswith("nothing relevant: nothing in this library seems to match") == said
        if said:
            assert f"(relevance {hybrid.relevance:.2f}, below 1.00)" in first
    assert main(["search", str(index_path), "un son aigu double", "--lang", "fra", "-k", "2", "--rank", "audio"]) == 0
    table = capsys.readouterr().out
    assert "sound" in table and audio[0].id in table and f"{audio[0].relevance:.2f}" in table
    with pytest.raises(SystemExit) as exc:  # argparse's choices
        main(["search", str(index_path), "x", "--rank", "bm25"])
    assert exc.value.code == 2
    for call in (lambda: index.search_text("x", "eng", 3, min_relevance=1.5),  # checked where each query enters
                 lambda: index.search_audio(index.paths[0], 3, min_relevance=-0.5)):
        with pytest.raises(MlatrError, match="min_relevance: expected a probability in"):
            call()


def test_server_rank_and_evidence(served_toy):
    pytest.importorskip("fastapi")
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import request, running_server

    _, _, index_path = served_toy
    live = LiveIndex(index_path)
    live.reload()
    expected = {r: Index.load(index_path).search_text("un son aigu", "fra", 4, rank=r)
                for r in ("audio", "captions", "hybrid")}
    with running_server(create_app(live)) as base:
        for rank, hits in expected.items():
            body = request(base + "/search?" + urllib.parse.urlencode({"q": "un son aigu", "lang": "fra", "k": 4,
                                                                       "rank": rank})).json()
            assert body["rank"] == rank and [x["id"] for x in body["results"]] == [h.id for h in hits]
            assert [e["source"] for e in body["results"][0]["evidence"]] == [e.source for e in hits[0].evidence]
            assert body["results"][0]["relevance"] == pytest.approx(hits[0].relevance)
            assert body["nothing_relevant"] == hits.nothing_relevant
        default = request(base + "/search?q=un+son+aigu&lang=fra&k=4").json()
        assert default["rank"] == "hybrid"
        bad = request(base + "/search?q=un+son+aigu&lang=fra&rank=bm25")
        assert bad.status == 422 and "rank" in bad.json()["error"]


def test_readme_own_folder_recipe_finds_the_french_sidecar_first(served_toy, tmp_path, capsys):
    """README "Your own library": import a folder (captions from file names, one French sidecar), build the
    index, search the sidecar's caption in French: that clip comes first, with the caption as evidence."""
    manifest_path, ckpt, _ = served_toy
    folder = tmp_path / "Sounds"
    names = ["ZOOM0001", "track_17", "Rooster", "hard-candy", "Orca call", "dog_bark_02", "Rain", "door slam"]
    src = sorted((manifest_path.parent / "audio").glob("*.wav"))
    for name, wav in zip(names, src, strict=False):
        (folder / "fx").mkdir(parents=True, exist_ok=True)
        shutil.copy(wav, folder / "fx" / f"{name}.wav")
    (folder / "fx" / "dog_bark_02.fra.txt").write_text("un chien qui aboie\n", encoding="utf-8")
    m = tmp_path / "my-sounds.jsonl"
    assert main(["data", "import", "--format", "folder", str(folder), "-o", str(m)]) == 0
    assert main(["data", "recaption", str(m), "--in-place"]) == 0
    idx = tmp_path / "my-sounds.idx.npz"
    assert main(["index", "build", "--model", str(ckpt), "--manifest", str(m), "-o", str(idx),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["search", str(idx), "un chien qui aboie", "--lang", "fra", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first = out["results"][0]
    assert first["id"].endswith("dog_bark_02")
    assert {"source": "caption", "text": "un chien qui aboie", "lang": "fra"}.items() <= first["evidence"][0].items()
    assert sf.info(first["path"]).frames > 0


def _tied_library(seed, n=60, m=90):
    """Coarse embeddings (many tied cosines), captions from six words (tied BM25), some clips without any."""
    rng = np.random.default_rng(seed)
    audio = (rng.integers(-2, 3, (n, 4)) / 2).astype(np.float32)
    captions = (rng.integers(-2, 3, (m, 4)) / 2).astype(np.float32)
    clip = np.sort(rng.integers(0, n - 10, m))[rng.permutation(m)]
    words = ["dog", "bark", "rain", "door", "bell", "chien"]
    texts = [" ".join(rng.choice(words, rng.integers(1, 3))) for _ in range(m)]
    langs = [("eng", "fra")[i % 2] for i in range(m)]
    return audio, captions, clip, texts, langs


def test_a_batch_of_queries_ranks_as_each_query_alone():
    """rank_many (the batching server's path: one product of the batch with each matrix) gives each query the
    ranking rank gives it alone, for mixed rankings and k (exact: the library's products are exact in float32)."""
    audio, captions, clip, texts, langs = _tied_library(1)
    ranker = TextRanker(audio, captions, clip, texts, langs)
    vecs = (np.random.default_rng(7).integers(-2, 3, (6, 4)) / 2).astype(np.float32)
    queries = ["dog bell", "rain", "zebra", "chien", "door bark", ""]
    langs_q = ["eng", "eng", None, "fra", "eng", "eng"]
    ks, ranks = [1, 3, 10, 60, 5, 2], ["hybrid", "captions", "audio", "hybrid", "captions", "hybrid"]
    batch = ranker.rank_many(vecs, queries, langs_q, ks, ranks)
    assert batch == [ranker.rank(v, q, lg, k, r) for v, q, lg, k, r in zip(vecs, queries, langs_q, ks, ranks,
                                                                          strict=True)]
    assert len({tuple(r.row for r in one) for one in batch}) > 3  # the queries do rank differently


def test_tombstoned_clips_never_rank_and_the_rest_rank_as_without_them():
    """Deleted clips that would rank first take no slot (k results still come back), and the ranking is that
    of the library without them (ranks, keyword statistics), in every ranking."""
    audio, captions, clip, texts, langs = _tied_library(7)
    q = captions[0] + audio[clip[0]]
    query = texts[0]
    full = TextRanker(audio, captions, clip, texts, langs)
    first = [r.row for r in full.rank(q, query, "eng", 4, "hybrid")]
    deleted = np.array(first[:3] + [59])
    ranker = TextRanker(audio, captions, clip, texts, langs, deleted)
    keep = np.setdiff1d(np.arange(len(audio)), deleted)
    new_row = np.full(len(audio), -1)
    new_row[keep] = np.arange(len(keep))
    kept_captions = np.flatnonzero(np.isin(clip, keep))
    compact = TextRanker(audio[keep], captions[kept_captions], new_row[clip[kept_captions]],
                         [texts[i] for i in kept_captions], [langs[i] for i in kept_captions])
    for rank in ("hybrid", "captions", "audio"):
        for k in (3, 10, len(keep), len(audio)):
            got = ranker.rank(q, query, "eng", k, rank)
            assert len(got) == min(k, len(keep)) and not set(deleted) & {r.row for r in got}
            assert [r._replace(row=int(keep[r.row])) for r in compact.rank(q, query, "eng", k, rank)] == got


def test_ranker_over_shards_ranks_as_over_one_array_without_copying_them():
    """An index folder's embeddings come as a RowStack of memory-mapped shards: the ranker reads them part by
    part (float32 parts not copied, float16 widened) and ranks exactly as over the concatenated array."""
    audio, captions, clip, texts, langs = _tied_library(3)
    stacked = RowStack([audio[:25], audio[25:].astype(np.float16).astype(np.float32)], audio.shape[1])
    caps = RowStack([captions[:10], captions[10:].astype(np.float16)], captions.shape[1])
    one = TextRanker(audio, np.asarray(caps, np.float32), clip, texts, langs)
    parts = TextRanker(stacked, caps, clip, texts, langs)
    assert all(np.shares_memory(p, s) for p, s in zip(parts.audio.parts, stacked.parts, strict=True))
    assert len(parts.audio) == len(audio) and len(parts.captions) == len(captions)
    vecs = (np.random.default_rng(5).integers(-2, 3, (4, audio.shape[1])) / 2).astype(np.float32)
    for rank in ("hybrid", "captions", "audio"):
        queries, langs_q = ["dog", "rain", "x", ""], ["eng"] * 4
        got = parts.rank_many(vecs, queries, langs_q, [3, 5, 60, 2], [rank] * 4)
        want = one.rank_many(vecs, queries, langs_q, [3, 5, 60, 2], [rank] * 4)
        assert [[(r.row, r.evidence) for r in q] for q in got] == [[(r.row, r.evidence) for r in q] for q in want]
        assert np.allclose([r.relevance for q in got for r in q], [r.relevance for q in want for r in q])


def test_without_captions_the_hybrid_ranking_is_the_sound_ranking_found_by_the_searcher():
    """A library without any caption: the fused score orders the clips as their sound does, so a hybrid query
    found by the index's searcher and described (rank_texts' path, approximate at scale) gives the hits, fused
    scores, relevance and answer of the full ranking over every clip."""
    rng = np.random.default_rng(11)
    audio = _unit(rng.standard_normal((50, 16))).astype(np.float32)
    ranker = TextRanker(audio, np.zeros((0, 16), np.float32), np.zeros(0, np.int64), [], [])
    for _ in range(3):
        q = _unit(rng.standard_normal(16)).astype(np.float32)
        full = ranker.rank(q, "a dog barking", "eng", 12, "hybrid")
        sound = audio @ q
        rows = np.argsort(-sound, kind="stable")[:12]
        assert [r.row for r in full] == rows.tolist()
        found = ranker.describe(q, "a dog barking", "eng", rows, sound[rows], "hybrid")
        assert [(r.row, r.evidence) for r in found] == [(r.row, r.evidence) for r in full]
        assert np.allclose([r.score for r in found], [r.score for r in full])
        assert np.allclose([r.relevance for r in found], [r.relevance for r in full])
        assert found.relevance == pytest.approx(full.relevance)


def test_hybrid_without_a_live_caption_through_the_index_equals_the_full_ranking():
    """An index with no caption of a live clip (none at all, or only captions of deleted clips) answers a hybrid
    query through its searcher (Index.rank_texts, as the API and the batching server call it) with the
    hits, fused scores, evidence and relevance the full ranking over every live clip gives; with a live caption
    the full fusion ranks."""
    rng = np.random.default_rng(3)
    n, d = 40, 8
    audio = _unit(rng.standard_normal((n, d)))

    def make(cap_rows, deleted):
        caps = _unit(rng.standard_normal((len(cap_rows), d)))
        clips = ClipColumns(audio, [f"c{i}" for i in range(n)], {"path": [f"/x/c{i}.wav" for i in range(n)],
                                                                 "captions": [{} for _ in range(n)]})
        captions = CaptionColumns(caps.reshape(len(cap_rows), d), np.asarray(cap_rows, np.int64),
                                  {"lang": ["eng"] * len(cap_rows), "text": ["a dog"] * len(cap_rows)})
        index = Index(clips, captions, backend="numpy", deleted_rows=np.asarray(deleted, np.int64))
        index.use_calibration(Calibration.default())  # the ranker's own default models: relevance compared
        return index

    q = _unit(rng.standard_normal(d))
    for cap_rows, deleted in (([], []), ([], [4, 9]), ([4, 9], [4, 9]), ([4], [9])):  # the last: the full fusion
        index = make(cap_rows, deleted)
        assert index.has_live_captions() == (cap_rows == [4])
        want = TextRanker(audio, index.caption_embeddings, index.caption_clip, index.caption_text,
                          index.caption_lang, index.deleted_rows).rank(q, "a dog", "eng", 7, "hybrid")
        query = TextQuery("a dog", "eng", 7, "hybrid")
        for hits in (index.rank_texts(q[None], [query])[0],):
            assert [(index.ids.index(h.id), h.evidence) for h in hits] == [(r.row, r.evidence) for r in want]
            assert np.allclose([h.score for h in hits], [r.score for r in want])
            assert np.allclose([h.relevance for h in hits], [r.relevance for r in want])
            assert hits.relevance == pytest.approx(want.relevance)
