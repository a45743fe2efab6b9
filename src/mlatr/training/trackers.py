"""Where a run's numbers go besides ``log.jsonl``: TensorBoard and Weights & Biases (``train.log``).

``train.log: [tensorboard, wandb]`` (either, both or neither; ``train.tensorboard: true`` is the older
spelling of ``[tensorboard]``). Each step's numeric fields (loss, ``loss_<term>``, lr, diagnostics) are
logged under ``train/`` at the optimizer step; each epoch's train loss and terms, validation R@1 (t2a, a2t,
their average) and MRV under ``epoch/`` and ``val/`` at the epoch's last step, so the curves share one
axis. TensorBoard writes ``OUT/tensorboard``; wandb writes ``OUT/wandb`` and follows its own environment
(``WANDB_MODE=offline`` for no network, ``WANDB_PROJECT``, ...), with a run id derived from the run
folder so ``--resume`` continues the same wandb run. Both packages are optional (``pip install
'mlatr[log]'``) and imported only when named.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mlatr.errors import MlatrError

#: Logger names ``train.log`` accepts.
LOGGERS = ("tensorboard", "wandb")


def logger_names(log: list[str] | tuple[str, ...], tensorboard: bool = False) -> list[str]:
    """The loggers a config asks for (``train.log`` + the older ``train.tensorboard``), checked."""
    names = list(dict.fromkeys([*(log or []), *(["tensorboard"] if tensorboard else [])]))
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise MlatrError(f"config: train.log: unknown logger {unknown[0]!r}; known: {', '.join(LOGGERS)}")
    return names


def epoch_scalars(record: dict[str, Any]) -> dict[str, float]:
    """The numbers of an epoch record worth a curve: train loss and terms, validation R@1 and MRV."""
    out = {"epoch/train_loss": float(record["train_loss"]), "epoch/time_s": float(record["epoch_time_s"])}
    out.update({f"epoch/{k}": float(v) for k, v in (record.get("train_terms") or {}).items()})
    val = record.get("val")
    if val:
        out.update({"val/t2a_R1": float(val["t2a"]["avg"]["R1"]), "val/a2t_R1": float(val["a2t"]["avg"]["R1"]),
                    "val/avg_R1": float(record["val_score"]), "val/mrv": float(val["consistency"]["mrv"])})
    return out


def step_scalars(info: dict[str, Any]) -> dict[str, float]:
    """The numeric fields of a step record under ``train/``."""
    return {f"train/{k}": float(v) for k, v in info.items()
            if k not in ("type", "step", "epoch") and isinstance(v, (int, float)) and not isinstance(v, bool)}


class RunLoggers:
    """The loggers of one run (first process only): ``step(info)``, ``epoch(record, step)``, ``close()``."""

    def __init__(self, names: list[str], out_dir: str | Path, config: dict[str, Any]):
        self.out = Path(out_dir)
        self.tensorboard = self.wandb = None
        if "tensorboard" in names:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional extra (mlatr[log])
            except ImportError as exc:
                raise MlatrError("train.log: tensorboard needs the tensorboard package: pip install 'mlatr[log]'"
                                 ) from exc
            self.tensorboard = SummaryWriter(str(self.out / "tensorboard"))
        if "wandb" in names:
            try:
                import wandb  # optional extra (mlatr[log])
            except ImportError as exc:
                raise MlatrError("train.log: wandb needs the wandb package: pip install 'mlatr[log]'") from exc
            (self.out / "wandb").mkdir(parents=True, exist_ok=True)
            run_id = hashlib.sha256(str(self.out.resolve()).encode()).hexdigest()[:16]
            self.wandb = wandb.init(dir=str(self.out), id=run_id, resume="allow", name=self.out.name,
                                    config=config, reinit="finish_previous")

    def _write(self, values: dict[str, float], step: int) -> None:
        if self.tensorboard is not None:
            for key, value in values.items():
                self.tensorboard.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log({**values, "step": step}, step=step)

    def step(self, info: dict[str, Any]) -> None:
        self._write(step_scalars(info), int(info["step"]))

    def epoch(self, record: dict[str, Any]) -> None:
        self._write(epoch_scalars(record), int(record["step"]))

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
