"""Hybrid text search: BM25 against its formula, reciprocal-rank fusion against hand values, the caption gate
degrading to audio-only, evidence in the API / CLI / server, and the README's own-folder recipe with a
French sidecar caption."""

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
from mlatr.search.columns import CaptionColumns, ClipColumns, RowStack
from mlatr.search.fusion import DEFAULT_FUSION, FusionSettings, fused_scores, ranks_among, reciprocal_rank_fusion
from mlatr.search.hybrid import TextRanker, describe_evidence
from mlatr.search.lexical import KeywordIndex, tokenize
from mlatr.search.query import TextQuery, text_query
from mlatr.search.search import rank_text, rank_texts


def test_tokenize_words_and_cjk_bigrams():
    assert tokenize("Un CHIEN qui aboie_2!") == ["un", "chien", "qui", "aboie", "2"]
    assert tokenize("狗叫 dog") == ["狗", "叫", "狗叫", "dog"]
    assert tokenize("ドアabc") == ["ド", "ア", "ドア", "abc"]


def test_bm25_equals_the_lucene_formula():
    texts = ["dog barking loud", "cat meowing", "dog dog growling", "door slam", ""]
    scores = KeywordIndex(texts).scores("Dog growling")
    docs = [tokenize(t) for t in texts]
    n, avgdl, k1, b = len(docs), np.mean([len(d) or 1 for d in docs]), 1.5, 0.75  # bm25s counts "" as 1 token

    def bm25(doc, terms):
        total = 0.0
        for term in terms:
            df = sum(term in d for d in docs)
            tf = doc.count(term)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            total += idf * tf / (tf + k1 * (1 - b + b * (len(doc) or 1) / avgdl))
        return total

    expected = [bm25(d, ["dog", "growling"]) for d in docs]
    assert np.allclose(scores, expected, rtol=1e-4)
    assert scores[2] > scores[0] > 0 and scores[1] == scores[3] == scores[4] == 0
    assert np.array_equal(KeywordIndex(texts).scores("zebra"), np.zeros(5))
    assert KeywordIndex(texts).matched_terms("Dog growling", 0) == ["dog"]
    assert np.array_equal(KeywordIndex([]).scores("dog"), np.zeros(0))


def clip_best(scores, clip, n):
    """Brute force: ``[1, n]`` each clip's best of ``scores [1, M]`` (-inf without caption)."""
    return np.array([[max((s for s, c in zip(scores[0], clip, strict=True) if c == i), default=-np.inf)
                      for i in range(n)]], np.float32)


def test_ranks_among():
    r = ranks_among(np.array([0.1, 0.9, 0.5, 0.7]), np.array([True, True, False, True]))
    assert r.tolist() == [3, 1, 0, 2]
    rng = np.random.default_rng(5)  # the batch path ranks each row as the one-query path does
    scores, eligible = rng.standard_normal((4, 30)), rng.random((4, 30)) < 0.5
    rows = [ranks_among(a, e) for a, e in zip(scores, eligible, strict=True)]
    assert np.array_equal(ranks_among(scores, eligible), np.stack(rows))


