"""What an optimised runtime's precision costs on retrieval: held-out clips ranked by a trained model, each runtime.

Issue 48: int8 may be recommended only with its retrieval cost measured (R@10 drop at most 0.5 point). A trained
model (``--model``, e.g. runs/demo-real/model.pt: aiSFX + a text tower, trained on the manifest's train split) is
evaluated on ``--limit`` clips drawn (seed 0) from the held-out ``--split`` of ``--manifest``, as ``mlatr eval``
evaluates (:func:`mlatr.evaluate`: the model's own head, captions in ``--languages``), once per case: the audio
encoder's CNN run by torch (the reference), or by ``RUNTIME/PRECISION`` attached as ``mlatr index build --runtime
R --precision P`` attaches it (int8 calibrated on 32 clips spread over the evaluated clips). Reported per case:
text-to-audio and audio-to-text R@1 / R@10 (percent, averaged over the languages), their difference from torch
in points, and the least cosine between the case's clip vectors and torch's.

    .venv/bin/python benchmarks/bench_runtime_retrieval.py --model runs/demo-real/model.pt
        [--manifest data/real-sounds/manifest.jsonl] [--split test] [--limit 600]
        [--cases torch/fp32,onnxruntime/fp32,onnxruntime/int8,openvino/int8] [--languages eng] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

import mlatr
from mlatr.data.manifest import Manifest
from mlatr.inference.audio import SoundFiles
from mlatr.inference.model_evaluation import evaluate_model
from mlatr.inference.runtime import calibration_waves


def case_metrics(model_path: str, clips: Manifest, runtime: str, precision: str, languages: list[str],
                 batch_size: int, workers: int) -> tuple[dict, np.ndarray, list[str]]:
    """``(metrics, clip vectors, clip ids)`` of the model with its audio CNN run by ``runtime`` at ``precision``."""
    model = mlatr.load(model_path)
    waves = None
    if precision == "int8":
        paths = [str(c.audio_path(clips.root)) for c in clips.clips]
        waves = calibration_waves(SoundFiles(paths, model.sample_rate, float(model.data["eval_max_seconds"])))
    model.use_runtime(runtime, precision, waves)
    found = evaluate_model(model, clips, "all", languages=languages, batch_size=batch_size, workers=workers,
                           progress=False)
    return found.metrics, np.asarray(found.encoded.audio, np.float64), list(found.encoded.clip_ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a trained checkpoint with an aiSFX audio encoder")
    ap.add_argument("--manifest", default="data/real-sounds/manifest.jsonl")
    ap.add_argument("--split", default="test", help="the held-out split evaluated")
    ap.add_argument("--limit", type=int, default=600, help="clips drawn (seed 0) from the split")
    ap.add_argument("--cases", default="torch/fp32,onnxruntime/fp32,onnxruntime/int8,openvino/int8")
    ap.add_argument("--languages", default="eng", help="comma-separated caption languages ranked")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=1, help="processes encoding the audio")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    manifest = Manifest.load(args.manifest)
    held_out = manifest if args.split == "all" else manifest.split(args.split)
    chosen = sorted(random.Random(0).sample(range(len(held_out.clips)), min(args.limit, len(held_out.clips))))
    clips = Manifest(clips=[held_out.clips[i] for i in chosen], root=manifest.root, path=manifest.path)
    languages = [s.strip() for s in args.languages.split(",") if s.strip()]
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if cases[0] != "torch/fp32":
        cases.insert(0, "torch/fp32")  # the reference every difference is taken from
    results: dict[str, dict] = {}
    reference: tuple[np.ndarray, list[str]] | None = None
    for case in cases:
        runtime, _, precision = case.partition("/")
        metrics, vectors, ids = case_metrics(args.model, clips, runtime, precision or "fp32", languages,
                                             args.batch_size, args.workers)
        row = {d: {k: metrics[d]["avg"][k] for k in ("R1", "R10")} for d in ("t2a", "a2t")}
        if reference is None:
            reference = (vectors, ids)
            row["cosine"] = 1.0
        else:
            at = {cid: i for i, cid in enumerate(reference[1])}
            ref = reference[0][[at[c] for c in ids]]
            row["cosine"] = float(((vectors * ref).sum(1) / (np.linalg.norm(vectors, axis=1)
                                                              * np.linalg.norm(ref, axis=1))).min())
        results[case] = row
        print(f"{case}: t2a R@10 {row['t2a']['R10']:.2f}, a2t R@10 {row['a2t']['R10']:.2f}", flush=True)
    base = results["torch/fp32"]
    print(f"\n{len(clips)} clips of the {args.split} split, captions in {', '.join(languages)}")
    print("| case | t2a R@1 | t2a R@10 | t2a R@10 vs torch (points) | a2t R@1 | a2t R@10 | a2t R@10 vs torch (points) "
          "| least cosine vs torch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for case, r in results.items():
        print(f"| {case} | {r['t2a']['R1']:.2f} | {r['t2a']['R10']:.2f} | {r['t2a']['R10'] - base['t2a']['R10']:+.2f} "
              f"| {r['a2t']['R1']:.2f} | {r['a2t']['R10']:.2f} | {r['a2t']['R10'] - base['a2t']['R10']:+.2f} "
              f"| {r['cosine']:.6f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"clips": len(clips), "split": args.split, "languages": languages,
                                               "cases": results}, indent=1))


if __name__ == "__main__":
    main()
