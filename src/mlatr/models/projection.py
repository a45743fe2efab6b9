"""Projection head: two linear layers with a ReLU between, as in ML-CLAP.

ML-CLAP (the ATRI baseline, ATRI §5.3) maps each encoder's output into the shared space with
``Linear -> ReLU -> Linear``. The same head is applied to the pooled vector and to every frame
(audio) or token (text) feature, so local and global features live in one space (needed by the
local-to-global matching heads).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
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


class IdentityHead(nn.Module):
    """``[..., d] -> [..., d]`` unchanged: the text side of a model whose audio head is trained *into* a
    frozen multilingual text space (the text encoder's cross-lingual alignment is kept as it is)."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int | None = None):
        super().__init__()
        if in_dim != out_dim:
            raise ValueError(f"identity head: input size {in_dim} differs from the embedding size {out_dim}")
        self.in_dim = self.out_dim = int(in_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class ResidualHead(nn.Module):
    """``x + Linear(ReLU(Linear(x)))`` with the last layer initialised to zero: the identity at the start,
    a near-identity while a penalty on ``||head(x) - x||`` keeps it there (:mod:`mlatr.training.head_training`)."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int | None = None):
        super().__init__()
        if in_dim != out_dim:
            raise ValueError(f"residual head: input size {in_dim} differs from the embedding size {out_dim}")
        self.in_dim = self.out_dim = int(in_dim)
        self.hidden_dim = int(hidden_dim or in_dim)
        self.net = nn.Sequential(nn.Linear(self.in_dim, self.hidden_dim), nn.ReLU(),
                                 nn.Linear(self.hidden_dim, self.out_dim))
        nn.init.zeros_(self.net[2].weight)
        nn.init.zeros_(self.net[2].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class MeanOfUnitHeads(nn.Module):
    """``[..., in_dim] -> [..., out_dim]``: the mean of several heads' L2-normalised outputs, an ensemble of head
    pairs trained apart from different initialisations and batch orders (``DualEncoder(ensemble=N)``). The mean
    is not unit norm; the dual encoder normalises it again, so ranking by it is ranking by the cosine of the
    members' summed unit embeddings. Not from the three papers: an ensemble measured on the real-sound corpus
    (docs/real-sounds.md, the options tried)."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one head")
        self.members = nn.ModuleList(members)
        self.in_dim, self.out_dim = members[0].in_dim, members[0].out_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([F.normalize(h(x), dim=-1) for h in self.members]).mean(dim=0)  # [..., out_dim]


#: Projection head kinds by name (``DualEncoder(text_head=...)``).
PROJECTION_HEADS: dict[str, type[nn.Module]] = {"mlp": ProjectionHead, "identity": IdentityHead,
                                                "residual": ResidualHead}
