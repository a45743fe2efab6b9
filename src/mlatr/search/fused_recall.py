"""The window of a windowed text ranking, chosen and its recall measured when an index folder is built.

A windowed ranking (:class:`~mlatr.search.hybrid.TextRanker`) ranks the union of each source's top window,
found by approximate search at scale; the fused top 10 can then miss a clip the exact fusion over every
clip would rank there (one that no source put in its window, or that the ANN missed). As the ANN's recall
is measured at build (:mod:`mlatr.search.ann`), :func:`measure_fused_recall` measures this one: on
:data:`QUERIES` queries drawn from the library (a live caption's embedding with Gaussian noise, as the ANN's
sample, and the caption's first :data:`QUERY_WORDS` words as the query's text, in its language), the share
of the exact fusion's top 10 that the windowed ranking's top 10 holds. The window starts at
:data:`DEFAULT_WINDOW` and doubles until that recall reaches :data:`TARGET_RECALL` (or the window
:data:`MAX_WINDOW`); the window, the recall and the sample are recorded in the manifest's meta
(``fusion``), and searches read the window from there. ``mlatr index build`` and ``compact`` measure it
(:class:`~mlatr.search.shards.FolderStorage`, the one storage with approximate structures of its own); ``--add``
keeps the recorded figure (it says at how many clips it was measured).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import numpy as np

from mlatr.search.hybrid import TextRanker
from mlatr.search.storage import Tables

DEFAULT_WINDOW = 100
MAX_WINDOW = 1600
TARGET_RECALL = 0.95
QUERIES = 100
QUERY_WORDS = 3
#: Noise added to a sampled caption embedding (as :data:`mlatr.search.ann.RECALL_NOISE`).
NOISE = 0.5
#: Queries ranked exactly at once (the exact ranking's ``[B, N]`` products).
BATCH = 16


def fusion_queries(tables: Tables, n: int = QUERIES, seed: int = 0) -> tuple[np.ndarray, list[str], list[str]]:
    """``(vecs [q, d], texts, langs)``: queries drawn from the live captions of ``tables`` (module docstring)."""
    captions = tables.captions
    gone = np.isin(np.asarray(captions.clip), tables.deleted)
    live = np.flatnonzero(~gone)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(live, size=min(n, len(live)), replace=False))
    vecs = np.stack([np.asarray(captions.embeddings[int(r)], np.float32) for r in rows]) if len(rows) else \
        np.zeros((0, captions.dim), np.float32)
    vecs = vecs + NOISE * rng.standard_normal(vecs.shape).astype(np.float32) / math.sqrt(max(captions.dim, 1))
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    texts = [" ".join(str(captions["text"][int(r)]).split()[:QUERY_WORDS]) for r in rows]
    return vecs, texts, [captions["lang"][int(r)] for r in rows]


def top_rows_of(ranker, vecs: np.ndarray, texts: list[str], langs: list[str], k: int = 10) -> list[list[int]]:
    """Each query's top ``k`` clip rows by the hybrid ranking of ``ranker``."""
    out = []
    for start in range(0, len(vecs), BATCH):
        sl = slice(start, start + BATCH)
        n = len(texts[sl])
        out += [[h.row for h in r] for r in ranker.rank_many(vecs[sl], texts[sl], langs[sl], [k] * n,
                                                            ["hybrid"] * n)]
    return out


def recall_of(found: list[list[int]], truth: list[list[int]]) -> float:
    """Mean share of each query's true top rows among its found ones."""
    return float(np.mean([len(set(f) & set(t)) / max(1, len(t)) for f, t in zip(found, truth, strict=True)])) \
        if truth else 1.0


def measure_fused_recall(tables: Tables, windowed_ranker: Callable[[int], TextRanker]) -> dict | None:
    """Choose the window of the text ranking of ``tables`` (module docstring); ``windowed_ranker(window)`` gives
    its windowed ranker. What to record (``fusion`` in the index's meta), or None where it holds no caption."""
    live = len(tables.clips) - len(tables.deleted)
    if not len(tables.captions) or not live:
        return None
    vecs, texts, langs = fusion_queries(tables)
    if not len(vecs):
        return None
    windowed = windowed_ranker(DEFAULT_WINDOW)
    exact = copy.copy(windowed)
    exact.window = None
    truth = top_rows_of(exact, vecs, texts, langs)
    window = DEFAULT_WINDOW
    while True:
        windowed.window = window
        found = recall_of(top_rows_of(windowed, vecs, texts, langs), truth)
        if found >= TARGET_RECALL or window >= MAX_WINDOW:
            break
        window = min(MAX_WINDOW, 2 * window)
    return {"window": window, "recall_at_10": round(found, 4), "queries": len(vecs), "clips": live,
            "target_recall": TARGET_RECALL}