def test_reciprocal_rank_fusion_hand_values_and_gate():
    audio = np.array([0.30, 0.10, 0.20, 0.05])  # sound ranks 1, 3, 2, 4
    caption = np.array([0.2, 0.9, -np.inf, 0.6])  # gate 0.5: clip 1 first, clip 3 second, the rest nothing
    keyword = np.array([0.0, 0.0, 0.0, 3.0])  # only clip 3
    s = FusionSettings(caption_gate=0.5, rrf_k=10)
    fused = fused_scores(audio, caption, keyword, "hybrid", s)
    assert np.allclose(fused, [1 / 11, 1 / 13 + 1 / 11, 1 / 12, 1 / 14 + 1 / 12 + 1 / 11])
    assert reciprocal_rank_fusion({"a": np.array([0, 2])}, 1.0).tolist() == [0.0, 1 / 3]
    # names that say nothing: no caption reaches the gate, no keyword -> exactly the audio order
    rng = np.random.default_rng(1)
    audio = rng.standard_normal((4, 50))
    weak = rng.uniform(-0.2, 0.3, (4, 50))
    hybrid = fused_scores(audio, weak, np.zeros((4, 50)), "hybrid", FusionSettings(0.5, 60))
    assert np.array_equal(np.argsort(-hybrid, axis=1, kind="stable"), np.argsort(-audio, axis=1, kind="stable"))
    assert fused_scores(audio, weak, None, "audio") is audio and fused_scores(audio, weak, None, "captions") is weak


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_text_ranker_finds_the_caption_and_a_clip_without_caption():
    rng = np.random.default_rng(2)
    audio = _unit(rng.standard_normal((6, 8)))
    captions = _unit(rng.standard_normal((4, 8)))
    texts, langs = ["a dog barking", "un chien qui aboie", "rain on a roof", "door"], ["eng", "fra", "eng", "eng"]
    clip = np.array([1, 1, 3, 4])
    ranker = TextRanker(audio, captions, clip, texts, langs, FusionSettings(0.5, 60))
    ranked = ranker.rank(captions[1], "un chien qui aboie", 6, "hybrid")
    row, score, evidence = ranked[0]
    assert row == 1
    cap = next(e for e in evidence if e["source"] == "caption")
    assert cap["text"] == "un chien qui aboie" and cap["lang"] == "fra" and cap["score"] == pytest.approx(1.0)
    kw = next(e for e in evidence if e["source"] == "keyword")
    assert kw["terms"] == ["un", "chien", "qui", "aboie"] and kw["rank"] == 1
    assert evidence[-1]["source"] == "sound" and evidence[-1]["score"] == pytest.approx(float(audio[1] @ captions[1]))
    assert sorted(r for r, _, _ in ranked) == list(range(6))  # clips 0, 2, 5 (no caption) still ranked by sound
    assert "un chien qui aboie" in describe_evidence(evidence) and "[fra]" in describe_evidence(evidence)
    # captions-only: the clips by their best caption cosine
    cos = captions @ captions[1]
    best = {c: max(cos[i] for i in range(4) if clip[i] == c) for c in set(clip.tolist())}
    order = [r for r, _, _ in ranker.rank(captions[1], "x", 3, "captions")]
    assert order == sorted(best, key=lambda c: -best[c])[:3]
    with pytest.raises(MlatrError, match="unknown ranking 'bm25'"):  # refused where the query enters
        text_query("x", "eng", 3, "bm25", ANY_LANGUAGE)


