"""The keyword index and library statistics stored with each shard (issue 36): after any sequence of adds,
deletions and compactions, the keyword scores, idf masses and embedding moments of a loaded folder equal
those of a fresh build over the same live clips; BM25 equals bm25s' scores; stored parts load mapped."""

import json
import random

import bm25s
import numpy as np
import pytest

from mlatr.cli import main
from mlatr.errors import InputError
from mlatr.search import Index
from mlatr.search.build import delete_clips, write_rows
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.lexical import KeywordIndex, Postings
from mlatr.search.relevance import Moments

WORDS = ("rain dog bark door creak wind storm engine car horn bird song water drip glass break bell ring crowd "
         "cheer").split()
D = 8


def _part(rng, first: int, n: int, meta: dict) -> Index:
    """``n`` clips ``c{first}..`` with 0-2 captions each (words of WORDS, some repeated)."""
    emb = rng.standard_normal((n, D)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ids = [f"c{first + i}" for i in range(n)]
    clip, texts = [], []
    for i in range(n):
        for _ in range(int(rng.integers(0, 3))):
            clip.append(i)
            texts.append(" ".join(rng.choice(WORDS, size=int(rng.integers(1, 6)))))
    cap = rng.standard_normal((len(clip), D)).astype(np.float32)
    cap /= np.linalg.norm(cap, axis=1, keepdims=True)
    clips = ClipColumns(emb, ids, {"path": [f"/x/{c}.wav" for c in ids], "captions": [{} for _ in ids]})
    return Index(clips, CaptionColumns(cap, np.asarray(clip, np.int64), {"lang": ["eng"] * len(clip), "text": texts}),
                 meta)


def _check_equals_fresh(out):
    loaded = Index.load(out)
    live = loaded.live()  # the same live clips, copied into memory: a fresh build's input
    fresh = KeywordIndex(list(live.caption_text), list(live.caption_lang))
    ranker = loaded.text_ranker()
    gone = np.isin(np.asarray(loaded.caption_clip), loaded.deleted_rows)
    for query in ("rain", "dog bark", "glass break bell", "storm storm wind", "nothing here"):
        terms = fresh.terms(query, "eng")
        stored = ranker.keywords.scores_of(terms)
        assert np.all(stored[gone] == 0)
        np.testing.assert_allclose(stored[~gone], fresh.scores_of(terms), rtol=1e-5, atol=1e-6)
        assert ranker.keywords.idf_mass(terms) == pytest.approx(fresh.idf_mass(terms))
    for mine, theirs in ((ranker.stats.audio, Moments.of(np.asarray(live.embeddings))),
                         (ranker.stats.captions, Moments.of(np.asarray(live.caption_embeddings)))):
        assert mine.count == theirs.count
        np.testing.assert_allclose(mine.mean, theirs.mean, atol=1e-9)
        np.testing.assert_allclose(mine.cov, theirs.cov, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_keyword_scores_equal_a_fresh_build_after_any_sequence_of_writes(tmp_path, vectors_meta, seed):
    rng, pick = np.random.default_rng(seed), random.Random(seed)
    out = tmp_path / "lib.idx"
    _part(rng, 0, 12, vectors_meta).save(out)
    _check_equals_fresh(out)
    next_id = 12
    for step in range(6):
        op = pick.choice(["add", "add", "delete", "compact"])
        if op == "add":
            write_rows(out, _part(rng, next_id, int(rng.integers(3, 9)), vectors_meta), add=True)
            next_id += 8
        elif op == "delete":
            now = Index.load(out)
            dead = set(now.deleted_rows.tolist())
            ids = [cid for row, cid in enumerate(now.ids) if row not in dead]
            delete_clips(out, pick.sample(ids, min(3, len(ids) - 1)))
        else:
            assert main(["index", "compact", str(out)]) == 0
        _check_equals_fresh(out)
        assert all((s.folder / "keywords.json").is_file() and (s.folder / "moments.npz").is_file()
                   for s in Index.load(out).storage.shards), step


def test_bm25_equals_bm25s_and_a_part_loads_mapped(tmp_path):
    docs = ["dog bark bark", "door creak", "rain on the window rain", "", "dog in rain"]
    tokens = [d.split() for d in docs]
    part = Postings.of_terms(tokens)
    mine = KeywordIndex.of_parts([part], [None], analyse=lambda t, _lang: t.split())
    ref = bm25s.BM25()
    ref.index([t or [""] for t in tokens], show_progress=False)
    for terms in (["dog"], ["rain", "bark"], ["creak", "dog", "rain"]):
        np.testing.assert_allclose(mine.scores_of(terms), ref.get_scores(terms), rtol=1e-5)
    part.save(tmp_path)
    loaded = Postings.load(tmp_path, len(docs))
    assert isinstance(loaded.docs.base, np.memmap) and loaded.vocab == part.vocab  # mapped, not read
    assert mine.matched_terms(["rain", "dog", "cat"], 4) == ["rain", "dog"]
    # a part analysed otherwise is analysed again (None), one that does not fit its shard is refused by name
    head = json.loads((tmp_path / "keywords.json").read_text())
    with pytest.raises(InputError, match="keywords.indptr.npy.*do not fit"):
        Postings.load(tmp_path, len(docs) + 1)
    (tmp_path / "keywords.json").write_text(json.dumps({**head, "analysis": "another"}))
    assert Postings.load(tmp_path, len(docs)) is None
