"""One training step of a config, traced: the trainer's own model, objective, optimizer and step code.

:func:`trace_step` builds what :class:`~mlatr.training.trainer.Trainer` builds (the config's dual encoder,
:func:`~mlatr.training.objective.build_objective`, :func:`~mlatr.training.trainer.build_optimizer`), runs
:class:`~mlatr.training.step.StepRunner` (plain or gradient-cached, as ``optim.grad_cache_chunk`` says)
on one batch of ``train.batch_size`` clips of ``data.max_seconds`` seconds, every clip captioned in every
language of ``data.languages`` (the scheme selects its captions from them as in training), then clips
the gradients and steps the optimizer as the trainer does. The optimizer state exists before the traced
step (its first step is taken beforehand), so the trace is a steady-state step.

``fake=True`` (a plan): the model is built on the ``meta`` device and made of fake tensors
(``FakeTensorMode``): nothing is allocated or computed, the full-size model costs no memory. ``fake=False``
(the CPU validation): the same step runs for real on random weights and random audio. Both are measured
by the same :class:`~mlatr.lab.planning.tracker.LiveTensorTracker`.

Mixed precision: a GPU run with ``optim.amp: auto`` runs under bf16 autocast. A fake trace runs on the CPU
device (PyTorch's CPU-only build cannot index fake CUDA tensors), so ``amp="bf16"`` traces under CPU
autocast, whose list of bf16 operations (matmul, linear, convolution, attention) is CUDA's; CUDA autocast
also runs some reductions (softmax, layer norm) in fp32 where CPU autocast keeps bf16 (docs/gpu-planning.md).
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from mlatr.inference.process_group import DistContext
from mlatr.lab.planning.architectures import ArchitectureOnlyText, build_planned_model, planning_captions
from mlatr.lab.planning.cuda_kernels import SUBSTITUTIONS, cuda_choices
from mlatr.lab.planning.tracker import LiveTensorTracker, cuda_rounded
from mlatr.losses.schemes import build_scheme
from mlatr.training.config import Config
from mlatr.training.objective import build_objective
from mlatr.training.step import StepInputs, StepRunner
from mlatr.training.trainer import build_optimizer

#: The parts a step's peak is made of, in the order they are printed.
PARTS = ("weights", "gradients", "optimizer_state", "activations")


@dataclass
class StepTrace:
    """What one traced step held and computed.

    ``parts``: bytes alive at the peak by part (weights = parameters and buffers; activations = everything
    else: inputs, saved activations, temporaries); ``peak``: their sum; ``rounding``: what the CUDA
    allocator's 512-byte rounding adds to the storages alive at the peak; ``phase``: where the peak falls
    (forward-backward or optimizer step) and ``phase_peaks`` the peak of each phase; ``flops``: of the whole
    step (forward, backward, optimizer).
    """

    batch_size: int
    texts: int
    parameters: int
    trainable: int
    parts: dict[str, int]
    peak: int
    rounding: int
    phase: str
    phase_peaks: dict[str, int]
    flops: int


class _TracedStepRunner(StepRunner):
    """The trainer's :class:`StepRunner`, minus reading the loss's value: a fake tensor has none."""

    def _loss(self, audio, text, inp, where):
        out = self.objective(audio, text, inp.selection, self.model.temperature, rows=None)
        return out, math.nan, {}


def step_batch(cfg: Config, batch: int, caption_tokens: int, real: bool) -> StepInputs:
    """One batch: ``batch`` clips of ``data.max_seconds`` (zeros, or noise for a real run), each captioned in
    every configured language; the scheme's selection drawn as in training."""
    languages = list(cfg.data.languages)
    samples = int(round(cfg.data.max_seconds * cfg.data.sample_rate))
    captions = planning_captions(batch * len(languages), caption_tokens)
    rows = [captions[i * len(languages):(i + 1) * len(languages)] for i in range(batch)]
    with torch._subclasses.fake_tensor.unset_fake_temporarily():  # the selection is real data (tracker docs)
        selection = build_scheme(cfg.objective.scheme).select(rows, languages, torch.Generator().manual_seed(0))
        owned = torch.ones(batch, dtype=torch.bool)
    waveform = torch.randn(batch, samples) * 0.1 if real else torch.zeros(batch, samples)
    lengths = torch.full((batch,), samples, dtype=torch.long)
    return StepInputs(waveform, lengths, selection.texts, selection.langs, selection, [batch],
                      [len(selection.texts)], owned)


