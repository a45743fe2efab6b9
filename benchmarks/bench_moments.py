"""Moments inside long recordings: is a short event in a long file found by a text query for it, and where?

For each event (a short clip of the library, with a query naming it), a long recording is made: quiet pink
noise of ``--minutes`` minutes at ``--noise-db`` dBFS with the event mixed in at its own level at a seeded time.
The recordings are added (``build_index(..., add=True)``, the index build's own path) to a copy of the base
index (the library's clips: ``--base-index``, or built from ``--manifest``), once per segmenting setting
(``--settings LENGTH:HOP,...``). Per event and setting:

- the long file's rank for the query among every clip by sound (``rank=audio``, the index's sound searcher:
  the higher of a clip's pooled vector and its best segment) and by the default hybrid ranking (top 100), and
  the rank its pooled vector alone gives (what an index without segments answers: the file's centre crop);
- where the hit says it matched (its best segment) against the event: whether the segment holds the event,
  and the error of the segment's centre and of its start from the event's.

Costs: the segments' count and bytes, the build time of the recordings, and the time of a hybrid text query
(k=10, after a warm-up) on the index with and without the recordings' segments.

``--mixed N``: the user's case instead: a folder of N short clips of the library plus one 2-minute recording
holding two of the events, indexed from the folder (captions from the file names; the recording's name says
nothing), ranked by each event's query with and without segments and with whole-file windows
(``--max-seconds 120 --window-seconds 10``).

    .venv/bin/python benchmarks/bench_moments.py --model runs/demo-real/model.pt \\
        --manifest data/real-sounds/manifest.jsonl --base-index runs/demo-real/sounds.idx \\
        --minutes 10 --settings 10:5 --work /tmp/moments [--json out.json]
    .venv/bin/python benchmarks/bench_moments.py --model runs/demo-real/model.pt \\
        --manifest data/real-sounds/manifest.jsonl --mixed 60 --work /tmp/mixed

Figures: docs/sound-libraries.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import soundfile as sf

#: Events of the real corpus (a clip id of data/real-sounds, the query naming it): held-out clips where the
#: corpus has one, each 1-3.5 s.
REAL_EVENTS = [
    ("scorched3d/apoc/data/wav/misc/dog2", "a dog barking"),
    ("qabcs/rooster", "a rooster crowing"),
    ("scorched3d/apoc/data/wav/misc/carhorn4", "a car horn"),
    ("scorched3d/apoc/data/wav/explosions/thunder", "thunder"),
    ("freedroidrpg/sound/effects/Glass_Break", "glass breaking"),
    ("linphone/rings/oldphone-mono", "a telephone ringing"),
    ("hydrogen-drumkits/The Black Pearl 1.0/PaisteBell-Hard", "a bell"),
    ("bzflag/explosion", "an explosion"),
]
SR = 16000


def pink_noise(seconds: float, db: float, rng: np.random.Generator) -> np.ndarray:
    """Pink (1/f) noise of ``seconds`` at ``SR`` with an RMS of ``db`` dBFS."""
    n = int(seconds * SR)
    spectrum = np.fft.rfft(rng.standard_normal(n))
    f = np.fft.rfftfreq(n, 1 / SR)
    spectrum[1:] /= np.sqrt(f[1:])
    spectrum[0] = 0
    x = np.fft.irfft(spectrum, n)
    return (x / np.sqrt(np.mean(x ** 2)) * 10 ** (db / 20)).astype(np.float32)


def recording(path: Path, events: list[tuple[np.ndarray, float]], seconds: float, noise_db: float, seed: int) -> None:
    """A recording of ``seconds`` of pink noise with each ``(waveform at SR, start s)`` event mixed in."""
    x = pink_noise(seconds, noise_db, np.random.default_rng(seed))
    for wave, start in events:
        a = int(start * SR)
        x[a:a + len(wave)] += wave[:len(x) - a]
    sf.write(path, np.clip(x, -1, 1), SR, subtype="PCM_16")


def events_of(manifest, spec: str) -> list[tuple[str, str]]:
    """``(clip id, query)`` of the events: the built-in real ones, or (``toy``) the first two clips' captions."""
    if spec == "real":
        known = {c.id for c in manifest.clips}
        return [(cid, q) for cid, q in REAL_EVENTS if cid in known]
    return [(c.id, c.captions["eng"][0]) for c in manifest.clips[:2]]


