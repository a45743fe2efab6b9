"""The training loop: batch -> scheme's captions -> dual encoder -> objective's loss terms; checkpoints, resume.

Per epoch ``e`` every random choice (clip order, caption index, crop, the scheme's language draws,
dropout) comes from generators seeded by ``(seed, e)``. Checkpoints are written atomically at the end
of every epoch with the optimizer, scheduler and bookkeeping, so ``resume=True`` continues an
interrupted run bit-exactly: the same seed gives the same final weights as an uninterrupted run.

Outputs in ``cfg.out_dir``: ``config.yaml``, ``last.pt`` (resume), ``best.pt`` (best validation
average R@1, the papers' selection rule: ATRI §5.3, SupCLAP §4.1.2), ``log.jsonl`` (one JSON object
per logged step and per epoch) and ``summary.json``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm import tqdm

from mlatr.data.dataset import AudioSource, TrainBatches, derive_seed
from mlatr.data.manifest import Manifest
from mlatr.encoding import encode_manifest
from mlatr.errors import MlatrError
from mlatr.evaluation.with_head import evaluate_with_head
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.registry import build_audio_encoder, build_text_encoder, text_encoder_takes_corpus
from mlatr.training.checkpoint import load_model, read_checkpoint, save_checkpoint
from mlatr.training.config import Config
from mlatr.training.diagnostics import diagnostic_callbacks
from mlatr.training.objective import build_objective
from mlatr.training.resources import memory_kind, peak_memory_mb, reset_peak_memory, resolve_device
from mlatr.training.schedule import lr_factor

#: ``callback(trainer, info)`` after each optimizer step. ``info`` holds step, epoch, loss, lr, the
#: objective's terms and diagnostics (:meth:`~mlatr.training.objective.LossOutput.log_values`), and the
#: step's inputs: ``batch`` (TrainBatch), ``selection`` (the scheme's texts),
#: ``audio_emb`` / ``text_emb`` (pooled unit embeddings before the step, detached; ``text_emb`` is flat,
#: in ``selection.texts`` order). A callback may put numbers into ``trainer.extra_logs``; they are
#: written with this step's log line (diagnostics such as SupCLAP's drift).
StepCallback = Callable[["Trainer", dict[str, Any]], None]


def build_model(cfg: Config, train_manifest: Manifest):
    """A fresh :class:`DualEncoder` for ``cfg`` (text tokenizers trained on the training captions)."""
    audio_opts = dict(cfg.model.audio)
    text_opts = dict(cfg.model.text)
    if text_encoder_takes_corpus(text_opts["name"]) and "tokenizer" not in text_opts:
        text_opts["corpus"] = [t for c in train_manifest for lang in cfg.data.languages
                               for t in c.captions.get(lang, []) if t]
    audio = build_audio_encoder(audio_opts.pop("name"), **audio_opts)
    text = build_text_encoder(text_opts.pop("name"), **text_opts)
    return DualEncoder(audio, text, embed_dim=cfg.model.embed_dim, temperature=cfg.model.temperature,
                       learnable_temperature=cfg.model.learnable_temperature)


def validation_score(metrics: dict[str, Any]) -> float:
    """Average R@1 over languages and both directions (the checkpoint selection criterion)."""
    return 0.5 * (metrics["t2a"]["avg"]["R1"] + metrics["a2t"]["avg"]["R1"])


class Trainer:
    def __init__(self, cfg: Config, resume: bool = False, callbacks: list[StepCallback] | None = None):
        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        self.device = resolve_device(cfg.train.device)
        self.callbacks = list(callbacks or []) + diagnostic_callbacks(cfg.train.diagnostics)
        self.extra_logs: dict[str, float] = {}
        manifest = Manifest.load(cfg.data.manifest, skip_bad=cfg.data.skip_bad)
        self.manifest_problems = len(manifest.problems)
        self.train_manifest = manifest.split(cfg.data.train_split)
        self.val_manifest = manifest.split(cfg.data.val_split) if cfg.train.eval_every > 0 else None
        self.batches = TrainBatches(
            self.train_manifest, cfg.data.languages, cfg.train.batch_size, cfg.data.max_seconds, cfg.seed,
            sample_rate=cfg.data.sample_rate, cache_audio=cfg.data.cache_audio, skip_bad=cfg.data.skip_bad,
            need_first_language=cfg.objective.scheme == "cacl",
        )
        self.val_source = (AudioSource(self.val_manifest, cfg.data.sample_rate, cache=cfg.data.cache_audio,
                                       skip_bad=cfg.data.skip_bad) if self.val_manifest else None)

        torch.manual_seed(derive_seed(cfg.seed, "init"))
        self.model = self._initial_model().to(self.device)
        self.objective = build_objective(cfg.objective, cfg.train.batch_size).to(self.device)
        params = [p for p in list(self.model.parameters()) + list(self.objective.parameters()) if p.requires_grad]
        opt_cls = torch.optim.AdamW if cfg.optim.name == "adamw" else torch.optim.Adam
        wd = cfg.optim.weight_decay if cfg.optim.name == "adamw" else 0.0
        self.optimizer = opt_cls(params, lr=cfg.optim.lr, betas=cfg.optim.betas, weight_decay=wd)
        self.steps_per_epoch = math.ceil(len(self.batches) / cfg.optim.accumulate)
        self.total_steps = self.steps_per_epoch * cfg.train.epochs
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: lr_factor(s, self.total_steps, cfg.optim.warmup_steps, cfg.optim.schedule,
                                cfg.optim.min_lr_ratio),
        )
        self.epoch = 0  # epochs completed
        self.step = 0
        self.best: dict[str, Any] = {"score": -1.0, "epoch": None}
        self.history: list[dict[str, Any]] = []
        if resume:
            self._resume()
        elif (self.out / "last.pt").exists():
            raise MlatrError(f"{self.out} already holds a run (last.pt): pass --resume to continue it, "
                             "or choose another out_dir")

    # ---- set-up ----------------------------------------------------------------------------------
    def _initial_model(self):
        """A fresh model, or the one of ``model.init_checkpoint`` (ATRI §5.3: KCL / CACL start from ML-CLAP)."""
        init = self.cfg.model.init_checkpoint
        if init:
            return load_model(init).model
        return build_model(self.cfg, self.train_manifest)

    def _resume(self) -> None:
        path = self.out / "last.pt"
        state = read_checkpoint(path, map_location=self.device)
        if state.get("train_config") != self.cfg.to_dict():
            raise MlatrError(f"{path}: was written with another configuration; resume needs the same one")
        self.model.load_state_dict(state["model"])
        self.objective.load_state_dict(state["objective"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.step = state["epoch"], state["step"]
        self.best, self.history = state["best"], state["history"]

    # ---- the loop --------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.out / "config.yaml", yaml.safe_dump(_yaml_tree(cfg.to_dict()), sort_keys=False,
                                                                   allow_unicode=True))
        log = (self.out / "log.jsonl").open("a", encoding="utf-8")
        writer = self._tensorboard()
        try:
            while self.epoch < cfg.train.epochs:
                record = self._train_epoch(self.epoch, log, writer)
                self.epoch += 1
                if self._validates_after(self.epoch):
                    record["val"] = self.validate()
                    record["val_score"] = validation_score(record["val"])
                    if record["val_score"] > self.best["score"]:
                        self.best = {"score": record["val_score"], "epoch": self.epoch}
                self.history.append(record)
                log.write(json.dumps({"type": "epoch", **_compact(record)}) + "\n")
                log.flush()
                if writer is not None and "val_score" in record:
                    writer.add_scalar("val/avg_R1", record["val_score"], self.epoch)
                state = self._state()
                save_checkpoint(self.out / "last.pt", state)
                if self.best["epoch"] == self.epoch or cfg.train.eval_every <= 0:
                    save_checkpoint(self.out / "best.pt", state)
        finally:
            log.close()
            if writer is not None:
                writer.close()
        summary = self.summary()
        atomic_write_json(self.out / "summary.json", summary)
        return summary

    def _train_epoch(self, epoch: int, log, writer) -> dict[str, Any]:
        cfg = self.cfg
        self.model.train()
        torch.manual_seed(derive_seed(cfg.seed, epoch, "torch"))
        pairing_gen = torch.Generator().manual_seed(derive_seed(cfg.seed, epoch, "pairing"))
        reset_peak_memory(self.device)
        amp = self._autocast()
        start = time.perf_counter()
        total, count, texts_seen = 0.0, 0, 0
        bar = tqdm(total=len(self.batches), desc=f"epoch {epoch + 1}/{cfg.train.epochs}", unit="batch",
                   disable=not cfg.train.progress, dynamic_ncols=True)
        self.optimizer.zero_grad(set_to_none=True)
        pending = 0
        for batch in self.batches.epoch(epoch):
            selection = self.objective.scheme.select(batch.rows, cfg.data.languages, pairing_gen)
            with amp:
                audio = self.model.encode_audio(batch.waveform.to(self.device), batch.lengths.to(self.device))
                text = self.model.encode_text(selection.texts, selection.langs)
                out = self.objective(audio, text, selection, self.model.temperature)
                loss = out.total
            if not torch.isfinite(loss):
                raise MlatrError(f"non-finite loss at epoch {epoch + 1}, step {self.step}: lower optim.lr "
                                 "or check the data")
            (loss / cfg.optim.accumulate).backward()
            pending += 1
            total += float(loss.detach())
            count += 1
            texts_seen += len(selection.texts)
            if pending == cfg.optim.accumulate:
                self._optimizer_step()
                pending = 0
                info = {"type": "step", "step": self.step, "epoch": epoch + 1, "loss": float(loss.detach()),
                        "lr": self.scheduler.get_last_lr()[0], **out.log_values()}
                for cb in self.callbacks:
                    cb(self, {**info, "batch": batch, "selection": selection,
                              "audio_emb": audio.pooled.detach(), "text_emb": text.pooled.detach()})
                info.update(self.extra_logs)
                self.extra_logs.clear()
                if self.step % max(1, cfg.train.log_every) == 0:
                    log.write(json.dumps(info) + "\n")
                    if writer is not None:
                        writer.add_scalar("train/loss", info["loss"], self.step)
            bar.set_postfix(loss=f"{total / count:.4f}")
            bar.update(1)
        if pending:
            self._optimizer_step()
        bar.close()
        seconds = time.perf_counter() - start
        return {"epoch": epoch + 1, "step": self.step, "train_loss": total / max(1, count),
                "epoch_time_s": seconds, "peak_memory_mb": peak_memory_mb(self.device),
                "memory_kind": memory_kind(self.device), "texts_encoded": texts_seen,
                "bad_audio": len(self.batches.source.bad)}

    def _optimizer_step(self) -> None:
        clip = self.cfg.optim.grad_clip
        if clip:
            params = [p for g in self.optimizer.param_groups for p in g["params"]]
            torch.nn.utils.clip_grad_norm_(params, clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1

    def _autocast(self):
        if self.device.type == "cuda" and self.cfg.optim.amp == "auto":
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return torch.autocast("cuda", dtype=dtype)
        return torch.autocast("cpu", enabled=False)

    def _tensorboard(self):
        if not self.cfg.train.tensorboard:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise MlatrError("train.tensorboard=true needs the tensorboard package: pip install tensorboard") from exc
        return SummaryWriter(str(self.out / "tensorboard"))

    # ---- validation, state -----------------------------------------------------------------------
    def _validates_after(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (1-based, just finished) is validated: every ``train.eval_every``
        epochs and always the last one, so the final weights are never left unscored."""
        every = self.cfg.train.eval_every
        return every > 0 and (epoch % every == 0 or epoch == self.cfg.train.epochs)

    def validate(self) -> dict[str, Any]:
        """Validation metrics, ranked with the head being trained (fine-grained paper §2.1; cosine otherwise)."""
        head = self.objective.ranking_head
        enc = encode_manifest(self.model, self.val_manifest, self.cfg.data.languages,
                              batch_size=self.cfg.train.eval_batch_size,
                              max_seconds=self.cfg.data.eval_max_seconds, source=self.val_source,
                              frames=head.needs_frames)
        return evaluate_with_head(head, enc)

    def _state(self) -> dict[str, Any]:
        return {
            "model_config": self.model.config(), "model": self.model.state_dict(),
            "objective": self.objective.state_dict(), "train_config": self.cfg.to_dict(),
            "epoch": self.epoch, "step": self.step, "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "best": self.best, "history": self.history,
            "matching_head": self.objective.ranking_head.config(),
        }

    def summary(self) -> dict[str, Any]:
        times = [h["epoch_time_s"] for h in self.history]
        return {
            "out_dir": str(self.out), "scheme": self.cfg.objective.scheme, "base": self.cfg.objective.base,
            "svr": self.cfg.objective.svr is not None, "epochs": self.epoch, "steps": self.step,
            "best_epoch": self.best["epoch"], "best_val_score": self.best["score"],
            "epoch_time_s": sum(times) / len(times) if times else None,
            "peak_memory_mb": max((h["peak_memory_mb"] for h in self.history), default=None),
            "memory_kind": memory_kind(self.device), "device": str(self.device),
            "texts_encoded": sum(h["texts_encoded"] for h in self.history),
            "parameters": sum(p.numel() for p in self.model.parameters()),
        }


def _yaml_tree(obj: Any) -> Any:
    """A config tree with tuples as lists (``yaml.safe_dump`` writes no tuples)."""
    if isinstance(obj, dict):
        return {k: _yaml_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_yaml_tree(v) for v in obj]
    return obj


def _compact(record: dict[str, Any]) -> dict[str, Any]:
    """An epoch record for the log: validation reduced to the averages and consistency."""
    out = {k: v for k, v in record.items() if k != "val"}
    if "val" in record:
        v = record["val"]
        out["val"] = {"t2a": v["t2a"]["avg"], "a2t": v["a2t"]["avg"], "mrv": v["consistency"]["mrv"]}
    return out
