"""What encoders return: one set of encoded items (audio clips or texts)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class EncoderOutput:
    """Encoded items: an audio or text encoder's output (before or after projection), one side of a match.

    Attributes:
        pooled: ``[B, D]`` one vector per item (``None`` only for a frames-only side handed to a head).
        frames: ``[B, L, D]`` audio frames or text tokens, or ``None`` if the encoder has none.
        mask: ``[B, L]`` bool, True at valid positions, or ``None`` (all valid / no frames).

    Slotted texts (``Selection.gather``) have one more axis after the batch: ``pooled [B, S, D]``,
    ``frames [B, S, L, D]``, ``mask [B, S, L]``.
    """

    pooled: torch.Tensor | None = None
    frames: torch.Tensor | None = None
    mask: torch.Tensor | None = None

    def map(self, fn) -> EncoderOutput:
        """``fn`` applied to every field that is set (pooled, frames, mask)."""
        return EncoderOutput(*(None if t is None else fn(t) for t in (self.pooled, self.frames, self.mask)))

    def rows(self, index: torch.Tensor) -> EncoderOutput:
        """Items ``index`` (a ``[n]`` long tensor) of every field."""
        return self.map(lambda t: t.index_select(0, index))

    def slot(self, k: int) -> EncoderOutput:
        """Slot ``k`` of slotted texts (``[B, S, ...]`` -> ``[B, ...]``)."""
        return self.map(lambda t: t[:, k])

    def float(self) -> EncoderOutput:
        """Pooled vectors and frames in at least float32 (:func:`at_least_float32`; masks unchanged)."""
        return EncoderOutput(*(None if t is None else at_least_float32(t) for t in (self.pooled, self.frames)),
                             self.mask)


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 when it is narrower (AMP's float16 / bfloat16), else as it is: a model made in float64
    (the CPU-portable behaviour record, ``tests/behaviour_record.py``) keeps its precision."""
    return t if t.dtype == torch.float64 else t.float()
