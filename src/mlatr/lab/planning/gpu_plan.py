"""A training plan for one GPU: memory by part, FLOPs, a time lower bound, the largest batch, options that fit.

Everything comes from traced steps (:func:`~mlatr.lab.planning.step_trace.trace_step`); no constant is fitted
to a measurement. The predicted ``torch.cuda.max_memory_allocated`` of a step is

    traced peak of live storages + the allocator's 512-byte rounding of them + the cuBLAS workspace

and a config fits a GPU when that is at most the GPU's memory minus ``reserve_mib`` (the CUDA context, the
libraries' own allocations and the allocator's cached but unallocated blocks, none of which
``memory_allocated`` counts; an assumption the user sets, stated in every plan).

- **Batches**: with a manifest (:mod:`mlatr.lab.planning.caption_lengths`) the plan traces the worst step of an
  epoch (the expected epoch maximum of the padded caption length and of the clip length: the run's peak)
  and a typical one (their medians), and reports both peaks; without one, every caption is
  ``caption_tokens`` long and every clip ``data.max_seconds``, and the plan says so.
- **Time lower bound**: the step's FLOPs at the GPU's peak (bf16 under AMP; TF32 for fp32 with
  ``optim.tf32``, else the fp32 peak); a real step is slower (memory-bound operations, launch overheads, the
  data loader), never faster.
- **Largest batch**: the forward-backward peak is traced at ``B`` and ``2B`` (on the same built model);
  activations grow linearly with the batch (every clip and caption adds the same tensors; the loss's ``N x N``
  similarity matrices are quadratic but kilobytes), the optimizer step's peak does not depend on it. The
  largest batch is where the line through the two traces meets the budget (the optimizer step's peak must fit
  too).
- **Cheapest option set that fits** (a config that does not fit): candidates in order of their time cost,
  each traced, the first that fits is reported with its memory and FLOPs relative to the config's:
  bf16 AMP (when off), gradient checkpointing of both encoders, gradient caching (chunks of 8), both, and
  last a frozen text encoder (which changes what is trained).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.lab.planning.caption_lengths import LengthPlan
from mlatr.lab.planning.gpus import GPU
from mlatr.lab.planning.step_trace import PARTS, StepTrace, StepTracer
from mlatr.training.config import Config, config_from_dict

MIB = 2**20

#: Training clips of the papers' datasets, for an epoch's time when the config's manifest is not here:
#: AudioCaps' training split (Kim et al. 2019) and Clotho v2.1's development split (Drossos et al. 2020).
KNOWN_TRAIN_CLIPS = {"audiocaps": 49_838, "clotho": 3_839}

#: Option sets tried, in order of their time cost, for a config that does not fit (see the module docstring).
OPTION_SETS: list[tuple[str, list[str]]] = [
    ("bf16 AMP", ["optim.amp=auto"]),
    ("gradient checkpointing", ["model.audio.gradient_checkpointing=true", "model.text.gradient_checkpointing=true"]),
    ("gradient caching (chunk 8)", ["optim.grad_cache_chunk=8"]),
    ("gradient caching (chunk 8) + checkpointing", ["optim.grad_cache_chunk=8",
                                                   "model.audio.gradient_checkpointing=true",
                                                   "model.text.gradient_checkpointing=true"]),
    ("frozen text encoder + checkpointing", ["model.text.freeze=true", "model.audio.gradient_checkpointing=true"]),
]


def amp_of(cfg: Config) -> str:
    """``bf16`` when the run would use autocast on a GPU (``optim.amp: auto``), else ``off``."""
    return "bf16" if cfg.optim.amp == "auto" else "off"


#: ``--precision`` values and the overrides that give them.
PRECISIONS = {"bf16": ["optim.amp=auto"], "fp32": ["optim.amp='off'"]}


def precision_of(cfg: Config) -> str:
    """The run's precision in words: bf16 autocast, fp32 with TF32 matrix products, or fp32."""
    if cfg.optim.amp == "auto":
        return "bf16 autocast"
    return "fp32, TF32 matmuls" if cfg.optim.tf32 else "fp32"