def test_index_rank_modes_and_cli(served_toy, tmp_path, capsys):
    _, _, index_path = served_toy
    index = Index.load(index_path)
    audio = index.search_text("un son aigu double", "fra", 5, rank="audio")
    assert [e["source"] for e in audio[0].evidence] == ["sound"]
    hybrid = index.search_text("un son aigu double", "fra", 5)
    assert hybrid[0].evidence[0]["source"] in ("caption", "keyword")
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
    assert out["results"][0]["evidence"] == hybrid[0].evidence
    assert main(["search", str(index_path), "un son aigu double", "--lang", "fra", "-k", "2", "--rank", "audio"]) == 0
    table = capsys.readouterr().out
    assert "why: sound" in table and audio[0].id in table
    with pytest.raises(SystemExit) as exc:  # argparse's choices
        main(["search", str(index_path), "x", "--rank", "bm25"])
    assert exc.value.code == 2


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
            assert [e["source"] for e in body["results"][0]["evidence"]] == [e["source"] for e in hits[0].evidence]
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
    assert main(["index", "build", "--checkpoint", str(ckpt), "--manifest", str(m), "-o", str(idx),
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["search", str(idx), "un chien qui aboie", "--lang", "fra", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first = out["results"][0]
    assert first["id"].endswith("dog_bark_02")
    assert {"source": "caption", "text": "un chien qui aboie", "lang": "fra"}.items() <= first["evidence"][0].items()
    assert sf.info(first["path"]).frames > 0


def test_text_ranker_fast_path_equals_the_batch_fusion():
    """The one-query path (grouped maximum, partial sorts) ranks as the batch functions the evaluation uses."""
    rng = np.random.default_rng(3)
    n, m = 200, 300
    audio = _unit(rng.standard_normal((n, 8)))
    captions = _unit(rng.standard_normal((m, 8)))
    clip = rng.integers(0, n - 20, m)  # the last 20 clips have no caption
    words = ["dog", "bark", "rain", "door", "wind", "bell", "car", "bird"]
    texts = [" ".join(rng.choice(words, 2)) for _ in range(m)]
    settings = FusionSettings(0.3, 20, 2.0)
    ranker = TextRanker(audio, captions, clip, texts, ["eng"] * m, settings)
    q = _unit(rng.standard_normal(8))
    for rank in ("hybrid", "captions"):
        got = ranker.rank(q, "dog bell", n, rank)
        caption = clip_best((captions @ q)[None], clip, n)
        keyword = clip_best(KeywordIndex(texts).scores("dog bell")[None], clip, n)
        keyword = np.where(np.isfinite(keyword), keyword, 0)
        fused = fused_scores((audio @ q)[None], caption, keyword, rank, settings)[0]
        assert [r for r, _, _ in got] == np.lexsort((np.arange(n), -fused)).tolist()
        assert np.allclose([s for _, s, _ in got], np.sort(fused)[::-1])


def full_ranking(audio, captions, clip, texts, langs, settings, q, query, k, rank):
    """The ranking as computed before the top-only fusion (every clip's source scores, ranks and fused
    score, then a full sort), with its evidence: the reference the fast path must equal exactly."""
    n = len(audio)
    keywords = KeywordIndex(texts)
    caption_scores, keyword_scores = captions @ q, keywords.scores(query)
    caption = np.array([caption_scores[clip == i].max(initial=-np.inf) for i in range(n)], np.float32)
    keyword = np.array([keyword_scores[clip == i].max(initial=-np.inf) for i in range(n)], np.float32)
    keyword = np.where(np.isfinite(keyword), keyword, 0.0)
    a = audio @ q
    ranks = {"sound": ranks_among(a, np.isfinite(a)), "caption": ranks_among(caption, caption >= settings.caption_gate),
             "keyword": ranks_among(keyword, keyword > 0)}
    scores = fused_scores(a, caption, keyword, rank, settings, ranks)
    out = []
    for i in np.lexsort((np.arange(n), -scores))[:k].tolist():
        rows = np.flatnonzero(clip == i)
        evidence = []
        if ranks["caption"][i]:
            row = rows[np.argmax(caption_scores[rows])]
            evidence.append({"source": "caption", "text": texts[row], "lang": langs[row], "score": float(caption[i]),
                             "rank": int(ranks["caption"][i])})
        if ranks["keyword"][i]:
            row = rows[np.argmax(keyword_scores[rows])]
            evidence.append({"source": "keyword", "text": texts[row], "lang": langs[row],
                             "terms": keywords.matched_terms(query, row), "score": float(keyword[i]),
                             "rank": int(ranks["keyword"][i])})
        evidence.append({"source": "sound", "score": float(a[i]), "rank": int(ranks["sound"][i])})
        out.append((i, float(scores[i]), evidence))
    return out


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


@pytest.mark.parametrize("seed", range(4))
def test_top_only_fusion_equals_the_full_fusion(seed):
    """Fusing only the sound's top k and the clips with caption or keyword evidence gives exactly the full
    computation's rows, scores and evidence, ties included, for every k and ranking."""
    audio, captions, clip, texts, langs = _tied_library(seed)
    settings = FusionSettings(0.5, 5.0, 2.0) if seed % 2 else FusionSettings(1.0, 60.0, 1.0)
    ranker = TextRanker(audio, captions, clip, texts, langs, settings)
    q = (np.random.default_rng(100 + seed).integers(-2, 3, 4) / 2).astype(np.float32)
    for query in ("dog bell", "rain", "zebra"):
        for rank in ("hybrid", "captions", "audio"):
            full = full_ranking(audio, captions, clip, texts, langs, settings, q, query, len(audio), rank)
            for k in (1, 3, 10, 59, 60, 200):
                assert ranker.rank(q, query, k, rank) == full[:k]


def test_a_batch_of_queries_ranks_as_each_query_alone():
    """rank_many (the batching server's path: one product of the batch with each matrix) gives each query the
    ranking rank gives it alone, for mixed rankings and k (exact: the library's products are exact in float32)."""
    audio, captions, clip, texts, langs = _tied_library(1)
    ranker = TextRanker(audio, captions, clip, texts, langs, FusionSettings(0.5, 5.0, 2.0))
    vecs = (np.random.default_rng(7).integers(-2, 3, (6, 4)) / 2).astype(np.float32)
    queries = ["dog bell", "rain", "zebra", "chien", "door bark", ""]
    ks, ranks = [1, 3, 10, 60, 5, 2], ["hybrid", "captions", "audio", "hybrid", "captions", "hybrid"]
    batch = ranker.rank_many(vecs, queries, ks, ranks)
    assert batch == [ranker.rank(v, q, k, r) for v, q, k, r in zip(vecs, queries, ks, ranks, strict=True)]
    assert len({tuple(i for i, _, _ in one) for one in batch}) > 3  # the queries do rank differently


def test_tombstoned_clips_never_rank_and_the_rest_rank_as_without_them():
    """Deleted clips that would rank first take no slot (k results still come back), and the ranking is that
    of the library without them (ranks, keyword statistics), in every ranking."""
    audio, captions, clip, texts, langs = _tied_library(7)
    settings = FusionSettings(0.5, 5.0, 1.0)
    q = captions[0] + audio[clip[0]]
    query = texts[0]
    full = TextRanker(audio, captions, clip, texts, langs, settings)
    first = [r for r, _, _ in full.rank(q, query, 4, "hybrid")]
    deleted = np.array(first[:3] + [59])
    ranker = TextRanker(audio, captions, clip, texts, langs, settings, deleted)
    keep = np.setdiff1d(np.arange(len(audio)), deleted)
    new_row = np.full(len(audio), -1)
    new_row[keep] = np.arange(len(keep))
    kept_captions = np.flatnonzero(np.isin(clip, keep))
    compact = TextRanker(audio[keep], captions[kept_captions], new_row[clip[kept_captions]],
                         [texts[i] for i in kept_captions], [langs[i] for i in kept_captions], settings)
    for rank in ("hybrid", "captions", "audio"):
        for k in (3, 10, len(keep), len(audio)):
            got = ranker.rank(q, query, k, rank)
            assert len(got) == min(k, len(keep)) and not set(deleted) & {r for r, _, _ in got}
            assert [(int(keep[r]), s, e) for r, s, e in compact.rank(q, query, k, rank)] == got


def test_hybrid_without_any_caption_is_the_sound_ranking_through_the_searcher():
    """A library with no caption (or only captions of deleted clips) ranks hybrid queries by sound alone: the
    index's searcher finds them (approximate at scale, no every-clip pass, no copy of the embeddings) and the
    hits, scores and evidence equal the full fusion's (TextRanker) exactly."""
    rng = np.random.default_rng(3)
    n, d = 40, 8
    audio = _unit(rng.standard_normal((n, d)))
    settings = DEFAULT_FUSION  # what Index.text_ranker builds its ranker with

    def make(cap_rows, deleted):
        caps = _unit(rng.standard_normal((len(cap_rows), d)))
        clips = ClipColumns(audio, [f"c{i}" for i in range(n)], {"path": [f"/x/c{i}.wav" for i in range(n)],
                                                                 "captions": [{} for _ in range(n)]})
        captions = CaptionColumns(caps.reshape(len(cap_rows), d), np.asarray(cap_rows, np.int64),
                                  {"lang": ["eng"] * len(cap_rows), "text": ["a dog"] * len(cap_rows)})
        return Index(clips, captions, backend="numpy", deleted_rows=np.asarray(deleted, np.int64))

    q = _unit(rng.standard_normal(d))
    for cap_rows, deleted in (([], []), ([], [4, 9]), ([4, 9], [4, 9])):
        index = make(cap_rows, deleted)
        ranker = TextRanker(audio, index.caption_embeddings, index.caption_clip, index.caption_text,
                            index.caption_lang, settings, index.deleted_rows)
        want = ranker.rank(q, "a dog", 7, "hybrid")
        query = TextQuery("a dog", "eng", 7, "hybrid")
        for hits in (rank_text(index, q, query), rank_texts(index, q[None], [query])[0]):
            assert [(index.ids.index(h.id), h.score, h.evidence) for h in hits] == \
                [(r, pytest.approx(s), e) for r, s, e in want]
            assert "text" not in index._searchers  # the every-clip ranker was never built
    index = make([4], [9])  # a live clip with a caption: the full fusion
    assert rank_text(index, q, TextQuery("a dog", "eng", 3))[0].evidence[0]["source"] in ("caption", "keyword")


def test_ranker_over_shards_ranks_as_over_one_array_without_copying_them():
    """An index folder's embeddings come as a RowStack of memory-mapped shards: the ranker reads them part by
    part (float32 parts not copied, float16 widened) and ranks exactly as over the concatenated array."""
    audio, captions, clip, texts, langs = _tied_library(3)
    settings = FusionSettings(0.5, 5.0, 1.0)
    stacked = RowStack([audio[:25], audio[25:].astype(np.float16).astype(np.float32)], audio.shape[1])
    caps = RowStack([captions[:10], captions[10:].astype(np.float16)], captions.shape[1])
    one = TextRanker(audio, np.asarray(caps, np.float32), clip, texts, langs, settings)
    parts = TextRanker(stacked, caps, clip, texts, langs, settings)
    assert all(np.shares_memory(p, s) for p, s in zip(parts.audio.parts, stacked.parts, strict=True))
    assert len(parts.audio) == len(audio) and len(parts.captions) == len(captions)
    vecs = (np.random.default_rng(5).integers(-2, 3, (4, audio.shape[1])) / 2).astype(np.float32)
    for rank in ("hybrid", "captions", "audio"):
        assert parts.rank_many(vecs, ["dog", "rain", "x", ""], [3, 5, 60, 2], [rank] * 4) == \
            one.rank_many(vecs, ["dog", "rain", "x", ""], [3, 5, 60, 2], [rank] * 4)
