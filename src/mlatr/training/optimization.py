"""The optimizer, its learning-rate schedule and the optimizer step: one of each for every training loop.

The full-model trainer (:mod:`mlatr.training.trainer`) and the head trainer on cached features
(:mod:`mlatr.training.head_training`) both build their Adam / AdamW with :func:`make_optimizer`, their
schedule with :func:`make_scheduler` (:func:`~mlatr.training.schedule.lr_factor`: warmup, then cosine or
constant) and step with :func:`optimizer_step` (gradient-norm clipping at ``optim.grad_clip``, the
optimizer, the scheduler, gradients cleared), so ``optim`` means the same in both.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from mlatr.training.config import OptimConfig
from mlatr.training.schedule import lr_factor


def make_optimizer(optim: OptimConfig, params: Iterable[nn.Parameter],
                   foreach: bool | None = None) -> torch.optim.Optimizer:
    """``optim``'s Adam / AdamW over the parameters of ``params`` that require gradients (weight decay for
    AdamW only). ``foreach``: PyTorch's default (None) takes the multi-tensor implementation when the
    parameters are on CUDA."""
    trainable = [p for p in params if p.requires_grad]
    opt_cls = torch.optim.AdamW if optim.name == "adamw" else torch.optim.Adam
    wd = optim.weight_decay if optim.name == "adamw" else 0.0
    return opt_cls(trainable, lr=optim.lr, betas=optim.betas, weight_decay=wd, foreach=foreach)


def make_scheduler(optimizer: torch.optim.Optimizer, optim: OptimConfig,
                   total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning-rate schedule of ``optim`` over ``total_steps`` optimizer steps (its state resumes)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, total_steps, optim.warmup_steps, optim.schedule, optim.min_lr_ratio))


def optimizer_step(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                   grad_clip: float | None) -> None:
    """Clip the gradients' global norm to ``grad_clip`` (None: no clipping), step, advance the schedule and
    clear the gradients."""
    if grad_clip:
        params = [p for g in optimizer.param_groups for p in g["params"]]
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
