"""Overhead of SupCLAP's SVR on one training step: InfoNCE vs + bi-DynamicSVR vs + bi-StaticSVR.

One step = encode a batch of clips and captions with the demo's dual encoder (``mlatr demo`` model),
the objective (ML-CLAP pairing, InfoNCE, optionally + SVR), backward and the AdamW step, at the same
batch (default 32 clips of 6 s, one caption each). Two figures, as in SupCLAP Table 14:

- *step time*: median wall time and median process CPU time of the step, the three variants
  interleaved step by step in one process (so machine-load changes hit all alike; CPU time is less
  sensitive to other jobs than wall time); plus the median CPU time of the objective alone (forward
  + backward on fixed embeddings, N = batch, d = 96), which is where SVR's work lies;
- *peak memory*: each variant in its own subprocess (peak RSS only grows within a process); on a
  GPU ``torch.cuda.max_memory_allocated``. On CPU the RSS figure includes the Python interpreter,
  torch and the allocator's caching, so it is coarse (a few MB of noise) next to SVR's extra tensors
  (``O(N^2 + N d)`` floats: a few hundred KB at N = 32); we also print that analytic size.

Goal (issue 4): SVR adds <= 5 % step time and <= 2 % memory (SupCLAP Table 14 reports ~0 %).

    .venv/bin/python benchmarks/bench_svr_overhead.py [--batch 32] [--steps 15] [--warmup 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

VARIANTS = {
    "InfoNCE": None,
    "+ bi-DynamicSVR": {"radius": "dynamic", "bidirectional": True, "beta": 0.01},
    "+ bi-StaticSVR": {"radius": "static", "bidirectional": True, "beta": 0.01},
}

WORDS = ("dog bark car horn rain wind bird song door knock engine water bell siren crowd "
         "music piano guitar speech laugh step glass break train whistle").split()


def build(variant: str, batch: int, seconds: float, device):
    """(model, objective, optimizer, inputs) of one variant, all seeded the same."""
    import torch

    from mlatr.lab.experiments.demo import demo_config
    from mlatr.losses.schemes import Selection
    from mlatr.models import build_audio_encoder, build_text_encoder
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.training.config import ObjectiveConfig, SVRConfig
    from mlatr.training.objective import build_objective

    g = torch.Generator().manual_seed(0)
    captions = [" ".join(WORDS[int(i)] for i in torch.randint(len(WORDS), (8,), generator=g)) for _ in range(batch)]
    model_cfg = demo_config("unused", "mlclap", 1)["model"]
    torch.manual_seed(0)
    audio_opts, text_opts = dict(model_cfg["audio"]), dict(model_cfg["text"])
    text_opts["corpus"] = captions * 4
    model = DualEncoder(build_audio_encoder(audio_opts.pop("name"), **audio_opts),
                        build_text_encoder(text_opts.pop("name"), **text_opts),
                        embed_dim=model_cfg["embed_dim"], temperature=model_cfg["temperature"]).to(device).train()
    svr = VARIANTS[variant]
    objective = build_objective(ObjectiveConfig(scheme="mlclap", svr=SVRConfig(**svr) if svr else None),
                                batch).to(device)
    params = list(model.parameters()) + list(objective.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    wave = 0.1 * torch.randn(batch, int(16000 * seconds), generator=g).to(device)
    lengths = torch.full((batch,), wave.shape[1], dtype=torch.long, device=device)

    sel = Selection(captions, ["eng"] * batch, torch.arange(batch)[:, None], [["eng"]] * batch)  # one caption a clip
    return model, objective, optimizer, (wave, lengths, captions, ["eng"] * batch, sel)


def train_step(model, objective, optimizer, inputs) -> float:
    wave, lengths, captions, langs, sel = inputs
    optimizer.zero_grad(set_to_none=True)
    loss = objective(model.encode_audio(wave, lengths), model.encode_text(captions, langs), sel,
                     model.temperature).total
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def objective_only(objective, audio, text, sel, temperature) -> None:
    from mlatr.models.outputs import EncoderOutput

    a = audio.detach().requires_grad_(True)
    t = text.detach().requires_grad_(True)
    objective(EncoderOutput(a), EncoderOutput(t), sel, temperature).total.backward()


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_variants(batch: int, seconds: float, steps: int, warmup: int, device) -> dict[str, dict[str, float]]:
    import statistics

    import torch

    built = {v: build(v, batch, seconds, device) for v in VARIANTS}
    step_times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    obj_times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu_times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    g = torch.Generator().manual_seed(1)
    emb_a = torch.nn.functional.normalize(torch.randn(batch, 96, generator=g), dim=1).to(device)
    emb_t = torch.nn.functional.normalize(torch.randn(batch, 96, generator=g), dim=1).to(device)
    for i in range(warmup + steps):
        for v, (model, objective, optimizer, inputs) in built.items():
            sync(device)
            t0, c0 = time.perf_counter(), time.process_time()
            train_step(model, objective, optimizer, inputs)
            sync(device)
            t1, c1 = time.perf_counter(), time.process_time()
            for _ in range(10):
                objective_only(objective, emb_a, emb_t, inputs[4], 0.07)
            sync(device)
            c2 = time.process_time()
            if i >= warmup:
                step_times[v].append(t1 - t0)
                cpu_times[v].append(c1 - c0)
                obj_times[v].append((c2 - c1) / 10)
    return {v: {"step_ms": 1e3 * statistics.median(step_times[v]), "cpu_ms": 1e3 * statistics.median(cpu_times[v]),
                "objective_ms": 1e3 * statistics.median(obj_times[v])} for v in VARIANTS}


def child(variant: str, batch: int, seconds: float, steps: int, device_name: str) -> None:
    """One variant's peak memory over a few steps (run in a fresh process)."""
    import torch

    from mlatr.training.resources import memory_kind, peak_memory_mb, reset_peak_memory

    device = torch.device(device_name)
    model, objective, optimizer, inputs = build(variant, batch, seconds, device)
    reset_peak_memory(device)
    for _ in range(steps):
        train_step(model, objective, optimizer, inputs)
    print(json.dumps({"peak_mb": peak_memory_mb(device), "kind": memory_kind(device)}))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seconds", type=float, default=6.0, help="clip length (the demo's training crop)")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--memory-steps", type=int, default=4)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: on a shared machine more threads only add contention)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if args.child:
        child(args.child, args.batch, args.seconds, args.memory_steps, str(device))
        return 0
    print(f"device={device} threads={torch.get_num_threads()} cpus={os.cpu_count()} "
          f"load={os.getloadavg()[0]:.1f} batch={args.batch} clip={args.seconds}s steps={args.steps}")
    memory = {}
    for v in VARIANTS:
        out = subprocess.run([sys.executable, __file__, "--child", v, "--threads", str(args.threads),
                              "--batch", str(args.batch), "--seconds",
                              str(args.seconds), "--memory-steps", str(args.memory_steps), "--device", str(device)],
                             check=True, capture_output=True, text=True).stdout
        memory[v] = json.loads(out.strip().splitlines()[-1])
    times = time_variants(args.batch, args.seconds, args.steps, args.warmup, device)
    ref_t, ref_m = times["InfoNCE"]["step_ms"], memory["InfoNCE"]["peak_mb"]
    kind = memory["InfoNCE"]["kind"]
    ref_c = times["InfoNCE"]["cpu_ms"]
    print(f"{'variant':<17} {'step (ms)':>10} {'time +%':>8} {'step CPU (ms)':>14} {'CPU +%':>7} "
          f"{'objective CPU (ms)':>19} {kind + ' (MB)':>22} {'mem +%':>7}")
    for v in VARIANTS:
        t, c, m = times[v]["step_ms"], times[v]["cpu_ms"], memory[v]["peak_mb"]
        print(f"{v:<17} {t:>10.1f} {100 * (t / ref_t - 1):>+8.1f} {c:>14.1f} {100 * (c / ref_c - 1):>+7.1f} "
              f"{times[v]['objective_ms']:>19.3f} {m:>22.1f} {100 * (m / ref_m - 1):>+7.1f}")
    n, d = args.batch, 96
    extra = 4 * (4 * n * n + 8 * n * d) / 1024  # sim matrices, support vectors and their grads, float32
    print(f"SVR's extra tensors (analytic, N={n}, d={d}): ~{extra:.0f} KB; the load average was "
          f"{os.getloadavg()[0]:.1f} at the end (other jobs on the machine make step times noisy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
