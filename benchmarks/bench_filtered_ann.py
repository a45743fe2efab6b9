"""What a filter costs on the approximate path (issue 46): the sound search of one HNSW shard among the rows a filter
allows, at several allowed fractions, for filters unrelated to the sound (rows drawn at random) and filters that
follow it (whole clusters: a library, a category), by three strategies: FAISS's ID selector (the graph walked with
the filter, ``efSearch`` widened by the inverse of the allowed fraction), the wider unfiltered search of
:mod:`mlatr.search.ann` (its candidates re-scored and filtered, the exact search where they hold fewer than k
allowed rows) and the exact search of the allowed rows; and the first filtered query's cost of reading the facets
of an index folder.

For each fraction: recall@10 of the two approximate strategies against the exact top 10 of the allowed rows, ms
per query (one query at a time) of each and of the policy :mod:`mlatr.search.ann` applies (exact where the filter
leaves at most ``FILTER_EXACT_BELOW`` rows or under ``FILTER_ANN_FRACTION`` of them, the wider search otherwise);
the unfiltered HNSW search for reference. Then the folder's facets: the default ``not silent`` of a text query (the
rows files scanned for ``"silent": true``), seconds to read the fields of every row a filter tests (the first query
that needs them) and ms to evaluate the filter on the columns (every later query).

    .venv/bin/python benchmarks/bench_filtered_ann.py --clips 100000 --dim 64 --queries 200 [--work DIR] [--json F]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from mlatr.search import Index, ann
from mlatr.search.ann import AnnBuild
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.filters import NOT_SILENT, FacetTable, filter_mask, parse_filter


def library(n: int, d: int, clusters: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d)).astype(np.float32)
    label = rng.integers(0, clusters, n)
    emb = centres[label] + rng.standard_normal((n, d)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ids = [f"c{i}" for i in range(n)]
    facets = [{"duration": float(rng.uniform(0.1, 30)), "channels": int(rng.integers(1, 3)),
               "library": f"lib{label[i] % 20}", "silent": bool(rng.random() < 0.01)} for i in range(n)]
    clips = ClipColumns(emb, ids, {"path": [f"/x/{c}.wav" for c in ids], "captions": [{} for _ in ids],
                                   "facets": facets})
    return clips, CaptionColumns(np.zeros((0, d), np.float32), np.zeros(0, np.int64), {"lang": [], "text": []}), label


def selector_search(searcher, query: np.ndarray, k: int, mask: np.ndarray) -> np.ndarray:
    """FAISS's ID selector over the shard's HNSW (``efSearch`` times the inverse allowed fraction, up to 1024),
    the candidates re-scored exactly: the strategy the wider search was measured against."""
    import faiss  # the benchmark's own comparison: the library does not use the selector

    bits = np.packbits(mask, bitorder="little")
    selector = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bits))
    ef = min(1024, int(np.ceil(searcher.entry["params"]["efSearch"] * len(mask) / max(1, mask.sum()))))
    _, cand = searcher.index.search(query, k * searcher.rerank, params=faiss.SearchParametersHNSW(sel=selector,
                                                                                                   efSearch=ef))
    rows = np.unique(cand[0][cand[0] >= 0])
    exact = np.asarray(searcher.embeddings[rows], np.float32) @ query[0]
    return rows[np.lexsort((rows, -exact))[:k]]


def timed(fn, queries):
    """(results, ms per query) of ``fn`` over ``queries`` one at a time."""
    out, t0 = [], time.perf_counter()
    for q in queries:
        out.append(fn(q[None]))
    return out, (time.perf_counter() - t0) * 1e3 / len(queries)


def recall_of(found, truth) -> float:
    return float(np.mean([len(set(np.asarray(f).tolist()) & set(t.tolist())) / max(1, min(10, len(t)))
                          for f, t in zip(found, truth, strict=True)]))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clips", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--clusters", type=int, default=200)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--fractions", default="1,0.5,0.2,0.1,0.05,0.01")
    p.add_argument("--work", default=None, help="folder of the index (default: a temporary one)")
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-filtered-"))
    out = work / "lib.idx"
    clips, captions, label = library(args.clips, args.dim, args.clusters)
    meta = {"checkpoint": {"path": "unused", "sha256": "0"}, "sample_rate": 16000, "max_seconds": 10.0}
    t0 = time.perf_counter()
    Index(clips, captions, meta).save(out, ann=AnnBuild("hnsw", exact_below=min(1000, args.clips // 2)))
    print(f"built {args.clips:,} x {args.dim} HNSW in {time.perf_counter() - t0:.1f} s")
    index = Index.load(out)
    searcher = index.searcher("audio")
    rng = np.random.default_rng(1)
    emb = np.asarray(index.embeddings, np.float32)
    queries = emb[rng.choice(len(emb), args.queries, replace=False)]
    queries = queries + 0.5 * rng.standard_normal(queries.shape).astype(np.float32) / np.sqrt(args.dim)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    _, plain_ms = timed(lambda q: searcher.top_k(q, 10), queries)
    print(f"unfiltered HNSW: {plain_ms:.2f} ms/query")
    shard = searcher.parts[0][2]  # the shard's AnnSearcher
    print(f"{'filter':>8} {'fraction':>8} {'allowed':>8} {'selector R@10':>13} {'ms':>6} {'wider R@10':>10} "
          f"{'ms':>6} {'exact ms':>8} {'policy':>8} {'ms':>6}")
    rows = []
    defaults = (ann.FILTER_EXACT_BELOW, ann.FILTER_ANN_FRACTION)
    for kind in ("random", "clusters"):
        for fraction in (float(f) for f in args.fractions.split(",")):
            if kind == "random":
                mask = rng.random(len(emb)) < fraction
            else:
                chosen = rng.permutation(args.clusters)[:max(1, round(fraction * args.clusters))]
                mask = np.isin(label, chosen)
            allowed = np.flatnonzero(mask)
            truth = [allowed[np.argsort(-(emb[allowed] @ q), kind="stable")[:10]] for q in queries]
            found, sel_ms = timed(lambda q, m=mask: selector_search(shard, q, 10, m), queries)
            sel_recall = recall_of(found, truth)
            ann.FILTER_EXACT_BELOW, ann.FILTER_ANN_FRACTION = 0, 0.0  # the wider search, always
            found, wide_ms = timed(lambda q, m=mask: searcher.top_k(q, 10, allowed=m)[1][0], queries)
            wide_recall = recall_of(found, truth)
            ann.FILTER_EXACT_BELOW, ann.FILTER_ANN_FRACTION = 10 ** 12, 1.0  # the allowed rows, exactly
            _, exact_ms = timed(lambda q, m=mask: searcher.top_k(q, 10, allowed=m), queries)
            ann.FILTER_EXACT_BELOW, ann.FILTER_ANN_FRACTION = defaults
            count = int(mask.sum())
            policy = "exact" if count <= defaults[0] or count < defaults[1] * len(emb) else "wider"
            _, policy_ms = timed(lambda q, m=mask: searcher.top_k(q, 10, allowed=m), queries)
            rows.append({"filter": kind, "fraction": fraction, "allowed": count, "selector_recall_at_10": sel_recall,
                         "selector_ms": sel_ms, "wider_recall_at_10": wide_recall, "wider_ms": wide_ms,
                         "exact_ms": exact_ms, "policy": policy, "policy_ms": policy_ms})
            print(f"{kind:>8} {fraction:>8} {count:>8,} {sel_recall:>13.3f} {sel_ms:>6.2f} {wide_recall:>10.3f} "
                  f"{wide_ms:>6.2f} {exact_ms:>8.2f} {policy:>8} {policy_ms:>6.2f}")
    # the facets of the folder: the default "not silent" (a scan of the rows files), a field read once (the first
    # query that needs it), then a filter evaluated per query
    index = Index.load(out)
    t0 = time.perf_counter()
    silent = filter_mask(NOT_SILENT, index.facets())
    silence_s = time.perf_counter() - t0
    print(f"the default 'not silent' on {args.clips:,} clips of a folder: {silence_s * 1e3:.0f} ms "
          f"({int((~silent).sum()):,} silent)")
    t0 = time.perf_counter()
    table: FacetTable = index.facets()
    where = parse_filter("duration<5 and channels=1 and not silent")
    mask = filter_mask(where, table)
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(20):
        filter_mask(where, table)
    eval_ms = (time.perf_counter() - t0) * 1e3 / 20
    print(f"facets of {args.clips:,} clips read from the folder in {read_s:.2f} s (the first filtered query); "
          f"a filter evaluated on them in {eval_ms:.2f} ms ({int(mask.sum()):,} allowed)")
    if args.json:
        Path(args.json).write_text(json.dumps({"clips": args.clips, "dim": args.dim, "unfiltered_ms": plain_ms,
                                               "rows": rows, "silence_s": silence_s,
                                               "facet_read_s": read_s, "filter_eval_ms": eval_ms},
                                              indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