def rank_of(hits, cid: str) -> tuple[int | None, object]:
    for h in hits:
        if h.id == cid:
            return h.rank, h
    return None, None


def pooled_rank(index, vec: np.ndarray, cid: str) -> int:
    """The rank of ``cid`` by its pooled vector alone (an index without segments), among every live clip."""
    row = index.tables.live_rows()[cid]
    sound = np.asarray(index.text_ranker().clip_vectors(np.asarray(sorted(index.tables.live_rows().values()))))
    return int(np.sum(sound @ vec > index.text_ranker().clip_vectors(np.asarray([row]))[0] @ vec)) + 1


def timed_queries(index, queries: list[str], repeats: int) -> float:
    index.search_text(queries[0], k=10)  # warm-up: the ranker, the keyword index
    times = []
    for _ in range(repeats):
        for q in queries:
            t0 = time.perf_counter()
            index.search_text(q, k=10)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def long_files(args, manifest, events, work: Path) -> tuple[list[dict], list[tuple[float, float]]]:
    """One recording per event; manifest rows and each event's (start, end) seconds."""
    from mlatr.audio.io import load_audio

    rng = np.random.default_rng(args.seed)
    rows, spans = [], []
    seconds = args.minutes * 60
    for k, (cid, _) in enumerate(events):
        wave = load_audio(manifest.clips[[c.id for c in manifest.clips].index(cid)].audio_path(manifest.root), SR)
        start = float(np.round(rng.uniform(0.1, 0.9) * (seconds - len(wave) / SR), 2))
        path = work / f"REC_{k:04d}.wav"
        recording(path, [(wave, start)], seconds, args.noise_db, args.seed + k)
        rows.append({"id": f"long/REC_{k:04d}", "audio": str(path), "captions": {"eng": [f"REC {k:04d}"]}})
        spans.append((start, start + len(wave) / SR))
    return rows, spans


