"""A run folder's ``log.jsonl`` kept in step with its checkpoint, and what a killed run left cleaned up.

The trainer writes an epoch's records to the log before it saves ``last.pt``. A run killed between the
two (or while ``last.pt`` is written) resumes from the previous checkpoint and trains that epoch again, so
its records would be in the log twice; a run killed mid-epoch leaves that epoch's first step records.
:func:`open_run_log` therefore drops, before appending, every record the checkpoint does not cover (step
records after its step, epoch records after its epoch, and a line cut short by the kill), and removes the
temporary files an interrupted atomic write of the run's files left (``.last.pt.XXXXXXXX.tmp``, ...;
:func:`mlatr.io_utils.remove_orphan_temps`). A fresh run (epoch 0, step 0) starts an empty log.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any

from mlatr.errors import InputError
from mlatr.io_utils import atomic_write_text, remove_orphan_temps
from mlatr.json_input import parse_json

#: The files a training run writes in its folder (their orphan temporary files are removed at start).
RUN_FILES = ("config.yaml", "last.pt", "best.pt", "log.jsonl", "summary.json")


def _covered(record: Any, epoch: int, step: int) -> bool:
    """Whether a log record belongs to the training the checkpoint holds (``epoch`` epochs, ``step``
    optimizer steps done)."""
    if not isinstance(record, dict):
        return False
    if record.get("type") == "epoch":
        return isinstance(record.get("epoch"), int) and record["epoch"] <= epoch
    if isinstance(record.get("step"), int):
        return record["step"] <= step
    return True


def reconcile_log(path: str | Path, epoch: int, step: int) -> int:
    """Rewrite ``path`` (atomically) without the records a checkpoint at (``epoch``, ``step``) does not
    cover; returns how many lines were dropped (0: the file is left untouched)."""
    path = Path(path)
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                record = parse_json(line, str(path))
            except InputError:
                record = None
            if line.endswith("\n") and _covered(record, epoch, step):
                kept.append(line)
            else:
                dropped += 1
    if dropped:
        atomic_write_text(path, "".join(kept))
    return dropped


def read_run_log(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The step records (by step) and the epoch records (by epoch) of a ``log.jsonl``; where a resumed
    run repeated one, the last one wins; a line cut short by a kill is skipped."""
    steps: dict[int, dict[str, Any]] = {}
    epochs: dict[int, dict[str, Any]] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        try:
            record = parse_json(line, str(path), n, "json") if line.strip() else None
        except InputError:  # a line cut short by a kill (or damaged): skipped
            continue
        if not isinstance(record, dict):
            continue
        if record.get("type") == "step" and isinstance(record.get("step"), int):
            steps[record["step"]] = record
        elif record.get("type") == "epoch" and isinstance(record.get("epoch"), int):
            epochs[record["epoch"]] = record
    return [steps[k] for k in sorted(steps)], [epochs[k] for k in sorted(epochs)]


def open_run_log(out_dir: str | Path, epoch: int, step: int) -> IO[str]:
    """Clean ``out_dir`` after an interrupted run (see the module docstring) and open its ``log.jsonl``
    for appending; what was removed is said on stderr."""
    out = Path(out_dir)
    removed = remove_orphan_temps(out, RUN_FILES)
    dropped = reconcile_log(out / "log.jsonl", epoch, step)
    if removed:
        print(f"mlatr: removed {len(removed)} temporary file(s) an interrupted run left in {out}: "
              + ", ".join(p.name for p in removed), file=sys.stderr)
    if dropped:
        print(f"mlatr: dropped {dropped} line(s) of {out / 'log.jsonl'} written after the checkpoint "
              f"(epoch {epoch}, step {step}) the run continues from", file=sys.stderr)
    return (out / "log.jsonl").open("a", encoding="utf-8")


def head_log_records(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A head run's epoch history (:func:`mlatr.training.head_training.train_heads`) as the epoch records of a
    ``log.jsonl`` that ``mlatr plot`` reads: ``train_loss`` and ``train_terms`` at the epoch's last ``step``,
    and the validation score (t2a R@10 of the validation clips' captions, percent) as ``val.t2a.R10``."""
    records = []
    for r in history:
        record = {"type": "epoch", "epoch": r["epoch"], "step": r["step"], "train_loss": r["loss"],
                  "train_terms": {k: v for k, v in r.items() if k.startswith("loss_")}}
        if "val" in r:
            record["val"] = {"t2a": {"R10": r["val"]}}
        records.append(record)
    return records
