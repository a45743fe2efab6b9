"""Latency and load of ``mlatr serve`` over HTTP on 127.0.0.1, at 10k clips with the USE text encoder.

The server runs as its own process (``mlatr serve INDEX --port 0``), as a person would start it; this
script is the client. The index: ``--clips`` (default 10,000) random unit embeddings of the model's
dimension (the lookup cost depends on the count and dimension, not on the values) whose audio files
cycle through the real sound library when its manifest is there (else through a few generated tones),
and the model of ``mlatr demo-real``: the aisfx audio encoder + multilingual USE text encoder with
projection heads (``--model`` uses a trained one, e.g. ``runs/demo-real/model.pt``, whose size
its config gives: 512 with today's near-identity heads; default: untrained heads to ``--dim``, which
cost what trained ones of that size cost).

1. Text queries one after another over one kept-alive connection: ``GET /search?q=...&lang=...&k=10``
   with the 256 hand-written queries of ``queries_multilingual.json`` (8 languages), each text new
   to the server (a number appended after the first round), so the encoder's memo never answers.
   Reported: the client-side latency p50 / p95 / p99 and the server's own ``took_ms`` p50.
2. Load: ``--requests`` (default 500) text queries from ``--concurrency`` (default 50) client threads,
   a new connection each (``--keep-alive`` runs each load a second time with one persistent connection
   per client thread, as browsers and load generators such as wrk do); the error count, throughput and
   latency distribution, and the CPU milliseconds per request of the server process and of this client
   (the clients share the server's cores: on a busy machine the rate says what CPU the machine gave, the
   CPU per request what the server needs).
   ``--load-ranks`` (default ``hybrid,audio``) repeats the load once per ranking: ``hybrid`` is the API's
   default (sound + captions + BM25 keywords, ranked per query), ``audio`` the sound embeddings alone
   (one vectorised lookup per micro-batch), so the server's own per-request cost shows apart from the
   hybrid ranking's.
3. Sound queries: ``POST /search/audio`` with a real clip, one after another (p50 / p95).
4. The model-bound rate, before the server starts: the same model embedding the queries in batches of
   ``--embed-batch`` (default 64) in this process, one thread, no HTTP: the most text queries per second
   the encoder could answer, and its CPU milliseconds per query. The load's requests/s is printed beside
   it, with the goals of issue 23
   (>= 800 requests/s and p99 <= 150 ms at 10,000 clips and 50 clients). The server micro-batches
   concurrent text queries (:mod:`mlatr.serve.batching`).
5. Cold start (issue 23: <= 5 s): from starting ``mlatr serve`` to the first answer of a real text query
   (``GET /search``, a text the server has not seen), with the moments it printed "serving at" and
   answered ``/health``, and the CPU seconds the server process had used by then (``/proc``: a figure
   that depends less on how busy the machine is than the wall time).
6. With ``--rank-latency N`` (issue 22): every clip first gets ``--captions-per-clip`` captions (the real
   library's captions cycled, random unit embeddings), then ``N`` text queries are asked twice each, in
   turn, as ``rank=audio`` and ``rank=hybrid`` (sound + caption embeddings + BM25 keywords), each text
   new to the server; the p50 / p95 of both and their ratio, in the same run.

    .venv/bin/python benchmarks/bench_serve.py [--clips 10000] [--model runs/demo-real/model.pt]
        [--requests 500] [--concurrency 50] [--threads 1] [--json out.json]
        [--rank-latency 200 --captions-per-clip 2]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms, dtype=float)
    return {"p50_ms": float(np.percentile(a, 50)), "p90_ms": float(np.percentile(a, 90)),
            "p95_ms": float(np.percentile(a, 95)), "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()),
            "n": int(a.size)}


def make_checkpoint(path: Path, dim: int) -> Path:
    import torch

    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    torch.manual_seed(0)
    model = DualEncoder(build_audio_encoder("aisfx", frozen=True), build_text_encoder("use-multilingual"),
                        embed_dim=dim)
    save_checkpoint(path, {"model_config": model.config(), "model": model.state_dict(),
                           "train_config": {"data": {"sample_rate": 16000, "eval_max_seconds": 10.0}}})
    return path


def audio_files(manifest: Path, tmp: Path) -> list[str]:
    """Absolute paths of the real library's sounds, or of four generated tones when it is absent."""
    if manifest.is_file():
        from mlatr.data.manifest import Manifest

        m = Manifest.load(manifest)
        return [str(c.audio_path(m.root).resolve()) for c in m.clips]
    import soundfile as sf

    out = []
    for i, f0 in enumerate((220, 440, 880, 1760)):
        t = np.arange(16000 * 2) / 16000
        path = tmp / f"tone{i}.wav"
        sf.write(path, (0.3 * np.sin(2 * np.pi * f0 * t)).astype(np.float32), 16000)
        out.append(str(path))
    return out


