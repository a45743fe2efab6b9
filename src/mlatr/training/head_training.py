"""Training the projection heads alone, on features of frozen backbones computed once.

With both backbones frozen (aisfx audio, a frozen multilingual sentence encoder: ``mlatr demo-real``),
only the DualEncoder's heads learn (ATRI sec. 3.1: ``g_a(f_a(x))``, ``g_t(f_t(t))`` with ``f`` fixed),
so every epoch can start from the backbones' cached outputs instead of audio and text.

The loop is the full-model trainer's (:class:`~mlatr.training.epoch_loop.EpochLoop`: seeds, steps,
validation, best epoch, checkpoints and bit-exact resume); only the model and the batches differ
(:class:`HeadRun`): the encoder is :class:`FeatureHeads`, the heads over the cached features, and an
epoch's batches come from the same plan (:func:`~mlatr.data.pipeline.epoch_plan.plan_epoch`: clip order and one
source caption per clip from the ``(seed, epoch, "order")`` and ``(seed, epoch, "crop")`` generators,
nothing to crop, the last smaller batch dropped). The objective (:func:`~mlatr.training.objective.build_objective`:
ML-CLAP, KCL, CACL; InfoNCE, SigLIP; SupCLAP's SVR), the optimizer and schedule
(:mod:`mlatr.training.optimization`, ``HeadTraining.optim``) are the trainer's; the settings
(:class:`~mlatr.training.config.HeadTraining`) go through the same rules (``validate_config``). With
``out_dir``, ``last.pt`` after every epoch and ``best.pt`` at the best validated epoch, ``"model"`` holding
the heads only; ``resume=True`` continues bit-exactly. With ``HeadTraining.patience``, the run stops after that many
validated epochs without a better score (early stopping), the best epoch's heads kept.

The audio side reads ``ClipFeatures`` (:mod:`mlatr.frozen_prefix`): pooled vectors of the whole frozen
backbone (heads only), or the cached outputs of its frozen lower blocks with ``audio_tail``, the backbone's
upper blocks, training with the heads (``train_last_blocks`` of :class:`~mlatr.models.aisfx.AisfxEncoder`;
the checkpoint's ``"model"`` then also holds those blocks, which learn at ``HeadTraining.tail_lr``). With
``batch_groups``, an epoch's batches hold whole groups of similar clips (hard negatives,
:mod:`mlatr.training.hard_batches`).

One extra term exists only here: ``text_identity`` (weight ``identity_penalty``), the mean squared
distance ``||g_t(t) - t||^2`` between the text head's output and its input, which keeps a near-identity
text head (:class:`~mlatr.models.projection.ResidualHead`) close to the frozen multilingual space.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mlatr.data.pipeline.batches import TrainBatch
from mlatr.data.pipeline.epoch_plan import plan_epoch
from mlatr.errors import MlatrError
from mlatr.frozen_prefix import ClipFeatures, PooledFeatures
from mlatr.inference.process_group import DistContext
from mlatr.models.outputs import EncoderOutput
from mlatr.training.config import HEAD_OPTIM, HeadTraining, validate_config
from mlatr.training.epoch_loop import EpochLoop, EpochStats
from mlatr.training.hard_batches import group_batches
from mlatr.training.objective import build_objective
from mlatr.training.optimization import make_optimizer, make_scheduler
from mlatr.training.step import ExtraTerms, StepInputs, StepRunner

HEAD_PREFIXES = ("audio_projection", "text_projection")
#: the settings (HeadTraining, HEAD_OPTIM) live with the other training settings; head training's callers
#: name them from here
__all__ = ["HEAD_OPTIM", "HEAD_PREFIXES", "FeatureHeads", "HeadRun", "HeadTraining", "TextBank", "caption_rows",
           "train_heads"]


class TextBank:
    """Frozen text features by ``(language, text)``: ``vectors [M, D]`` and the row of each pair."""

    def __init__(self, keys: Sequence[tuple[str, str]], vectors: np.ndarray):
        if len(keys) != len(vectors):
            raise MlatrError(f"text bank: {len(keys)} keys but {len(vectors)} vectors")
        self.row = {tuple(k): i for i, k in enumerate(keys)}
        self.vectors = torch.from_numpy(np.ascontiguousarray(vectors, np.float32))

    @classmethod
    def embed(cls, encoder, pairs: Sequence[tuple[str, str]]) -> TextBank:
        """Embed every distinct ``(language, text)`` of ``pairs`` with a frozen encoder's ``embed_numpy``."""
        keys = list(dict.fromkeys((lang, text) for lang, text in pairs))
        if not keys:
            return cls([], np.zeros((0, encoder.output_dim), np.float32))
        return cls(keys, encoder.embed_numpy([t for _, t in keys], [lang for lang, _ in keys]))

    def lookup(self, texts: Sequence[str], langs: Sequence[str]) -> torch.Tensor:
        try:
            rows = [self.row[(lang, text)] for text, lang in zip(texts, langs, strict=True)]
        except KeyError as exc:
            raise MlatrError(f"text bank: no features for {exc.args[0]!r}") from exc
        return self.vectors[rows]


