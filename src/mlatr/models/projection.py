"""Projection head: two linear layers with a ReLU between, as in ML-CLAP.

ML-CLAP (the ATRI baseline, ATRI §5.3) maps each encoder's output into the shared space with
``Linear -> ReLU -> Linear``. The same head is applied to the pooled vector and to every frame
(audio) or token (text) feature, so local and global features live in one space (needed by the
local-to-global matching heads).
"""

from __future__ import annotations

import torch
from torch import nn


class ProjectionHead(nn.Module):
    """``[..., in_dim] -> [..., out_dim]``: ``Linear(in, hidden) -> ReLU -> Linear(hidden, out)``."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int | None = None):
        super().__init__()
        hidden_dim = hidden_dim or out_dim
        self.in_dim, self.out_dim, self.hidden_dim = int(in_dim), int(out_dim), int(hidden_dim)
        self.net = nn.Sequential(nn.Linear(self.in_dim, self.hidden_dim), nn.ReLU(),
                                 nn.Linear(self.hidden_dim, self.out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
