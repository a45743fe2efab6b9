"""Training input at scale: inline decoding vs worker processes vs the prepared store vs all in RAM.

Makes (once, under ``--dir``) ``--clips`` clips of 10 s at 44.1 kHz as Ogg Vorbis files with captions, then
trains the demo model on them in a fresh process per mode and reports the epoch-2 step time (wall time per
step, data wait included, after ``--warmup`` steps), the time the step waited for data, and the peak memory
of the training process and its workers together (proportional set size, so pages the workers share with
the training process count once). Modes:

- ``ram``: ``data.cache_audio=true``: every clip decoded into memory before training (the reference);
- ``inline``: decoded and resampled in the training process, no cache;
- ``workers``: decoded by ``--workers`` worker processes, no cache;
- ``store``, ``store-workers``: read from a store made by ``mlatr data prepare`` (timed once, kept).

Run twice with different ``--clips`` to see which modes' memory grows with the data set. The printed
ratios are against ``ram``. Example::

    python benchmarks/bench_data_throughput.py --clips 5000 --steps 20
    python benchmarks/bench_data_throughput.py --clips 1000 --steps 20 --modes ram,workers,store
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

MODES = ("ram", "inline", "workers", "store", "store-workers")
RATE = 44100
SECONDS = 10.0
WORDS = {"eng": ("a {p} tone with noise", {"low": "low", "high": "high"}),
         "fra": ("un son {p} avec du bruit", {"low": "grave", "high": "aigu"}),
         "deu": ("ein {p} Ton mit Rauschen", {"low": "tiefer", "high": "hoher"})}


def make_clip(path: Path, seed: int) -> str:
    """A 10 s, 44.1 kHz scene of a tone with a slow envelope and noise, written as Ogg Vorbis."""
    import soundfile as sf

    rng = np.random.default_rng(seed)
    pitch = "low" if seed % 2 == 0 else "high"
    t = np.arange(int(RATE * SECONDS)) / RATE
    f0 = (220.0 if pitch == "low" else 1760.0) * (1 + 0.1 * rng.standard_normal())
    env = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(0.1, 1.0) * t + rng.uniform(0, 6.28))
    wave = 0.3 * env * np.sin(2 * np.pi * f0 * t) + 0.03 * rng.standard_normal(t.size)
    if not path.exists():
        tmp = path.with_suffix(".tmp.ogg")
        sf.write(tmp, wave.astype(np.float32), RATE, format="OGG", subtype="VORBIS")
        os.replace(tmp, path)
    return pitch


def _make_range(args: tuple[str, int, int]) -> list[dict]:
    folder, start, stop = args
    rows = []
    for i in range(start, stop):
        name = f"audio/clip{i:05d}.ogg"
        pitch = make_clip(Path(folder) / name, i)
        rows.append({"id": f"clip{i:05d}", "audio": name, "split": "train", "duration": SECONDS,
                     "captions": {lang: [tmpl.format(p=words[pitch])] for lang, (tmpl, words) in WORDS.items()}})
    return rows


def make_data(folder: Path, clips: int, jobs: int) -> Path:
    """``folder/manifest-N.jsonl`` over clips 0..N-1 (files made where missing, by ``jobs`` processes)."""
    from multiprocessing import Pool

    (folder / "audio").mkdir(parents=True, exist_ok=True)
    manifest = folder / f"manifest-{clips}.jsonl"
    if manifest.exists():
        return manifest
    start = time.perf_counter()
    step = 250
    with Pool(jobs) as pool:
        parts = pool.map(_make_range, [(str(folder), s, min(s + step, clips)) for s in range(0, clips, step)])
    rows = [r for part in parts for r in part]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    size = sum((folder / r["audio"]).stat().st_size for r in rows)
    print(f"made {clips} clips ({size / 2**20:.0f} MB of Ogg Vorbis) in {time.perf_counter() - start:.0f} s",
          flush=True)
    return manifest


class TreeMemory:
    """Samples the summed proportional set size (PSS) of this process and its children."""

    def __init__(self, interval: float = 0.25):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _pss(pid: int) -> int:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return 0
        return 0

    @staticmethod
    def _children(pid: int) -> list[int]:
        out = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                out += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        return out

    def sample(self) -> int:
        pids, todo = [], [os.getpid()]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo += self._children(pid)
        total = sum(self._pss(p) for p in pids)
        self.peak = max(self.peak, total)
        return total

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_mode(args) -> dict:
    """One mode in this process: the trainer's own loop pieces, timed step by step in epoch 2."""
    import torch

    from mlatr.training.config import load_config
    from mlatr.training.step import step_inputs
    from mlatr.training.trainer import Trainer

    torch.set_num_threads(args.threads)
    mode = args.run
    data = {"ram": ["data.cache_audio=true", f"data.workers={args.workers}"],
            "inline": ["data.cache_audio=false", "data.workers=0"],
            "workers": ["data.cache_audio=false", f"data.workers={args.workers}"],
            "store": [f"data.store={args.store}", "data.cache_audio=false", "data.workers=0"],
            "store-workers": [f"data.store={args.store}", "data.cache_audio=false", f"data.workers={args.workers}"]}
    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml", [
        f"data.manifest={args.manifest}", f"out_dir={args.out}/{mode}", "data.languages=[eng,fra,deu]",
        f"data.max_seconds={SECONDS}", f"train.batch_size={args.batch}", "train.eval_every=0", "train.progress=false",
        "objective.scheme=mlclap", *data[mode]])
    with TreeMemory() as memory:
        start = time.perf_counter()
        trainer = Trainer(cfg)
        _ = trainer.batches.lengths  # headers read (or, for ram, every clip decoded into memory)
        setup = time.perf_counter() - start
        after_setup = memory.sample()
        steps, waits, cpu = [], [], []
        generator = torch.Generator().manual_seed(0)
        batches = trainer.batches.epoch(1)  # "epoch 2": its own plan; the cache is full for ram
        trainer.model.train()
        last, last_cpu = time.perf_counter(), time.process_time()
        for k in range(args.warmup + args.steps):
            batch = next(batches)
            got = time.perf_counter()
            inputs = step_inputs(batch, trainer.batches, trainer.objective.scheme, cfg.data.languages, generator,
                                 trainer.dist)
            trainer.run_step(inputs, 1, True, "bench")
            trainer.optimizer_step()
            now, now_cpu = time.perf_counter(), time.process_time()
            if k >= args.warmup:
                steps.append(now - last)
                waits.append(got - last)
                cpu.append(now_cpu - last_cpu)
            last, last_cpu = now, now_cpu
        memory.sample()
    return {"mode": mode, "setup_s": setup, "step_s": statistics.median(steps),
            "step_mean_s": statistics.mean(steps), "wait_s": statistics.median(waits), "cpu_s": statistics.median(cpu),
            "peak_pss_mb": memory.peak / 2**20, "setup_pss_mb": after_setup / 2**20, "steps": len(steps),
            "workers": 0 if mode in ("inline", "store") else args.workers}