def bench_long(args, loaded, manifest) -> dict:
    from mlatr.data.manifest import Manifest
    from mlatr.search import Index, build_index
    from mlatr.search.segments import Segmenting

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base = work / "base.idx"
    if not base.exists():
        if args.base_index:
            shutil.copytree(args.base_index, base)
        else:
            build_index(loaded, manifest, base, batch_size=args.batch_size, segments=Segmenting(above=None))
    events = events_of(manifest, args.events)
    rows, spans = long_files(args, manifest, events, work)
    (work / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    long = Manifest.load(work / "long.jsonl")
    base_index = Index.load(base, model=loaded)
    queries = [q for _, q in events]
    out = {"events": len(events), "minutes": args.minutes, "noise_db": args.noise_db, "base_clips": len(base_index),
           "base_query_ms": timed_queries(base_index, queries, args.repeats), "settings": []}
    window = float(base_index.meta.get("window_seconds") or base_index.meta["max_seconds"])
    for setting in args.settings.split(","):
        length, hop = (float(x) for x in setting.split(":"))
        target = work / f"seg-{length:g}-{hop:g}.idx"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(base, target)
        t0 = time.perf_counter()
        report = build_index(loaded, long, target, add=True, batch_size=args.batch_size,
                             segments=Segmenting(length, hop, window))
        built = time.perf_counter() - t0
        index = Index.load(target, model=loaded)
        vecs = index.embed_queries([_query(q, index) for q in queries])
        per_event = []
        for (cid, query), row, span, vec in zip(events, rows, spans, vecs, strict=True):
            sound, hit = rank_of(index.search_text(query, k=len(index), rank="audio"), row["id"])
            hybrid, _ = rank_of(index.search_text(query, k=100), row["id"])
            start, end = hit.segment
            per_event.append({"event": cid, "query": query, "event_start": span[0], "event_end": span[1],
                              "rank_audio": sound, "rank_hybrid": hybrid,
                              "rank_without_segments": pooled_rank(index, vec, row["id"]),
                              "segment": [start, end], "holds_event": start <= span[0] and span[1] <= end,
                              "centre_error_s": abs((start + end) / 2 - (span[0] + span[1]) / 2),
                              "start_error_s": abs(start - span[0])})
        seg = index.segment_columns
        out["settings"].append({
            "length": length, "hop": hop, "segments": len(seg),
            "segment_bytes": int(np.asarray(seg.embeddings).nbytes) + 24 * len(seg),
            "build_s": built, "encoded": report.added, "query_ms": timed_queries(index, queries, args.repeats),
            "events": per_event,
            "found_top10_audio": sum(e["rank_audio"] is not None and e["rank_audio"] <= 10 for e in per_event),
            "found_top10_hybrid": sum(e["rank_hybrid"] is not None and e["rank_hybrid"] <= 10 for e in per_event),
            "held": sum(e["holds_event"] for e in per_event),
            "centre_within_1s": sum(e["centre_error_s"] <= 1.0 for e in per_event)})
    return out


def _query(text: str, index):
    from mlatr.models.protocols import query_languages
    from mlatr.search.query import text_query

    return text_query(text, "eng", 10, "hybrid", query_languages(index.model().model.text_encoder))


def bench_mixed(args, loaded, manifest) -> dict:
    """The user's folder: N short clips, one 2-minute recording of two events (module docstring)."""
    from mlatr.audio.io import load_audio
    from mlatr.search import Index

    work = Path(args.work) / "folder"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    events = events_of(manifest, args.events)[:2]
    rng = np.random.default_rng(args.seed)
    skip = {cid for cid, _ in events}
    pool = [c for c in manifest.clips if c.id not in skip and (c.duration or 0) <= 10]
    for c in [pool[i] for i in rng.choice(len(pool), args.mixed, replace=False)]:
        shutil.copy(c.audio_path(manifest.root), work / (c.id.replace("/", "_") + c.audio_path(manifest.root).suffix))
    by_id = {c.id: c for c in manifest.clips}
    waves = [load_audio(by_id[cid].audio_path(manifest.root), SR) for cid, _ in events]
    starts = [40.0, 100.0][:len(waves)]
    recording(work / "ZOOM0001.wav", list(zip(waves, starts, strict=True)), 120.0, args.noise_db, args.seed)
    out = {"clips": args.mixed + 1, "events": [{"event": cid, "query": q, "start": s}
                                               for (cid, q), s in zip(events, starts, strict=True)], "builds": {}}
    for name, options in (("segments", {}), ("no segments", {"segments": False}),
                          ("whole-file windows, no segments", {"segments": False, "max_seconds": 120.0,
                                                               "window_seconds": 10.0})):
        index = Index.build(loaded, work, progress=False, batch_size=args.batch_size, **options)
        ranks = []
        for (_, query), start, wave in zip(events, starts, waves, strict=True):
            hits = index.search_text(query, k=len(index))
            rank, hit = rank_of(hits, "ZOOM0001")
            audio, _ = rank_of(index.search_text(query, k=len(index), rank="audio"), "ZOOM0001")
            ranks.append({"rank_hybrid": rank, "rank_audio": audio, "segment": hit.segment,
                          "holds_event": bool(hit.segment) and hit.segment[0] <= start
                          and start + len(wave) / SR <= hit.segment[1]})
        out["builds"][name] = ranks
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--manifest", required=True, help="the library's manifest (the events are its clips)")
    parser.add_argument("--base-index", default=None, help="an index of the library (default: built from --manifest)")
    parser.add_argument("--events", choices=("real", "toy"), default="real")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--noise-db", type=float, default=-50.0, help="the noise's RMS, dBFS")
    parser.add_argument("--settings", default="10:5", help="segment LENGTH:HOP seconds, comma-separated")
    parser.add_argument("--mixed", type=int, default=0, help="the folder case with this many short clips")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", required=True)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import mlatr
    from mlatr.data.manifest import Manifest

    loaded = mlatr.load(args.model)
    manifest = Manifest.load(args.manifest)
    result = bench_mixed(args, loaded, manifest) if args.mixed else bench_long(args, loaded, manifest)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
