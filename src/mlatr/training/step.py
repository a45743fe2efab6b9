"""One training step's forward and backward on the global batch: plain, or with gradient caching.

:func:`step_inputs` turns this process's :class:`~mlatr.data.pipeline.batches.TrainBatch` into the step's inputs:
the global batch's caption rows (the clips every process kept, in rank order), the scheme's selection over
them (the same draws in every process, from the same generator) and this process's share of it (its clips
and their captions, contiguous in the selection's clip-major order). In a single process this is the batch
itself, the selection drawn exactly as before.

:class:`StepRunner` encodes this process's share, gathers the embeddings of all processes
(:mod:`mlatr.training.distributed`), computes the objective on the global batch and back-propagates:

- plain: one forward of the dual encoder (through DistributedDataParallel under torchrun), then
  ``(loss / accumulate).backward()``;
- ``optim.grad_cache_chunk``: :mod:`mlatr.training.grad_cache` (encode without graphs, loss on the cached
  embeddings, replay chunk by chunk).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor

from mlatr.data.pipeline.batches import TrainBatch, TrainBatches
from mlatr.errors import MlatrError
from mlatr.inference.process_group import DistContext
from mlatr.losses.schemes import Scheme, Selection
from mlatr.models.outputs import EncoderOutput
from mlatr.training.distributed import all_reduce_, gather_int_lists, gather_output
from mlatr.training.grad_cache import chunk_schedule, encode_without_graphs, leaves, replay
from mlatr.training.objective import LossOutput, Objective


@dataclass
class StepInputs:
    """What one process encodes for a step, and the global batch it belongs to."""

    waveform: Tensor  # this process's clips [n, T] (the head trainer: their cached backbone features [n, D])
    lengths: Tensor  # [n]
    texts: list[str]  # this process's captions (its clips' part of ``selection.texts``)
    langs: list[str]
    selection: Selection  # over the global batch
    clip_counts: list[int]  # clips per process
    text_counts: list[int]  # captions per process
    owned: Tensor  # [N] bool, the global batch's rows that are this process's clips


def step_inputs(batch: TrainBatch, batches: TrainBatches | None, scheme: Scheme, languages: list[str],
                generator: torch.Generator, ctx: DistContext) -> StepInputs | None:
    """The step's inputs, or None when the global batch is skipped (fewer than 2 clips kept, or a process
    whose shard kept none: every process decides alike)."""
    positions = gather_int_lists(batch.position, ctx)
    clip_counts = [len(p) for p in positions]
    if sum(clip_counts) < 2 or min(clip_counts) == 0:
        return None
    rows = batch.rows if not ctx.enabled else batches.rows([batch.planned[p] for ps in positions for p in ps])
    selection = scheme.select(rows, languages, generator)
    per_clip = (selection.index >= 0).sum(dim=1).tolist()
    starts = [sum(clip_counts[:r]) for r in range(len(clip_counts))]
    text_counts = [sum(per_clip[s:s + c]) for s, c in zip(starts, clip_counts, strict=True)]
    first = sum(per_clip[:starts[ctx.rank]])
    last = first + text_counts[ctx.rank]
    owned = torch.zeros(len(rows), dtype=torch.bool)
    owned[starts[ctx.rank]:starts[ctx.rank] + clip_counts[ctx.rank]] = True
    return StepInputs(batch.waveform, batch.lengths, selection.texts[first:last], selection.langs[first:last],
                      selection, clip_counts, text_counts, owned)


#: ``extra_terms(audio, text, inputs) -> {name: scalar}``: loss terms a loop adds to the objective's.
ExtraTerms = Callable[[EncoderOutput, EncoderOutput, StepInputs], dict[str, Tensor]]


@dataclass
class StepResult:
    """A step's loss (the global value, also under a local loss), its logged terms and diagnostics, and the
    global batch's pooled embeddings before the update (detached)."""

    out: LossOutput
    loss: float
    logs: dict[str, float]
    audio: Tensor
    text: Tensor


