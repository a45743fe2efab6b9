"""torchrun on CPU: step time with 1 and 2 processes and what each process sends per step.

Trains the demo model on the synthetic benchmark (8 languages) with a global batch of ``--batch`` clips
through ``torchrun --nproc_per_node=N`` for N = 1 and 2 (gloo, one thread per process), ``--steps`` steps
after ``--warmup``, and reports the median step time and the bytes each process handed to collectives per
step (:data:`mlatr.training.distributed.TRAFFIC`): ``gather`` = the embeddings (and batch bookkeeping) all
processes gather, ``reduce`` = all-reduces of the trainer (loss-side gradients, logged loss; with a local
loss also the embedding gradients), ``ddp`` = DistributedDataParallel's gradient buckets (all the model's
gradients, every step). A ring all-reduce sends about twice its payload; an all-gather sends its payload to
each other process. On a CPU this checks the mechanics, not the speed-up: 2 processes on a shared 2-core
machine compete with each other and everything else.

    python benchmarks/bench_torchrun.py --steps 10
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = {"KCL": ["objective.scheme=kcl"], "KCL + local loss": ["objective.scheme=kcl", "dist.local_loss=true"],
         "KCL + grad cache 8": ["objective.scheme=kcl", "optim.grad_cache_chunk=8"],
         "ML-CLAP": ["objective.scheme=mlclap"]}


def worker(args) -> None:
    import torch

    from mlatr.inference import process_group
    from mlatr.training import distributed
    from mlatr.training.config import load_config
    from mlatr.training.step import step_inputs
    from mlatr.training.trainer import Trainer

    cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "demo.yaml", [
        f"data.manifest={args.manifest}", f"out_dir={args.out}", f"train.batch_size={args.batch}",
        "train.eval_every=0", "train.progress=false", "data.workers=0", *CASES[args.case]])
    trainer = Trainer(cfg)
    generator = torch.Generator().manual_seed(0)
    times, traffic = [], []
    batches = (batch for epoch in itertools.count() for batch in trainer.batches.epoch(epoch))
    for k in range(args.warmup + args.steps):
        trainer.dist.barrier()
        distributed.TRAFFIC.clear()
        start = time.perf_counter()
        inputs = step_inputs(next(batches), trainer.batches, trainer.objective.scheme, cfg.data.languages,
                             generator, trainer.dist)
        trainer.run_step(inputs, 1, True, "bench")
        trainer.optimizer_step()
        if k >= args.warmup:
            times.append(time.perf_counter() - start)
            traffic.append(dict(distributed.TRAFFIC))
    if trainer.dist.is_main:
        kinds = sorted({k for t in traffic for k in t})
        sent = {k: statistics.median([t.get(k, 0) for t in traffic]) for k in kinds}
        print(json.dumps({"step_s": statistics.median(times), "bytes": sent,
                          "parameters": sum(p.numel() for p in trainer.model.parameters())}), flush=True)
    process_group.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--clips", type=int, default=256, help="training clips of the synthetic data made once")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated names of CASES")
    parser.add_argument("--dir", default="/tmp/mlatr-bench-torchrun")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        worker(args)
        return
    folder = Path(args.dir)
    data = folder / "synth"
    if not (data / "manifest.jsonl").exists():
        subprocess.run([sys.executable, "-m", "mlatr", "data", "synth", "-o", str(data), "--train", str(args.clips),
                        "--val", "4", "--test", "4", "--quiet"], check=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": os.environ.get("GLOO_SOCKET_IFNAME", "lo")}
    print(f"global batch {args.batch}, demo model, 8 languages; load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs", flush=True)
    for case in [c for c in args.cases.split(",") if c]:
        steps = {}
        for n in (1, 2):
            for _attempt in range(2):  # a port picked free may be taken by another program before torchrun binds it
                command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={n}",
                           "--master_addr=127.0.0.1", f"--master_port={free_port()}", __file__, "--case", case,
                           "--manifest", str(data / "manifest.jsonl"),
                           "--out", str(folder / "runs" / str(time.time_ns())),
                           "--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
                out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
                if out.returncode == 0:
                    break
            if out.returncode:
                raise SystemExit(f"{' '.join(command)} failed:\n{out.stderr[-4000:]}")
            r = json.loads([x for x in out.stdout.splitlines() if x.startswith("{")][-1])
            steps[n] = r["step_s"]
            sent = ", ".join(f"{k} {v / 2**10:.1f} KiB" for k, v in r["bytes"].items()) or "nothing"
            print(f"{case:18s} {n} process(es): step {r['step_s']:.3f} s; sent per process and step: {sent} "
                  f"(model: {r['parameters'] / 1e6:.2f} M parameters = {r['parameters'] * 4 / 2**20:.2f} MiB "
                  "of gradients)", flush=True)
        print(f"{case:18s} 2 processes / 1 process step time: x{steps[2] / steps[1]:.2f}", flush=True)


if __name__ == "__main__":
    main()