def attention_of(cfg: Config) -> str:
    """The encoders' ``attention`` options in words (``default``: the encoder's own, ``sdpa`` for CED and the
    Hugging Face towers)."""
    return f"audio {cfg.model.audio.get('attention') or 'default'}, text {cfg.model.text.get('attention') or 'default'}"


def with_overrides(cfg: Config, overrides: list[str]) -> Config:
    """``cfg`` with ``key=value`` overrides applied (validated as a config file's are)."""
    return config_from_dict(cfg.to_dict(), overrides)


def predicted_bytes(trace: StepTrace, gpu: GPU) -> int:
    """Predicted ``max_memory_allocated``: the traced peak, its allocator rounding, the cuBLAS workspace."""
    return trace.peak + trace.rounding + int(gpu.cublas_workspace_mib * MIB)


def train_clips(cfg: Config, given: int | None) -> tuple[int | None, str]:
    """Clips per epoch and where the number comes from: ``given``, the config's manifest, or a known dataset."""
    if given is not None:
        return given, "--train-clips"
    path = Path(cfg.data.manifest)
    if cfg.data.manifest and path.is_file():
        try:
            return len(Manifest.load(path, skip_bad=True).split(cfg.data.train_split)), str(path)
        except MlatrError:
            pass
    for name, clips in KNOWN_TRAIN_CLIPS.items():
        if name in cfg.data.manifest.lower():
            return clips, f"{name} training split (published size)"
    return None, "unknown (give --train-clips)"


class Tracers:
    """The plan's :class:`~mlatr.lab.planning.step_trace.StepTracer` s: a config that differs from one already
    built only in what a step does (its batch, caption and clip lengths, AMP, gradient caching) is traced on
    that one's model."""

    def __init__(self, caption_tokens: int, say: Callable[[str], None]):
        self.caption_tokens, self.say = caption_tokens, say
        self.built: list[StepTracer] = []

    def trace(self, cfg: Config, flops: bool, caption_tokens: int | None = None) -> StepTrace:
        tokens = caption_tokens or self.caption_tokens
        self.say(f"tracing batch {cfg.train.batch_size}, {cfg.objective.scheme}, captions of {tokens} tokens, "
                 f"{cfg.data.max_seconds:g} s clips, grad_cache_chunk={cfg.optim.grad_cache_chunk}, amp {amp_of(cfg)}")
        tracer = next((t for t in self.built if t.reuses(cfg)), None)
        if tracer is None:
            tracer = StepTracer(cfg, tokens, fake=True, foreach=True, cuda_kernels=True)
            self.built.append(tracer)
        return tracer.trace(cfg, amp=amp_of(cfg), flops=flops, caption_tokens=tokens)


def memory_summary(trace: StepTrace, gpu: GPU) -> dict[str, Any]:
    """A trace's memory in MiB: parts at the peak, rounding, workspace, the predicted total, each phase's peak."""
    return {"parts_mib": {k: trace.parts[k] / MIB for k in PARTS}, "rounding_mib": trace.rounding / MIB,
            "workspace_mib": gpu.cublas_workspace_mib, "predicted_mib": predicted_bytes(trace, gpu) / MIB,
            "peak_phase": trace.phase, "phase_peaks_mib": {k: v / MIB for k, v in trace.phase_peaks.items()}}


def largest_batch(small: StepTrace, large: StepTrace, budget: int, gpu: GPU) -> int:
    """The largest batch whose forward-backward peak (on the line through two traces) and optimizer-step
    peak fit ``budget`` bytes; 0 when none does."""
    fb_small, fb_large = small.phase_peaks["forward-backward"], large.phase_peaks["forward-backward"]
    slope = (fb_large - fb_small) / (large.batch_size - small.batch_size)
    fixed = small.rounding + int(gpu.cublas_workspace_mib * MIB)
    if max(small.phase_peaks["optimizer step"], large.phase_peaks["optimizer step"]) + fixed > budget:
        return 0
    intercept = fb_small - slope * small.batch_size
    if slope <= 0:
        return large.batch_size
    return max(0, math.floor((budget - fixed - intercept) / slope))