class FeatureHeads:
    """``heads(features, lengths, texts, langs) -> (audio, text)``: the dual encoder's forward with the frozen
    backbones' outputs read from the cache (audio features given: pooled ``[n, Da]``, or the frozen lower
    blocks' outputs that ``tail`` takes to ``[n, Da]``; texts looked up in ``bank``)."""

    def __init__(self, model, bank: TextBank,
                 tail: Callable[[torch.Tensor, torch.Tensor], EncoderOutput] | None = None):
        self.model, self.bank, self.tail = model, bank, tail

    def __call__(self, features: torch.Tensor, lengths: torch.Tensor, texts: Sequence[str],
                 langs: Sequence[str]) -> tuple[EncoderOutput, EncoderOutput]:
        pooled = features if self.tail is None else self.tail(features, lengths).pooled  # [n, Da]
        dtype = next(self.model.audio_projection.parameters()).dtype  # the cached features are float32
        audio = self.model.audio_projection(pooled.to(dtype))  # [n, D]
        text = self.model.text_projection(self.bank.lookup(texts, langs).to(pooled.device, dtype))  # [M, D]
        return EncoderOutput(pooled=audio), EncoderOutput(pooled=text)


def caption_rows(captions: dict[str, list[str | None]], languages: Sequence[str]) -> list[list[str | None]]:
    """One row per source caption ``j`` of a clip: its text in each of ``languages`` (``None`` where
    missing); rows with no text in any of ``languages`` are dropped."""
    n = max((len(v) for v in captions.values()), default=0)
    rows = [[_at(captions.get(lang), j) for lang in languages] for j in range(n)]
    return [row for row in rows if any(t is not None for t in row)]


def _at(texts: list[str | None] | None, j: int) -> str | None:
    return texts[j] if texts is not None and j < len(texts) else None


