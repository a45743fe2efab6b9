"""The GPU suite: ``torch.cuda.max_memory_allocated`` of real training steps beside ``mlatr plan``'s prediction.

Cases: every ATRI preset (ML-CLAP, CACL, KCL on AudioCaps and Clotho; the presets of one scheme differ only
in their data, so the AudioCaps preset's model and step run with each dataset's lengths) x precision (fp32 with
TF32, as the presets; bf16 autocast) x attention (``sdpa``: both encoders' fused kernels; ``eager``: both
keep their score tensors) x batch (the typical and the worst step of an epoch: caption tokens and clip
seconds from ``benchmarks/gpu_suite_lengths.json``, which ``mlatr plan --manifest`` computed), plus two memory
options (gradient caching in chunks of 8, gradient checkpointing) on KCL / AudioCaps / bf16 / worst batch.

Each case builds nothing new on the GPU but the objective and the optimizer (one dual encoder per attention
form, at full size with random weights: no downloads, :func:`mlatr.lab.planning.architectures.build_planned_model`),
takes one warm-up step (the optimizer's state), resets the peak, and runs ``--steps`` steps with the trainer's
:class:`~mlatr.training.step.StepRunner` and optimizer: ``measured_mib`` is their
``torch.cuda.max_memory_allocated``, ``step_s`` the median step time. ``predicted_mib`` is the planner's figure
for the same config and lengths (a fake trace, CUDA's kernels, the GPU's cuBLAS workspace), computed in worker
processes on the CPU while the GPU measures. A case that runs out of memory is recorded as such. Cases stop
being started after ``--budget-s`` seconds, so the suite ends in time; those left are listed.

On the CPU (``--device cpu --tiny``: toy sizes, what the tests run) the measurement is the real step's
live-tensor peak (:class:`~mlatr.lab.planning.tracker.LiveTensorTracker`) with the kernel substitutions a CPU can
run, so the mechanics are tested without a GPU.

Imports: torch, numpy, pyyaml, transformers and mlatr's planning and training modules (no audio decoding,
no search libraries). Run it through ``benchmarks/gpu_suite.sh``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from mlatr.inference.process_group import DistContext
from mlatr.lab.planning.architectures import ArchitectureOnlyText, build_planned_model
from mlatr.lab.planning.cuda_kernels import ON_CPU, cuda_choices
from mlatr.lab.planning.gpu_plan import MIB, predicted_bytes
from mlatr.lab.planning.gpus import GPUS
from mlatr.lab.planning.step_trace import StepTracer, step_batch
from mlatr.lab.planning.tracker import LiveTensorTracker
from mlatr.training.config import Config, load_config
from mlatr.training.objective import build_objective
from mlatr.training.step import StepRunner
from mlatr.training.trainer import build_optimizer

ROOT = Path(__file__).resolve().parents[1]
SCHEMES = ("mlclap", "cacl", "kcl")
DATASETS = ("audiocaps", "clotho")
PRECISIONS = {"fp32": ["optim.amp='off'"], "bf16": ["optim.amp=auto"]}
ATTENTIONS = {"sdpa": ["model.audio.attention=sdpa", "model.text.attention=sdpa"],
              "eager": ["model.audio.attention=eager", "model.text.attention=eager"]}
OPTIONS = {"plain": [], "grad-cache-8": ["optim.grad_cache_chunk=8"],
           "checkpointing": ["model.audio.gradient_checkpointing=true", "model.text.gradient_checkpointing=true"]}
#: --tiny: the presets' classes at toy sizes (the CPU mechanics test), the text tower's architecture replaced.
TINY = ["model.audio={name: ced, dim: 32, depth: 1, num_heads: 2}", "model.embed_dim=32", "train.batch_size=4",
        "data.languages=[eng,fra,deu]"]
TINY_TEXT = {"vocab_size": 300, "d_model": 32, "encoder_layers": 1, "encoder_attention_heads": 2,
             "encoder_ffn_dim": 64, "max_position_embeddings": 64}
TINY_LENGTHS = {d: {"typical": {"caption_tokens": 8, "audio_seconds": 0.5},
                    "worst": {"caption_tokens": 12, "audio_seconds": 1.0}} for d in DATASETS}


@dataclass
class Case:
    scheme: str
    dataset: str
    precision: str
    attention: str
    batch: str
    option: str
    caption_tokens: int
    audio_seconds: float
    result: dict = field(default_factory=dict)

    @property
    def build_key(self) -> tuple[str, str]:
        """Cases of one key run on one built model (gradient checkpointing is built in)."""
        return self.attention, "checkpointing" if self.option == "checkpointing" else "plain"

    def overrides(self, tiny: bool) -> list[str]:
        return ((TINY if tiny else []) + [f"objective.scheme={self.scheme}", f"data.max_seconds={self.audio_seconds!r}"]
                + PRECISIONS[self.precision] + ATTENTIONS[self.attention] + OPTIONS[self.option])


def all_cases(lengths: dict, schemes: list[str], options: list[str]) -> list[Case]:
    cases = []
    for attention in ATTENTIONS:
        for dataset in DATASETS:
            for scheme in schemes:
                for precision in PRECISIONS:
                    for batch in ("typical", "worst"):
                        lb = lengths[dataset].get(scheme, lengths[dataset])[batch]  # per scheme where given
                        cases.append(Case(scheme, dataset, precision, attention, batch, "plain",
                                          lb["caption_tokens"], lb["audio_seconds"]))
    worst = lengths["audiocaps"].get("kcl", lengths["audiocaps"])["worst"]
    for option in options:
        if option != "plain" and "kcl" in schemes:
            cases.append(Case("kcl", "audiocaps", "bf16", "sdpa", "worst", option, worst["caption_tokens"],
                              worst["audio_seconds"]))
    return cases


def case_config(config: str, case: Case, tiny: bool) -> Config:
    return load_config(config.format(scheme=case.scheme), case.overrides(tiny))


def predict(job: tuple[str, list[Case], bool, str, str]) -> list[float]:
    """Predicted MiB of each case (one worker: cases sharing a scheme and a build, traced on one StepTracer)."""
    config, cases, tiny, gpu_name, device = job
    torch.set_num_threads(1)
    gpu, out, tracer = GPUS[gpu_name], [], None
    kernels = True if device == "cuda" else ON_CPU
    for case in cases:
        cfg = case_config(config, case, tiny)
        try:
            if tracer is None or not tracer.reuses(cfg):
                tracer = StepTracer(cfg, case.caption_tokens, fake=True, foreach=True, cuda_kernels=kernels,
                                    text_architecture=TINY_TEXT if tiny else None)
            amp = "bf16" if cfg.optim.amp == "auto" else "off"
            trace = tracer.trace(cfg, amp=amp, flops=False, caption_tokens=case.caption_tokens)
            out.append((predicted_bytes(trace, gpu) if device == "cuda" else trace.peak) / MIB)
        except Exception as exc:  # a case the planner cannot trace is reported, the others still are
            out.append(f"not predicted: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            tracer = None
    return out


def measure(model, cfg: Config, case: Case, device: torch.device, steps: int) -> dict:
    """Peak memory and median time of ``steps`` steady-state steps of ``case`` on the built ``model``."""
    if isinstance(model.text_encoder, ArchitectureOnlyText):
        model.text_encoder.tokenizer.pieces = max(1, case.caption_tokens - 2)
    objective = build_objective(cfg.objective, cfg.train.batch_size).to(device)
    optimizer = build_optimizer(cfg, model, objective, foreach=True if device.type == "cpu" else None)
    amp = cfg.optim.amp == "auto"
    autocast = ((lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if amp
                else (lambda: torch.autocast(device.type, enabled=False)))
    runner = StepRunner(model, model, objective, DistContext(), device, autocast, cfg.optim.grad_cache_chunk)
    inputs = step_batch(cfg, cfg.train.batch_size, case.caption_tokens, real=True)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    tracker = LiveTensorTracker() if device.type == "cpu" else None
    times = []
    try:
        with cuda_choices(ON_CPU) if device.type == "cpu" else nullcontext():  # CUDA runs its own kernels
            for k in range(steps + 1):
                if k == 1:  # the warm-up made the optimizer's state: a steady-state step's peak from here
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
    except torch.OutOfMemoryError as exc:
        return {"measured_mib": None, "error": f"out of memory: {str(exc).splitlines()[0]}"}
    finally:
        optimizer.zero_grad(set_to_none=True)
        del optimizer, objective, runner, inputs, params
        if device.type == "cuda":
            torch.cuda.empty_cache()


def build(config: str, case: Case, tiny: bool, device: torch.device):
    cfg = case_config(config, case, tiny)
    torch.manual_seed(0)
    return build_planned_model(cfg, case.caption_tokens, TINY_TEXT if tiny else None).to(device).train()


def table(cases: list[Case]) -> str:
    head = (f"{'scheme':<7}{'dataset':<10}{'precision':<10}{'attention':<10}{'batch':<8}{'option':<14}"
            f"{'tokens':>7}{'seconds':>8}{'predicted MiB':>14}{'measured MiB':>13}{'meas/pred':>10}{'step s':>8}")
    lines = [head]
    for c in cases:
        r = c.result
        measured = r.get("measured_mib")
        pred = r.get("predicted_mib")
        ratio = f"{measured / pred:.3f}" if measured and pred else "-"
        shown = f"{measured:,.0f}" if measured else r.get("error", "not run")[:12]
        step = f"{r['step_s']:.3f}" if "step_s" in r else "-"
        lines.append(f"{c.scheme:<7}{c.dataset:<10}{c.precision:<10}{c.attention:<10}{c.batch:<8}{c.option:<14}"
                     f"{c.caption_tokens:>7}{c.audio_seconds:>8g}{pred if pred is None else format(pred, ',.0f'):>14}"
                     f"{shown:>13}{ratio:>10}{step:>8}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/atri-{scheme}-audiocaps.yaml",
                        help="the preset of each scheme ({scheme} is filled in)")
    parser.add_argument("--lengths", default=str(ROOT / "benchmarks" / "gpu_suite_lengths.json"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gpu", default="h100-80gb", choices=sorted(GPUS), help="the plan's GPU (workspace size)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--schemes", default=",".join(SCHEMES))
    parser.add_argument("--options", default=",".join(OPTIONS))
    parser.add_argument("--attentions", default=",".join(ATTENTIONS))
    parser.add_argument("--datasets", default=",".join(DATASETS), help="the datasets whose lengths are measured")
    parser.add_argument("--budget-s", type=float, default=330.0, help="start no case after this many seconds")
    parser.add_argument("--workers", type=int, default=6, help="processes computing the predictions")
    parser.add_argument("--tiny", action="store_true", help="toy sizes (the CPU mechanics test)")
    parser.add_argument("--out", default="gpu-suite-out", help="folder for gpu-suite.json and gpu-suite.txt")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    lengths = TINY_LENGTHS if args.tiny else json.loads(Path(args.lengths).read_text(encoding="utf-8"))["lengths"]
    attentions, datasets = args.attentions.split(","), args.datasets.split(",")
    cases = [c for c in all_cases(lengths, args.schemes.split(","), args.options.split(","))
             if c.attention in attentions and c.dataset in datasets]
    groups: dict[tuple, list[Case]] = {}
    for c in cases:
        groups.setdefault((c.scheme, c.attention, c.option == "checkpointing"), []).append(c)
    jobs = [(args.config, group, args.tiny, args.gpu, device.type) for group in groups.values()]
    pool = multiprocessing.get_context("spawn").Pool(min(args.workers, len(jobs)))
    predictions = pool.map_async(predict, jobs)
    model, built = None, None
    for case in sorted(cases, key=lambda c: c.build_key):
        if time.perf_counter() - started > args.budget_s:
            case.result = {"error": "not run (time budget)"}
            continue
        if built != case.build_key:
            model = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
            model, built = build(args.config, case, args.tiny, device), case.build_key
        case.result = measure(model, case_config(args.config, case, args.tiny), case, device, args.steps)
        print(json.dumps({**asdict(case), "result": case.result}), flush=True)
    for group, predicted in zip(groups.values(), predictions.get(), strict=True):
        for case, mib in zip(group, predicted, strict=True):
            if isinstance(mib, str):
                case.result["prediction_error"] = mib
                continue
            case.result["predicted_mib"] = mib
            if case.result.get("measured_mib"):
                case.result["measured_over_predicted"] = case.result["measured_mib"] / mib
    pool.close()
    text = table(cases)
    ratios = [c.result["measured_over_predicted"] for c in cases if "measured_over_predicted" in c.result]
    summary = (f"{len(ratios)} of {len(cases)} cases measured; measured / predicted from {min(ratios):.3f} to "
               f"{max(ratios):.3f}; within 10 %: {sum(abs(r - 1) <= 0.10 for r in ratios)}" if ratios else
               "no case measured")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    record = {"device": device_name, "torch": torch.__version__, "gpu_plan": args.gpu, "steps": args.steps,
              "lengths": lengths, "seconds": time.perf_counter() - started, "summary": summary,
              "cases": [{**asdict(c)} for c in cases]}
    (out / "gpu-suite.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    (out / "gpu-suite.txt").write_text(f"{device_name}, torch {torch.__version__}\n{text}\n{summary}\n",
                                       encoding="utf-8")
    print(f"\n{device_name}, torch {torch.__version__}\n{text}\n{summary}\n"
          f"wrote {out / 'gpu-suite.json'} and {out / 'gpu-suite.txt'} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
