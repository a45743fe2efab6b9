"""Run a grid of training configurations (methods x seeds), evaluate each on the test split, resume.

Used by ``mlatr demo`` (ML-CLAP vs CACL vs KCL) and by the SupCLAP / fine-grained comparisons. Each
run trains in its own Python process (``python -m mlatr train``) so that the CPU peak-RSS figure of
ATRI Table 4 belongs to that run alone. Every step leaves a file behind (``summary.json``,
``test_metrics.json``), so an interrupted grid continues where it stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_json, atomic_write_text


@dataclass
class RunSpec:
    """One training run: a method name, a seed and a full config tree (as for ``load_config``)."""

    method: str
    seed: int
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.method}-seed{self.seed}"


def train_run(spec: RunSpec, run_dir: Path, progress: bool = True, log: Callable[[str], None] = print) -> dict:
    """Train ``spec`` in a subprocess unless ``run_dir`` holds a finished run of the same config (then
    its summary is returned); resume a partial run. A finished run of another config (e.g. left by an
    older version, or other options into the same ``--out``) is refused, never silently reused."""
    summary_path = run_dir / "summary.json"
    tree = dict(spec.config, seed=spec.seed, out_dir=str(run_dir))
    config_path = run_dir / "run-config.yaml"
    if summary_path.exists():
        stored = yaml.safe_load(config_path.read_text()) if config_path.exists() else None
        if stored != yaml.safe_load(yaml.safe_dump(tree, sort_keys=False, allow_unicode=True)):
            raise MlatrError(f"[{spec.name}] {run_dir} holds a finished run trained with another config "
                             f"({config_path.name} differs); remove that folder to retrain it, or use another "
                             "output folder")
        log(f"[{spec.name}] already trained: {summary_path}")
        return json.loads(summary_path.read_text())
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(config_path, yaml.safe_dump(tree, sort_keys=False, allow_unicode=True))
    cmd = [sys.executable, "-m", "mlatr", "train", "--config", str(config_path)]
    if (run_dir / "last.pt").exists():
        cmd.append("--resume")
        log(f"[{spec.name}] resuming the interrupted run in {run_dir}")
    if not progress:
        cmd.append("--no-progress")
    log(f"[{spec.name}] training: {' '.join(cmd[1:])}")
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    if proc.returncode != 0:
        raise MlatrError(f"[{spec.name}] training failed (exit {proc.returncode}); "
                         f"rerun the same command to resume, or see {run_dir}/log.jsonl")
    return json.loads(summary_path.read_text())


def evaluate_run(run_dir: Path, manifest: str, split: str, languages: list[str], max_seconds: float) -> dict:
    """Test metrics of ``run_dir/best.pt`` (cached in ``test_metrics.json``), ranked with the model's own
    matching head (pooled cosine unless it was trained with ``objective.matching``)."""
    out = run_dir / "test_metrics.json"
    if out.exists():
        return json.loads(out.read_text())
    from mlatr.data.manifest import Manifest
    from mlatr.encoding import encode_manifest
    from mlatr.evaluation import evaluate_embeddings
    from mlatr.training.checkpoint import load_model, read_checkpoint
    from mlatr.training.matching_objective import head_from_checkpoint

    model = load_model(run_dir / "best.pt")
    head = head_from_checkpoint(read_checkpoint(run_dir / "best.pt"))
    test = Manifest.load(manifest).split(split)
    enc = encode_manifest(model, test, languages, max_seconds=max_seconds, frames=head.needs_frames)
    if head.name == "cosine":
        metrics = evaluate_embeddings(**enc.arrays())
    else:
        from mlatr.evaluation.with_head import evaluate_with_head

        metrics = evaluate_with_head(head, enc)
        metrics["matching_head"] = head.config()
    atomic_write_json(out, metrics)
    return metrics