class StepRunner:
    """``runner(inputs, accumulate, sync, where) -> StepResult``: forward and backward of one (micro-)batch.

    ``net`` is the dual encoder or its DistributedDataParallel wrapper (``model`` the encoder itself; the
    head trainer passes its heads over cached features, :class:`mlatr.training.head_training.FeatureHeads`);
    ``sync=False`` keeps DDP from synchronising gradients (accumulation); ``where`` names the step in a
    non-finite-loss error. ``extra_terms(audio, text, inputs)`` adds named loss terms beside the
    objective's (the head trainer's ``text_identity``)."""

    def __init__(self, model, net, objective: Objective, ctx: DistContext, device: torch.device,
                 autocast: Callable[[], AbstractContextManager], grad_cache_chunk: int | None = None,
                 local_loss: bool = False, extra_terms: ExtraTerms | None = None):
        self.model, self.net, self.objective, self.ctx, self.device = model, net, objective, ctx, device
        self.autocast = autocast
        self.extra_terms = extra_terms
        self.chunk = grad_cache_chunk
        self.local = local_loss and ctx.enabled
        if self.local:
            objective.check_rows_support()
        self.frames = objective.head is not None and objective.head.needs_frames
        #: True after a backward whose gradients DDP did not synchronise (see EpochLoop.optimizer_step).
        self.unsynced = False

    def __call__(self, inp: StepInputs, accumulate: int, sync: bool, where: str) -> StepResult:
        if self.chunk is None:
            result = self._plain(inp, accumulate, sync, where)
        else:
            result = self._cached(inp, accumulate, sync, where)
        self.unsynced = self.ctx.enabled and not sync
        return result

    def _no_sync(self, sync: bool) -> AbstractContextManager:
        return self.net.no_sync() if self.ctx.enabled and not sync else nullcontext()

    def _loss(self, audio: EncoderOutput, text: EncoderOutput, inp: StepInputs,
              where: str) -> tuple[LossOutput, float, dict[str, float]]:
        """The objective on the global batch, its global value (checked finite) and its log values."""
        out = self.objective(audio, text, inp.selection, self.model.temperature,
                             rows=inp.owned if self.local else None)
        if self.extra_terms is not None:
            out.terms.update(self.extra_terms(audio, text, inp))
        logs = out.log_values()
        loss = out.total
        value = float(loss.detach())
        if self.local:  # every process holds its share of each term: log the sums
            names = [f"loss_{k}" for k in out.terms]
            values = all_reduce_(torch.tensor([value] + [logs[k] for k in names], dtype=torch.float64), self.ctx)
            value = float(values[0])
            logs.update({k: float(v) for k, v in zip(names, values[1:].tolist(), strict=True)})
        if not math.isfinite(value):
            raise MlatrError(f"non-finite loss at {where}: lower optim.lr or check the data")
        return out, value, logs

    def _plain(self, inp: StepInputs, accumulate: int, sync: bool, where: str) -> StepResult:
        with self._no_sync(sync):
            with self.autocast():
                audio, text = self.net(inp.waveform.to(self.device), inp.lengths.to(self.device), inp.texts,
                                       inp.langs)
                audio = gather_output(audio, inp.clip_counts, self.ctx, frames=self.frames, sum_grads=self.local)
                text = gather_output(text, inp.text_counts, self.ctx, frames=self.frames, sum_grads=self.local)
                out, value, logs = self._loss(audio, text, inp, where)
            (out.total / accumulate).backward()
        return StepResult(out, value, logs, audio.pooled.detach(), text.pooled.detach())

    def _cached(self, inp: StepInputs, accumulate: int, sync: bool, where: str) -> StepResult:
        waveform, lengths = inp.waveform.to(self.device), inp.lengths.to(self.device)
        schedule = chunk_schedule(waveform.shape[0], len(inp.texts), self.chunk)
        audio, text, states = encode_without_graphs(self.model, waveform, lengths, inp.texts, inp.langs, schedule,
                                                    self.autocast, self.device)
        audio = leaves(gather_output(audio, inp.clip_counts, self.ctx, frames=self.frames, grad=False), self.frames)
        text = leaves(gather_output(text, inp.text_counts, self.ctx, frames=self.frames, grad=False), self.frames)
        with self.autocast():
            out, value, logs = self._loss(audio, text, inp, where)
        (out.total / accumulate).backward()
        audio_grad = self._own_rows(audio, inp.clip_counts)
        text_grad = self._own_rows(text, inp.text_counts)
        replay(self.net, waveform, lengths, inp.texts, inp.langs, schedule, states, audio_grad, text_grad,
               self.autocast, self.net.no_sync if self.ctx.enabled else None, sync)
        return StepResult(out, value, logs, audio.pooled.detach(), text.pooled.detach())

    def _own_rows(self, leaf: EncoderOutput, counts: list[int]) -> EncoderOutput:
        """This process's rows of the gradients the loss left on the global embeddings (summed over
        processes first under a local loss, where each process holds a part of the loss)."""
        start = sum(counts[:self.ctx.rank])
        rows = slice(start, start + counts[self.ctx.rank])

        def own(t: Tensor | None) -> Tensor | None:
            if t is None or t.grad is None:
                return None
            grad = t.grad
            if self.local:
                grad = all_reduce_(grad.clone(), self.ctx)
            return grad[rows]

        return EncoderOutput(own(leaf.pooled), own(leaf.frames))