#: Config keys a :class:`StepTracer` may trace other values of without rebuilding its model, objective and
#: optimizer: they change the batch or how the step runs, not what is built (``optim.amp`` is the trace's
#: ``amp`` argument; ``optim.tf32`` changes no tensor). ``train.batch_size`` also sizes a dynamic SVR radius:
#: see :meth:`StepTracer.reuses`.
STEP_KEYS = (("train", "batch_size"), ("optim", "amp"), ("optim", "tf32"), ("optim", "grad_cache_chunk"),
             ("optim", "accumulate"), ("optim", "grad_clip"), ("data", "max_seconds"))


def _built_part(cfg: Config) -> dict:
    """``cfg`` as a dict without :data:`STEP_KEYS` (what decides the model, objective and optimizer)."""
    d = cfg.to_dict()
    for section, key in STEP_KEYS:
        d[section] = {k: v for k, v in d[section].items() if k != key}
    return d


def _tensor_shapes(module: torch.nn.Module) -> list[torch.Size]:
    return [t.shape for t in list(module.parameters()) + list(module.buffers())]


class StepTracer:
    """The model, objective and optimizer of a config built once (with the optimizer's first step taken, so
    its state exists), then :meth:`trace` traces one steady-state step at any batch (see
    :func:`trace_step`; the arguments are its own).

    Building is a large part of a fake trace's cost (the model on the ``meta`` device, its fake copy, the
    warm-up optimizer step), and a plan traces the same model several times (the config, the doubled batch,
    option sets that change only the step). Each :meth:`trace` starts from the state a fresh build leaves:
    weights and optimizer state alive, no gradients (``zero_grad(set_to_none=True)`` after every step), a new
    tracker that counts only those and what the step creates; tests/test_planning.py checks that a reused
    tracer's trace equals a fresh one's.
    """

    def __init__(self, cfg: Config, caption_tokens: int = 32, fake: bool = True, foreach: bool | None = None,
                 cuda_kernels: bool | tuple[str, ...] = False, text_architecture: dict | None = None):
        self.cfg, self.caption_tokens, self.fake = cfg, caption_tokens, fake
        self.cuda_kernels = SUBSTITUTIONS if cuda_kernels is True else tuple(cuda_kernels or ())
        self.mode = FakeTensorMode(allow_non_fake_inputs=True) if fake else nullcontext()
        with torch.device("meta") if fake else nullcontext():
            model = build_planned_model(cfg, caption_tokens, text_architecture)
            objective = build_objective(cfg.objective, cfg.train.batch_size)
        self._objective_shapes = _tensor_shapes(objective)
        with self.mode:
            if fake:
                model, objective = model.to_empty(device="cpu"), objective.to_empty(device="cpu")
            model.train()
            self.model, self.objective = model, objective
            self.optimizer = build_optimizer(cfg, model, objective, foreach=foreach)
            self.params = [p for group in self.optimizer.param_groups for p in group["params"]]
            for p in self.params:  # the optimizer's state exists before a steady-state step
                p.grad = torch.zeros_like(p)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.weights = list(model.parameters()) + list(model.buffers()) + list(objective.parameters()) + \
            list(objective.buffers())
        self.state = [t for s in self.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]

    def reuses(self, cfg: Config) -> bool:
        """Whether :meth:`trace` can trace ``cfg``: it differs from the built config only in
        :data:`STEP_KEYS`, and its batch gives the objective the same parameters (a dynamic SVR radius's
        predictor is sized by the batch)."""
        if _built_part(cfg) != _built_part(self.cfg):
            return False
        if cfg.train.batch_size == self.cfg.train.batch_size:
            return True
        with torch.device("meta"):
            objective = build_objective(cfg.objective, cfg.train.batch_size)
        return _tensor_shapes(objective) == self._objective_shapes

    def trace(self, cfg: Config | None = None, amp: str = "off", flops: bool = True,
              caption_tokens: int | None = None) -> StepTrace:
        """One steady-state step of ``cfg`` (default: the built config; it must satisfy :meth:`reuses`), its
        captions ``caption_tokens`` long (default: the built length)."""
        cfg = cfg or self.cfg
        if not self.reuses(cfg):
            raise ValueError("StepTracer.trace: the config changes what is built; make a new StepTracer")
        tokens = caption_tokens or self.caption_tokens
        if isinstance(self.model.text_encoder, ArchitectureOnlyText):  # its FixedLengthTokenizer: 2 specials
            self.model.text_encoder.tokenizer.pieces = max(1, tokens - 2)
        batch, fake = cfg.train.batch_size, self.fake
        model, objective, optimizer, params = self.model, self.objective, self.optimizer, self.params
        with self.mode:
            runner_cls = _TracedStepRunner if fake else StepRunner
            device = torch.device("cpu")
            autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if amp == "bf16"
                        else (lambda: torch.autocast("cpu", enabled=False)))
            runner = runner_cls(model, model, objective, DistContext(), device, autocast, cfg.optim.grad_cache_chunk)
            tracker = LiveTensorTracker(fake=fake, count_flops=flops)
            kernels = cuda_choices(self.cuda_kernels) if self.cuda_kernels else nullcontext()
            with tracker:
                tracker.track(self.weights + self.state)
                tracker.reset_peak()
                with kernels:
                    inputs = step_batch(cfg, batch, tokens, real=not fake)
                    runner(inputs, cfg.optim.accumulate, True, "planned step")
                    texts = len(inputs.texts)
                    grads = tracker.records_of(p.grad for p in params)
                    windows = {"forward-backward": (tracker.peak, tracker.peak_event)}
                    tracker.reset_peak()
                    if cfg.optim.grad_clip:
                        torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    windows["optimizer step"] = (tracker.peak, tracker.peak_event)
                del inputs
            phase = max(windows, key=lambda k: windows[k][0])
            weight_ids, state_ids = tracker.records_of(self.weights), tracker.records_of(self.state)
            parts = dict.fromkeys(PARTS, 0)
            rounding = 0
            for i in tracker.live_at(windows[phase][1]):
                nbytes = tracker.records[i].nbytes
                part = ("weights" if i in weight_ids else "optimizer_state" if i in state_ids
                        else "gradients" if i in grads else "activations")
                parts[part] += nbytes
                rounding += cuda_rounded(nbytes) - nbytes
        return StepTrace(
            batch_size=batch, texts=texts, parameters=sum(p.numel() for p in model.parameters()),
            trainable=sum(p.numel() for p in params), parts=parts, peak=sum(parts.values()), rounding=rounding,
            phase=phase, phase_peaks={k: v[0] for k, v in windows.items()}, flops=tracker.flops,
        )