def prepare(manifest: Path, store: Path, workers: int) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mlatr", "data", "prepare", str(manifest), "-o", str(store), "--workers",
                    str(workers), "--no-progress"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=5000)
    parser.add_argument("--dir", default="/tmp/mlatr-bench-data", help="where the clips and stores are kept")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="worker processes of the worker modes")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the training process")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every mode, interleaved (medians)")
    parser.add_argument("--run", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run_mode(args)), flush=True)
        return
    folder = Path(args.dir)
    manifest = make_data(folder, args.clips, jobs=max(1, os.cpu_count() or 1))
    store = folder / f"store-{args.clips}"
    modes = [m for m in args.modes.split(",") if m]
    if any(m.startswith("store") for m in modes) and not (store / "index.json").exists():
        print(f"mlatr data prepare: {prepare(manifest, store, args.workers):.0f} s for {args.clips} clips", flush=True)
    print(f"load average before: {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; torch threads {args.threads}",
          flush=True)
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for repeat in range(args.repeats):  # interleaved, so that a change in the machine's load hits every mode
        for mode in modes:
            command = [sys.executable, __file__, "--run", mode, "--manifest", str(manifest), "--store", str(store),
                       "--out", str(folder / "runs" / f"{args.clips}-{time.time_ns()}"), "--steps", str(args.steps),
                       "--warmup", str(args.warmup), "--batch", str(args.batch), "--workers", str(args.workers),
                       "--threads", str(args.threads)]
            out = subprocess.run(command, check=True, capture_output=True, text=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mode].append(r)
            print(f"[{repeat + 1}/{args.repeats}] {mode:14s} workers {r['workers']}  setup {r['setup_s']:6.1f} s  "
                  f"step {r['step_s']:.3f} s (CPU of the training process {r['cpu_s']:.3f})  data wait "
                  f"{r['wait_s']:.3f} s  memory after setup {r['setup_pss_mb']:6.0f} MB, peak "
                  f"{r['peak_pss_mb']:6.0f} MB  (load {os.getloadavg()[0]:.1f})", flush=True)
    results = {m: {k: statistics.median([r[k] for r in rs]) for k in ("step_s", "cpu_s", "wait_s", "peak_pss_mb")}
               for m, rs in runs.items()}
    print(f"\nmedians over {args.repeats} run(s) ({args.clips} clips, batch {args.batch}, "
          f"load average now {os.getloadavg()[0]:.1f}):")
    ref = results.get("ram")
    for mode, r in results.items():
        ratio = (f"  step time x{r['step_s'] / ref['step_s']:.2f} of ram, "
                 f"memory x{r['peak_pss_mb'] / ref['peak_pss_mb']:.2f}" if ref else "")
        print(f"{mode:14s} step {r['step_s']:.3f} s  wait {r['wait_s']:.3f} s  CPU {r['cpu_s']:.3f} s  "
              f"peak memory {r['peak_pss_mb']:6.0f} MB{ratio}")


if __name__ == "__main__":
    main()
