"""What encoders return."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EncoderOutput:
    """Output of an audio or text encoder (before or after projection).

    Attributes:
        pooled: ``[B, D]`` one vector per input.
        frames: ``[B, L, D]`` audio frames or text tokens, or ``None`` if the encoder has none.
        mask: ``[B, L]`` bool, True at valid positions, or ``None`` (all valid / no frames).
    """

    pooled: torch.Tensor
    frames: torch.Tensor | None = None
    mask: torch.Tensor | None = None