def with_lengths(cfg: Config, seconds: float) -> Config:
    """``cfg`` whose clips are ``seconds`` long (the batch's padded length; never above the crop)."""
    return with_overrides(cfg, [f"data.max_seconds={min(float(seconds), cfg.data.max_seconds)!r}"])


def make_plan(cfg: Config, gpu: GPU, caption_tokens: int = 32, reserve_mib: float = 1024.0,
              clips: int | None = None, search: bool = True,
              say: Callable[[str], None] = lambda m: print(m, file=sys.stderr), lengths: LengthPlan | None = None,
              tracers: Tracers | None = None) -> dict[str, Any]:
    """The plan of ``cfg`` on ``gpu`` (see the module docstring) as a JSON-able dict.

    ``lengths``: the manifest's step lengths; the plan's figures are then the worst step's, and
    ``typical_batch`` the typical step's. ``tracers``: built models to reuse (plans of several precisions)."""
    budget = int((gpu.memory_mib - reserve_mib) * MIB)
    tracers = tracers or Tracers(caption_tokens, say)
    if lengths is not None:
        caption_tokens, seconds = lengths.batch("worst")
        cfg = with_lengths(cfg, seconds)
    trace = tracers.trace(cfg, True, caption_tokens)
    amp = amp_of(cfg)
    step_s = trace.flops / gpu.peak_flops(amp, cfg.optim.tf32)
    n_clips, clips_from = train_clips(cfg, clips)
    steps = math.ceil(n_clips / cfg.train.batch_size) if n_clips else None
    plan: dict[str, Any] = {
        "gpu": gpu.name, "gpu_memory_mib": gpu.memory_mib, "reserve_mib": reserve_mib, "budget_mib": budget / MIB,
        "scheme": cfg.objective.scheme, "batch_size": cfg.train.batch_size, "languages": len(cfg.data.languages),
        "texts_per_step": trace.texts, "audio_seconds": cfg.data.max_seconds, "caption_tokens": caption_tokens,
        "amp": amp, "precision": precision_of(cfg), "attention": attention_of(cfg),
        "grad_cache_chunk": cfg.optim.grad_cache_chunk, "parameters": trace.parameters,
        "trainable_parameters": trace.trainable, **memory_summary(trace, gpu),
        "fits": predicted_bytes(trace, gpu) <= budget,
        "flops_per_step": trace.flops,
        "step_time_lower_bound_s": step_s, "train_clips": n_clips, "train_clips_from": clips_from,
        "steps_per_epoch": steps, "epoch_time_lower_bound_s": step_s * steps if steps else None,
    }
    if lengths is not None:
        plan["lengths"] = lengths.summary()
        typical_tokens, typical_seconds = lengths.batch("typical")
        typical = tracers.trace(with_lengths(cfg, typical_seconds), False, typical_tokens)
        plan["typical_batch"] = {"caption_tokens": typical_tokens, "audio_seconds": typical_seconds,
                                 **memory_summary(typical, gpu)}
    else:
        plan["lengths"] = {"assumed": f"no manifest: every caption {caption_tokens} tokens (--caption-tokens), "
                                      f"every clip {cfg.data.max_seconds:g} s (data.max_seconds); give --manifest "
                                      f"to plan the typical and the worst batch from the data"}
    if not search:
        return plan
    bigger = with_overrides(cfg, [f"train.batch_size={2 * cfg.train.batch_size}"])
    plan["largest_batch"] = largest_batch(trace, tracers.trace(bigger, False, caption_tokens), budget, gpu)
    if not plan["fits"]:
        plan["fitting_options"] = None
        for label, overrides in OPTION_SETS:
            try:
                option_cfg = with_overrides(cfg, overrides)
                if option_cfg.to_dict() == cfg.to_dict():
                    continue
                option = tracers.trace(option_cfg, True, caption_tokens)
            except (MlatrError, TypeError) as exc:
                say(f"option set {label!r} does not apply to this config ({exc})")
                continue
            if predicted_bytes(option, gpu) <= budget:
                plan["fitting_options"] = {
                    "name": label, "overrides": overrides, "predicted_mib": predicted_bytes(option, gpu) / MIB,
                    "flops_ratio": option.flops / trace.flops if trace.flops else None,
                    "step_time_lower_bound_s": option.flops / gpu.peak_flops(amp_of(option_cfg), cfg.optim.tf32)}
                break
    return plan


