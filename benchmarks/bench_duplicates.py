"""Duplicates: the thresholds of ``mlatr index duplicates`` measured on copies made from a library.

From ``--originals`` clips of the library (seeded, ``--min-seconds`` long or more, at most one per folder so no
two originals are the same recording), copies are made as a person makes them: an MP3 and an Ogg Vorbis re-encode,
a WAV 6 dB quieter, a WAV with the first ``--trim`` seconds cut, and a WAV re-save at another rate (48 kHz, 16-bit:
the same audio). As many non-duplicate pairs are drawn from the same libraries: each original with its
``kinds`` nearest other clips of its own library (by the base index's vectors: the hardest negatives there are;
none that is the same audio). Everything is indexed with the model (``build_index``, the build's own path) and:

- near copies: each pair's cosine of pooled embeddings and its durations; precision and recall of the rule
  ``cosine >= T and durations_match`` over the copy pairs (positives, by kind) and the negative pairs, for a grid of
  ``T``, and the threshold that maximises F1 (the default of :mod:`mlatr.search.duplicates` comes from it);
- the same audio (:mod:`mlatr.data.dedup`): which pairs are found the same audio (the re-saves should all be; no
  other copy and no negative).

    .venv/bin/python benchmarks/bench_duplicates.py --model runs/demo-real/model.pt \\
        --manifest data/real-sounds/manifest.jsonl --base-index runs/demo-real/sounds.idx --originals 100 \\
        --work /tmp/dups [--json out.json]

Figures: docs/sound-libraries.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import soundfile as sf

KINDS = ("mp3", "ogg", "gain-6dB", "trim")
MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def make_copies(src: Path, out: Path, trim: float) -> dict[str, Path]:
    """The copies of the sound at ``src`` (module docstring), named by kind, in ``out``."""
    import soxr

    x, sr = sf.read(src, dtype="float32", always_2d=True)
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    rate = sr if sr in MP3_RATES else 44100
    y = x if rate == sr else soxr.resample(x, sr, rate, quality="HQ")
    made["mp3"] = out / "mp3.mp3"
    sf.write(made["mp3"], np.clip(y, -1, 1), rate, format="MP3", subtype="MPEG_LAYER_III")
    made["ogg"] = out / "ogg.ogg"
    with sf.SoundFile(made["ogg"], "w", sr, x.shape[1], format="OGG", subtype="VORBIS") as f:
        for a in range(0, len(x), 1 << 15):  # in blocks: libsndfile's Vorbis encoder crashes on one large write
            f.write(np.clip(x[a:a + (1 << 15)], -1, 1))
    made["gain-6dB"] = out / "gain.wav"
    sf.write(made["gain-6dB"], np.clip(x * 10 ** (-6 / 20), -1, 1), sr, subtype="PCM_16")
    made["trim"] = out / "trim.wav"
    sf.write(made["trim"], np.clip(x[int(trim * sr):], -1, 1), sr, subtype="PCM_16")
    made["resave"] = out / "resave.wav"
    z = x if sr == 48000 else soxr.resample(x, sr, 48000, quality="HQ")
    sf.write(made["resave"], z, 48000, subtype="FLOAT")  # float: no clipping, the same samples at another rate
    return made


def pick(manifest, base, n: int, min_seconds: float, kinds: int, seed: int) -> tuple[list, dict[str, list[str]]]:
    """``n`` originals (one per folder, at least ``min_seconds``) and each one's ``kinds`` nearest clips of its own
    library by the base index's vectors (not the same audio)."""
    from mlatr.data.dedup import same_files

    rng = np.random.default_rng(seed)
    clips = [c for c in manifest.clips if (c.duration or 0) >= min_seconds]
    order = rng.permutation(len(clips))
    seen, originals = set(), []
    for i in order.tolist():
        folder = clips[i].id.rsplit("/", 1)[0]
        if folder not in seen:
            seen.add(folder)
            originals.append(clips[i])
        if len(originals) == n:
            break
    rows = base.tables.live_rows()
    library = np.asarray([cid.split("/", 1)[0] for cid in base.ids])
    vectors = base.text_ranker()
    by_id = {c.id: c for c in manifest.clips}
    neighbours = {}
    for c in originals:
        vec = vectors.clip_vectors(np.asarray([rows[c.id]]))[0]
        mine = np.flatnonzero(library == c.id.split("/", 1)[0])
        mine = mine[mine != rows[c.id]]
        order = mine[np.argsort(-(vectors.clip_vectors(mine) @ vec))]
        found = []
        for r in order.tolist():
            other = by_id.get(base.ids[r])
            if other is None or same_files(c.audio_path(manifest.root), other.audio_path(manifest.root)):
                continue
            found.append(other.id)
            if len(found) == kinds:
                break
        neighbours[c.id] = found
    return originals, neighbours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--base-index", default=None, help="an index of the library (default: built from it)")
    parser.add_argument("--originals", type=int, default=100)
    parser.add_argument("--min-seconds", type=float, default=3.0)
    parser.add_argument("--trim", type=float, default=1.0, help="seconds cut from the start of a trimmed copy")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", required=True)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import mlatr
    from mlatr.data.dedup import same_files
    from mlatr.data.manifest import Manifest
    from mlatr.search import Index, build_index
    from mlatr.search.duplicates import durations_match
    from mlatr.search.segments import Segmenting

    work = Path(args.work)
    shutil.rmtree(work / "copies", ignore_errors=True)
    loaded = mlatr.load(args.model)
    manifest = Manifest.load(args.manifest)
    if args.base_index:
        base = Index.load(args.base_index, model=loaded)
    else:
        base = build_index(loaded, manifest, work / "base.idx", batch_size=args.batch_size,
                           segments=Segmenting(above=None)).index
    originals, neighbours = pick(manifest, base, args.originals, args.min_seconds, len(KINDS), args.seed)
    rows, positives, negatives = [], [], []
    listed = set()

    def add(cid: str, path: Path) -> None:
        if cid not in listed:
            listed.add(cid)
            rows.append({"id": cid, "audio": str(path)})

    by_id = {c.id: c for c in manifest.clips}
    for k, c in enumerate(originals):
        add(c.id, c.audio_path(manifest.root))
        for kind, path in make_copies(c.audio_path(manifest.root), work / "copies" / f"{k:04d}", args.trim).items():
            add(f"copy/{k:04d}/{kind}", path)
            positives.append((c.id, f"copy/{k:04d}/{kind}", kind))
        for other in neighbours[c.id]:
            add(other, by_id[other].audio_path(manifest.root))
            negatives.append((c.id, other, "neighbour"))
    (work / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    index = build_index(loaded, Manifest.load(work / "pairs.jsonl"), work / "pairs.idx", batch_size=args.batch_size,
                        segments=Segmenting(above=None)).index
    at = index.tables.live_rows()
    ranker = index.text_ranker()
    paths = {cid: index.paths[r] for cid, r in at.items()}
    seconds = {cid: sf.info(p).duration for cid, p in paths.items()}

    def measured(pairs):
        out = []
        for a, b, kind in pairs:
            va, vb = ranker.clip_vectors(np.asarray([at[a], at[b]]))
            out.append({"a": a, "b": b, "kind": kind, "cosine": float(va @ vb), "seconds": [seconds[a], seconds[b]],
                        "durations_match": durations_match(seconds[a], seconds[b]),
                        "same_audio": same_files(paths[a], paths[b])})
        return out

    pos, neg = measured(positives), measured(negatives)
    near_pos = [p for p in pos if p["kind"] in KINDS]
    grid = []
    for t in np.round(np.arange(0.80, 1.0001, 0.01), 2).tolist():
        tp = sum(p["cosine"] >= t and p["durations_match"] for p in near_pos)
        fp = sum(p["cosine"] >= t and p["durations_match"] for p in neg)
        recall = tp / len(near_pos)
        precision = tp / (tp + fp) if tp + fp else 1.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        grid.append({"threshold": t, "precision": precision, "recall": recall, "f1": f1, "false_pairs": fp,
                     "recall_by_kind": {k: sum(p["cosine"] >= t and p["durations_match"] for p in near_pos
                                               if p["kind"] == k) / max(1, sum(p["kind"] == k for p in near_pos))
                                        for k in KINDS}})
    best = max(grid, key=lambda g: (g["f1"], g["threshold"]))
    result = {"originals": len(originals), "positive_pairs": len(near_pos), "negative_pairs": len(neg),
              "best": best, "grid": grid,
              "cosines": {k: [round(float(np.quantile([p["cosine"] for p in near_pos if p["kind"] == k], q)), 4)
                              for q in (0.0, 0.1, 0.5)] for k in KINDS} if near_pos else {},
              "negative_cosines": [round(float(np.quantile([p["cosine"] for p in neg], q)), 4)
                                   for q in (0.5, 0.9, 1.0)] if neg else [],
              "duration_check_fails": {"positives": sum(not p["durations_match"] for p in near_pos),
                                       "negatives": sum(not p["durations_match"] for p in neg)},
              "same_audio": {"resaves_found": sum(p["same_audio"] for p in pos if p["kind"] == "resave"),
                             "resaves": sum(p["kind"] == "resave" for p in pos),
                             "other_copies_found": sum(p["same_audio"] for p in near_pos),
                             "negatives_found": sum(p["same_audio"] for p in neg)}}
    print(json.dumps({k: v for k, v in result.items() if k != "grid"}, indent=1))
    print(f"{'T':>5} {'precision':>9} {'recall':>6} {'F1':>5}  recall by kind")
    for g in grid:
        print(f"{g['threshold']:5.2f} {g['precision']:9.3f} {g['recall']:6.3f} {g['f1']:5.3f}  "
              + " ".join(f"{k} {v:.2f}" for k, v in g["recall_by_kind"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "pairs": pos + neg}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