def trace_step(cfg: Config, caption_tokens: int = 32, fake: bool = True, amp: str = "off",
               foreach: bool | None = None, flops: bool = True, cuda_kernels: bool | tuple[str, ...] = False,
               text_architecture: dict | None = None) -> StepTrace:
    """Trace one steady-state training step of ``cfg`` (see the module docstring).

    Args:
        cfg: the training config (``train.batch_size``, the model, objective, optimizer, memory options).
        caption_tokens: padded caption length in tokens (the planner has no captions).
        fake: fake tensors (a plan) or a real run on random weights (the validation).
        amp: ``"bf16"`` to trace under bf16 autocast (a GPU run with ``optim.amp: auto``), ``"off"``.
        foreach: the optimizer's multi-tensor implementation (True: what PyTorch picks on CUDA).
        flops: count FLOPs (``torch.utils.flop_counter``'s formulas).
        cuda_kernels: dropout and attention take the kernels CUDA would
            (:func:`~mlatr.lab.planning.cuda_kernels.cuda_choices`; a plan for a GPU): True for all, or the names
            of some (:data:`~mlatr.lab.planning.cuda_kernels.ON_CPU` for a real CPU run).
        text_architecture: values replacing a Hugging Face text tower's published ones (smaller towers for
            the validation; :func:`~mlatr.lab.planning.architectures.build_planned_model`).
    """
    tracer = StepTracer(cfg, caption_tokens, fake=fake, foreach=foreach, cuda_kernels=cuda_kernels,
                        text_architecture=text_architecture)
    return tracer.trace(amp=amp, flops=flops)
