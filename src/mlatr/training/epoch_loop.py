"""The one epoch loop: fit, resume, best-epoch tracking and checkpoints, for every kind of training run.

A run (:class:`~mlatr.training.trainer.Trainer`: the dual encoder on audio and captions;
:class:`~mlatr.training.head_training.HeadRun`: the projection heads on cached backbone features) is an
:class:`EpochLoop` that supplies what differs: its model, objective and optimizer (the constructor's
arguments), its epoch's batches (:meth:`EpochLoop.epoch_batches`), its epoch record, its validation and what a
resumed run must match (abstract methods: a run that leaves one out cannot be constructed).
The loop does the rest, the same way for both:

- each epoch ``e``: the trained modules in train mode, the global torch generator seeded by ``(seed, e,
  "torch"[, rank])`` (dropout) and the scheme's language draws by ``(seed, e, "pairing")``; each batch
  through :func:`~mlatr.training.step.step_inputs` and the run's
  :class:`~mlatr.training.step.StepRunner`, ``accumulate`` micro-batches per optimizer step
  (:func:`~mlatr.training.optimization.optimizer_step`: clipping, schedule), the epoch's last one
  included;
- after the epochs the run validates (:meth:`EpochLoop.validates_after`): the best score so far and its
  epoch (the papers' selection rule: ATRI §5.3, SupCLAP §4.1.2);
- checkpoints (first process only, with an output folder): ``last.pt`` after every epoch (model, objective,
  optimizer, scheduler, epoch, step, best, history: the randomness contract of ``docs/architecture.md``
  makes a resumed run bit-identical), ``best.pt`` at the best validated epoch, or every epoch when the run
  validates none;
- :meth:`EpochLoop.resume` reads ``last.pt`` back after the run's own check of it (the same settings and
  data); a run killed before its first checkpoint starts over.

A run that keeps the best weights (``keep_best``) ends with them loaded (the heads, used in-process
afterwards); the trainer leaves its last weights and ``best.pt``.
"""

from __future__ import annotations

import copy
import math
import time
from abc import ABCMeta, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from mlatr.data.pipeline.batches import TrainBatch, TrainBatches
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import read_checkpoint, save_checkpoint
from mlatr.inference.process_group import DistContext
from mlatr.seeds import derive_seed
from mlatr.training import distributed
from mlatr.training.objective import Objective
from mlatr.training.optimization import optimizer_step
from mlatr.training.step import StepInputs, StepResult, StepRunner, step_inputs


@dataclass
class EpochStats:
    """What one epoch's training steps gave: the mean loss and terms over the steps run, the captions
    encoded, the steps run and the wall time."""

    loss: float
    terms: dict[str, float] = field(default_factory=dict)  # loss_<term> -> mean
    texts: int = 0
    steps: int = 0
    seconds: float = 0.0


#: What a run that validates supplies, all three or none.
VALIDATION_METHODS = ("validates_after", "validates_ever", "validation")


