"""Peak memory of ``mlatr index build`` over long clips (issue 14: ten-minute clips with
``--max-seconds 300`` took gigabytes, growing with the batch of long crops fed to the encoder).

Writes ``--clips`` sound files of ``--minutes`` minutes (16 kHz, 16-bit: noise and tones), a checkpoint of
an untrained dual encoder with the demo's audio encoder (``configs/demo.yaml``: small-cnn 16/32/64
channels + one transformer layer over the frames, whose attention grows with the square of a clip's
length) and runs ``python -m mlatr index build --max-seconds S --batch-size B`` in a child process,
reporting the child's peak resident memory (``ru_maxrss``) and its wall time.

    .venv/bin/python benchmarks/bench_index_memory.py --clips 60 --minutes 10 --max-seconds 300
    # the code before a change: --src /path/to/old/checkout/src (put first on PYTHONPATH)

The measured figures are in the README ("Measured figures").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 16_000


def write_clips(folder: Path, n: int, minutes: float) -> Path:
    """``n`` clips of ``minutes`` minutes and a manifest of them; reused when already there."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        path = folder / f"long{i:03d}.wav"
        frames = int(minutes * 60 * SR)
        if not path.exists() or sf.info(str(path)).frames != frames:
            rng = np.random.default_rng(i)
            with sf.SoundFile(path, "w", SR, 1, subtype="PCM_16") as out:
                for start in range(0, frames, SR * 10):
                    n_block = min(SR * 10, frames - start)
                    t = (start + np.arange(n_block)) / SR
                    tone = 0.2 * np.sin(2 * np.pi * (200 + 50 * i) * t) * (np.sin(2 * np.pi * t / 7) > 0)
                    out.write((tone + 0.05 * rng.standard_normal(n_block)).astype(np.float32))
        rows.append({"id": path.stem, "audio": path.name, "duration": minutes * 60,
                     "captions": {"eng": [f"a long recording {i}"]}})
    manifest = folder / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return manifest


def write_checkpoint(path: Path) -> Path:
    import torch

    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    torch.manual_seed(0)
    audio = build_audio_encoder("small-cnn", channels=[16, 32, 64], dim=96, num_layers=1, num_heads=4, ff_dim=192)
    text = build_text_encoder("small-transformer", corpus=["a long recording"] * 4, dim=96, num_layers=2,
                              num_heads=4, ff_dim=192, vocab_size=300)
    model = DualEncoder(audio, text, embed_dim=96)
    save_checkpoint(path, {"model_config": model.config(), "model": model.state_dict(), "train_config": {}})
    return path


def measure(argv: list[str], src: str | None) -> tuple[float, float, int]:
    """(peak RSS MB, wall s, exit code) of ``python -m mlatr ARGV`` in a child of a fresh wrapper process."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    wrapper = ("import resource, subprocess, sys, time, json; t = time.monotonic(); "
               "rc = subprocess.run(sys.argv[1:]).returncode; "
               "print(json.dumps([resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, "
               "time.monotonic() - t, rc]))")
    out = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "mlatr", *argv], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit(out.stderr)
    peak, wall, rc = json.loads(out.stdout.strip().splitlines()[-1])
    if rc != 0:
        print(out.stderr[-2000:], file=sys.stderr)
    return peak, wall, rc


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clips", type=int, default=60)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--work", default=None, help="folder for the clips (default: a temporary one)")
    p.add_argument("--src", default=None, help="mlatr sources to measure instead of the installed ones")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        manifest = write_clips(work / "clips", args.clips, args.minutes)
        ckpt = write_checkpoint(work / "model.pt")
        peak, wall, rc = measure(["index", "build", "--model", str(ckpt), "--manifest", str(manifest),
                                  "-o", str(work / "long.idx.npz"), "--max-seconds", str(args.max_seconds),
                                  "--batch-size", str(args.batch_size), "--no-progress"], args.src)
        print(json.dumps({"clips": args.clips, "minutes": args.minutes, "max_seconds": args.max_seconds,
                          "batch_size": args.batch_size, "peak_rss_mb": round(peak), "wall_s": round(wall, 1),
                          "exit_code": rc, "src": args.src or "installed"}))


if __name__ == "__main__":
    main()
