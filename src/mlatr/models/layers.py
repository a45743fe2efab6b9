"""Small building blocks shared by the small encoders: masked pooling, sinusoidal positions."""

from __future__ import annotations

import math

import torch


def masked_mean(features: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``features [B, L, D]`` over the positions where ``mask [B, L]`` is True -> ``[B, D]``."""
    if mask is None:
        return features.mean(dim=1)
    weights = mask.to(features.dtype).unsqueeze(-1)
    return (features * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


def sinusoidal_positions(length: int, dim: int, device: torch.device | None = None) -> torch.Tensor:
    """``[length, dim]`` sine/cosine position codes (Vaswani et al. 2017, §3.5)."""
    position = torch.arange(length, dtype=torch.float32, device=device)[:, None]
    freqs = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32, device=device)
                      * (-math.log(10_000.0) / dim))
    codes = torch.zeros(length, dim, device=device)
    codes[:, 0::2] = torch.sin(position * freqs)
    codes[:, 1::2] = torch.cos(position * freqs[: dim // 2])
    return codes