class _LoopMeta(ABCMeta):
    """Refuses, at construction, a subclass whose ``__init__`` never called :meth:`EpochLoop.__init__`."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        loop = super().__call__(*args, **kwargs)
        if "epochs" not in loop.__dict__:
            raise TypeError(f"{cls.__name__}.__init__ must call EpochLoop.__init__ with the loop's state (model, "
                            "objective, run_step, optimizer, scheduler, languages, epochs, seed, ...)")
        return loop


class EpochLoop(metaclass=_LoopMeta):
    """Fit, resume, best epoch and checkpoints of a training run (module docstring).

    A subclass builds what it trains, then calls ``super().__init__`` with it (the keyword arguments below;
    those without a default are required), and supplies the abstract methods (:meth:`epoch_batches`,
    :meth:`epoch_record`, :meth:`run_config`, :meth:`check_resume`); a run that validates overrides
    :meth:`validates_after`, :meth:`validates_ever` and :meth:`validation` together. A subclass that leaves
    one out fails when it is constructed, naming what is missing.

    Args:
        model: the trained model (its state is what a checkpoint's ``"model"`` holds).
        objective: the loss (its scheme draws each batch's captions; its state is checkpointed).
        run_step: one micro-batch's forward and backward (:class:`~mlatr.training.step.StepRunner`).
        optimizer, scheduler: the optimizer and its learning-rate schedule (stepped per optimizer step).
        languages: the run's caption languages. epochs: how many to train. seed: the run's seed.
        accumulate: micro-batches per optimizer step. grad_clip: gradient-norm clip (None: off).
        device: where the run's tensors live. dist: the process group (one process by default).
        out: the folder of ``last.pt`` / ``best.pt`` (None: no checkpoint is written).
        batch_source: where :func:`~mlatr.training.step.step_inputs` finds the rows of other processes' clips.
        saved_prefixes: the prefixes of the model's state a checkpoint's ``"model"`` holds (None: all of it).
        keep_best: load the best validated epoch's weights when :meth:`fit_epochs` ends.
        loss_side: parameters of the loss side (temperature, SigLIP bias, SVR radius model), reduced over
            processes.
        progress: ``"batches"``: a bar over each epoch's batches; ``"epochs"``: one bar over the epochs
            (named ``name``); None: no bar.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        objective: Objective,
        run_step: StepRunner,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        languages: Sequence[str],
        epochs: int,
        seed: int,
        accumulate: int = 1,
        grad_clip: float | None = None,
        device: torch.device | None = None,
        dist: DistContext | None = None,
        out: Path | None = None,
        batch_source: TrainBatches | None = None,
        saved_prefixes: tuple[str, ...] | None = None,
        keep_best: bool = False,
        loss_side: Sequence[nn.Parameter] = (),
        progress: str | None = None,
        name: str = "train",
    ) -> None:
        missing = [m for m in VALIDATION_METHODS if getattr(type(self), m) is getattr(EpochLoop, m)]
        if 0 < len(missing) < len(VALIDATION_METHODS):
            raise TypeError(f"{type(self).__name__} validates: it must supply {', '.join(VALIDATION_METHODS)} "
                            f"together (missing: {', '.join(missing)})")
        if epochs < 1 or accumulate < 1:
            raise MlatrError(f"{name}: epochs and accumulate must be >= 1, got {epochs} and {accumulate}")
        if progress not in (None, "batches", "epochs"):
            raise MlatrError(f"{name}: progress must be 'batches', 'epochs' or None, got {progress!r}")
        self.model, self.objective, self.run_step = model, objective, run_step
        self.optimizer, self.scheduler = optimizer, scheduler
        self.languages, self.epochs, self.seed = list(languages), epochs, seed
        self.accumulate, self.grad_clip = accumulate, grad_clip
        self.device = device if device is not None else torch.device("cpu")
        self.dist = dist if dist is not None else DistContext()
        self.out, self.batch_source, self.saved_prefixes = out, batch_source, saved_prefixes
        self.keep_best, self.loss_side, self.progress, self.name = keep_best, loss_side, progress, name
        # no epoch run yet (resume reads them from last.pt)
        self.epoch = 0  # epochs completed
        self.step = 0  # optimizer steps taken
        self.best: dict[str, Any] = {"score": None, "epoch": None}
        self.history: list[dict[str, Any]] = []
        self._best_weights: dict[str, torch.Tensor] | None = None

    # ---- what a run supplies ------------------------------------------------------------------------
    @abstractmethod
    def epoch_batches(self, epoch: int) -> tuple[Iterable[TrainBatch], int]:
        """(run) Epoch ``epoch``'s batches of this process, and how many there are."""

    @abstractmethod
    def epoch_record(self, epoch: int, stats: EpochStats) -> dict[str, Any]:
        """(run) The history record of epoch ``epoch`` (0-based) from its training :class:`EpochStats`."""

    @abstractmethod
    def run_config(self) -> dict[str, Any]:
        """(run) What a checkpoint records as ``train_config``."""

    @abstractmethod
    def check_resume(self, state: dict[str, Any], path: Path) -> None:
        """(run) Refuse to resume from ``state`` (read from ``path``) written with other settings or data."""

    def train_modules(self) -> list[nn.Module]:
        """The modules put in train mode at each epoch's start (the run may leave frozen parts alone)."""
        return [self.model]

    def validates_after(self, epoch: int) -> bool:
        """(a validating run) Whether epoch ``epoch`` (1-based, just trained) is validated (in this process)."""
        return False

    def validates_ever(self) -> bool:
        """(a validating run) Whether the run validates any epoch (else ``best.pt`` is the last epoch)."""
        return False

    def validation(self) -> tuple[float, dict[str, Any]]:
        """(a validating run) The validation score (higher is better) and the fields it adds to the epoch
        record."""
        raise MlatrError(f"{type(self).__name__} validates no epoch")

    def stops_early(self) -> bool:
        """Whether the run stops before its next epoch (early stopping; checked from the state a resumed run read
        back too)."""
        return False

    def checkpoint_extras(self) -> dict[str, Any]:
        """What a checkpoint holds besides the loop's state."""
        return {}

    def after_step(self, epoch: int, batch: TrainBatch, inputs: StepInputs, result: StepResult) -> None:
        """Called after each optimizer step (``result``: its last micro-batch's)."""

    def end_epoch(self, record: dict[str, Any]) -> None:
        """After an epoch is trained, validated and recorded: the checkpoints (a run adds its logs)."""
        self.save_checkpoints()

    # ---- the loop -----------------------------------------------------------------------------------
    def fit_epochs(self) -> list[dict[str, Any]]:
        """Train the epochs left; the history of every epoch."""
        epochs = tqdm(range(self.epoch, self.epochs), desc=self.name, unit="epoch", disable=self.progress != "epochs")
        for epoch in epochs:
            if self.stops_early():
                break
            self.epoch_started = time.perf_counter()
            record = self.epoch_record(epoch, self.train_epoch(epoch))
            self.epoch = epoch + 1
            if self.validates_after(self.epoch):
                score, fields = self.validation()
                record.update(fields)
                if score > (self.best["score"] if self.best["score"] is not None else -math.inf):
                    self.best = {"score": score, "epoch": self.epoch}
                    if self.keep_best:
                        self._best_weights = copy.deepcopy(self.saved_state())
            self.history.append(record)
            self.end_epoch(record)
        if self.keep_best and self._best_weights is not None:
            self.model.load_state_dict(self._best_weights, strict=self.saved_prefixes is None)
        return list(self.history)

    def train_epoch(self, epoch: int) -> EpochStats:
        """One epoch's steps (module docstring)."""
        for module in self.train_modules():
            module.train()
        rank_part = () if not self.dist.enabled else (self.dist.rank,)  # dropout: each process its own draws
        torch.manual_seed(derive_seed(self.seed, epoch, "torch", *rank_part))
        pairing = torch.Generator().manual_seed(derive_seed(self.seed, epoch, "pairing"))
        batches, n = self.epoch_batches(epoch)
        start = time.perf_counter()
        total, count, texts, sums = 0.0, 0, 0, {}
        bar = tqdm(total=n, desc=f"epoch {epoch + 1}/{self.epochs}", unit="batch", dynamic_ncols=True,
                   disable=self.progress != "batches")
        self.optimizer.zero_grad(set_to_none=True)
        pending = 0
        for b, batch in enumerate(batches):
            inputs = step_inputs(batch, self.batch_source, self.objective.scheme, self.languages, pairing, self.dist)
            if inputs is None:  # fewer than 2 clips left in the global batch (unreadable audio)
                bar.update(1)
                continue
            sync = pending + 1 == self.accumulate or b == n - 1
            result = self.run_step(inputs, self.accumulate, sync, f"epoch {epoch + 1}, step {self.step}")
            pending += 1
            total += result.loss
            count += 1
            for key, value in result.logs.items():
                if key.startswith("loss_"):
                    sums[key] = sums.get(key, 0.0) + value
            texts += len(inputs.selection.texts)
            if pending == self.accumulate:
                self.optimizer_step()
                pending = 0
                self.after_step(epoch, batch, inputs, result)
            bar.set_postfix(loss=f"{total / count:.4f}")
            bar.update(1)
        if pending:
            self.optimizer_step()
        bar.close()
        return EpochStats(total / max(1, count), {k: v / max(1, count) for k, v in sums.items()}, texts, count,
                          time.perf_counter() - start)

    def optimizer_step(self) -> None:
        """Gradients complete in every process, then the clipped step and the schedule."""
        if self.run_step.unsynced:  # the epoch's last micro-batch was left out of DDP's synchronisation
            grads = [p.grad for p in self.model.parameters() if p.grad is not None and p is not
                     getattr(self.model, "log_temperature", None)]
            for g in grads:
                distributed.all_reduce_(g, self.dist)
            self.run_step.unsynced = False
        distributed.reduce_loss_side_grads(self.loss_side, self.dist, self.run_step.local)
        optimizer_step(self.optimizer, self.scheduler, self.grad_clip)
        self.step += 1

    # ---- checkpoints --------------------------------------------------------------------------------
    def saved_state(self) -> dict[str, torch.Tensor]:
        """The model's state a checkpoint holds (all of it, or the tensors under :attr:`saved_prefixes`)."""
        state = self.model.state_dict()
        if self.saved_prefixes is None:
            return state
        return {k: v for k, v in state.items() if k.startswith(self.saved_prefixes)}

    def state(self) -> dict[str, Any]:
        return {"model": self.saved_state(), "objective": self.objective.state_dict(),
                "train_config": self.run_config(), "epoch": self.epoch, "step": self.step,
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "best": self.best, "history": self.history, **self.checkpoint_extras()}

    def save_checkpoints(self) -> None:
        """``last.pt``, and ``best.pt`` when this epoch is the best (or the run validates none): first
        process only, with an output folder."""
        if self.out is None or not self.dist.is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        state = self.state()
        save_checkpoint(self.out / "last.pt", state)
        if self.best["epoch"] == self.epoch or not self.validates_ever():
            save_checkpoint(self.out / "best.pt", state)

    def resume(self) -> bool:
        """Continue from ``out/last.pt`` (checked by :meth:`check_resume`); False when there is none yet (a
        run killed before its first checkpoint: resuming is starting)."""
        path = self.out / "last.pt"
        if not path.exists():
            return False
        state = read_checkpoint(path, map_location=self.device)
        self.check_resume(state, path)
        self.model.load_state_dict(state["model"], strict=self.saved_prefixes is None)
        self.objective.load_state_dict(state["objective"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.best, self.history = state["best"], state["history"]
        if self.keep_best and self.best["epoch"] is not None:
            self._best_weights = read_checkpoint(self.out / "best.pt", map_location=self.device)["model"]
        return True
