"""Cold start of ``mlatr serve`` on an existing index, repeated, with the page cache warm or dropped.

For each of ``--repeat`` starts: the seconds from starting ``mlatr serve INDEX`` to its first answered text
query, the server's CPU seconds then and its resident memory (:func:`bench_serve.start_server`). Then, in
this process, what loading the index costs apart from the model: ``Index.load`` with its searchers, and
opening each shard's FAISS file with and without memory-mapping (``IO_FLAG_MMAP_IFC``, what
:class:`mlatr.search.ann.AnnSearcher` uses). ``--drop-caches`` (root only) empties the page cache before
every measurement, as after a reboot; without it the index's files are read once first, as on a server
that has been running. Goal (issue 23): <= 5 s to the first answer.

    .venv/bin/python benchmarks/bench_serve_start.py LIB.idx [--repeat 2] [--drop-caches] [--json out.json]

An index to start on: ``benchmarks/bench_search_scale.py --clips 1000000 --clusters 1000 --no-serve --work
DIR`` leaves one at ``DIR/scale.idx``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import faiss

from mlatr.search import Index

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import start_server  # noqa: E402  (a sibling script, not a package)


def drop_page_cache() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def warm_page_cache(index: Path) -> None:
    for f in index.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 24):
                    pass


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def prepare(index: Path, drop: bool) -> None:
    drop_page_cache() if drop else warm_page_cache(index)


def serve_start(index: Path) -> dict:
    proc, _, start = start_server(index, 1)
    start["resident_mib"] = resident_mib(proc.pid)
    proc.terminate()
    proc.wait(timeout=30)
    return start


def index_load(index: Path) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    ix = Index.load(index)
    ix.searcher("audio")
    ix.searcher("captions")
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "clips": len(ix)}


def faiss_open(path: Path, flags: int) -> float:
    t0 = time.perf_counter()
    faiss.read_index(str(path), flags)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--drop-caches", action="store_true", help="empty the page cache before each measurement (root)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    index = Path(args.index)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parents[1],
                            capture_output=True, text=True).stdout.strip()
    out: dict = {"commit": commit, "index": str(index), "drop_caches": args.drop_caches,
                 "load_average_start": os.getloadavg()[0], "starts": []}
    for _ in range(args.repeat):
        prepare(index, args.drop_caches)
        out["starts"].append(serve_start(index))
    prepare(index, args.drop_caches)
    out["index_load"] = index_load(index)
    out["faiss_open_s"] = {}
    for ann in sorted(index.glob("*/ann.faiss")):
        times = {}
        for name, flags in (("read whole", 0), ("memory-mapped", faiss.IO_FLAG_MMAP_IFC)):
            prepare(index, args.drop_caches)
            times[name] = faiss_open(ann, flags)
        out["faiss_open_s"][ann.parent.name] = times
    out["load_average_end"] = os.getloadavg()[0]

    cache = "page cache dropped before each" if args.drop_caches else "page cache warm"
    print(f"commit {commit}; {index}: {out['index_load']['clips']:,} clips; {cache}; load average "
          f"{out['load_average_start']:.1f} -> {out['load_average_end']:.1f}")
    for s in out["starts"]:
        first = s["first_query_s"]
        print(f"mlatr serve: first text answer {first:.1f} s after the start ({first / 5:.2f}x the goal of 5 s), "
              f"{s['cpu_s']:.1f} CPU s, /health {s['health_s']:.1f} s, resident "
              f"{s['resident_mib']:,.0f} MiB")
    ld = out["index_load"]
    print(f"Index.load + searchers in this process: {ld['wall_s']:.2f} s ({ld['cpu_s']:.2f} CPU s)")
    for shard, times in out["faiss_open_s"].items():
        print(f"FAISS open of {shard}/ann.faiss: " + ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
