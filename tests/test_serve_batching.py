"""Micro-batched text queries: concurrent queries are embedded together and answer what one-by-one search does."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import load_model
from mlatr.search import Index, build_index
from mlatr.search.query import TextQuery, text_query
from mlatr.serve.batching import TextBatcher
from mlatr.serve.live_index import LiveIndex
from toydata import train_toy_model

QUERIES = [("a single low tone", "eng"), ("deux sons aigus", "fra"), ("a high tone twice", "eng"),
           ("un son grave", "fra"), ("three short beeps", "eng"), ("silence", "eng"), ("bruit", "fra"),
           ("a tone rising", "eng")]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batching")
    manifest_path, ckpt = train_toy_model(tmp)
    out = tmp / "lib.idx"
    build_index(load_model(ckpt), Manifest.load(manifest_path), out, caption_languages=["eng"])
    live = LiveIndex(out)
    live.reload()
    return live


def test_concurrent_queries_are_batched_and_equal_one_by_one(live):
    snap = live.current()
    batcher = TextBatcher(live, max_batch=8, max_wait_ms=200)
    queries = QUERIES * 3
    with ThreadPoolExecutor(max_workers=len(queries)) as pool:
        found = list(pool.map(lambda qk: batcher.search(snap, TextQuery(qk[0][0], qk[0][1], qk[1])),
                              [(q, 3 + i % 5) for i, q in enumerate(queries)]))
    assert batcher.queries == len(queries) and batcher.batches < len(queries) / 2  # embedded together
    for i, ((text, lang), hits) in enumerate(zip(queries, found, strict=True)):
        alone = snap.index.search_text(text, lang, 3 + i % 5)
        assert [h.id for h in hits] == [h.id for h in alone]
        assert np.allclose([h.score for h in hits], [h.score for h in alone], atol=1e-5)


def test_a_query_is_checked_where_it_enters_and_a_failing_batch_fails_alone(live, monkeypatch):
    snap = live.current()
    batcher = TextBatcher(live, max_wait_ms=1)
    for text, lang, k, rank, says in (("   ", "eng", 3, "hybrid", "empty text query"),
                                      ("x", "xx", 3, "audio", "lang: "), ("x", "eng", 0, "audio", "k: expected an"),
                                      ("x", "fr", 3, "bm25", "unknown ranking")):
        with pytest.raises(MlatrError, match=says):
            text_query(text, lang, k, rank, snap.languages)
    assert text_query(" x ", "fr", 2, "audio", snap.languages) == TextQuery(" x ", "fra", 2, "audio")
    for level in (1.5, -0.1, float("nan")):  # the answer's threshold: a probability, checked here too
        with pytest.raises(MlatrError, match="min_relevance: expected a probability in"):
            text_query("x", "eng", 3, "hybrid", snap.languages, min_relevance=level)
    query = text_query("a tone", "eng", 3, "hybrid", snap.languages, min_relevance=1)
    assert query.min_relevance == 1.0 and batcher.search(snap, query).min_relevance == 1.0
    def broken(index, queries):
        raise MlatrError("the model gave a non-finite query embedding")

    monkeypatch.setattr(Index, "embed_queries", broken)
    with pytest.raises(MlatrError, match="non-finite"):
        batcher.search(snap, TextQuery("a tone", "eng", 4))
    monkeypatch.undo()
    assert [h.rank for h in batcher.search(snap, TextQuery("a tone", "eng", 4))] == [1, 2, 3, 4]


def test_awaited_queries_are_batched_and_equal_the_blocking_ones(live):
    snap = live.current()
    batcher = TextBatcher(live, max_batch=len(QUERIES), max_wait_ms=5000)  # a full batch goes at once

    async def ask_all():
        return await asyncio.gather(*(batcher.search_async(snap, TextQuery(text, lang, 4)) for text, lang in QUERIES))

    found = asyncio.run(ask_all())
    assert batcher.queries == len(QUERIES) and batcher.batches == 1  # one event loop, one batch, no thread each
    for (text, lang), hits in zip(QUERIES, found, strict=True):
        alone = snap.index.search_text(text, lang, 4)
        assert [h.id for h in hits] == [h.id for h in alone]
        assert np.allclose([h.score for h in hits], [h.score for h in alone], atol=1e-5)
