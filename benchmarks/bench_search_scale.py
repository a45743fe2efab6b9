"""Search at scale (issue 23): an index folder of ``--clips`` random unit vectors (d = ``--dim``), its
approximate structure, load, memory, query latency and recall, appending, and ``mlatr serve``'s cold start.

Every figure is printed with its goal and its ratio to the reference of the same run:

1. Build: the vectors are written as one shard (``mlatr.search.build.write_rows``) with the structure
   ``--ann`` (default ``auto``: chosen by size as ``mlatr index build`` chooses) whose recall@10 is
   measured by the build itself (perturbed stored vectors as queries) and recorded.
2. Query (a child process that loads the index as ``mlatr search`` / ``serve`` do, memory-mapped):
   ``--queries`` single queries one after another, p50 / p95 latency; the reference is FAISS flat
   (exact, ``IndexFlatIP``) over the same vectors in another child process, one query at a time; recall@10
   of the approximate answers against the exact ones on the same queries (perturbed stored vectors, as at
   build, and fresh vectors drawn like the library's). ``--clusters C`` draws the library around C
   centres (uniform on the sphere by default: no neighbourhood structure, the hardest case for a graph).
   Goal: p50 <= 5 ms at recall@10 >= 0.95.
3. Memory: the query child's resident set (``VmRSS``, and its peak ``VmHWM``) after loading and querying,
   against the vectors' bytes (goal <= 1.2x).
4. Append: ``--add`` (default 1,000) new vectors as one more shard; seconds, bytes written, and whether
   any file of the first shard changed (goal <= 10 s, nothing rewritten).
5. Cold start of ``mlatr serve`` on the index (the model of ``benchmarks/bench_serve.py``: aisfx + USE,
   untrained heads to ``--dim``): seconds from the process start to the first answered text query
   (goal <= 5 s), with the moment ``/health`` answered and the server's CPU seconds by then.
   ``--no-serve`` skips it.

6. With ``--captions-per-clip C``: C captions per clip (vectors drawn like the audio's, around the clip's
   centre; texts from a made-up word list, two of the cluster's topic words and two of the whole list),
   and the hybrid ranking as ``mlatr search`` / ``serve`` rank it (windowed over each source's top window:
   :class:`mlatr.search.hybrid.TextRanker`) against the exact fusion over every clip (a child process
   with exact backends): p50 / p95, fused recall@10 (goal p50 <= 20 ms at recall >= 0.95), the window and
   recall the build recorded, load to a ready ranker, resident memory (goal <= 1.3x the bytes of all
   vectors). ``--cold``: load and first answer with the index's files dropped from the page cache.

    .venv/bin/python benchmarks/bench_search_scale.py --clips 1000000 --json out.json [--dim 512] [--ann auto]
        [--captions-per-clip 2] [--dtype float32] [--threads 1] [--work DIR] [--cold]
    ... the same options --work DIR --reuse-index   (queries, memory, start-up again on DIR's index, as it is)

Resident memory counts the pages of the index's memory-mapped files that the process has mapped: clean page
cache, shared between processes and given back under pressure (the kernel maps up to 64 KiB of cached pages
around each row a query reads); the process's own (anonymous) memory is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 100_000
#: Words of the generated captions.
WORDS = 3000


def random_unit(n: int, dim: int, seed: int, out: np.ndarray | None = None, clusters: int = 0,
                given: np.ndarray | None = None) -> np.ndarray:
    """``[n, d]`` random unit float32 vectors (written into ``out`` in chunks when given): uniform on the
    sphere, or with ``clusters`` > 0 drawn around that many random centres (each vector = centre + noise of
    the same norm, normalised: cosine ~0.5 to its centre), closer to real embeddings, which group by sound.
    ``given [n]``: the centre of each vector (default: drawn here; captions are drawn around their clip's)."""
    out = np.empty((n, dim), np.float32) if out is None else out
    rng = np.random.default_rng(seed)
    centres = None
    if clusters:
        centres = np.random.default_rng(12345).standard_normal((clusters, dim), dtype=np.float32)
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    for start in range(0, n, CHUNK):
        x = rng.standard_normal((min(CHUNK, n - start), dim), dtype=np.float32)
        if centres is not None:
            which = given[start:start + len(x)] if given is not None else rng.integers(0, clusters, len(x))
            x = centres[which] + x / np.sqrt(dim)
        out[start:start + len(x)] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def word_list(size: int = WORDS) -> list[str]:
    """``size`` made-up words of three syllables (a fixed list: no dictionary is installed everywhere)."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    rng = np.random.default_rng(7)
    words = {"".join(rng.choice(syllables, 3)) for _ in range(4 * size)}
    return sorted(words)[:size]


def caption_texts(labels: np.ndarray, per_clip: int, words: list[str], seed: int) -> list[str]:
    """``per_clip`` captions for each clip of cluster ``labels[i]``: two of its cluster's three topic words
    and two words of the whole list (so a word's captions cluster as the vectors do)."""
    rng = np.random.default_rng(seed)
    lab = np.repeat(labels, per_clip)
    topic = (3 * lab[:, None] + rng.integers(0, 3, (len(lab), 2))) % len(words)
    other = rng.integers(0, len(words), (len(lab), 2))
    picks = np.concatenate([topic, other], axis=1)
    return [" ".join(words[j] for j in row) for row in picks.tolist()]


def part_index(emb: np.ndarray, first_id: int, meta: dict, captions: np.ndarray | None = None,
               texts: list[str] | None = None):
    """An in-memory index of ``emb`` rows (ids ``c{first_id + i}``, no audio file) with ``captions [n * C, d]``
    (``texts``: English; C per clip, in clip order) or none."""
    from mlatr.search.columns import CaptionColumns, ClipColumns
    from mlatr.search.index import Index

    n = emb.shape[0]
    clips = ClipColumns(emb, [f"c{first_id + i}" for i in range(n)],
                        {"path": [f"/library/c{first_id + i}.wav" for i in range(n)], "captions": [{}] * n})
    if captions is None or not len(captions):
        return Index(clips, CaptionColumns.empty(emb.shape[1]), meta)
    per = len(captions) // n
    caps = CaptionColumns(captions, np.repeat(np.arange(n, dtype=np.int64), per),
                          {"lang": ["eng"] * len(captions), "text": texts})
    return Index(clips, caps, meta)


def child(code: str, threads: int) -> dict:
    """Run ``code`` in a fresh Python (mlatr's sources on the path); it prints one JSON line last."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


QUERY_CHILD = """
import json, time, sys
import numpy as np
from mlatr.search import Index
t0 = time.perf_counter()
index = Index.load({path!r})
searcher = index.searcher("audio")
load_s = time.perf_counter() - t0
queries = np.load({queries!r})
rows, times = [], []
for q in queries:
    t = time.perf_counter()
    _, r = searcher.top_k(q[None], 10)
    times.append((time.perf_counter() - t) * 1e3)
    rows.append(r[0].tolist())
status = dict(line.split(":", 1) for line in open("/proc/self/status")
              if line.startswith(("VmRSS", "VmHWM", "RssAnon")))
kib = {{k: int(v.split()[0]) for k, v in status.items()}}
print(json.dumps({{"load_s": load_s, "times_ms": times, "rows": rows, "rss_bytes": kib["VmRSS"] * 1024,
                  "peak_rss_bytes": kib["VmHWM"] * 1024, "kind": [e.get("ann", {{}}).get("kind", "exact")
                  for e in index.summary()["shards"]]}}))
"""

FLAT_CHILD = """
import json, time
import numpy as np, faiss
emb = np.load({vectors!r}, mmap_mode="r")
index = faiss.IndexFlatIP(emb.shape[1])
for s in range(0, emb.shape[0], 100000):
    index.add(np.ascontiguousarray(emb[s:s + 100000], np.float32))
queries = np.load({queries!r})
rows, times = [], []
for q in queries:
    t = time.perf_counter()
    _, r = index.search(q[None], 10)
    times.append((time.perf_counter() - t) * 1e3)
    rows.append(r[0].tolist())
print(json.dumps({{"times_ms": times, "rows": rows}}))
"""


HYBRID_CHILD = """
import json, time
import numpy as np
from mlatr.search import Index
t0 = time.perf_counter()
index = Index.load({path!r})
ranker = index.text_ranker()
index.searcher("audio"), index.searcher("captions")
load_s = time.perf_counter() - t0
queries, texts = np.load({queries!r}), json.load(open({texts!r}))
rows, times = [], []
for q, text in zip(queries, texts):
    t = time.perf_counter()
    found = ranker.rank_many(q[None], [text], ["eng"], [10], ["hybrid"])[0]
    times.append((time.perf_counter() - t) * 1e3)
    rows.append([h.row for h in found])
status = dict(line.split(":", 1) for line in open("/proc/self/status")
              if line.startswith(("VmRSS", "VmHWM", "RssAnon")))
kib = {{k: int(v.split()[0]) for k, v in status.items()}}
print(json.dumps({{"load_s": load_s, "times_ms": times, "rows": rows, "rss_bytes": kib["VmRSS"] * 1024,
                  "peak_rss_bytes": kib["VmHWM"] * 1024, "anon_bytes": kib["RssAnon"] * 1024,
                  "window": ranker.window}}))
"""

EXACT_FUSION_CHILD = """
import json, time
import numpy as np
from mlatr.search import Index
index = Index.load({path!r}, backend="numpy")
ranker = index.text_ranker()
queries, texts = np.load({queries!r}), json.load(open({texts!r}))
rows, times = [], []
for s in range(0, len(texts), 16):
    found = ranker.rank_many(queries[s:s + 16], texts[s:s + 16], ["eng"] * len(texts[s:s + 16]),
                             [10] * len(texts[s:s + 16]), ["hybrid"] * len(texts[s:s + 16]))
    rows += [[h.row for h in f] for f in found]
for q, text in list(zip(queries, texts))[:3]:
    t = time.perf_counter()
    ranker.rank_many(q[None], [text], ["eng"], [10], ["hybrid"])
    times.append((time.perf_counter() - t) * 1e3)
print(json.dumps({{"rows": rows, "times_ms": times}}))
"""


def evict(folder: Path) -> int:
    """Drop the files under ``folder`` from the page cache (``posix_fadvise`` DONTNEED: no root needed, unlike
    ``/proc/sys/vm/drop_caches``); the bytes still cached after, by ``mincore`` through ``fincore`` if there."""
    for f in folder.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
    if not shutil.which("fincore"):
        return -1
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, (f for f in folder.rglob("*") if f.is_file()))],
                         capture_output=True, text=True, check=False).stdout
    return sum(int(x) for x in out.split() if x.isdigit())


def pct(ms: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(ms), q))


def recall(found: list[list[int]], truth: list[list[int]]) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]))


def serve_cold_start(index: Path) -> dict:
    """``mlatr serve INDEX`` from its start to its first answered text query (``first_query_s``; also
    ``health_s``, ``serving_line_s`` and the server's ``cpu_s``: :func:`bench_serve.start_server`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_serve import start_server

    proc, _, start = start_server(index, 1)
    proc.terminate()
    proc.wait(timeout=30)
    return start


def line(name: str, value: float, unit: str, goal: str, ref: float | None = None, ref_name: str = "") -> str:
    ratio = f"  ({value / ref:.3g}x {ref_name})" if ref else ""
    return f"  {name:<42} {value:>12.4g} {unit:<6}{ratio}  goal {goal}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--ann", default="auto", help="auto | exact | hnsw | ivfpq")
    ap.add_argument("--ann-param", action="append", default=[], metavar="KEY=INT")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    ap.add_argument("--clusters", type=int, default=0,
                    help="draw the vectors around this many centres (0: uniform on the sphere, the hardest case)")
    ap.add_argument("--captions-per-clip", type=int, default=0,
                    help="captions of each clip (vectors drawn like the audio's, texts from a word list, both "
                         "clustered as --clusters): measures the hybrid (fused) ranking too")
    ap.add_argument("--ann-exact-below", type=int, default=None,
                    help="shards (and caption sets) smaller than this are searched exactly (default: mlatr's)")
    ap.add_argument("--reuse-vectors", action="store_true",
                    help="take vectors.npy / captions.npy already in --work when their shapes fit (the same seeds "
                         "drew them: drawing a million takes minutes)")
    ap.add_argument("--reuse-index", action="store_true",
                    help="measure queries, memory and start-up again on WORK/scale.idx as an earlier run with the same "
                         "--work left it (no drawing, no build, no add: those figures are that run's)")
    ap.add_argument("--cold", action="store_true",
                    help="also load and answer one hybrid query with the index's files dropped from the page cache")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--add", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1, help="math threads of the query children (default 1)")
    ap.add_argument("--no-serve", action="store_true", help="skip the mlatr serve cold start")
    ap.add_argument("--work", default=None, help="folder for the index (default: a temporary one, removed)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from mlatr.commands.index_build import parse_ann_params
    from mlatr.file_state import file_sha256
    from mlatr.search.ann import EXACT_BELOW, AnnBuild, recall_sample
    from mlatr.search.build import write_rows
    from mlatr.search.shards import bytes_of

    work = Path(args.work or tempfile.mkdtemp(prefix="mlatr-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    out = work / "scale.idx"
    if args.reuse_index and not (out / "index.json").is_file():
        raise SystemExit(f"--reuse-index: no index at {out} (run once without it, with the same --work)")
    if out.exists() and not args.reuse_index:
        shutil.rmtree(out)
    vectors_path = work / "vectors.npy"
    n, d = args.clips, args.dim
    res: dict = {"clips": n, "dim": d, "dtype": args.dtype, "ann": args.ann, "clusters": args.clusters}
    print(f"{n:,} clips, d={d}, {args.dtype}; work folder {work}", flush=True)

    # the checkpoint the index records (and mlatr serve loads)
    ckpt = work / "model.pt"
    if not ckpt.exists():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_serve import make_checkpoint

        make_checkpoint(ckpt, d)
    from mlatr.inference.checkpoint import read_checkpoint

    per = args.captions_per_clip
    meta = {"checkpoint": {"path": str(ckpt.resolve()), "sha256": file_sha256(ckpt)},
            "model_config": read_checkpoint(ckpt)["model_config"], "sample_rate": 16000, "max_seconds": 10.0,
            "caption_languages": ["eng"] if per else [], "manifest": None}
    res["captions_per_clip"] = per
    words = word_list()

    def library(count: int, seed: int, audio_out=None, caption_out=None, drawn: bool = False):
        """``count`` clips' vectors, their captions' vectors and texts (clusters shared); ``drawn``: the
        vectors are in ``audio_out`` / ``caption_out`` already (the labels are drawn apart, the same again)."""
        labels = np.random.default_rng(seed + 100).integers(0, args.clusters or 1000, count)
        audio = audio_out if drawn else random_unit(count, d, seed, audio_out, args.clusters,
                                                    given=labels if args.clusters else None)
        if not per:
            return audio, None, None
        caps = caption_out if drawn else random_unit(count * per, d, seed + 50, caption_out, args.clusters,
                                                     given=np.repeat(labels, per))
        return audio, caps, caption_texts(labels, per, words, seed + 60)

    t0 = time.perf_counter()
    captions_path = work / "captions.npy"

    def fits(path: Path, rows: int) -> bool:
        return path.is_file() and np.load(path, mmap_mode="r").shape == (rows, d)

    drawn = (args.reuse_vectors or args.reuse_index) and fits(vectors_path, n) \
        and (not per or fits(captions_path, n * per))
    if args.reuse_index and not drawn:
        raise SystemExit(f"--reuse-index: {vectors_path} (and captions.npy) of this --clips / --dim are needed")
    if drawn:
        emb, caps, texts = library(n, 0, np.load(vectors_path, mmap_mode="r"),
                                   np.load(captions_path, mmap_mode="r") if per else None, drawn=True)
    else:
        caption_out = np.lib.format.open_memmap(captions_path, "w+", np.float32, (n * per, d)) if per else None
        emb, caps, texts = library(n, 0, np.lib.format.open_memmap(vectors_path, "w+", np.float32, (n, d)),
                                   caption_out)
        emb.flush()
    res["reused_vectors"] = bool(drawn)
    res["generate_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    build = AnnBuild(args.ann, parse_ann_params(args.ann_param),
                     EXACT_BELOW if args.ann_exact_below is None else args.ann_exact_below, progress=True)
    if args.reuse_index:
        res["build_s"] = None
    else:
        write_rows(out, part_index(np.load(vectors_path, mmap_mode="r"), 0, meta,
                                   np.load(captions_path, mmap_mode="r") if per else None, texts),
                   add=False, dtype=args.dtype, build=build)
        res["build_s"] = time.perf_counter() - t0
    del caps, texts
    manifest = json.loads((out / "index.json").read_text())
    ann = manifest["shards"][0].get("ann")
    res["build_recall_at_10"] = ann["recall_at_10"] if ann else 1.0
    res["ann_entry"] = ann
    res["caption_ann_entry"] = manifest["shards"][0].get("caption_ann")
    res["fusion"] = manifest["meta"].get("fusion")
    res["index_bytes"] = bytes_of(out)
    vec_bytes = n * (1 + per) * d * (2 if args.dtype == "float16" else 4)
    res["vector_bytes"] = vec_bytes
    done = "reused" if args.reuse_index else f"built in {res['build_s']:.1f} s"
    print(f"{done}: {ann['kind'] if ann else 'exact'} {ann['params'] if ann else ''}, "
          f"recall@10 at build {res['build_recall_at_10']}", flush=True)

    near = recall_sample(np.load(vectors_path, mmap_mode="r"), args.queries, seed=1)
    far = random_unit(args.queries, d, 2, clusters=args.clusters)
    results = {}
    for name, queries in (("near", near), ("random", far)):
        qpath = work / f"queries-{name}.npy"
        np.save(qpath, queries)
        results[name] = (child(QUERY_CHILD.format(path=str(out), queries=str(qpath)), args.threads),
                         child(FLAT_CHILD.format(vectors=str(vectors_path), queries=str(qpath)), args.threads))
    q, flat = results["near"]
    res.update({"load_s": q["load_s"], "query_p50_ms": pct(q["times_ms"], 50), "query_p95_ms": pct(q["times_ms"], 95),
                "flat_p50_ms": pct(flat["times_ms"], 50), "flat_p95_ms": pct(flat["times_ms"], 95),
                "recall_at_10": recall(q["rows"], flat["rows"]),
                "recall_at_10_random_queries": recall(*(r["rows"] for r in results["random"])),
                "query_p50_ms_random_queries": pct(results["random"][0]["times_ms"], 50),
                "rss_bytes": q["rss_bytes"], "peak_rss_bytes": q["peak_rss_bytes"], "searched_with": q["kind"]})

    if per:  # the hybrid ranking: windowed (as mlatr search / serve rank) against the exact fusion
        from mlatr.search import Index
        from mlatr.search.fused_recall import fusion_queries

        near_vecs, near_texts, _ = fusion_queries(Index.load(out).tables, args.queries, seed=5)
        fresh_labels = np.random.default_rng(13).integers(0, args.clusters or 1000, args.queries)
        fresh_vecs = random_unit(args.queries, d, 14, clusters=args.clusters,
                                 given=fresh_labels if args.clusters else None)
        fresh_texts = [" ".join(words[(3 * c + j) % len(words)] for j in (0, 1)) for c in fresh_labels.tolist()]
        # both query sets in one child each (a child's imports cost seconds): near first, then fresh
        qpath, tpath = work / "hybrid-queries.npy", work / "hybrid-queries.json"
        np.save(qpath, np.concatenate([near_vecs, fresh_vecs]))
        tpath.write_text(json.dumps(list(near_texts) + fresh_texts))
        paths = {"path": str(out), "queries": str(qpath), "texts": str(tpath)}
        h = child(HYBRID_CHILD.format(**paths), args.threads)
        ex = child(EXACT_FUSION_CHILD.format(**paths), args.threads)
        cut = len(near_vecs)
        near_ms, fresh_ms = h["times_ms"][:cut], h["times_ms"][cut:]
        res.update({"hybrid_load_s": h["load_s"], "hybrid_first_ms": h["times_ms"][0],
                    "hybrid_p50_ms": pct(near_ms, 50), "hybrid_p95_ms": pct(near_ms, 95),
                    "hybrid_window": h["window"], "exact_fusion_ms": pct(ex["times_ms"], 50),
                    "hybrid_recall_at_10": recall(h["rows"][:cut], ex["rows"][:cut]),
                    "hybrid_p50_ms_fresh": pct(fresh_ms, 50), "hybrid_p95_ms_fresh": pct(fresh_ms, 95),
                    "hybrid_recall_at_10_fresh": recall(h["rows"][cut:], ex["rows"][cut:]),
                    "hybrid_rss_bytes": h["rss_bytes"], "hybrid_peak_rss_bytes": h["peak_rss_bytes"],
                    "hybrid_anon_bytes": h["anon_bytes"]})
        if args.cold:
            left = evict(out)
            qpath, tpath = work / "hybrid-cold.npy", work / "hybrid-cold.json"
            np.save(qpath, fresh_vecs[:3])
            tpath.write_text(json.dumps(fresh_texts[:3]))
            cold = child(HYBRID_CHILD.format(path=str(out), queries=str(qpath), texts=str(tpath)), args.threads)
            res.update({"cold_load_s": cold["load_s"], "cold_first_ms": cold["times_ms"][0],
                        "cold_cached_bytes_before": left})

    # append: one more shard; the first shard's files must not change
    first = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in (out / manifest["shards"][0]["name"]).iterdir()}
    more, more_caps, more_texts = library(args.add, 3)
    if not args.reuse_index:  # a reused index stays as it was: its add was measured by the run that built it
        t0 = time.perf_counter()
        # the added shard's structure chosen by size (a forced --ann kind and its parameters, e.g. an nlist larger
        # than the add, are the big shard's)
        written = write_rows(out, part_index(more, n, meta, more_caps, more_texts), add=True, dtype=args.dtype,
                             build=AnnBuild(exact_below=build.exact_below))
        res["add_s"] = time.perf_counter() - t0
        res["add_bytes_written"] = written
        res["add_rewrote_first_shard"] = any((p.stat().st_size, p.stat().st_mtime_ns) != s
                                             for p, s in first.items())
    if not args.no_serve:
        res["serve_cold_start"] = serve_cold_start(out)
        tiny = work / "tiny.idx"  # the same model over 10 clips: what the model alone costs at start-up
        write_rows(tiny, part_index(more[:10], 0, meta), add=False)
        res["serve_cold_start_10_clips"] = serve_cold_start(tiny)

    print(f"\n== search at scale: {n:,} clips, d={d}, {args.dtype}, {'/'.join(q['kind'])} "
          f"(threads {args.threads}) ==")
    print(line("query p50 (near queries)", res["query_p50_ms"], "ms", "<= 5 ms", res["flat_p50_ms"], "FAISS flat"))
    print(line("query p95", res["query_p95_ms"], "ms", "", res["flat_p95_ms"], "FAISS flat p95"))
    print(line("FAISS flat p50 (reference, exact)", res["flat_p50_ms"], "ms", "reference"))
    print(line("recall@10 vs exact (near queries)", res["recall_at_10"], "", ">= 0.95", 0.95, "goal"))
    print(line("recall@10 recorded at build", res["build_recall_at_10"], "", ">= 0.95", 0.95, "goal"))
    print(line("recall@10 vs exact (fresh queries)", res["recall_at_10_random_queries"], "", "(new vectors)"))
    print(line("query p50 (fresh queries)", res["query_p50_ms_random_queries"], "ms", "<= 5 ms",
               pct(results["random"][1]["times_ms"], 50), "FAISS flat"))
    print(line("load (Index.load + searcher, after imports)", res["load_s"], "s", ""))
    if per:
        fusion = res["fusion"] or {}
        print(line(f"hybrid p50 (near queries, window {res['hybrid_window']})", res["hybrid_p50_ms"], "ms",
                   "<= 20 ms", res["exact_fusion_ms"], "exact fusion"))
        print(line("hybrid p95", res["hybrid_p95_ms"], "ms", ""))
        print(line("exact fusion, one query (reference)", res["exact_fusion_ms"], "ms", "reference"))
        print(line("fused recall@10 vs exact fusion (near)", res["hybrid_recall_at_10"], "", ">= 0.95", 0.95, "goal"))
        print(line("fused recall@10 recorded at build", fusion.get("recall_at_10", 1.0), "", ">= 0.95", 0.95,
                   "goal"))
        print(line("hybrid p50 (fresh queries)", res["hybrid_p50_ms_fresh"], "ms", "<= 20 ms"))
        print(line("fused recall@10 vs exact fusion (fresh)", res["hybrid_recall_at_10_fresh"], "", ">= 0.95"))
        print(line("load + hybrid ranker (warm cache)", res["hybrid_load_s"], "s", "<= 5 s", 5.0, "goal"))
        print(line("  first hybrid answer after it", res["hybrid_first_ms"], "ms", ""))
        if "cold_load_s" in res:
            print(line("load + hybrid ranker (index files evicted)", res["cold_load_s"], "s", "(cold disk)"))
            print(line("  first hybrid answer after it (cold)", res["cold_first_ms"], "ms", ""))
        print(line("resident memory after hybrid queries", res["hybrid_rss_bytes"] / 2**30, "GiB", "<= 1.3x vectors",
                   vec_bytes / 2**30, "all vectors' bytes"))
        print(line("  of it the process's own (anonymous)", res["hybrid_anon_bytes"] / 2**30, "GiB", "",
                   vec_bytes / 2**30, "all vectors' bytes"))
        print(line("caption ANN recall@10 at build", (res["caption_ann_entry"] or {}).get("recall_at_10", 1.0), "",
                   ">= 0.95"))
    print(line("resident memory after sound queries", res["rss_bytes"] / 2**30, "GiB",
               "<= 1.3x vectors" if per else "<= 1.2x vectors", vec_bytes / 2**30, "the vectors' bytes"))
    print(line("peak resident memory", res["peak_rss_bytes"] / 2**30, "GiB", "", vec_bytes / 2**30,
               "the vectors' bytes"))
    print(line("vectors' bytes (audio + captions)", vec_bytes / 2**30, "GiB", ""))
    print(line("index folder", res["index_bytes"] / 2**30, "GiB", ""))
    if not args.reuse_index:  # built and appended to by this run
        print(line("build (write shard + ANN + recall)", res["build_s"], "s", ""))
        print(line(f"add {args.add:,} clips" + (f" ({per} captions each)" if per else ""), res["add_s"], "s", "<= 10 s",
                   10.0, "goal"))
        print(line("  bytes written by the add", res["add_bytes_written"] / 2**20, "MiB", "",
                   res["index_bytes"] / 2**20, "of the index"))
        print(f"  {'  first shard rewritten by the add':<42} {res['add_rewrote_first_shard']!s:>12}         goal False")
    if "serve_cold_start" in res:
        full, tiny = res["serve_cold_start"], res["serve_cold_start_10_clips"]
        print(line("mlatr serve cold start (to a text answer)", full["first_query_s"], "s", "<= 5 s", 5.0, "goal"))
        print(line("  to /health", full["health_s"], "s", ""))
        if full["cpu_s"] is not None:
            print(line("  server CPU time to the text answer", full["cpu_s"], "s", ""))
        print(line("  same model, 10-clip index", tiny["first_query_s"], "s", "reference", full["first_query_s"],
                   "of the full start"))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
