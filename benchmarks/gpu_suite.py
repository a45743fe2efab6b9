"""The GPU suite: measured memory and step time of every scheme and memory option, beside the plan.

For each scheme (ML-CLAP, CACL, KCL) and memory option (plain, gradient caching in chunks of 8, gradient
checkpointing of both encoders) this builds the config's dual encoder at full size with random weights (no
downloads: :func:`mlatr.planning.architectures.build_planned_model`), runs ``--steps`` real training steps
with the trainer's :class:`~mlatr.training.step.StepRunner` and optimizer on random audio, and reports:

- ``measured_mib``: ``torch.cuda.max_memory_allocated`` over the timed steps (on the CPU: the live-tensor
  peak of :class:`~mlatr.planning.tracker.LiveTensorTracker`, so the mechanics can be tested without a GPU);
- ``step_s``: the median step time (after one warm-up step), with bf16 autocast and without, and with
  ``torch.compile`` of both encoders for the plain step (``--compile``);
- ``predicted_mib``: the planner's prediction for the same config (``mlatr plan``'s figure), and the ratio;
- the data loader's throughput on ``--loader-clips`` synthetic 10 s clips (clips/s with the default worker
  count) against the clips/s the plain step consumes.

Run it through ``benchmarks/gpu_suite.sh`` (defaults sized for ten minutes on one H100)::

    python benchmarks/gpu_suite.py --config configs/atri-kcl-audiocaps.yaml --device cuda --steps 5
    python benchmarks/gpu_suite.py --device cpu --tiny --steps 1 --json out.json   # mechanics only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.batches import TrainBatches
from mlatr.inference.process_group import DistContext
from mlatr.planning.architectures import build_planned_model
from mlatr.planning.gpus import GPUS
from mlatr.planning.plan import MIB, predicted_bytes
from mlatr.planning.step_trace import step_batch, trace_step
from mlatr.planning.tracker import LiveTensorTracker
from mlatr.training.config import Config, load_config
from mlatr.training.objective import build_objective
from mlatr.training.step import StepRunner
from mlatr.training.trainer import build_optimizer

SCHEMES = ("mlclap", "cacl", "kcl")
OPTIONS = {"plain": [], "grad-cache-8": ["optim.grad_cache_chunk=8"],
           "checkpointing": ["model.audio.gradient_checkpointing=true", "model.text.gradient_checkpointing=true"]}
#: --tiny: the presets' classes at toy sizes (CPU mechanics test), the text tower's architecture replaced.
TINY = ["model.audio={name: ced, dim: 32, depth: 1, num_heads: 2}", "model.embed_dim=32", "data.max_seconds=1.0",
        "train.batch_size=4", "data.languages=[eng,fra,deu]"]
TINY_TEXT = {"vocab_size": 300, "d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2,
             "encoder_ffn_dim": 64, "max_position_embeddings": 64}


def measure(cfg: Config, device: torch.device, steps: int, amp: bool, compile_: bool, caption_tokens: int,
            text_architecture: dict | None) -> dict:
    """Peak memory and median step time of ``steps`` real steps of ``cfg`` on ``device`` (after a warm-up)."""
    torch.manual_seed(0)
    model = build_planned_model(cfg, caption_tokens, text_architecture).to(device).train()
    objective = build_objective(cfg.objective, cfg.train.batch_size).to(device)
    if compile_:
        model.audio_encoder.compile()
        getattr(model.text_encoder, "model", model.text_encoder).compile()
    optimizer = build_optimizer(cfg, model, objective)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    autocast = ((lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if amp
                else (lambda: torch.autocast(device.type, enabled=False)))
    runner = StepRunner(model, model, objective, DistContext(), device, autocast, cfg.optim.grad_cache_chunk)
    inputs = step_batch(cfg, cfg.train.batch_size, caption_tokens, real=True)
    tracker = LiveTensorTracker() if device.type == "cpu" else None
    times = []
    for k in range(steps + 1):
        if k == 1:  # the warm-up made the optimizer state: the peak of a steady-state step from here
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            else:
                tracker.__enter__()
                tracker.track(list(model.parameters()) + list(model.buffers()) + [
                    t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)])
                tracker.reset_peak()
        start = time.perf_counter()
        runner(inputs, 1, True, f"suite step {k}")
        if cfg.optim.grad_clip:
            torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if k:
            times.append(time.perf_counter() - start)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
    else:
        tracker.__exit__(None, None, None)
        peak = tracker.peak
    return {"measured_mib": peak / MIB, "step_s": statistics.median(times)}


def loader_throughput(clips: int, batch: int, seconds: float, languages: list[str]) -> float:
    """Clips per second the training loader delivers (default workers) on ``clips`` synthetic WAV clips."""
    import soundfile as sf

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rng = np.random.default_rng(0)
        rows = []
        for i in range(clips):
            sf.write(root / f"c{i}.wav", (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32), 16000)
            rows.append({"id": f"c{i}", "audio": f"c{i}.wav", "split": "train",
                         "captions": {lang: [f"noise number {i}"] for lang in languages}})
        (root / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        manifest = Manifest.load(root / "m.jsonl").split("train")
        from mlatr.data.pipeline.source_choice import open_source
        from mlatr.data.pipeline.workers import default_workers

        batches = TrainBatches(manifest, languages, batch, seconds, 0, source=open_source(manifest, 16000, None, False),
                               workers=default_workers(), prefetch=2)
        start = time.perf_counter()
        n = sum(b.waveform.shape[0] for b in batches.epoch(0))
        return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/atri-kcl-audiocaps.yaml",
                        help="the preset whose model and data settings every case uses (the scheme varies)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gpu", default="h100-80gb", choices=sorted(GPUS), help="the plan's GPU (workspace size)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--caption-tokens", type=int, default=32)
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--options", default=",".join(OPTIONS))
    parser.add_argument("--compile", action="store_true", help="also time the plain step under torch.compile")
    parser.add_argument("--loader-clips", type=int, default=64)
    parser.add_argument("--tiny", action="store_true", help="toy sizes (the CPU mechanics test)")
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    base = load_config(args.config, TINY if args.tiny else [])
    text_architecture = TINY_TEXT if args.tiny else None
    gpu = GPUS[args.gpu]
    rows = []
    for scheme in args.schemes.split(","):
        for option in args.options.split(","):
            cfg = load_config(args.config, (TINY if args.tiny else []) + [f"objective.scheme={scheme}"]
                              + OPTIONS[option])
            # bf16 for every option, fp32 too for the plain step; on the CPU fp32 only (CPU autocast is not
            # what a GPU runs: the CPU run tests the mechanics)
            amps = (False,) if device.type == "cpu" else (True, False) if option == "plain" else (True,)
            for amp in amps:
                row = {"scheme": scheme, "option": option, "amp": "bf16" if amp else "off", "compile": False}
                row.update(measure(cfg, device, args.steps, amp, False, args.caption_tokens, text_architecture))
                trace = trace_step(cfg, args.caption_tokens, fake=True, amp=row["amp"], foreach=device.type == "cuda"
                                   or None, flops=False, cuda_kernels=device.type == "cuda",
                                   text_architecture=text_architecture)
                row["predicted_mib"] = (predicted_bytes(trace, gpu) if device.type == "cuda" else trace.peak) / MIB
                row["measured_over_predicted"] = row["measured_mib"] / row["predicted_mib"]
                rows.append(row)
                print(json.dumps(row), flush=True)
            if option == "plain" and args.compile:
                row = {"scheme": scheme, "option": option, "amp": "bf16", "compile": True}
                row.update(measure(cfg, device, args.steps, True, True, args.caption_tokens, text_architecture))
                rows.append(row)
                print(json.dumps(row), flush=True)
    loader = loader_throughput(args.loader_clips, base.train.batch_size, base.data.max_seconds,
                               list(base.data.languages))
    plain = [r for r in rows if r["option"] == "plain" and not r["compile"]]
    step_rate = base.train.batch_size / min(r["step_s"] for r in plain) if plain else float("nan")
    summary = {"loader_clips_per_s": loader, "fastest_step_clips_per_s": step_rate,
               "loader_keeps_up": loader >= step_rate}
    print(json.dumps(summary))
    print(f"\n{'scheme':<8}{'option':<15}{'amp':<6}{'compile':<9}{'measured MiB':>14}{'predicted MiB':>15}"
          f"{'ratio':>7}{'step s':>9}")
    for r in rows:
        pred = r.get("predicted_mib")
        print(f"{r['scheme']:<8}{r['option']:<15}{r['amp']:<6}{str(r['compile']):<9}{r['measured_mib']:>14,.1f}"
              f"{pred if pred is None else format(pred, ',.1f'):>15}"
              f"{r.get('measured_over_predicted', float('nan')):>7.3f}{r['step_s']:>9.3f}")
    print(f"loader {loader:.1f} clips/s vs the fastest plain step's {step_rate:.1f} clips/s")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, **summary}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
