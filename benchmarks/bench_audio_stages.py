"""Where a clip's time goes on the audio path: decode, resample, crop, front end, CNN, by format, rate and channels.

Generated clips (seeded tones and noise) of ``--seconds`` in every combination of WAV / FLAC / OGG / MP3, 16 /
48 kHz, mono / stereo; for each: the whole-file decode (libsndfile, mixed to mono block by block), the resampling
to the model's 16 kHz (soxr), the centred ``--crop`` read alone (:func:`mlatr.audio.io.load_audio_centre`: only
that part decoded where the format seeks), then on that crop aiSFX's front end (16 -> 44.1 kHz, STFT, mel,
blocks) and its CNN by torch and by each optimised runtime installed (fp32). One torch thread; median of
``--repeats`` runs of each stage. Prints milliseconds per clip per stage and the share of the path
(decode + resample + front end + CNN) each takes.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_audio_stages.py [--seconds 5,60] [--crop 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls of ``fn`` and its last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", default="5,60", help="clip lengths, comma-separated")
    ap.add_argument("--crop", type=float, default=10.0, help="the model's centre crop (demo-real's 10 s)")
    ap.add_argument("--formats", default="WAV,FLAC,OGG,MP3")
    ap.add_argument("--rates", default="16000,48000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-cnn", action="store_true", help="decode stages only (no aisfx wheel needed)")
    args = ap.parse_args()

    import soundfile as sf
    import torch

    from mlatr.audio.integrity import read_audio_blocks
    from mlatr.audio.io import load_audio_centre, resample

    torch.set_num_threads(1)
    encoder, runners = None, {}
    if not args.no_cnn:
        from mlatr.inference.runtime import attach_runtime
        from mlatr.models.aisfx import BlockEmbedder
        from mlatr.models.registry import build_audio_encoder

        encoder = build_audio_encoder("aisfx").eval()
        runners["torch"] = BlockEmbedder(encoder.cnn).eval()
        for runtime in ("onnxruntime", "openvino"):
            if importlib.util.find_spec(runtime) is not None and importlib.util.find_spec("onnx") is not None:
                attach_runtime(encoder, runtime, "fp32")
                runners[runtime] = encoder.block_runner
        encoder.block_runner = None
    count = int(args.crop * 16000)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for seconds in [float(s) for s in args.seconds.split(",")]:
            for fmt in args.formats.split(","):
                for rate in [int(r) for r in args.rates.split(",")]:
                    for channels in (1, 2):
                        t = np.arange(int(seconds * rate)) / rate
                        data = np.stack([0.3 * np.sin(2 * np.pi * (220 * (c + 1)) * t * (1 + t / 30))
                                         + 0.05 * rng.standard_normal(t.size) for c in range(channels)], axis=1)
                        path = Path(tmp) / f"c{seconds:g}-{rate}-{channels}.{fmt.lower()}"
                        with sf.SoundFile(path, "w", rate, channels, format=fmt) as out:
                            for i in range(0, data.shape[0], 1 << 15):  # one long write crashes the Vorbis encoder
                                out.write(data[i:i + (1 << 15)].astype(np.float32))
                        row = {"clip": f"{fmt} {rate // 1000} kHz {'stereo' if channels == 2 else 'mono'} "
                                       f"{seconds:g} s"}
                        row["decode"], (mono, sr) = timed(lambda p=path: read_audio_blocks(p), args.repeats)
                        row["resample"], wave = timed(lambda m=mono, s=sr: resample(m, s, 16000), args.repeats)
                        row["crop read alone"], _ = timed(lambda p=path: load_audio_centre(p, 16000, count),
                                                          args.repeats)
                        if encoder is not None:
                            start = max(0, (wave.shape[0] - count) // 2)
                            x = torch.from_numpy(np.ascontiguousarray(wave[start:start + count]))[None]
                            with torch.no_grad():
                                row["front end"], (blocks, _) = timed(lambda x=x: encoder.stage_blocks(x), args.repeats)
                                for name, run in runners.items():
                                    row[f"CNN {name}"], _ = timed(lambda r=run, b=blocks: r(b), args.repeats)
                        rows.append(row)
    stages = [k for k in rows[0] if k != "clip"]
    print("| clip | " + " | ".join(f"{s} ms" for s in stages) + " | decode + resample share of the torch path |")
    print("|---|" + "---:|" * (len(stages) + 1))
    for row in rows:
        path = row["decode"] + row["resample"] + row.get("front end", 0) + row.get("CNN torch", 0)
        share = (row["decode"] + row["resample"]) / path if path else float("nan")
        print(f"| {row['clip']} | " + " | ".join(f"{1000 * row[s]:.1f}" for s in stages) + f" | {100 * share:.0f} % |")


if __name__ == "__main__":
    main()
