"""Training the dual encoder: batch -> scheme's captions -> dual encoder -> objective's loss terms.

:class:`Trainer` is an :class:`~mlatr.training.epoch_loop.EpochLoop` (the one loop of fit, resume,
best-epoch tracking and checkpoints, shared with the head trainer) that supplies the model, the data
(:class:`~mlatr.data.pipeline.batches.TrainBatches`), validation on the validation split, what a resumed
run must match (the configuration and the clips) and the run's logs. Checkpoints are written atomically at
the end of every epoch with the optimizer, scheduler and bookkeeping, so ``resume=True`` continues an
interrupted run bit-exactly (the randomness contract: ``docs/architecture.md``, "Randomness and resume").

Outputs in ``cfg.out_dir``: ``config.yaml``, ``last.pt`` (resume), ``best.pt`` (best validation
average R@1, the papers' selection rule: ATRI §5.3, SupCLAP §4.1.2), ``log.jsonl`` (one JSON object
per logged step and per epoch) and ``summary.json``.

Under ``torchrun`` (:mod:`mlatr.training.distributed`) every process runs this loop on its shard of each
global batch of ``train.batch_size`` clips; the objective sees the global batch. The first process writes
the outputs, shows the progress bar and validates (once); the others wait for it at the epoch's end. A run
resumes with any number of processes: the epoch's batches do not depend on it.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
import yaml
from tqdm import tqdm

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.batches import TrainBatch, TrainBatches
from mlatr.data.pipeline.source_choice import choose_cache, open_source
from mlatr.data.pipeline.workers import default_workers
from mlatr.data.webdataset_shards import ShardIndex, index_shards
from mlatr.errors import MlatrError
from mlatr.evaluation.with_head import evaluate_with_head
from mlatr.inference import process_group
from mlatr.inference.checkpoint import load_model
from mlatr.inference.encoded_split import encode_manifest
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.registry import build_audio_encoder, build_text_encoder, text_encoder_takes_corpus
from mlatr.seeds import derive_seed
from mlatr.training import distributed
from mlatr.training.config import Config, resume_view
from mlatr.training.config_checks import config_differences
from mlatr.training.data_checks import check_training_data, data_fingerprint, fingerprint_difference
from mlatr.training.diagnostics import diagnostic_callbacks
from mlatr.training.epoch_line import epoch_line, eta_seconds
from mlatr.training.epoch_loop import EpochLoop, EpochStats
from mlatr.training.objective import build_objective, check_scheme
from mlatr.training.optimization import make_optimizer, make_scheduler
from mlatr.training.resources import memory_kind, peak_memory_mb, reset_peak_memory
from mlatr.training.run_log import open_run_log
from mlatr.training.step import StepInputs, StepResult, StepRunner
from mlatr.training.trackers import RunLoggers, logger_names
from mlatr.writer_lock import writer_lock

#: ``callback(trainer, info)`` after each optimizer step. ``info`` holds step, epoch, loss, lr, the
#: objective's terms and diagnostics (:meth:`~mlatr.training.objective.LossOutput.log_values`), and the
#: step's inputs: ``batch`` (TrainBatch, this process's clips), ``selection`` (the scheme's texts of the
#: global batch), ``audio_emb`` / ``text_emb`` (the global batch's pooled unit embeddings before the step,
#: detached; ``text_emb`` is flat, in ``selection.texts`` order). A callback may put numbers into
#: ``trainer.extra_logs``; they are written with this step's log line (diagnostics such as SupCLAP's drift).
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


def build_optimizer(cfg: Config, model, objective, foreach: bool | None = None) -> torch.optim.Optimizer:
    """The run's optimizer (:func:`~mlatr.training.optimization.make_optimizer`) over the trainable parameters
    of the model and the objective. ``foreach``: the planner (:mod:`mlatr.lab.planning`) asks for the
    implementation a GPU would run while tracing on the CPU."""
    return make_optimizer(cfg.optim, list(model.parameters()) + list(objective.parameters()), foreach)


def validation_score(metrics: dict[str, Any]) -> float:
    """Average R@1 over languages and both directions (the checkpoint selection criterion)."""
    return 0.5 * (metrics["t2a"]["avg"]["R1"] + metrics["a2t"]["avg"]["R1"])


class Trainer(EpochLoop):
    """A training run of ``cfg`` (see the module docstring)."""

    def __init__(self, cfg: Config, resume: bool = False, callbacks: list[StepCallback] | None = None,
                 wait: bool | float = False, allow_data_change: bool = False):
        """``wait``: when another process is writing ``out_dir``, wait for it (True, or at most that many
        seconds) instead of refusing (:class:`mlatr.writer_lock.LockedError`). The first process holds the
        run's writer lock from here until :meth:`fit` returns (or :meth:`close`). ``resume`` refuses when the
        training or validation clips differ from those ``last.pt`` was trained on, saying what changed;
        ``allow_data_change`` warns with the difference and goes on."""
        self.cfg = cfg
        self.allow_data_change = allow_data_change
        self.out = Path(cfg.out_dir)
        self.dist, self.device = process_group.setup(cfg.train.device, cfg.dist.timeout_minutes)
        if self.device.type == "cuda" and cfg.optim.tf32:  # the fp32 matmuls of this process on TF32 cores
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self._lock = ExitStack()
        if self.dist.is_main:
            self._lock.enter_context(writer_lock(self.out, "training run", wait=wait, folder=True))
        try:
            self._set_up(cfg, resume, callbacks)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Release the run's writer lock (:meth:`fit` does it when it returns)."""
        self._lock.close()

    def _set_up(self, cfg: Config, resume: bool, callbacks: list[StepCallback] | None) -> None:
        self.callbacks = list(callbacks or []) + diagnostic_callbacks(cfg.train.diagnostics)
        self.extra_logs: dict[str, float] = {}
        self.logger_names = logger_names(cfg.train.log, cfg.train.tensorboard)
        self.shards = self._read_shards() if cfg.data.webdataset else None
        manifest = (self.shards.manifest if self.shards is not None
                    else Manifest.load(cfg.data.manifest, skip_bad=cfg.data.skip_bad))
        self.manifest_problems = manifest.problems  # malformed lines skipped under data.skip_bad
        self.train_manifest = manifest.split(cfg.data.train_split)
        self.val_manifest = manifest.split(cfg.data.val_split) if cfg.train.eval_every > 0 else None
        self.data_fingerprint = data_fingerprint({cfg.data.train_split: self.train_manifest,
                                                  cfg.data.val_split: self.val_manifest})
        self._open_audio()

        torch.manual_seed(derive_seed(cfg.seed, "init"))
        model = self._initial_model().to(self.device)
        objective = build_objective(cfg.objective, cfg.train.batch_size, scheme=self.scheme).to(self.device)
        self.net = model
        if self.dist.enabled:
            distributed.broadcast_module(objective, self.dist)
            self.net = distributed.wrap_ddp(model, self.device, cfg.dist.find_unused_parameters)
        loss_side = [p for p in objective.parameters() if p.requires_grad]
        if model.learnable_temperature:
            loss_side.append(model.log_temperature)
        optimizer = build_optimizer(cfg, model, objective)
        self.steps_per_epoch = math.ceil(len(self.batches) / cfg.optim.accumulate)
        self.total_steps = self.steps_per_epoch * cfg.train.epochs
        super().__init__(
            model=model, objective=objective,
            run_step=StepRunner(model, self.net, objective, self.dist, self.device, self._autocast,
                                cfg.optim.grad_cache_chunk, cfg.dist.local_loss),
            optimizer=optimizer, scheduler=make_scheduler(optimizer, cfg.optim, self.total_steps),
            languages=cfg.data.languages, epochs=cfg.train.epochs, seed=cfg.seed, accumulate=cfg.optim.accumulate,
            grad_clip=cfg.optim.grad_clip, device=self.device, dist=self.dist, out=self.out,
            batch_source=self.batches, loss_side=loss_side,
            progress="batches" if cfg.train.progress and self.dist.is_main else None,
        )
        if resume and not self.resume():
            print(f"mlatr: {self.out / 'last.pt'} does not exist yet: starting the run from its first epoch",
                  file=sys.stderr)
        elif not resume and (self.out / "last.pt").exists():
            raise MlatrError(f"{self.out} already holds a run (last.pt): pass --resume to continue it, "
                             "or choose another out_dir")

    # ---- set-up ----------------------------------------------------------------------------------
    def _open_audio(self) -> None:
        """The training batches (this process's shards, read by ``data.workers`` processes) and the
        validation audio (first process only), from the files or ``data.store``, cached per
        ``data.cache_audio``."""
        d = self.cfg.data
        self.workers = default_workers() if d.workers == "auto" else int(d.workers)
        show = self.cfg.train.progress and self.dist.is_main
        self.scheme = scheme = check_scheme(self.cfg.objective, d.languages)  # the run's one scheme
        # refuse data that cannot train before anything is built or read (training.data_checks)
        check_training_data(self.train_manifest, self.val_manifest, d.languages, self.cfg.train.batch_size,
                            scheme.anchor_language is not None, check_files=not d.store and self.shards is None,
                            skip_bad=d.skip_bad, splits=(d.train_split, d.val_split))
        train = open_source(self.train_manifest, d.sample_rate, d.store, d.skip_bad, self.shards)
        self.batches = TrainBatches(
            self.train_manifest, d.languages, self.cfg.train.batch_size, d.max_seconds, self.cfg.seed,
            need_first_language=scheme.anchor_language is not None, source=train, workers=self.workers,
            prefetch=d.prefetch, shard=(self.dist.rank, self.dist.world_size), progress=show,
        )
        parts = [(train, self.batches.clips)]
        val = None
        if self.val_manifest is not None:
            val = open_source(self.val_manifest, d.sample_rate, d.store, d.skip_bad, self.shards)
            parts.append((val, range(len(self.val_manifest))))
        # every process decides alike (the lengths the epoch is planned with come from the same place)
        choose_cache(d.cache_audio, parts, d.cache_max_gb / self.dist.local_world_size)
        self.val_source = val if self.dist.is_main else None

    def _read_shards(self) -> ShardIndex:
        """``data.webdataset``'s shards, each streamed once per job: split over the processes, exchanged."""
        gather = None
        if self.dist.enabled:
            def gather(obj):
                everyone: list[Any] = [None] * self.dist.world_size
                torch.distributed.all_gather_object(everyone, obj)
                return everyone
        workers = default_workers() if self.cfg.data.workers == "auto" else int(self.cfg.data.workers)
        return index_shards(self.cfg.data.webdataset, self.dist.rank, self.dist.world_size, gather,
                            progress=self.cfg.train.progress and self.dist.is_main, workers=workers,
                            skip_bad=self.cfg.data.skip_bad)

    def _initial_model(self):
        """A fresh model, or the one of ``model.init_checkpoint`` (ATRI §5.3: KCL / CACL start from ML-CLAP)
        with this run's freezing options. Under torchrun every process ends up with the first process's
        architecture and tokenizer."""
        init = self.cfg.model.init_checkpoint
        if init:
            fine_tuning = {"audio": self.cfg.model.audio, "text": self.cfg.model.text}
            model = load_model(init, fine_tuning=fine_tuning).model
        else:
            model = build_model(self.cfg, self.train_manifest)
        if self.dist.enabled:
            config = [model.config()]
            torch.distributed.broadcast_object_list(config, src=0)
            if config[0] != model.config():
                model = DualEncoder.from_config(config[0])
        return model

    def check_resume(self, state: dict[str, Any], path: Path) -> None:
        """Refuse a ``last.pt`` written with another configuration, or (unless ``allow_data_change``, which
        warns) on other training or validation clips."""
        stored, current = resume_view(state.get("train_config") or {}), resume_view(self.cfg.to_dict())
        if stored != current:
            raise MlatrError(f"{path}: was written with another configuration; resume needs the same one "
                             f"({config_differences(stored, current)})")
        recorded = state.get("data_fingerprint")  # absent in checkpoints written before it was recorded
        change = fingerprint_difference(recorded, self.data_fingerprint) if recorded is not None else None
        if change and not self.allow_data_change:
            raise MlatrError(f"{path}: the run's data changed since this checkpoint was written ({change}); "
                             f"resuming would go on with other clips than the run started with. Restore the "
                             f"manifest, start a new run, or pass --allow-data-change to go on with the new data")
        if change:
            print(f"mlatr: warning: resuming on changed data (--allow-data-change): {change}", file=sys.stderr)

    # ---- the loop --------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train the remaining epochs; the run's writer lock is released when this returns or fails."""
        try:
            return self._fit()
        finally:
            self.close()

    def _fit(self) -> dict[str, Any]:
        cfg = self.cfg
        main = self.dist.is_main
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.out / "config.yaml", yaml.safe_dump(_yaml_tree(cfg.to_dict()), sort_keys=False,
                                                                       allow_unicode=True))
        # the log agrees with last.pt; orphan temporary files are removed
        self._log = open_run_log(self.out, self.epoch, self.step) if main else None
        self._writer = RunLoggers(self.logger_names, self.out, cfg.to_dict()) if main else None
        self._walls: list[float] = []  # wall time of each epoch this process ran (the ETA)
        try:
            self.fit_epochs()
        finally:
            if self._log is not None:
                self._log.close()
            if self._writer is not None:
                self._writer.close()
        summary = self.summary()
        if main:
            atomic_write_json(self.out / "summary.json", summary)
        return summary

    def epoch_batches(self, epoch: int) -> tuple[Iterable[TrainBatch], int]:
        reset_peak_memory(self.device)
        return self.batches.epoch(epoch), len(self.batches)

    def after_step(self, epoch: int, batch: TrainBatch, inputs: StepInputs, result: StepResult) -> None:
        """The step callbacks, then the step's log line (every ``train.log_every`` steps)."""
        info = {"type": "step", "step": self.step, "epoch": epoch + 1, "loss": result.loss,
                "lr": self.scheduler.get_last_lr()[0], **result.logs}
        for cb in self.callbacks:
            cb(self, {**info, "batch": batch, "selection": inputs.selection,
                      "audio_emb": result.audio, "text_emb": result.text})
        info.update(self.extra_logs)
        self.extra_logs.clear()
        if self._log is not None and self.step % max(1, self.cfg.train.log_every) == 0:
            self._log.write(json.dumps(info) + "\n")
            self._writer.step(info)

    def epoch_record(self, epoch: int, stats: EpochStats) -> dict[str, Any]:
        peak = distributed.all_reduce_(torch.tensor([peak_memory_mb(self.device)]), self.dist, "max")
        return {"epoch": epoch + 1, "step": self.step, "train_loss": stats.loss, "train_terms": stats.terms,
                "epoch_time_s": stats.seconds, "peak_memory_mb": float(peak), "memory_kind": memory_kind(self.device),
                "texts_encoded": stats.texts, "bad_audio": self._bad_audio()}

    def end_epoch(self, record: dict[str, Any]) -> None:
        """The epoch's log record (before the checkpoint that covers it), the checkpoints, the epoch line; the
        other processes wait for the first."""
        if self.dist.is_main:
            self._log.write(json.dumps({"type": "epoch", **_compact(record)}) + "\n")
            self._log.flush()
            self._writer.epoch(record)
            self.save_checkpoints()
            self._walls.append(time.perf_counter() - self.epoch_started)
            tqdm.write(epoch_line(record, self.epochs, self._walls[-1],
                                  eta_seconds(self._walls, self.epoch, self.epochs),
                                  self.best["epoch"] == self.epoch and "val" in record), file=sys.stderr)
        self.dist.barrier()  # the others wait for validation and the checkpoint

    def _bad_audio(self) -> int:
        """Training clips found unreadable so far (by any process)."""
        bad = set(self.batches.source.bad)
        if self.dist.enabled:
            everyone: list[Any] = [None] * self.dist.world_size
            torch.distributed.all_gather_object(everyone, sorted(bad))
            bad = set().union(*everyone)
        return len(bad)

    def _autocast(self):
        """A fresh autocast context for the step (bf16 / fp16 on CUDA with ``optim.amp: auto``)."""
        if self.device.type == "cuda" and self.cfg.optim.amp == "auto":
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return torch.autocast("cuda", dtype=dtype)
        return torch.autocast("cpu", enabled=False)

    # ---- validation, state -----------------------------------------------------------------------
    def validates_after(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (1-based, just finished) is validated: by the first process, every
        ``train.eval_every`` epochs and always the last one, so the final weights are never left unscored."""
        every = self.cfg.train.eval_every
        return self.dist.is_main and every > 0 and (epoch % every == 0 or epoch == self.epochs)

    def validates_ever(self) -> bool:
        return self.cfg.train.eval_every > 0

    def validation(self) -> tuple[float, dict[str, Any]]:
        metrics = self.validate()
        score = validation_score(metrics)
        return score, {"val": metrics, "val_score": score}

    def validate(self) -> dict[str, Any]:
        """Validation metrics, ranked with the head being trained (fine-grained paper §2.1; cosine otherwise)."""
        head = self.objective.ranking_head
        enc = encode_manifest(self.model, self.val_manifest, self.cfg.data.languages,
                              batch_size=self.cfg.train.eval_batch_size,
                              max_seconds=self.cfg.data.eval_max_seconds, source=self.val_source,
                              frames=head.needs_frames, workers=self.workers)
        return evaluate_with_head(head, enc)

    def run_config(self) -> dict[str, Any]:
        return self.cfg.to_dict()

    def checkpoint_extras(self) -> dict[str, Any]:
        return {"model_config": self.model.config(), "matching_head": self.objective.ranking_head.config(),
                "data_fingerprint": self.data_fingerprint}

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
