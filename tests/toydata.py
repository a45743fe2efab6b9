"""A tiny on-disk data set for trainer / CLI tests: tones whose pitch and count the captions describe."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

WORDS = {
    "eng": ("a {n} {p} tone", {"low": "low", "high": "high"}, {1: "single", 2: "double"}),
    "fra": ("un son {p} {n}", {"low": "grave", "high": "aigu"}, {1: "simple", 2: "double"}),
    "deu": ("ein {n} {p} Ton", {"low": "tiefer", "high": "hoher"}, {1: "einzelner", 2: "doppelter"}),
}


def make_toy_manifest(root: Path, n_train: int = 24, n_val: int = 8, n_test: int = 8, seed: int = 0,
                      languages=("eng", "fra", "deu"), captions_per_clip: int = 2) -> Path:
    rng = np.random.default_rng(seed)
    (root / "audio").mkdir(parents=True, exist_ok=True)
    rows = []
    splits = ["train"] * n_train + ["val"] * n_val + ["test"] * n_test
    for i, split in enumerate(splits):
        pitch = "low" if i % 2 == 0 else "high"
        count = 1 + (i // 2) % 2
        f0 = (220.0 if pitch == "low" else 1760.0) * (1 + 0.05 * rng.standard_normal())
        sr = 16000
        dur = 1.0 + 0.5 * rng.random()
        t = np.arange(int(sr * dur)) / sr
        env = np.zeros_like(t)
        for c in range(count):
            start = 0.1 + c * 0.45
            env += ((t > start) & (t < start + 0.3)).astype(float)
        wave = 0.5 * env * np.sin(2 * np.pi * f0 * t) + 0.01 * rng.standard_normal(t.shape)
        name = f"audio/clip{i:03d}.wav"
        sf.write(root / name, wave.astype(np.float32), sr)
        caps = {}
        for lang in languages:
            tmpl, pw, nw = WORDS[lang]
            caps[lang] = [tmpl.format(p=pw[pitch], n=nw[count]) + ("" if j == 0 else f" {j}")
                          for j in range(captions_per_clip)]
        rows.append({"id": f"clip{i:03d}", "audio": name, "split": split, "captions": caps,
                     "labels": [f"{pitch} tone"], "duration": round(dur, 3)})
    path = root / "manifest.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


#: The overrides of a tiny model (a few thousand parameters) that trains in seconds on the toy data.
TINY_MODEL = [
    "model.audio={name: small-cnn, channels: [8, 16], dim: 32, num_heads: 2, ff_dim: 64}",
    "model.text={name: small-transformer, dim: 32, num_layers: 1, num_heads: 2, ff_dim: 64, vocab_size: 300}",
    "model.embed_dim=16",
]


def tiny_config(manifest, out, *extra, epochs: int = 2):
    """A training config for the toy data: tiny model, batch 8, 1 s crops, eng/fra/deu."""
    from mlatr.training.config import load_config

    return load_config(None, [
        f"data.manifest={manifest}", f"out_dir={out}", "data.languages=[eng,fra,deu]",
        f"train.epochs={epochs}", "train.batch_size=8", "data.max_seconds=1.0", "optim.warmup_steps=1",
        "train.progress=false", "train.log_every=1", *TINY_MODEL, *extra,
    ])


def train_toy_model(root: Path, n_train: int = 12, n_val: int = 4, n_test: int = 4,
                    calibrated: bool = True) -> tuple[Path, Path]:
    """A tiny small-cnn + small-transformer model trained one epoch on toy tones; (manifest, checkpoint).
    ``calibrated``: the checkpoint carries :func:`toy_calibration` (else it is uncalibrated, as a model fresh
    from ``mlatr train`` is)."""
    from mlatr.training.trainer import Trainer

    manifest = make_toy_manifest(root / "toy", n_train=n_train, n_val=n_val, n_test=n_test)
    Trainer(tiny_config(manifest, root / "run", "train.batch_size=6", "data.eval_max_seconds=2.0", epochs=1)).fit()
    if calibrated:
        stamp_test_calibration(root / "run" / "last.pt")
    return manifest, root / "run" / "last.pt"


def toy_calibration(weights_sha256: str) -> dict:
    """A calibration for tests: the default ranking's models (mlatr/data/default_ranking.json, fitted for another
    model) stamped as if fitted for the weights ``weights_sha256``, so that a toy model's searches carry relevance
    and "nothing relevant" as a calibrated model's do. Never a real model's calibration."""
    from mlatr.calibration_file import default_ranking

    return {**default_ranking(), "weights_sha256": weights_sha256,
            "fitted": {"role": "tests only: the default ranking stamped for a toy model's weights"}}


def stamp_test_calibration(checkpoint: Path) -> Path:
    """Store :func:`toy_calibration` in the checkpoint (or model folder) ``checkpoint``."""
    from mlatr.inference.checkpoint import read_checkpoint, store_calibration
    from mlatr.inference.model_identity import weights_sha256

    return store_calibration(checkpoint, toy_calibration(weights_sha256(read_checkpoint(checkpoint)["model"])))
