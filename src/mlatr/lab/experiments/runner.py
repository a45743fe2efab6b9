"""Grids of training runs (methods x seeds): train each, evaluate it on the test split, collect, resume.

One runner for every grid (``mlatr demo``, ``mlatr experiment supclap``, ``mlatr experiment finegrained``):
a paper module declares its :class:`Row` s (a key, a label, a config tree) and its tables and figures;
:func:`run_grid` trains and evaluates every row x seed and returns a :class:`GridRuns` the module reports
from. Each run trains in its own Python process (``python -m mlatr train``) so that the CPU peak-RSS figure
of ATRI Table 4 belongs to that run alone. Every step leaves a file behind (``summary.json``,
``test_metrics.json``, ``test_positive_similarity.json``), so an interrupted grid continues where it
stopped, and a finished run trained with another config is refused rather than silently reused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.evaluation.with_head import evaluate_with_head
from mlatr.inference.checkpoint import load_model, read_checkpoint
from mlatr.inference.encoded_split import encode_manifest
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.training.diagnostics import positive_similarities
from mlatr.training.run_log import read_run_log


@dataclass(frozen=True)
class Row:
    """One method of a grid: ``key`` names its run folders (``KEY-seedN``), ``label`` its table rows, and
    ``config(manifest, epochs)`` gives its training config tree (as for ``load_config``)."""

    key: str
    label: str
    config: Callable[[str, int], dict[str, Any]]


@dataclass
class RunEvaluation:
    """A finished run's test metrics (ranked with its own head) and every test caption's cosine with its clip."""

    metrics: dict[str, Any]
    positives: np.ndarray


@dataclass
class GridRuns:
    """The finished runs of a grid, by row key; each list is in seed order (``seeds[key]``)."""

    rows: dict[str, Row]
    seeds: dict[str, list[int]] = field(default_factory=dict)
    metrics: dict[str, list[dict]] = field(default_factory=dict)
    summaries: dict[str, list[dict]] = field(default_factory=dict)
    positives: dict[str, list[np.ndarray]] = field(default_factory=dict)
    #: per run, the step records of ``log.jsonl`` (a resumed run's repeats: the last one wins)
    steps: dict[str, list[list[dict]]] = field(default_factory=dict)
    #: per run, the epoch records of the checkpoint's history (exact across resumes)
    histories: dict[str, list[list[dict]]] = field(default_factory=dict)
    run_dirs: dict[str, list[Path]] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        return {key: self.rows[key].label for key in self.metrics}

    def all_seeds(self) -> list[int]:
        return sorted({s for seeds in self.seeds.values() for s in seeds})

    def add(self, key: str, seed: int, run_dir: Path, summary: dict, evaluation: RunEvaluation) -> None:
        for table, value in ((self.seeds, seed), (self.metrics, evaluation.metrics), (self.summaries, summary),
                             (self.positives, evaluation.positives), (self.run_dirs, run_dir),
                             (self.steps, read_step_log(run_dir / "log.jsonl")),
                             (self.histories, read_checkpoint(run_dir / "last.pt")["history"])):
            table.setdefault(key, []).append(value)


def run_dir_of(out: Path, key: str, seed: int) -> Path:
    return Path(out) / "runs" / f"{key}-seed{seed}"


def finished_seeds(out: Path, key: str) -> list[int]:
    """Seeds of row ``key`` whose run under ``out/runs`` has finished (``summary.json`` present)."""
    prefix = f"{key}-seed"
    found = []
    for path in (Path(out) / "runs").glob(f"{prefix}*/summary.json"):
        tail = path.parent.name[len(prefix):]
        if tail.isdigit():
            found.append(int(tail))
    return sorted(found)


def run_grid(out: str | Path, rows: Sequence[Row], seeds: Sequence[int], manifest: str, epochs: int, *,
             split: str = "test", languages: Sequence[str] = DEFAULT_LANGUAGES, max_seconds: float = 10.0,
             progress: bool = True, report_only: bool = False, log: Callable[[str], None] = print) -> GridRuns:
    """Train (or resume) and evaluate every row x seed under ``out/runs``.

    ``report_only``: train nothing; collect every finished run of ``rows`` found on disk, whatever its seed
    (e.g. after stopping a long grid, or to combine grids run with other ``--seeds``).
    """
    out = Path(out)
    runs = GridRuns(rows={r.key: r for r in rows})
    for row in rows:
        for seed in (finished_seeds(out, row.key) if report_only else seeds):
            run_dir = run_dir_of(out, row.key, seed)
            if report_only:
                summary = json.loads((run_dir / "summary.json").read_text())
            else:
                summary = train_run(row.key, seed, row.config(manifest, epochs), run_dir, progress, log)
            evaluation = evaluate_run(run_dir, manifest, split, languages, max_seconds)
            runs.add(row.key, seed, run_dir, summary, evaluation)
    if not runs.metrics:
        raise MlatrError(f"{out / 'runs'}: no finished run of {', '.join(r.key for r in rows)}")
    return runs


def train_run(key: str, seed: int, config: dict[str, Any], run_dir: Path, progress: bool = True,
              log: Callable[[str], None] = print) -> dict:
    """Train one run in a subprocess unless ``run_dir`` holds a finished run of the same config (then its
    summary is returned); resume a partial run. A finished run of another config (e.g. left by an older
    version, or other options into the same ``--out``) is refused, never silently reused."""
    name = f"{key}-seed{seed}"
    summary_path = run_dir / "summary.json"
    tree = dict(config, seed=seed, out_dir=str(run_dir))
    config_path = run_dir / "run-config.yaml"
    if summary_path.exists():
        stored = yaml.safe_load(config_path.read_text()) if config_path.exists() else None
        if stored != yaml.safe_load(yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)):
            raise MlatrError(f"[{name}] {run_dir} holds a finished run trained with another config "
                             f"({config_path.name} differs); remove that folder to retrain it, or use another "
                             "output folder")
        log(f"[{name}] already trained: {summary_path}")
        return json.loads(summary_path.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, yaml.safe_dump(tree, sort_keys=False, allow_unicode=True))
    cmd = [sys.executable, "-m", "mlatr", "train", "--config", str(config_path)]
    if (run_dir / "last.pt").exists():
        cmd.append("--resume")
        log(f"[{name}] resuming the interrupted run in {run_dir}")
    if not progress:
        cmd.append("--no-progress")
    log(f"[{name}] training: {' '.join(cmd[1:])}")
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    if proc.returncode != 0:
        raise MlatrError(f"[{name}] training failed (exit {proc.returncode}); "
                         f"rerun the same command to resume, or see {run_dir}/log.jsonl")
    return json.loads(summary_path.read_text())


def evaluate_run(run_dir: Path, manifest: str, split: str = "test", languages: Sequence[str] = DEFAULT_LANGUAGES,
                 max_seconds: float = 10.0) -> RunEvaluation:
    """Test metrics of ``run_dir/best.pt`` ranked with the model's own matching head (pooled cosine unless it
    was trained with ``objective.matching``), and the pooled cosine of every test caption with its clip
    (SupCLAP Figure 4); both cached next to the run."""
    metrics_path, positives_path = run_dir / "test_metrics.json", run_dir / "test_positive_similarity.json"
    if metrics_path.exists() and positives_path.exists():
        return RunEvaluation(json.loads(metrics_path.read_text()), np.asarray(json.loads(positives_path.read_text())))
    loaded = load_model(run_dir / "best.pt")
    enc = encode_manifest(loaded.model, Manifest.load(manifest).split(split), list(languages),
                          max_seconds=max_seconds, frames=loaded.head.needs_frames)
    metrics = evaluate_with_head(loaded.head, enc)
    if loaded.head.name != "cosine":
        metrics["matching_head"] = loaded.head.config()
    positives = positive_similarities(enc.audio, enc.text, enc.text_audio)
    atomic_write_json(metrics_path, metrics)
    atomic_write_json(positives_path, [round(float(x), 6) for x in positives])
    return RunEvaluation(metrics, positives)


def read_step_log(path: Path) -> list[dict]:
    """The step records of a run's ``log.jsonl`` in step order (a resumed run's repeats: the last one wins)."""
    return read_run_log(path)[0]


def validation_curve(history: list[dict], key: str = "avg") -> list[tuple[int, float]]:
    """``(epoch, R@1)`` of the validated epochs of a checkpoint history: ``key="avg"`` the mean of both
    directions (the selection score), ``"t2a"`` / ``"a2t"`` one direction."""
    if key == "avg":
        return [(h["epoch"], h["val_score"]) for h in history if "val_score" in h]
    return [(h["epoch"], h["val"][key]["avg"]["R1"]) for h in history if "val" in h]
