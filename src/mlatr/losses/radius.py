"""Semantic radius models for support vector regularization (SupCLAP §3.2, Appendix B).

A radius model maps the batch's cosine similarity matrix ``sim [N, N]`` (row ``i`` = one anchor, its
positive in column ``i``) to the radius of each anchor's support vector:

- :class:`StaticRadius` (StaticSVR): one learnable scalar shared by every anchor; returns a 0-d tensor.
- :class:`DynamicRadius` (DynamicSVR): a 3-layer MLP ``f_theta(S)`` on each anchor's similarity
  vector ``S = [s(t+, a+), s(t+, a_1-), ...]``; returns ``[N]``.

For the text-to-audio direction pass ``sim = t @ a.T``; for audio-to-text pass its transpose.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Initial radius. SupCLAP does not state one; 0.1 against a typical initial positive distance
#: ``||a+ - t+|| ~ 1`` (cosine ~ 0.5) starts with a mild suppression factor ``1 - R/||a+ - t+|| ~ 0.9``
#: of the perpendicular force (eq. 8), which training then adapts.
DEFAULT_INIT_RADIUS = 0.1


def _check_similarity(similarity: Tensor) -> None:
    if similarity.dim() != 2 or similarity.shape[0] != similarity.shape[1] or similarity.shape[0] == 0:
        raise ValueError(
            f"similarity must be a non-empty square [N, N] matrix, got {tuple(similarity.shape)}"
        )


class StaticRadius(nn.Module):
    """StaticSVR's semantic radius: one globally shared learnable scalar (SupCLAP §3.2).

    ``forward(similarity)`` ignores the similarities and returns the 0-d parameter, so the same
    support-vector displacement ``R`` is used for every anchor (and for both directions when one
    module serves both, as in the paper's single radius curve for bi-StaticSVR, Figure 3).

    Inputs (forward):
        similarity: ``[N, N]`` cosine matrix (only checked for shape).

    Returns:
        0-d tensor ``R`` (unconstrained real, as in the paper; see :func:`~mlatr.losses.constraint_loss`).

    Example:
        >>> import torch
        >>> float(StaticRadius(0.25)(torch.eye(3)).detach())
        0.25
    """

    def __init__(self, init: float = DEFAULT_INIT_RADIUS) -> None:
        super().__init__()
        self.radius = nn.Parameter(torch.tensor(float(init)))

    def forward(self, similarity: Tensor) -> Tensor:
        _check_similarity(similarity)
        return self.radius

    def extra_repr(self) -> str:
        return f"radius={float(self.radius.detach()):.4g}"


class DynamicRadius(nn.Module):
    """DynamicSVR's radius predictor: a 3-layer MLP on each anchor's similarity vector (SupCLAP §3.2).

    For anchor ``i`` the input is ``S_i = [cos(t_i, a_i), n_1, ..., n_{K-1}]``: the positive's cosine
    first, then the cosines to the negatives *sorted from most to least similar*, where ``K`` is the
    ``batch_size`` the predictor was built for. Choices the paper leaves open, and why:

    - Sorting. A mini-batch has no meaningful order of negatives, so feeding them in batch order would
      make ``R`` depend on an arbitrary permutation. Sorted, ``S`` is a fixed-length description of the
      set of negatives (hardest first), which is what §3.2 says the predictor reads ("high similarity
      to a negative sample implies a higher drift risk").
    - Other batch sizes. A smaller batch (e.g. the last one of an epoch, or a pair set with masked
      captions) is padded at the end with ``pad_value = -1``, the cosine of an antipodal clip. That is
      a neutral negative: its softmax weight ``exp(-1/tau)`` is negligible, so it exerts no pushing
      force (eq. 3) and stands for "no negative here". A larger batch keeps its ``K - 1`` hardest
      negatives, the ones that dominate the pushing force.
    - Cosine, not ``cos/tau``. The paper's ``s = cos/tau``; with a fixed ``tau`` the two differ by a
      scale the first layer absorbs, and cosines stay in ``[-1, 1]`` when ``tau`` is learned.
    - Detached input (default). Appendix D's Jacobian (eq. 14-15) treats ``R`` as a constant with
      respect to ``t+``; detaching ``S`` makes the SVR gradient the analysed one and stops the encoders
      from shaping similarities to steer the radius. The predictor still learns from the loss through
      ``R``. ``detach_input=False`` lets gradients flow into the similarities.
    - Output. ``"softplus"`` (default) keeps ``R > 0``; ``"identity"`` gives the paper's real-valued
      ``R`` whose sign the ``ReLU(-R)`` part of the constraint (Appendix B) polices.
    - Initialisation. The last layer starts at zero weight with the bias set so every anchor starts at
      ``init`` (DynamicSVR starts as StaticSVR and learns to deviate).

    Inputs (forward):
        similarity: ``[N, N]`` cosine matrix, row ``i`` = anchor ``i``, positive in column ``i``.

    Returns:
        ``[N]`` radius per anchor.

    Example:
        >>> import torch
        >>> _ = torch.manual_seed(0)
        >>> model = DynamicRadius(batch_size=8)
        >>> model(torch.eye(5)).shape
        torch.Size([5])
    """

    def __init__(
        self,
        batch_size: int,
        hidden: int = 64,
        init: float = DEFAULT_INIT_RADIUS,
        output: str = "softplus",
        detach_input: bool = True,
        pad_value: float = -1.0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if output not in ("softplus", "identity"):
            raise ValueError(f"output must be 'softplus' or 'identity', got {output!r}")
        if output == "softplus" and init <= 0:
            raise ValueError(f"a softplus radius is positive; init must be > 0, got {init}")
        self.batch_size = batch_size
        self.output = output
        self.detach_input = detach_input
        self.pad_value = pad_value
        self.mlp = nn.Sequential(
            nn.Linear(batch_size, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )
        last = self.mlp[-1]
        with torch.no_grad():
            last.weight.zero_()
            last.bias.fill_(math.log(math.expm1(init)) if output == "softplus" else init)

    def features(self, similarity: Tensor) -> Tensor:
        """The predictor's input ``[N, batch_size]``: positive cosine, then sorted, padded/cut negatives."""
        _check_similarity(similarity)
        if self.detach_input:
            similarity = similarity.detach()
        n = similarity.shape[0]
        eye = torch.eye(n, dtype=torch.bool, device=similarity.device)
        positive = similarity.diagonal().unsqueeze(1)
        # The diagonal goes to -inf so it sorts last and is dropped.
        negatives = similarity.masked_fill(eye, float("-inf")).sort(dim=1, descending=True).values[:, : n - 1]
        k = self.batch_size - 1
        if negatives.shape[1] >= k:
            negatives = negatives[:, :k]
        else:
            negatives = F.pad(negatives, (0, k - negatives.shape[1]), value=self.pad_value)
        return torch.cat([positive, negatives], dim=1)

    def forward(self, similarity: Tensor) -> Tensor:
        raw = self.mlp(self.features(similarity)).squeeze(1)
        return F.softplus(raw) if self.output == "softplus" else raw

    def extra_repr(self) -> str:
        return f"batch_size={self.batch_size}, output={self.output!r}, detach_input={self.detach_input}"
