"""Training the projection heads alone, on features of frozen backbones computed once.

With both backbones frozen (aisfx audio, a frozen multilingual sentence encoder: ``mlatr demo-real``),
only the DualEncoder's heads learn (ATRI sec. 3.1: ``g_a(f_a(x))``, ``g_t(f_t(t))`` with ``f`` fixed),
so every epoch can start from the backbones' cached outputs instead of audio and text.

The loop is the full-model trainer's, piece by piece; only the encoder differs (:class:`FeatureHeads`:
the heads over the cached features): the epoch plan (:func:`~mlatr.data.pipeline.plan.plan_epoch`: clip
order and one source caption per clip from the ``(seed, epoch, "order")`` and ``(seed, epoch, "crop")``
generators, nothing to crop, the last smaller batch dropped), the scheme's draws from the
``(seed, epoch, "pairing")`` generator and the step (:func:`~mlatr.training.step.step_inputs`,
:class:`~mlatr.training.step.StepRunner`), the objective (:func:`~mlatr.training.objective.build_objective`:
ML-CLAP, KCL, CACL; InfoNCE, SigLIP; SupCLAP's SVR), the optimizer, schedule and clipped step
(:mod:`mlatr.training.optimization`, ``HeadTraining.optim``), and the checkpoint layout and resume of
:mod:`mlatr.training.trainer` (``docs/architecture.md``, "Randomness and resume"): with ``out_dir``,
``last.pt`` after every epoch and ``best.pt`` at the best validated epoch, ``"model"`` holding the heads
only; ``resume=True`` continues bit-exactly.

The audio side reads ``ClipFeatures`` (:mod:`mlatr.frozen_prefix`): pooled vectors of the whole frozen
backbone (heads only), or the cached outputs of its frozen lower blocks with ``audio_tail``, the backbone's
upper blocks, training with the heads (``train_last_blocks`` of :class:`~mlatr.models.aisfx.AisfxEncoder`;
the checkpoint's ``"model"`` then also holds those blocks).

One extra term exists only here: ``text_identity`` (weight ``identity_penalty``), the mean squared
distance ``||g_t(t) - t||^2`` between the text head's output and its input, which keeps a near-identity
text head (:class:`~mlatr.models.projection.ResidualHead`) close to the frozen multilingual space.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from mlatr.data.pipeline.batches import TrainBatch
from mlatr.data.pipeline.plan import plan_epoch
from mlatr.errors import MlatrError
from mlatr.frozen_prefix import ClipFeatures, PooledFeatures
from mlatr.inference.checkpoint import read_checkpoint, save_checkpoint
from mlatr.models.outputs import EncoderOutput
from mlatr.seeds import derive_seed
from mlatr.training.config import ObjectiveConfig, OptimConfig
from mlatr.training.distributed import DistContext
from mlatr.training.hard_batches import group_batches
from mlatr.training.objective import build_objective
from mlatr.training.optimization import make_optimizer, make_scheduler, optimizer_step
from mlatr.training.step import ExtraTerms, StepInputs, StepRunner, step_inputs

HEAD_PREFIXES = ("audio_projection", "text_projection")


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


#: The heads' optimizer unless told otherwise: AdamW at a constant learning rate, no warmup, no clipping.
HEAD_OPTIM = OptimConfig(lr=1e-3, weight_decay=1e-4, warmup_steps=0, schedule="constant", grad_clip=None)


@dataclass
class HeadTraining:
    """Settings of :func:`train_heads` (``objective`` and ``optim`` as in a training config's sections;
    ``optim.accumulate``, ``grad_cache_chunk`` and ``amp`` do not apply to heads)."""

    epochs: int = 60
    batch_size: int = 64
    seed: int = 0
    optim: OptimConfig = field(default_factory=lambda: replace(HEAD_OPTIM))
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    #: Weight of the ``text_identity`` term (0 = off).
    identity_penalty: float = 0.0
    #: Learning rate of the audio tail's parameters (None: ``optim.lr``); the schedule scales both alike.
    tail_lr: float | None = None

    @classmethod
    def at(cls, lr: float, **fields: Any) -> HeadTraining:
        """Settings with :data:`HEAD_OPTIM` at learning rate ``lr`` (``fields``: the other settings)."""
        return cls(optim=replace(HEAD_OPTIM, lr=lr), **fields)


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
        audio = self.model.audio_projection(pooled)  # [n, D]
        text = self.model.text_projection(self.bank.lookup(texts, langs).to(pooled.device))  # [M, D]
        return EncoderOutput(pooled=audio), EncoderOutput(pooled=text)


def caption_rows(captions: dict[str, list[str | None]], languages: Sequence[str]) -> list[list[str | None]]:
    """One row per source caption ``j`` of a clip: its text in each of ``languages`` (``None`` where
    missing); rows with no text in any of ``languages`` are dropped."""
    n = max((len(v) for v in captions.values()), default=0)
    rows = [[_at(captions.get(lang), j) for lang in languages] for j in range(n)]
    return [row for row in rows if any(t is not None for t in row)]


def _at(texts: list[str | None] | None, j: int) -> str | None:
    return texts[j] if texts is not None and j < len(texts) else None


def project(model, audio_feats: np.ndarray, text_feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Projected unit-norm embeddings of precomputed backbone features (the DualEncoder's heads)."""
    device = next(model.audio_projection.parameters(), torch.empty(0)).device
    with torch.no_grad():
        a = model.audio_projection(torch.from_numpy(audio_feats).to(device)).cpu()
        t = model.text_projection(torch.from_numpy(text_feats).to(device)).cpu()
    return _unit(a.numpy()), _unit(t.numpy())


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def train_heads(model, audio_feats: np.ndarray | ClipFeatures, clip_rows: Sequence[Sequence[Sequence[str | None]]],
                languages: Sequence[str], bank: TextBank, settings: HeadTraining,
                validate: Callable[[nn.Module], float] | None = None, progress: bool = True,
                out_dir: str | Path | None = None, resume: bool = False, audio_tail: nn.Module | None = None,
                device: str | torch.device = "cpu", batch_groups: Sequence[int] | None = None) -> list[dict]:
    """Train ``model``'s projection heads on fixed features; returns the per-epoch log.

    ``audio_feats``: frozen audio features, ``[N, Da]`` pooled vectors or any ``ClipFeatures`` (with
    ``audio_tail``, a module of ``model`` that takes a batch of them to pooled ``[n, Da]`` vectors, e.g.
    :class:`~mlatr.models.aisfx.AisfxTail`; its parameters that require gradients train with the heads);
    ``device``: where ``model`` is and the steps run; ``batch_groups[i]``: a group (cluster) of clip ``i``,
    each epoch's batches then hold whole groups (hard negatives, :mod:`mlatr.training.hard_batches`);
    ``clip_rows[i]`` the caption rows of clip ``i``
    (:func:`caption_rows`: one row per source caption, one text per language of ``languages``, English
    first for CACL); ``bank`` holds the frozen text features of every caption. ``validate(model)`` (a
    score, higher is better) is called after each epoch and the heads of the best epoch are kept.
    ``out_dir``: write ``last.pt`` / ``best.pt`` there; ``resume``: continue from its ``last.pt`` (a run
    killed before its first checkpoint starts over).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [64, 512] matrices: thread hand-offs cost more than they save on a busy CPU
    try:
        run = _HeadRun(model, audio_feats, clip_rows, list(languages), bank, settings, out_dir, audio_tail,
                       torch.device(device), batch_groups)
        if resume:
            run.resume()
        return run.fit(validate, progress)
    finally:
        torch.set_num_threads(threads)


class _HeadRun:
    """One head-training run: the trainer's pieces over cached features (see the module docstring)."""

    def __init__(self, model, audio_feats, clip_rows, languages: list[str], bank: TextBank, s: HeadTraining,
                 out_dir: str | Path | None, tail: nn.Module | None, device: torch.device,
                 groups: Sequence[int] | None = None):
        if len(clip_rows) != len(audio_feats):
            raise MlatrError(f"train heads: {len(clip_rows)} clips of captions for {len(audio_feats)} audio "
                             "features")
        empty = [i for i, rows in enumerate(clip_rows) if not rows]
        if empty:
            raise MlatrError(f"train heads: clip {empty[0]} has no caption")
        self.model, self.clip_rows, self.languages, self.s = model, clip_rows, languages, s
        self.out = Path(out_dir) if out_dir is not None else None
        self.features = PooledFeatures(audio_feats) if isinstance(audio_feats, np.ndarray) else audio_feats
        self.trained = _trained_names(model, tail)
        self.batch_size = min(s.batch_size, len(clip_rows))  # fewer clips than a batch: one batch of them all
        self.objective = build_objective(s.objective, self.batch_size)
        self.objective.to(device)
        self.run_step = StepRunner(model, FeatureHeads(model, bank, tail), self.objective, DistContext(), device,
                                   nullcontext, extra_terms=_identity_term(bank, s.identity_penalty))
        named = dict(model.named_parameters())
        tail_names = [n for n in self.trained if not n.startswith(HEAD_PREFIXES)]
        lower = tail_names if s.tail_lr is not None else []
        self.optimizer = make_optimizer(s.optim, [named[n] for n in self.trained if n not in lower]
                                        + list(self.objective.parameters()))
        if lower:
            self.optimizer.add_param_group({"params": [named[n] for n in lower], "lr": s.tail_lr})
        steps_per_epoch = len(clip_rows) // self.batch_size
        self.scheduler = make_scheduler(self.optimizer, s.optim, steps_per_epoch * s.epochs)
        self.config = {**asdict(s), "clips": len(clip_rows), "languages": languages}
        if tail is not None:
            self.config["trained"] = self.trained
        self.groups = None if groups is None else list(groups)
        if groups is not None:
            self.config["batch_groups"] = int(max(groups)) + 1
        self.epoch, self.step = 0, 0  # epochs completed, optimizer steps taken
        self.best: dict[str, Any] = {"score": -math.inf, "epoch": None}
        self.best_heads: dict[str, torch.Tensor] | None = None
        self.history: list[dict] = []

    def resume(self) -> None:
        if self.out is None:
            raise MlatrError("train heads: resume needs out_dir")
        path = self.out / "last.pt"
        if not path.exists():  # killed before its first checkpoint: resuming is starting
            return
        state = read_checkpoint(path)
        if state.get("train_config") != self.config:
            raise MlatrError(f"{path}: was written with other head-training settings or data; resume needs the "
                             f"same ones (or remove {self.out})")
        self.model.load_state_dict(state["model"], strict=False)
        self.objective.load_state_dict(state["objective"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.best, self.history = state["best"], state["history"]
        if self.best["epoch"] is not None:
            self.best_heads = read_checkpoint(self.out / "best.pt")["model"]

    def fit(self, validate: Callable[[nn.Module], float] | None, progress: bool) -> list[dict]:
        bar = tqdm(range(self.epoch, self.s.epochs), desc="train heads", unit="epoch", disable=not progress)
        for epoch in bar:
            entry = self._train_epoch(epoch)
            self.epoch = epoch + 1
            if validate is not None:
                entry["val"] = float(validate(self.model))
                if entry["val"] > self.best["score"]:
                    self.best = {"score": entry["val"], "epoch": self.epoch}
                    self.best_heads = copy.deepcopy(self._heads())
            self.history.append(entry)
            if self.out is not None:
                self._save()
        if self.best_heads is not None:
            self.model.load_state_dict(self.best_heads, strict=False)
        return list(self.history)

    def _train_epoch(self, epoch: int) -> dict:
        s = self.s
        self.model.audio_projection.train()
        self.model.text_projection.train()
        torch.manual_seed(derive_seed(s.seed, epoch, "torch"))
        pairing = torch.Generator().manual_seed(derive_seed(s.seed, epoch, "pairing"))
        options = [range(len(rows)) for rows in self.clip_rows]
        plan = plan_epoch(range(len(self.clip_rows)), options, None, self.batch_size, 0, s.seed, epoch)
        if self.groups is not None:
            plan = group_batches(plan, self.groups, lambda p: str(self.clip_rows[p.index][p.caption]), s.seed, epoch)
        total, sums = 0.0, {}
        for planned in plan:
            idx = [p.index for p in planned]
            rows = [list(self.clip_rows[p.index][p.caption]) for p in planned]
            features, lengths = self.features.batch(idx)
            batch = TrainBatch(features, lengths, idx, rows, list(range(len(idx))), planned)
            inputs = step_inputs(batch, None, self.objective.scheme, self.languages, pairing, self.run_step.ctx)
            if inputs is None:  # a single clip: no negatives
                continue
            result = self.run_step(inputs, 1, True, f"epoch {epoch + 1}, step {self.step}")
            optimizer_step(self.optimizer, self.scheduler, s.optim.grad_clip)
            self.step += 1
            total += result.loss
            for key, value in result.logs.items():
                if key.startswith("loss_"):
                    sums[key] = sums.get(key, 0.0) + value
        entry = {"epoch": epoch + 1, "loss": total / max(len(plan), 1)}
        if len(sums) > 1:
            entry.update({k: v / max(len(plan), 1) for k, v in sums.items()})
        return entry

    def _heads(self) -> dict[str, torch.Tensor]:
        """The trained weights (the heads', and the tail's that train)."""
        trained = set(self.trained)
        return {k: v for k, v in self.model.state_dict().items() if k.startswith(HEAD_PREFIXES) or k in trained}

    def _save(self) -> None:
        """``last.pt`` (and ``best.pt`` when this epoch is the best): the trainer's checkpoint layout."""
        state = {"model": self._heads(), "objective": self.objective.state_dict(), "train_config": self.config,
                 "epoch": self.epoch, "step": self.step, "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "best": self.best, "history": self.history}
        self.out.mkdir(parents=True, exist_ok=True)
        save_checkpoint(self.out / "last.pt", state)
        if self.best["epoch"] == self.epoch:
            save_checkpoint(self.out / "best.pt", state)


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
