"""Search latency and index build rate.

1. Lookup: query latency (p50 / p95 over single queries, k=10) against 10k and 100k random unit
   vectors of the model's dimension (``--dim``, default 256 = ``mlatr demo-real``'s embed_dim), exact
   numpy backend vs FAISS ``IndexFlatIP`` (both exact); plus the backend's set-up time (FAISS: building
   the flat index on load).
2. Text encoding, measured apart from the lookup: a query through the frozen text backbone (e5-small,
   USE; each query text new, so the embedding cache never hits) and the trained projection head.
3. Index build rate (clips/s): ``mlatr.search.build_index`` with the real aisfx encoder (frozen) +
   e5-small on the first ``--build-clips`` files of the real sound manifest (decode, resample to 16 kHz,
   aisfx front end + CNN, projection, captions, atomic write).

    .venv/bin/python benchmarks/bench_search.py [--dim 256] [--queries 200] [--build-clips 80]
        [--manifest data/real-sounds/manifest.jsonl] [--json out.json]

Measured 2026-11-22 on the shared 2-core CPU while other jobs ran (load average 10-11, so absolute
times are pessimistic and p95 carries scheduler stalls), ``OMP_NUM_THREADS=1 ... --threads 1``,
faiss-cpu, d=256, k=10, 200 single queries:

| entries | backend | p50 ms | p95 ms | set-up ms |
|---:|---|---:|---:|---:|
| 10,000 | numpy | 0.20 | 4.3 | 0.0 |
| 10,000 | faiss (IndexFlatIP) | 0.20 | 4.8 | 12.6 |
| 100,000 | numpy | 12.2 | 18.1 | 0.3 |
| 100,000 | faiss (IndexFlatIP) | 12.4 | 19.1 | 146 |

Text query encoding (backbone + head, each text new): e5-small p50 37 ms / p95 50 ms; USE multilingual
p50 2.2 ms / p95 10 ms. So at 100k entries a text query costs ~15 ms (USE) to ~50 ms (e5) end to end;
both exact backends are memory-bound on one product and equal within noise. Index build with aisfx +
e5-small: 80 clips (70 s of audio) in 8.7 s = 9.2 clips/s (8.1 s of audio per s). With ``--threads 2``
on the same busy machine everything was slower (build 3.4 clips/s; faiss 100k p50 56 ms): under
contention the second thread costs more than it brings.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def percentiles(samples: list[float]) -> dict[str, float]:
    a = np.asarray(samples) * 1e3
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95))}


def bench_lookup(dim: int, sizes: list[int], n_queries: int, k: int, seed: int = 0) -> list[dict]:
    import faiss  # noqa: F401  (imported before timing: the set-up column is the index build alone)

    from mlatr.search.backends import make_backend

    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        emb = rng.standard_normal((n, dim), dtype=np.float32)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        queries = rng.standard_normal((n_queries, dim), dtype=np.float32)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        for backend in ("numpy", "faiss"):
            t0 = time.perf_counter()
            b = make_backend(backend, emb)
            setup = time.perf_counter() - t0
            b.top_k(queries[:1], k)  # warm-up
            times = []
            for q in queries:
                t0 = time.perf_counter()
                b.top_k(q[None], k)
                times.append(time.perf_counter() - t0)
            rows.append({"entries": n, "backend": backend, "setup_ms": setup * 1e3, **percentiles(times)})
    return rows


def bench_text(dim: int, n_queries: int) -> list[dict]:
    import torch

    from mlatr.models.projection import ProjectionHead
    from mlatr.models.registry import build_text_encoder

    data = json.loads((Path(__file__).resolve().parents[1] / "src/mlatr/data/queries_multilingual.json")
                      .read_text(encoding="utf-8"))
    texts = [(q["captions"][lang], lang) for q in data["queries"] for lang in data["languages"]]
    rows = []
    for name in ("e5-small", "use-multilingual"):
        enc = build_text_encoder(name, allow_unsupported_languages=True) if name == "use-multilingual" \
            else build_text_encoder(name)
        head = ProjectionHead(enc.output_dim, dim).eval()
        enc(["warm up"], ["eng"])
        times = []
        for text, lang in texts[:n_queries]:
            t0 = time.perf_counter()
            with torch.no_grad():
                head(enc([text], [lang]).pooled)
            times.append(time.perf_counter() - t0)
        rows.append({"encoder": name, "queries": len(times), **percentiles(times)})
    return rows


def bench_build(manifest_path: str, n_clips: int, dim: int) -> dict:
    import torch

    from mlatr.data.manifest import Manifest
    from mlatr.inference.checkpoint import load_model, save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder
    from mlatr.search.build import build_index

    manifest = Manifest.load(manifest_path)
    sub = Manifest(clips=manifest.clips[:n_clips], root=manifest.root, path=manifest.path)
    torch.manual_seed(0)
    model = DualEncoder(build_audio_encoder("aisfx"), build_text_encoder("e5-small"), embed_dim=dim).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "model.pt"
        save_checkpoint(ckpt, {"model_config": model.config(), "model": model.state_dict(), "train_config": {}})
        t0 = time.perf_counter()
        rep = build_index(load_model(ckpt), sub, Path(tmp) / "bench.idx.npz", caption_languages=["eng"], batch_size=8)
        dt = time.perf_counter() - t0
    seconds = sum(c.duration or 0.0 for c in sub.clips)
    return {"clips": rep.added, "audio_seconds": round(seconds, 1), "wall_s": round(dt, 2),
            "clips_per_s": rep.added / dt, "audio_s_per_s": seconds / dt}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--manifest", default="data/real-sounds/manifest.jsonl")
    ap.add_argument("--build-clips", type=int, default=80, help="0 skips the build benchmark")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: least hurt by other jobs)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    out = {"load_average": os.getloadavg()[0], "threads": args.threads}
    out["lookup"] = bench_lookup(args.dim, [int(s) for s in args.sizes.split(",")], args.queries, args.k)
    print(f"lookup (single queries, k={args.k}, d={args.dim})")
    for r in out["lookup"]:
        print(f"  {r['entries']:>7} entries  {r['backend']:<6} p50 {r['p50_ms']:7.3f} ms  p95 {r['p95_ms']:7.3f} ms"
              f"  set-up {r['setup_ms']:8.1f} ms")
    out["text"] = bench_text(args.dim, args.queries)
    print("text query encoding (backbone + projection head), each text new")
    for r in out["text"]:
        print(f"  {r['encoder']:<17} p50 {r['p50_ms']:7.2f} ms  p95 {r['p95_ms']:7.2f} ms  ({r['queries']} queries)")
    if args.build_clips and Path(args.manifest).is_file():
        out["build"] = bench_build(args.manifest, args.build_clips, args.dim)
        b = out["build"]
        print(f"index build (aisfx + e5-small): {b['clips']} clips ({b['audio_seconds']} s of audio) in "
              f"{b['wall_s']} s = {b['clips_per_s']:.2f} clips/s, {b['audio_s_per_s']:.1f} s of audio per s")
    out["load_average_end"] = os.getloadavg()[0]
    print(f"load average: {out['load_average']:.1f} at start, {out['load_average_end']:.1f} at end")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
