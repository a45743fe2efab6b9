"""Training with several processes (``torchrun``): the process group and the global batch's embeddings.

``torchrun --nproc_per_node=N -m mlatr train --config C`` starts N processes that share one global batch of
``train.batch_size`` clips: every process plans the same epoch and reads its contiguous shard of each batch
(:mod:`mlatr.data.pipeline.epoch_plan`), encodes it, and the embeddings of all processes are gathered in rank order
(:func:`gather_output`), so the objective (any scheme x base loss, SVR, matching heads) sees exactly the
single-process batch. This module only moves tensors; the objective's maths does not know about it.

Gradients (open_clip's ``gather_features`` pattern, arranged so that ``N x B/N`` equals ``1 x B``):

- **Global loss** (default): every process computes the whole loss ``L`` on the gathered batch. The gather's
  backward keeps the gradient of this process's own rows (every process holds all of ``L``, so that gradient
  is already complete: no communication), DistributedDataParallel *sums* the encoders' gradients over
  processes (:func:`sum_gradients_hook`), which gives ``dL/dtheta``. Loss-side parameters (temperature,
  SigLIP bias, SVR radius model) get the same ``dL/dphi`` in every process; they are averaged
  (:func:`reduce_loss_side_grads`) only to keep them bit-identical.
- **Local loss** (``dist.local_loss``): process ``r`` scores only the rows of its own clips, ``L_r``, against
  the whole gathered batch, with the global normalisation, so ``sum_r L_r = L``. The gather's backward then
  sums the embedding gradients of all processes (one all-reduce of ``[B, d]``), the encoders' gradients are
  summed as above and the loss-side ones are summed too. Same gradients, ``1/N`` of the loss's work.

The gathers run on a process group of their own, so their collectives never interleave with DDP's bucket
all-reduces. CPU uses gloo, CUDA nccl (one GPU per process: ``cuda:LOCAL_RANK``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from mlatr.inference.process_group import DistContext
from mlatr.models.outputs import EncoderOutput

#: Bytes this process has handed to collectives, by kind ("gather", "reduce", "ddp"): the payload, before
#: the backend's own overhead (a ring all-reduce moves about twice it). ``benchmarks/bench_torchrun.py``
#: reads it per step.
TRAFFIC: Counter[str] = Counter()


def _count(kind: str, t: Tensor) -> None:
    TRAFFIC[kind] += t.numel() * t.element_size()


def gather_int_lists(values: Sequence[int], ctx: DistContext) -> list[list[int]]:
    """Every process's list of small integers, in rank order (lists may differ in length)."""
    if not ctx.enabled:
        return [list(values)]
    n = torch.tensor([len(values)], dtype=torch.long, device=ctx.device)
    sizes = [torch.zeros(1, dtype=torch.long, device=ctx.device) for _ in range(ctx.world_size)]
    dist.all_gather(sizes, n, group=ctx.group)
    _count("gather", n)
    longest = max(int(s) for s in sizes)
    padded = torch.full((max(1, longest),), -1, dtype=torch.long, device=ctx.device)
    padded[:len(values)] = torch.tensor(list(values), dtype=torch.long, device=ctx.device)
    parts = [torch.empty_like(padded) for _ in range(ctx.world_size)]
    dist.all_gather(parts, padded, group=ctx.group)
    _count("gather", padded)
    return [p[:int(s)].tolist() for p, s in zip(parts, sizes, strict=True)]


def _all_gather_rows(x: Tensor, counts: Sequence[int], group) -> Tensor:
    """``cat`` over processes of each one's ``x`` (``counts[r]`` rows each), padded for the collective."""
    biggest = max(counts)
    padded = x.new_zeros((biggest, *x.shape[1:]))
    padded[:x.shape[0]] = x
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded.contiguous(), group=group)
    _count("gather", padded)
    return torch.cat([p[:n] for p, n in zip(parts, counts, strict=True)])


class _GatherRows(torch.autograd.Function):
    """All-gather with a gradient: backward returns this process's rows of the incoming gradient, summed
    over processes first when ``sum_grads`` (local loss: each process holds a part of the loss)."""

    @staticmethod
    def forward(ctx, x, counts, rank, group, sum_grads):
        ctx.counts, ctx.rank, ctx.group, ctx.sum_grads = list(counts), rank, group, sum_grads
        return _all_gather_rows(x, counts, group)

    @staticmethod
    def backward(ctx, grad):
        if ctx.sum_grads:
            grad = grad.contiguous().clone()
            dist.all_reduce(grad, group=ctx.group)
            _count("reduce", grad)
        start = sum(ctx.counts[:ctx.rank])
        return grad[start:start + ctx.counts[ctx.rank]], None, None, None, None