def sweep(cfg: Config, gpu: GPU, key: str, values: list[str], caption_tokens: int = 32,
          say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> list[dict[str, Any]]:
    """One traced step per value of ``key`` (``languages=K`` takes the first K of ``data.languages``): the
    batch's texts, the predicted memory and its parts, the FLOPs."""
    rows = []
    tracers = Tracers(caption_tokens, say)
    for value in values:
        if key == "languages":
            override = f"data.languages=[{','.join(cfg.data.languages[:int(value)])}]"
        else:
            override = f"{key}={value}"
        point = with_overrides(cfg, [override])
        trace = tracers.trace(point, True)
        rows.append({key: value, "texts_per_step": trace.texts, **memory_summary(trace, gpu),
                     "flops_per_step": trace.flops})
    return rows


def format_plan(plan: dict[str, Any]) -> str:
    """The plan as the table ``mlatr plan`` prints."""
    lines = [f"GPU {plan['gpu']}: {plan['gpu_memory_mib']:,.0f} MiB, budget {plan['budget_mib']:,.0f} MiB "
             f"(minus {plan['reserve_mib']:,.0f} MiB reserved for the CUDA context and the allocator's cache)",
             f"step: {plan['scheme']}, batch {plan['batch_size']}, {plan['texts_per_step']} captions of "
             f"{plan['caption_tokens']} tokens, {plan['audio_seconds']:g} s audio, {plan['precision']}, "
             f"attention {plan['attention']}, grad_cache_chunk {plan['grad_cache_chunk']}",
             *format_lengths(plan["lengths"]),
             f"parameters {plan['parameters']:,} ({plan['trainable_parameters']:,} trained)", "",
             f"memory at the peak ({plan['peak_phase']}):"]
    for part, mib in plan["parts_mib"].items():
        lines.append(f"  {part.replace('_', ' '):<24}{mib:>12,.0f} MiB")
    lines.append(f"  {'allocator rounding':<24}{plan['rounding_mib']:>12,.0f} MiB")
    lines.append(f"  {'cuBLAS workspace':<24}{plan['workspace_mib']:>12,.0f} MiB")
    lines.append(f"  {'predicted max allocated':<24}{plan['predicted_mib']:>12,.0f} MiB  "
                 f"({'fits' if plan['fits'] else 'does NOT fit'})")
    peaks = ", ".join(f"{k} {v:,.0f} MiB" for k, v in plan["phase_peaks_mib"].items())
    lines.append(f"  peaks by phase: {peaks}")
    if "typical_batch" in plan:
        typical = plan["typical_batch"]
        lines.append(f"  typical batch ({typical['caption_tokens']} tokens, {typical['audio_seconds']:g} s): "
                     f"{typical['predicted_mib']:,.0f} MiB predicted; the figures above are the worst batch's")
    lines += ["",
              f"FLOPs per step {plan['flops_per_step'] / 1e12:,.2f} T; time lower bound "
              f"{plan['step_time_lower_bound_s']:.3f} s/step"]
    if plan["steps_per_epoch"]:
        lines.append(f"epoch: {plan['train_clips']:,} clips ({plan['train_clips_from']}), {plan['steps_per_epoch']:,} "
                     f"steps, at least {plan['epoch_time_lower_bound_s']:,.0f} s")
    else:
        lines.append(f"epoch: clips {plan['train_clips_from']}")
    if "largest_batch" in plan:
        lines.append(f"largest batch that fits: {plan['largest_batch']}")
    if "fitting_options" in plan:
        option = plan["fitting_options"]
        if option is None:
            lines.append("no option set tried fits this GPU")
        else:
            lines.append(f"cheapest option set that fits: {option['name']} ({' '.join(option['overrides'])}): "
                         f"{option['predicted_mib']:,.0f} MiB, FLOPs x{option['flops_ratio']:.2f}, "
                         f"at least {option['step_time_lower_bound_s']:.3f} s/step")
    return "\n".join(lines)


def format_lengths(lengths: dict[str, Any]) -> list[str]:
    """The lines saying where the traced lengths come from (a plan's ``lengths``)."""
    if "assumed" in lengths:
        return [f"lengths assumed: {lengths['assumed']}"]
    tokens, audio = lengths["caption_tokens"], lengths["audio_seconds"]
    lines = [f"lengths from {lengths['clips_from']}; tokens counted with {lengths['tokenizer']}",
             f"  padded caption tokens of a step: median {tokens['typical']:g}, p95 {tokens['step_p95']:g}; worst step "
             f"of an epoch ({tokens['steps_per_epoch']:,} steps) expected {tokens['worst']:.1f} (5-95 %: "
             f"{tokens['epoch_max_p5']:g}-{tokens['epoch_max_p95']:g}), longest possible {tokens['longest']:g}",
             f"  padded clip seconds of a step: median {audio['typical']:g}, worst step expected {audio['worst']:.2f}",
             f"  traced: typical batch {lengths['typical']['caption_tokens']} tokens / "
             f"{lengths['typical']['audio_seconds']:g} s, worst batch {lengths['worst']['caption_tokens']} tokens / "
             f"{lengths['worst']['audio_seconds']:g} s"]
    return lines + [f"  note: {note}" for note in lengths["notes"]]


def format_precisions(plans: list[dict[str, Any]]) -> str:
    """Plans of one config in several precisions side by side: both peaks, fit, the time bound."""
    lines = [f"{'precision':<22}{'typical MiB':>13}{'worst MiB':>11}{'fits':>6}{'s/step (bound)':>16}"]
    for p in plans:
        typical = p.get("typical_batch", {}).get("predicted_mib", p["predicted_mib"])
        fits = "yes" if p["fits"] else "no"
        lines.append(f"{p['precision']:<22}{typical:>13,.0f}{p['predicted_mib']:>11,.0f}{fits:>6}"
                     f"{p['step_time_lower_bound_s']:>16.3f}")
    return "\n".join(lines)


def format_sweep(key: str, rows: list[dict[str, Any]]) -> str:
    """A sweep as a table: value, captions, parts at the peak, predicted MiB, the forward-backward peak (the
    part that grows with the batch and K when the optimizer step is the peak), TFLOPs."""
    head = (f"{key:>12} {'captions':>9} " + " ".join(f"{p[:12]:>12}" for p in PARTS)
            + f" {'predicted':>12} {'fwd-bwd peak':>13} {'TFLOPs':>8}")
    lines = [head]
    for r in rows:
        parts = " ".join(f"{r['parts_mib'][p]:>12,.0f}" for p in PARTS)
        lines.append(f"{r[key]:>12} {r['texts_per_step']:>9} {parts} {r['predicted_mib']:>12,.0f} "
                     f"{r['phase_peaks_mib']['forward-backward']:>13,.0f} {r['flops_per_step'] / 1e12:>8.2f}")
    return "\n".join(lines)
