"""A captioned library on milvus-lite beside mlatr's exact fusion in memory: build, load, query p50, recall.

Draws ``--clips`` clips of ``--dim`` unit audio vectors around ``--clusters`` centres, ``--captions-per-clip``
captions each (vectors around the clip's centre, texts from a word list: the kind's word and random others),
writes them into a milvus-lite file (:func:`mlatr.search.milvus.write_milvus`, the rows ``mlatr index build
--to milvus:LIB.db`` writes), loads it as a fresh process would (:func:`mlatr.search.milvus.read_milvus`) and
answers ``--queries`` text queries (vector and text drawn like a kind's) by each ranking. The reference is the
exact fusion over every clip in memory (:class:`mlatr.search.hybrid.TextRanker`, what a local index ranks by
without approximate structures); recall@10 is the share of its top 10 that Milvus's ranking (windows of
``--window`` per source, fused in mlatr: :class:`mlatr.search.milvus.MilvusRanker`) returns.

Example:
  nice python benchmarks/bench_milvus.py --clips 100000 --captions-per-clip 2 --dim 512 --queries 50
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mlatr.search import milvus as mv
from mlatr.search.columns import CaptionColumns, ClipColumns
from mlatr.search.hybrid import TextRanker

WORDS = ("dog bark rain roof door slam bell ring engine idle bird song wind gust glass break clock tick water drip "
         "crowd cheer train horn car pass cat meow baby cry phone buzz drum beat guitar strum piano note fire "
         "crackle thunder storm wave crash step walk knock wood metal clang paper rustle").split()


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def library(n: int, per_clip: int, dim: int, clusters: int, seed: int = 0):
    """Clip and caption tables of a clustered captioned library, and each clip's kind."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    kind = rng.integers(0, clusters, n)
    audio = unit(centres[kind] + rng.standard_normal((n, dim), dtype=np.float32))
    clip = np.repeat(np.arange(n), per_clip)
    caps = unit(centres[kind[clip]] + 1.2 * rng.standard_normal((len(clip), dim), dtype=np.float32))
    extra = rng.integers(0, len(WORDS), (len(clip), 3))
    texts = [f"{WORDS[kind[c] % len(WORDS)]} {WORDS[a]} {WORDS[b]} {WORDS[d]}"
             for c, (a, b, d) in zip(clip.tolist(), extra.tolist(), strict=True)]
    ids = [f"c{i:07d}" for i in range(n)]
    clips = ClipColumns(audio, ids, {"path": [f"/lib/{c}.wav" for c in ids],
                                     "captions": [{} for _ in ids], "state": [None] * n})
    captions = CaptionColumns(caps, clip, {"lang": ["eng"] * len(clip), "text": texts})
    return clips, captions, centres


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=100_000)
    ap.add_argument("--captions-per-clip", type=int, default=2)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--clusters", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--window", type=int, default=mv.WINDOW, help="each source's window (default %(default)s)")
    ap.add_argument("--work", default=None, help="folder for the milvus-lite file (default: a temporary one)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--phase", choices=["build", "query"], help=argparse.SUPPRESS)  # a child process's part
    args = ap.parse_args()

    work = Path(args.work or tempfile.mkdtemp(prefix="bench_milvus_"))
    work.mkdir(parents=True, exist_ok=True)
    target = f"milvus:{work / 'lib.db'}"
    if args.phase is None:  # build in one process, query from a fresh one, as a user runs search after build
        for phase in ("build", "query"):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--phase", phase, "--work", str(work)],
                           check=True)
        return
    clips, captions, centres = library(args.clips, args.captions_per_clip, args.dim, args.clusters)
    if args.phase == "build":
        t = time.perf_counter()
        mv.write_milvus(target, clips, captions, {"checkpoint": {"path": "none", "sha256": ""}}, [], replace=True)
        (work / "build.json").write_text(json.dumps({"milvus_build_s": time.perf_counter() - t}))
        return
    build = json.loads((work / "build.json").read_text())["milvus_build_s"]
    rng = np.random.default_rng(1)
    kinds = rng.integers(0, args.clusters, args.queries)
    vecs = unit(centres[kinds] + 1.2 * rng.standard_normal((args.queries, args.dim), dtype=np.float32))
    texts = [f"{WORDS[k % len(WORDS)]} {WORDS[rng.integers(len(WORDS))]}" for k in kinds.tolist()]
    langs = ["eng"] * args.queries
    t = time.perf_counter()
    local = TextRanker(clips.embeddings, captions.embeddings, captions.clip, captions.get("text"),
                       captions.get("lang"))
    local_build = time.perf_counter() - t
    t = time.perf_counter()
    ranker = mv.read_milvus(target).ranker
    load = time.perf_counter() - t
    ranker.window = args.window

    out: dict = {"clips": args.clips, "captions": len(captions), "dim": args.dim, "clusters": args.clusters,
                 "queries": args.queries, "window": args.window, "milvus_build_s": build, "milvus_load_s": load,
                 "local_build_s": local_build}
    for rank in ("audio", "captions", "hybrid"):
        ms_m, ms_l, rec = [], [], []
        for b in range(args.queries):
            t = time.perf_counter()
            want = local.rank_many(vecs[b:b + 1], texts[b:b + 1], langs[b:b + 1], [10], [rank])[0]
            ms_l.append(time.perf_counter() - t)
            t = time.perf_counter()
            if rank == "audio":  # Milvus's ANN (FLAT: exact), described as search does
                scores, rows = ranker.audio.top_k(vecs[b:b + 1], 10)
                got = [int(r) for r in rows[0]]
                ranker.describe(vecs[b], texts[b], langs[b], rows[0], scores[0], rank)
            else:
                got = [h.row for h in ranker.rank_many(vecs[b:b + 1], texts[b:b + 1], langs[b:b + 1], [10], [rank])[0]]
            ms_m.append(time.perf_counter() - t)
            rec.append(len(set(got) & {h.row for h in want}) / 10)
        out[rank] = {"milvus_p50_ms": pct(ms_m, 50), "milvus_p95_ms": pct(ms_m, 95),
                     "local_exact_p50_ms": pct(ms_l, 50), "recall_at_10": float(np.mean(rec))}
    print(f"{args.clips} clips, {len(captions)} captions, dim {args.dim}, {args.clusters} clusters, "
          f"{args.queries} queries, window {args.window}")
    print(f"  build: milvus-lite {build:.1f} s (rows, terms, BM25, statistics); local exact ranker in memory "
          f"{local_build:.1f} s (BM25 and statistics of every caption)")
    print(f"  load: milvus-lite {load:.1f} s (collections loaded, columns and statistics read)")
    for rank in ("audio", "captions", "hybrid"):
        r = out[rank]
        print(f"  {rank:8s} milvus-lite p50 {r['milvus_p50_ms']:.1f} ms (p95 {r['milvus_p95_ms']:.1f}), recall@10 "
              f"{r['recall_at_10']:.3f} vs local exact fusion p50 {r['local_exact_p50_ms']:.1f} ms "
              "(goal: recall >= 0.95)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
