"""The offline demo's grid: ML-CLAP vs CACL vs KCL on the synthetic multilingual benchmark (ATRI Tables 1-4).

What the grids train, imported by the CLI without torch: the benchmark sizes and the demo's model and
optimizer (:func:`demo_config`, shared by the SupCLAP and fine-grained grids). :mod:`mlatr.lab.experiments.
demo_report` builds the benchmark, trains the three pairing schemes with the same seed, model, optimizer
and number of optimizer steps (equal budget in steps and in audio clips seen; KCL encodes K captions per
clip, CACL two and ML-CLAP one, so the caption pairs seen differ as in the paper), evaluates each
best-by-validation checkpoint on the test split and writes the comparison.
"""

from __future__ import annotations

from typing import Any

from mlatr.languages import DEFAULT_LANGUAGES

#: Benchmark size and training length per ``--size``.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"train": 64, "val": 16, "test": 16, "epochs": 1},  # a smoke run: checks the installation
    "small": {"train": 600, "val": 100, "test": 100, "epochs": 12},
    "medium": {"train": 2000, "val": 200, "test": 200, "epochs": 25},
    "large": {"train": 6000, "val": 500, "test": 500, "epochs": 40},
}

SCHEME_NAMES = {"mlclap": "ML-CLAP", "cacl": "CACL", "kcl": "KCL"}


def demo_config(manifest: str, scheme: str, epochs: int, base: str = "infonce") -> dict[str, Any]:
    """The training config tree of one demo run (same as ``configs/demo.yaml`` apart from paths)."""
    return {
        "data": {"manifest": manifest, "languages": list(DEFAULT_LANGUAGES), "max_seconds": 6.0},
        "model": {
            "audio": {"name": "small-cnn", "channels": [16, 32, 64], "dim": 96, "num_layers": 1,
                      "num_heads": 4, "ff_dim": 192},
            "text": {"name": "small-transformer", "dim": 96, "num_layers": 2, "num_heads": 4, "ff_dim": 192,
                     "vocab_size": 2000},
            "embed_dim": 96,
            "temperature": 0.07,
        },
        "objective": {"scheme": scheme, "base": base},
        "optim": {"name": "adamw", "lr": 2e-3, "weight_decay": 0.01, "warmup_steps": 20},
        "train": {"epochs": epochs, "batch_size": 32, "eval_batch_size": 100},
    }