def _pad_length(t: Tensor | None, length: int, value=0) -> Tensor | None:
    """``t [n, L, ...]`` padded along ``L`` to ``length``."""
    if t is None or t.shape[1] == length:
        return t
    pad = t.new_full((t.shape[0], length - t.shape[1], *t.shape[2:]), value)
    return torch.cat([t, pad], dim=1)


def max_length(out: EncoderOutput, ctx: DistContext) -> int:
    """The longest frame / token axis over processes (0 without frames)."""
    length = torch.tensor([0 if out.frames is None else out.frames.shape[1]], dtype=torch.long, device=ctx.device)
    if ctx.enabled:
        dist.all_reduce(length, op=dist.ReduceOp.MAX, group=ctx.group)
    return int(length)


def gather_output(out: EncoderOutput, counts: Sequence[int], ctx: DistContext, *, frames: bool = False,
                  grad: bool = True, sum_grads: bool = False) -> EncoderOutput:
    """The global batch's :class:`EncoderOutput`: every process's ``out`` (``counts[r]`` items each) in rank
    order. ``frames``: gather frames and masks too (padded to the longest over processes, masked out);
    ``grad``: keep the autograd graph (see the module docstring; ``sum_grads`` for the local loss).
    Identity in a single process (frames dropped unless asked for)."""
    if not ctx.enabled:
        return out if frames else EncoderOutput(out.pooled)

    def gather(t: Tensor) -> Tensor:
        if grad and t.requires_grad:
            return _GatherRows.apply(t, list(counts), ctx.rank, ctx.group, sum_grads)
        return _all_gather_rows(t.detach(), counts, ctx.group)

    pooled = gather(out.pooled)
    if not frames or out.frames is None:
        return EncoderOutput(pooled)
    length = max_length(out, ctx)
    mask = out.mask if out.mask is not None else torch.ones(out.frames.shape[:2], dtype=torch.bool,
                                                            device=out.frames.device)
    frames_all = gather(_pad_length(out.frames, length))
    mask_all = _all_gather_rows(_pad_length(mask, length, False).to(torch.uint8), counts, ctx.group).bool()
    return EncoderOutput(pooled, frames_all, mask_all)


def all_reduce_(t: Tensor, ctx: DistContext, op: str = "sum") -> Tensor:
    """In-place all-reduce (``sum``, ``avg`` or ``max``) of a tensor (on any device); identity in a single
    process."""
    if ctx.enabled:
        work = t if t.device == ctx.device else t.to(ctx.device)
        _count("reduce", work)
        if op == "avg":
            dist.all_reduce(work, group=ctx.group)
            work.div_(ctx.world_size)
        else:
            dist.all_reduce(work, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=ctx.group)
        if work is not t:
            t.copy_(work)
    return t


def reduce_loss_side_grads(params: Sequence[torch.nn.Parameter], ctx: DistContext, local_loss: bool) -> None:
    """Gradients of the parameters the loss uses directly (temperature, SigLIP bias, SVR radius model):
    summed over processes for the local loss, averaged (they are equal) for the global one."""
    grads = [p.grad for p in params if p.grad is not None]
    if not ctx.enabled or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce_(flat, ctx, "sum" if local_loss else "avg")
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_module(module: torch.nn.Module, ctx: DistContext) -> None:
    """Copy process 0's parameters and buffers of ``module`` into every process."""
    if ctx.enabled:
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, 0, group=ctx.group)


def sum_gradients_hook(state, bucket):
    """DistributedDataParallel communication hook: all-reduce the bucket's gradients as a *sum* (DDP's
    default averages), the right reduction when the loss is not an average over processes (module
    docstring)."""
    _count("ddp", bucket.buffer())
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def wrap_ddp(model: torch.nn.Module, device: torch.device, find_unused_parameters: bool,
             loss_side: Sequence[str] = ("log_temperature",)):
    """``model`` in DistributedDataParallel with summed gradients; the parameters named in ``loss_side``
    are left to :func:`reduce_loss_side_grads` (the loss uses them outside the model's forward)."""
    names = {name for name, _ in list(model.named_parameters()) + list(model.named_buffers())}
    ignored = [n for n in loss_side if n in names]
    # DDP names a parameter of the root module ".name" when it builds its reducer, "name" elsewhere
    ignored += ["." + n for n in ignored if "." not in n]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, ignored)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  find_unused_parameters=find_unused_parameters)
    ddp.register_comm_hook(None, sum_gradients_hook)
    return ddp