def train_heads(model, audio_feats: np.ndarray | ClipFeatures, clip_rows: Sequence[Sequence[Sequence[str | None]]],
                languages: Sequence[str], bank: TextBank, settings: HeadTraining,
                validate: Callable[[nn.Module], float] | None = None, progress: bool = True,
                out_dir: str | Path | None = None, resume: bool = False, audio_tail: nn.Module | None = None,
                device: str | torch.device = "cpu", batch_groups: Sequence[int] | None = None) -> list[dict]:
    """Train ``model``'s projection heads on fixed features; returns the per-epoch log.

    ``audio_feats``: frozen audio features, ``[N, Da]`` pooled vectors or any ``ClipFeatures`` (with
    ``audio_tail``, a module of ``model`` that takes a batch of them to pooled ``[n, Da]`` vectors, e.g.
    :class:`~mlatr.models.aisfx.AisfxTail`; its parameters that require gradients train with the heads);
    ``device``: where ``model`` is and the steps run; ``batch_groups[i]``: the group (cluster) of clip ``i``,
    each epoch's batches then hold whole groups (:mod:`mlatr.training.hard_batches`); ``clip_rows[i]`` the
    caption rows of clip ``i`` (:func:`caption_rows`: one row per source caption, one text per language of
    ``languages``, English first for CACL); ``bank`` holds the frozen text features of every caption.
    ``validate(model)`` (a score, higher is better) is called after each epoch and the heads of the best epoch are kept.
    ``out_dir``: write ``last.pt`` / ``best.pt`` there; ``resume``: continue from its ``last.pt`` (a run
    killed before its first checkpoint starts over).
    """
    validate_config(settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [64, 512] matrices: thread hand-offs cost more than they save on a busy CPU
    try:
        run = HeadRun(model, audio_feats, clip_rows, list(languages), bank, settings, out_dir, validate, progress,
                      audio_tail, torch.device(device), batch_groups)
        if resume:
            if run.out is None:
                raise MlatrError("train heads: resume needs out_dir")
            run.resume()
        return run.fit_epochs()
    finally:
        torch.set_num_threads(threads)


class HeadRun(EpochLoop):
    """One head-training run: the epoch loop over cached features (see the module docstring)."""

    def __init__(self, model, audio_feats, clip_rows, languages: list[str], bank: TextBank, s: HeadTraining,
                 out_dir: str | Path | None, validate: Callable[[nn.Module], float] | None = None,
                 progress: bool = True, tail: nn.Module | None = None, device: torch.device | None = None,
                 groups: Sequence[int] | None = None):
        if len(clip_rows) != len(audio_feats):
            raise MlatrError(f"train heads: {len(clip_rows)} clips of captions for {len(audio_feats)} audio "
                             "features")
        if not len(clip_rows):
            raise MlatrError("train heads: no clip to train on")
        empty = [i for i, rows in enumerate(clip_rows) if not rows]
        if empty:
            raise MlatrError(f"train heads: clip {empty[0]} has no caption")
        self.clip_rows, self.s = clip_rows, s
        self.validate_fn = validate
        self.features = PooledFeatures(audio_feats) if isinstance(audio_feats, np.ndarray) else audio_feats
        device = device or torch.device("cpu")
        self.trained = _trained_names(model, tail)
        self.batch_size = min(s.batch_size, len(clip_rows))  # fewer clips than a batch: one batch of them all
        objective = build_objective(s.objective, self.batch_size).to(device)
        run_step = StepRunner(model, FeatureHeads(model, bank, tail), objective, DistContext(), device,
                              nullcontext, extra_terms=_identity_term(bank, s.identity_penalty))
        named = dict(model.named_parameters())
        lower = [n for n in self.trained if not n.startswith(HEAD_PREFIXES)] if s.tail_lr is not None else []
        optimizer = make_optimizer(s.optim, [named[n] for n in self.trained if n not in lower]
                                   + list(objective.parameters()))
        if lower:
            optimizer.add_param_group({"params": [named[n] for n in lower], "lr": s.tail_lr})
        steps_per_epoch = math.ceil(len(clip_rows) // self.batch_size / s.optim.accumulate)
        super().__init__(
            model=model, objective=objective, run_step=run_step, optimizer=optimizer,
            scheduler=make_scheduler(optimizer, s.optim, steps_per_epoch * s.epochs), languages=languages,
            epochs=s.epochs, seed=s.seed, accumulate=s.optim.accumulate, grad_clip=s.optim.grad_clip, device=device,
            out=Path(out_dir) if out_dir is not None else None, keep_best=True, name="train heads",
            saved_prefixes=tuple(HEAD_PREFIXES) + tuple(n for n in self.trained if not n.startswith(HEAD_PREFIXES)),
            progress="epochs" if progress else None,
        )
        self.config = {**asdict(s), "clips": len(clip_rows), "languages": languages}
        if s.patience is None:
            del self.config["patience"]  # the settings of a run that stops at its last epoch, as before there was any
        if tail is not None:
            self.config["trained"] = self.trained
        self.groups = None if groups is None else list(groups)
        if groups is not None:
            self.config["batch_groups"] = int(max(groups)) + 1

    def epoch_batches(self, epoch: int) -> tuple[Iterable[TrainBatch], int]:
        options = [range(len(rows)) for rows in self.clip_rows]
        plan = plan_epoch(range(len(self.clip_rows)), options, None, self.batch_size, 0, self.seed, epoch)
        if self.groups is not None:
            plan = group_batches(plan, self.groups, lambda p: str(self.clip_rows[p.index][p.caption]), self.seed,
                                 epoch)
        return (self._batch(planned) for planned in plan), len(plan)

    def _batch(self, planned) -> TrainBatch:
        idx = [p.index for p in planned]
        rows = [list(self.clip_rows[p.index][p.caption]) for p in planned]
        features, lengths = self.features.batch(idx)
        return TrainBatch(features, lengths, idx, rows, list(range(len(idx))), planned)

    def train_modules(self) -> list[nn.Module]:
        return [self.model.audio_projection, self.model.text_projection]  # the frozen backbones stay as they are

    def epoch_record(self, epoch: int, stats: EpochStats) -> dict[str, Any]:
        record = {"epoch": epoch + 1, "step": self.step, "loss": stats.loss}
        if len(stats.terms) > 1:
            record.update(stats.terms)
        return record

    def validates_after(self, epoch: int) -> bool:
        return self.validate_fn is not None

    def validates_ever(self) -> bool:
        return self.validate_fn is not None

    def validation(self) -> tuple[float, dict[str, Any]]:
        score = float(self.validate_fn(self.model))
        return score, {"val": score}

    def stops_early(self) -> bool:
        best = self.best["epoch"]
        return self.s.patience is not None and best is not None and self.epoch - best >= self.s.patience

    def run_config(self) -> dict[str, Any]:
        return self.config

    def check_resume(self, state: dict[str, Any], path: Path) -> None:
        if state.get("train_config") != self.config:
            raise MlatrError(f"{path}: was written with other head-training settings or data; resume needs the "
                             f"same ones (or remove {self.out})")


def _trained_names(model, tail: nn.Module | None) -> list[str]:
    """Names (in ``model``) of the parameters that train: the heads', and the tail's that require gradients."""
    in_tail = {id(p) for p in tail.parameters() if p.requires_grad} if tail is not None else set()
    return [n for n, p in model.named_parameters() if n.startswith(HEAD_PREFIXES) or id(p) in in_tail]


def _identity_term(bank: TextBank, weight: float) -> ExtraTerms | None:
    """The ``text_identity`` term ``weight * mean ||g_t(t) - t||^2`` over the step's captions (None: off)."""
    if weight <= 0:
        return None

    def terms(audio: EncoderOutput, text: EncoderOutput, inputs: StepInputs) -> dict[str, torch.Tensor]:
        text_in = bank.lookup(inputs.selection.texts, inputs.selection.langs).to(text.pooled.device)  # [M, Dt]
        return {"text_identity": weight * ((text.pooled - text_in) ** 2).sum(dim=1).mean()}

    return terms
