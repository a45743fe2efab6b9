"""Learning-rate schedule: linear warmup, then cosine decay (or constant)."""

from __future__ import annotations

import math


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str = "cosine",
              min_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based).

    Warmup: ``(step + 1) / warmup_steps`` for the first ``warmup_steps`` steps. Then ``"constant"``
    keeps 1; ``"cosine"`` decays from 1 to ``min_ratio`` over the remaining steps:
    ``min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`` with ``t`` in [0, 1].
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, max(0.0, (step - warmup_steps) / span))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t))
