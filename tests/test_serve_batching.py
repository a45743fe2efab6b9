"""Micro-batched text queries: concurrent queries are embedded together and answer what one-by-one search does."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import load_model
from mlatr.search import build_index
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
        found = list(pool.map(lambda qk: batcher.search(snap, qk[0][0], qk[0][1], qk[1]),
                              [(q, 3 + i % 5) for i, q in enumerate(queries)]))
    assert batcher.queries == len(queries) and batcher.batches < len(queries) / 2  # embedded together
    for i, ((text, lang), hits) in enumerate(zip(queries, found, strict=True)):
        alone = snap.index.search_text(text, lang, 3 + i % 5)
        assert [h.id for h in hits] == [h.id for h in alone]
        assert np.allclose([h.score for h in hits], [h.score for h in alone], atol=1e-5)


def test_a_bad_query_fails_alone(live):
    snap = live.current()
    batcher = TextBatcher(live, max_wait_ms=1)
    with pytest.raises(MlatrError, match="empty text query"):
        batcher.search(snap, "   ", "eng", 3)
    assert [h.rank for h in batcher.search(snap, "a tone", "eng", 4)] == [1, 2, 3, 4]


def test_awaited_queries_are_batched_and_equal_the_blocking_ones(live):
    snap = live.current()
    batcher = TextBatcher(live, max_batch=len(QUERIES), max_wait_ms=5000)  # a full batch goes at once

    async def ask_all():
        return await asyncio.gather(*(batcher.search_async(snap, text, lang, 4) for text, lang in QUERIES),
                                    batcher.search_async(snap, "   ", "eng", 4), return_exceptions=True)

    *found, empty = asyncio.run(ask_all())
    assert isinstance(empty, MlatrError) and "empty text query" in str(empty)  # refused at once, alone
    assert batcher.queries == len(QUERIES) and batcher.batches == 1  # one event loop, one batch, no thread each
    for (text, lang), hits in zip(QUERIES, found, strict=True):
        alone = snap.index.search_text(text, lang, 4)
        assert [h.id for h in hits] == [h.id for h in alone]
        assert np.allclose([h.score for h in hits], [h.score for h in alone], atol=1e-5)