def make_index(checkpoint: Path, n: int, files: list[str], out: Path) -> Path:
    from mlatr.file_state import file_sha256
    from mlatr.inference.checkpoint import read_checkpoint
    from mlatr.search.columns import CaptionColumns, ClipColumns
    from mlatr.search.index import Index

    state = read_checkpoint(checkpoint)
    dim = int(state["model_config"]["embed_dim"])
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((n, dim), dtype=np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    clips = ClipColumns(emb, [f"clip{i:05d}" for i in range(n)], {"path": [files[i % len(files)] for i in range(n)],
                                                                   "captions": [{"eng": [f"sound number {i}"]}
                                                                                for i in range(n)]})
    meta = {"checkpoint": {"path": str(checkpoint.resolve()), "sha256": file_sha256(checkpoint)},
            "model_config": state["model_config"], "sample_rate": 16000, "max_seconds": 10.0,
            "caption_languages": ["eng"], "manifest": None}
    Index(clips, CaptionColumns.empty(dim), meta).save(out)
    return out


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` and its live child processes (``--workers``) have used (Linux
    ``/proc``; ``None`` elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(cpu_seconds(int(c)) or 0.0 for c in children)


def start_server(index: Path, threads: int, workers: int = 1) -> tuple[subprocess.Popen, str, dict]:
    """Start ``mlatr serve`` and wait until it answers a text query; the cold-start figures (seconds from
    the start: ``serving_line_s``, ``health_s``, ``first_query_s``; ``cpu_s``: the server's CPU seconds then)."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "mlatr", "serve", str(index), "--port", "0", "--watch", "0" if workers == 1 else "5",
           "--no-access-log", "--threads", str(threads), "--workers", str(workers)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    deadline = time.monotonic() + 300
    start: dict = {}
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        print("  server:", line.rstrip())
        if line.startswith("serving at "):
            start["serving_line_s"] = time.perf_counter() - t0
            url = line.split()[2].rstrip("/")
            query = url + search_path(f"cold start {uuid.uuid4().hex[:6]}", "eng")  # a text not seen yet
            while time.monotonic() < deadline:
                try:
                    if "health_s" not in start:
                        urllib.request.urlopen(url + "/health", timeout=5).read()
                        start["health_s"] = time.perf_counter() - t0
                    urllib.request.urlopen(query, timeout=60).read()
                    start["first_query_s"] = time.perf_counter() - t0
                    start["cpu_s"] = cpu_seconds(proc.pid)
                    return proc, url, start
                except OSError:  # not listening yet, or 503 while loading
                    time.sleep(0.02)
    proc.kill()
    raise SystemExit("the server did not start")


def query_texts() -> list[tuple[str, str]]:
    doc = json.loads(resources.files("mlatr.data").joinpath("queries_multilingual.json").read_text("utf-8"))
    return [(q["captions"][lang], lang) for q in doc["queries"] for lang in doc["languages"] if lang != "cat"]


def search_path(text: str, lang: str, k: int = 10) -> str:
    return "/search?" + urllib.parse.urlencode({"q": text, "lang": lang, "k": k})


def sequential(url: str, n: int) -> dict:
    host = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
    texts = query_texts()
    client, server = [], []
    for i in range(n):
        text, lang = texts[i % len(texts)]
        text = text if i < len(texts) else f"{text} {i // len(texts)}"
        t0 = time.perf_counter()
        conn.request("GET", search_path(text, lang))
        resp = conn.getresponse()
        body = resp.read()
        client.append((time.perf_counter() - t0) * 1e3)
        if resp.status != 200:
            raise SystemExit(f"{resp.status}: {body[:200]!r}")
        server.append(json.loads(body)["took_ms"])
    conn.close()
    return {"client": percentiles(client), "server_took": percentiles(server)}


def load(url: str, n: int, concurrency: int, rank: str = "hybrid", server_pid: int | None = None,
         keep_alive: bool = False) -> dict:
    """``n`` text queries from ``concurrency`` client threads, a new connection each (``keep_alive``: one
    persistent HTTP/1.1 connection per client thread, as browsers and load generators such as wrk do); with
    ``server_pid``, also the CPU milliseconds per request the server process and this client process used
    (on a shared machine the wall-clock rate says how much CPU the machine gave; the CPU per request says
    what the server needs)."""
    texts = query_texts()
    tag = uuid.uuid4().hex[:6]
    paths = [search_path(f"{texts[i % len(texts)][0]} {tag}{i}", texts[i % len(texts)][1]) + f"&rank={rank}"
             for i in range(n)]
    host = urllib.parse.urlsplit(url)
    local = threading.local()

    def one_kept(path: str) -> tuple[int, float]:
        t0 = time.perf_counter()
        try:
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection(host.hostname, host.port, timeout=120)
            local.conn.request("GET", path)
            resp = local.conn.getresponse()
            resp.read()
            status = resp.status
        except OSError:
            local.conn = None
            status = -1
        return status, (time.perf_counter() - t0) * 1e3

    def one(path: str) -> tuple[int, float]:
        if keep_alive:
            return one_kept(path)
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(url + path, timeout=120) as resp:
                resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            status = err.code
        except OSError:
            status = -1
        return status, (time.perf_counter() - t0) * 1e3

    server0, client0 = (cpu_seconds(server_pid) if server_pid else None), time.process_time()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        replies = list(pool.map(one, paths))
    wall = time.perf_counter() - t0
    server_cpu = cpu_seconds(server_pid) - server0 if server0 is not None else None
    errors = sum(1 for s, _ in replies if s != 200)
    return {"rank": rank, "keep_alive": keep_alive, "requests": n, "concurrency": concurrency, "errors": errors,
            "wall_s": wall,
            "server_cpu_ms_per_request": server_cpu / n * 1e3 if server_cpu is not None else None,
            "client_cpu_ms_per_request": (time.process_time() - client0) / n * 1e3,
            "requests_per_s": n / wall, **percentiles([t for _, t in replies])}


def sound_queries(url: str, files: list[str], n: int) -> dict:
    path = Path(files[len(files) // 2])
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{path.name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n").encode() + path.read_bytes() + \
        f"\r\n--{boundary}--\r\n".encode()
    times = []
    for _ in range(n):
        req = urllib.request.Request(url + "/search/audio?k=10", data=body, method="POST",
                                     headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
        times.append((time.perf_counter() - t0) * 1e3)
    import soundfile as sf

    return {"file_seconds": round(sf.info(str(path)).duration, 2), **percentiles(times)}


def model_bound_rate(checkpoint: Path, batch: int, n: int = 1024) -> dict:
    """Text queries per second of the checkpoint's model embedding ``n`` queries in batches of ``batch``."""
    import torch

    from mlatr.inference.checkpoint import load_model

    torch.set_num_threads(1)
    model = load_model(checkpoint).model
    texts = query_texts()
    items = [(f"{texts[i % len(texts)][0]} {i}", texts[i % len(texts)][1]) for i in range(n)]
    with torch.no_grad():
        model.encode_text([t for t, _ in items[:batch]], [lang for _, lang in items[:batch]])  # warm-up
        t0, cpu0 = time.perf_counter(), time.process_time()
        for start in range(0, n, batch):
            chunk = items[start:start + batch]
            model.encode_text([t for t, _ in chunk], [lang for _, lang in chunk])
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        t0 = time.perf_counter()
        for text, lang in items[:64]:
            model.encode_text([f"{text} alone"], [lang])  # texts not seen yet: the encoder memoises
        one = (time.perf_counter() - t0) / 64
    return {"batch": batch, "queries_per_s": n / wall, "cpu_ms_per_query": cpu / n * 1e3, "one_query_ms": one * 1e3}


def add_captions(index_path: Path, per_clip: int, manifest: Path, exact_below: int | None = None) -> int:
    """Give every clip of the index ``per_clip`` captions: texts of the real library cycled (else numbered
    phrases), random unit embeddings (the lookup cost depends on the count, not on the values). Returns
    the number of captions. ``exact_below``: shards and caption sets of at least this many rows get an
    approximate structure, and the text ranking is then windowed (:mod:`mlatr.search.fused_recall`)."""
    from mlatr.search.ann import EXACT_BELOW, AnnBuild
    from mlatr.search.columns import CaptionColumns
    from mlatr.search.index import Index

    texts = [f"sound number {i}" for i in range(100)]
    if manifest.is_file():
        from mlatr.data.manifest import Manifest

        texts = [t for c in Manifest.load(manifest).clips for t in c.captions.get("eng", []) if t]
    index = Index.load(index_path)
    n = len(index) * per_clip
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((n, index.dim), dtype=np.float32)
    text = [texts[i % len(texts)] for i in range(n)]
    index.caption_columns = CaptionColumns(emb / np.linalg.norm(emb, axis=1, keepdims=True),
                                           np.repeat(np.arange(len(index)), per_clip),
                                           {"text": text, "lang": ["eng"] * n})
    index.captions = [{"eng": text[i * per_clip:(i + 1) * per_clip]} for i in range(len(index))]
    index.save(index_path, ann=AnnBuild(exact_below=EXACT_BELOW if exact_below is None else exact_below))
    return n


def rank_latency(url: str, n: int) -> dict:
    """``n`` new text queries, each asked with ``rank=audio`` then ``rank=hybrid`` over one connection."""
    host = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
    texts = query_texts()
    times: dict[str, dict[str, list[float]]] = {r: {"client": [], "server": []} for r in ("audio", "hybrid")}
    for i in range(n):
        text, lang = texts[i % len(texts)]
        for rank in ("audio", "hybrid"):
            query = f"{text} r{i}{rank[0]}"  # new to the server's text memo each time
            t0 = time.perf_counter()
            conn.request("GET", search_path(query, lang) + f"&rank={rank}")
            resp = conn.getresponse()
            body = resp.read()
            times[rank]["client"].append((time.perf_counter() - t0) * 1e3)
            if resp.status != 200:
                raise SystemExit(f"{resp.status}: {body[:200]!r}")
            times[rank]["server"].append(json.loads(body)["took_ms"])
    conn.close()
    out = {r: {"client": percentiles(t["client"]), "server_took": percentiles(t["server"])} for r, t in times.items()}
    out["ratio_client_p50"] = out["hybrid"]["client"]["p50_ms"] / out["audio"]["client"]["p50_ms"]
    out["ratio_server_p50"] = out["hybrid"]["server_took"]["p50_ms"] / out["audio"]["server_took"]["p50_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clips", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=256, help="embedding size of the generated model")
    ap.add_argument("--model", default=None, help="a demo-real checkpoint (default: untrained heads)")
    ap.add_argument("--manifest", default="data/real-sounds/manifest.jsonl", help="real sounds the clips point to")
    ap.add_argument("--queries", type=int, default=300, help="sequential text queries")
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--sound-queries", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="the server's --threads")
    ap.add_argument("--workers", type=int, default=1, help="the server's --workers (processes on one port)")
    ap.add_argument("--embed-batch", type=int, default=64, help="batch of the model-bound rate")
    ap.add_argument("--load-ranks", default="hybrid,audio", help="rankings the load is run with, in turn")
    ap.add_argument("--keep-alive", action="store_true",
                    help="also run each load with one persistent connection per client (as browsers and wrk do)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--rank-latency", type=int, default=0,
                    help="queries asked as rank=audio and rank=hybrid in turn (0: skip; adds captions first)")
    ap.add_argument("--captions-per-clip", type=int, default=2, help="captions per clip for --rank-latency")
    ap.add_argument("--ann-exact-below", type=int, default=None,
                    help="with --rank-latency: an approximate structure from this many clips / captions up, so "
                         "the server's hybrid ranking is windowed (default: mlatr's threshold)")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    out: dict = {"commit": commit, "clips": args.clips, "threads": args.threads, "workers": args.workers,
                 "load_average_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ckpt = Path(args.model) if args.model else make_checkpoint(tmp / "model.pt", args.dim)
        files = audio_files(Path(args.manifest), tmp)
        index = make_index(ckpt, args.clips, files, tmp / "bench.idx")
        if args.rank_latency:
            out["captions"] = add_captions(index, args.captions_per_clip, Path(args.manifest), args.ann_exact_below)
            out["fusion"] = json.loads((index / "index.json").read_text())["meta"].get("fusion")
        out["model_bound"] = model_bound_rate(ckpt, args.embed_batch)
        proc, url, out["cold_start"] = start_server(index, args.threads, args.workers)
        try:
            out["sequential"] = sequential(url, args.queries)
            out["loads"] = [load(url, args.requests, args.concurrency, rank, proc.pid, kept)
                            for kept in ([False, True] if args.keep_alive else [False])
                            for rank in args.load_ranks.split(",")]
            out["sound"] = sound_queries(url, files, args.sound_queries)
            if args.rank_latency:
                out["rank_latency"] = rank_latency(url, args.rank_latency)
            health = json.loads(urllib.request.urlopen(url + "/health", timeout=10).read())
            out["server_alive_after"] = health["status"] == "ok"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    out["load_average_end"] = os.getloadavg()[0]
    s, c, snd, cs = out["sequential"]["client"], out["sequential"]["server_took"], out["sound"], out["cold_start"]
    print(f"commit {commit}; {args.clips} clips, USE text encoder, server --threads {args.threads} "
          f"--workers {args.workers}")
    cpu = f"{cs['cpu_s']:.1f} CPU s" if cs["cpu_s"] is not None else "CPU time unknown"
    print(f"cold start: first text query answered {cs['first_query_s']:.1f} s after the start ({cpu} in the "
          f"server; goal <= 5 s: {cs['first_query_s'] / 5:.2f}x); 'serving at' {cs['serving_line_s']:.1f} s, "
          f"/health {cs['health_s']:.1f} s")
    print(f"text queries, one at a time ({s['n']}): p50 {s['p50_ms']:.1f} ms, p95 {s['p95_ms']:.1f} ms, "
          f"p99 {s['p99_ms']:.1f} ms (server's own time p50 {c['p50_ms']:.1f} ms)")
    mb = out["model_bound"]
    print(f"model-bound rate (the encoder alone, batches of {mb['batch']}, 1 thread): "
          f"{mb['queries_per_s']:.0f} queries/s, {mb['cpu_ms_per_query']:.2f} CPU ms a query (one query alone: "
          f"{mb['one_query_ms']:.1f} ms)")
    for ld in out["loads"]:
        conns = "one kept-alive connection per client" if ld["keep_alive"] else "a new connection per request"
        print(f"load, rank={ld['rank']}, {conns}: {ld['requests']} requests, {ld['concurrency']} concurrent: "
              f"{ld['errors']} errors, {ld['requests_per_s']:.0f} req/s; latency p50 {ld['p50_ms']:.0f} ms, "
              f"p90 {ld['p90_ms']:.0f} ms, p99 {ld['p99_ms']:.0f} ms, max {ld['max_ms']:.0f} ms")
        print(f"  {ld['requests_per_s'] / mb['queries_per_s']:.2f}x the model-bound rate; goals: >= 800 req/s "
              f"({ld['requests_per_s'] / 800:.2f}x), p99 <= 150 ms ({ld['p99_ms'] / 150:.2f}x)")
        if ld["server_cpu_ms_per_request"] is not None:
            print(f"  CPU a request: server {ld['server_cpu_ms_per_request']:.2f} ms "
                  f"({ld['server_cpu_ms_per_request'] / mb['cpu_ms_per_query']:.1f}x the model's per query), "
                  f"this client {ld['client_cpu_ms_per_request']:.2f} ms")
    print(f"sound queries ({snd['file_seconds']} s clip, {snd['n']}): p50 {snd['p50_ms']:.0f} ms, "
          f"p95 {snd['p95_ms']:.0f} ms")
    print(f"load average {out['load_average_start']:.1f} at start, {out['load_average_end']:.1f} at end; "
          f"server alive after: {out['server_alive_after']}")
    if args.rank_latency:
        rl = out["rank_latency"]
        print(f"rank latency, {args.rank_latency} queries each, {out['captions']} captions: "
              + "; ".join(f"{r} p50 {rl[r]['client']['p50_ms']:.1f} ms (server {rl[r]['server_took']['p50_ms']:.1f} "
                          f"ms), p95 {rl[r]['client']['p95_ms']:.1f} ms" for r in ("audio", "hybrid"))
              + f"; hybrid / audio p50: {rl['ratio_client_p50']:.2f}x client, {rl['ratio_server_p50']:.2f}x server")
        fusion = out.get("fusion")
        print("hybrid ranking: " + (f"windowed, window {fusion['window']}, fused recall@10 "
                                    f"{fusion['recall_at_10']:.3f} recorded at build" if fusion
                                    else "exact (every clip scored)"))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0 if all(ld["errors"] == 0 for ld in out["loads"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
