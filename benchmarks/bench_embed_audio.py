"""The inference layer's audio path against the audio encoder's forward alone (goal: within 1.3x).

``model.embed_audio(paths)`` (:mod:`mlatr.inference.audio`: decode, resample to 16 kHz, centre crop,
windows, collate, encode, pool) on ``--clips`` real sound files (the first clips of the offline real-sound
manifest, ``scripts/get-real-sounds.sh``), versus ``model.model.encode_audio`` on the very batches that
call fed to the encoder (recorded on a first, warm-up call: the same decoded, padded waveforms), which is
what the pipeline costs at the least. The model is the real-sound demo's audio side: frozen aisfx + a
projection to 256-d (``mlatr demo-real``), the crop and window its 10 s. Prints both clips/s and the ratio
pipeline / forward (1.0 = the pipeline adds nothing); best of ``--repeats`` timed runs each, interleaved.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_embed_audio.py [--clips 200] [--batch-size 16]
        [--workers 0] [--manifest data/real-sounds/manifest.jsonl] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default="data/real-sounds/manifest.jsonl")
    ap.add_argument("--clips", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=0, help="processes decoding ahead (0: inline)")
    ap.add_argument("--max-seconds", type=float, default=10.0, help="centre crop and window (demo-real's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: least hurt by other jobs)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    import mlatr
    from mlatr.data.manifest import Manifest
    from mlatr.inference import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    torch.set_num_threads(args.threads)
    manifest = Manifest.load(args.manifest)
    files = [c.audio_path(manifest.root) for c in manifest.clips[:args.clips]]
    torch.manual_seed(0)
    text = build_text_encoder("small-transformer", corpus=["a sound"], dim=32, num_layers=1, num_heads=2, ff_dim=64)
    dual = DualEncoder(build_audio_encoder("aisfx"), text, embed_dim=256).eval()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "model.pt"
        save_checkpoint(ckpt, {"model_config": dual.config(), "model": dual.state_dict(),
                               "train_config": {"data": {"eval_max_seconds": args.max_seconds}}})
        model = mlatr.load(ckpt, device="cpu")

    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    forward = model.model.encode_audio

    def recording(wave, lengths):
        batches.append((wave.clone(), lengths.clone()))
        return forward(wave, lengths)

    options = {"batch_size": args.batch_size, "max_seconds": args.max_seconds, "workers": args.workers}
    model.model.encode_audio = recording  # the warm-up call records the batches the encoder sees
    reference = model.embed_audio(files, **options)
    del model.model.encode_audio

    def run_pipeline() -> float:
        t0 = time.perf_counter()
        model.embed_audio(files, **options)
        return time.perf_counter() - t0

    def run_forward() -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            for wave, lengths in batches:
                forward(wave, lengths)
        return time.perf_counter() - t0

    timings = [(run_pipeline(), run_forward()) for _ in range(args.repeats)]  # interleaved: both see the same load
    pipeline_s, forward_s = min(p for p, _ in timings), min(f for _, f in timings)
    n = reference.shape[0]
    audio_s = sum(float(lengths.sum()) for _, lengths in batches) / model.sample_rate
    out = {"clips": n, "audio_seconds_encoded": round(audio_s, 1), "batches": len(batches),
           "batch_size": args.batch_size, "workers": args.workers, "threads": args.threads,
           "pipeline_s": round(pipeline_s, 2), "forward_s": round(forward_s, 2),
           "pipeline_clips_per_s": round(n / pipeline_s, 2), "forward_clips_per_s": round(n / forward_s, 2),
           "ratio": round(pipeline_s / forward_s, 3)}
    print(f"{n} clips ({out['audio_seconds_encoded']} s of audio after the {args.max_seconds:g} s crop), "
          f"{len(batches)} batches of {args.batch_size}, workers {args.workers}, {args.threads} thread(s)")
    print(f"embed_audio (decode + windows + encode): {out['pipeline_clips_per_s']:8.2f} clips/s  ({pipeline_s:.2f} s)")
    print(f"encoder forward alone, same batches:     {out['forward_clips_per_s']:8.2f} clips/s  ({forward_s:.2f} s)")
    print(f"ratio pipeline / forward: {out['ratio']:.3f} (goal <= 1.3)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
