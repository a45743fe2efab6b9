"""Semantic radius models for support vector regularization (SupCLAP §3.2, Appendix B).

A radius model maps the batch's cosine similarity matrix ``sim [N, N]`` (row ``i`` = one anchor, its
positive in column ``i``) to the radius of each anchor's support vector:

- :class:`StaticRadius` (StaticSVR): one learnable scalar shared by every anchor; returns a 0-d tensor.
- :class:`DynamicRadius` (DynamicSVR): a 3-layer MLP ``f_theta(S)`` on each anchor's similarity
  vector ``S = [s(t+, a+), s(t+, a_1-), ...]`` with ``s = cos / tau``; returns ``[N]``.

Both take ``(sim, temperature)``. For the text-to-audio direction pass ``sim = t @ a.T`` (cosines);
for audio-to-text pass its transpose.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mlatr.errors import MlatrError
from mlatr.losses._common import Scalar

#: Output and input forms of :class:`DynamicRadius` (the first of each is the paper's reading).
RADIUS_OUTPUTS = ("identity", "softplus")
RADIUS_INPUTS = ("logits", "cosine")

#: Initial radius. SupCLAP does not state one; 0.1 against a typical initial positive distance
#: ``||a+ - t+|| ~ 1`` (cosine ~ 0.5) starts with a mild suppression factor ``1 - R/||a+ - t+|| ~ 0.9``
#: of the perpendicular force (eq. 8), which training then adapts.
DEFAULT_INIT_RADIUS = 0.1


def _check_similarity(similarity: Tensor) -> None:
    if similarity.dim() != 2 or similarity.shape[0] != similarity.shape[1] or similarity.shape[0] == 0:
        raise MlatrError(
            f"similarity must be a non-empty square [N, N] matrix, got {tuple(similarity.shape)}"
        )


class StaticRadius(nn.Module):
    """StaticSVR's semantic radius: one globally shared learnable scalar (SupCLAP §3.2).

    ``forward(similarity)`` ignores the similarities and returns the 0-d parameter, so the same
    support-vector displacement ``R`` is used for every anchor (and for both directions when one
    module serves both, as in the paper's single radius curve for bi-StaticSVR, Figure 3).

    Args (forward):
        similarity: ``[N, N]`` cosine matrix (only checked for shape); temperature: ignored.

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

    def forward(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        _check_similarity(similarity)
        return self.radius

    def extra_repr(self) -> str:
        return f"radius={float(self.radius.detach()):.4g}"


class DynamicRadius(nn.Module):
    """DynamicSVR's radius predictor: a 3-layer MLP ``R = f_theta(S)`` (SupCLAP §3.2).

    For anchor ``i`` the input is §3.2's similarity vector ``S_i = [s(t_i, a_i), s(t_i, a_1^-), ...]``:
    the positive first, then the negatives, ``K`` values in all, where ``K`` is the ``batch_size`` the
    predictor was built for. The default reading is the paper's, and each choice it leaves open is an
    option:

    - ``input="logits"`` (default): ``s = cos / tau`` as §3.1 defines ``s``; ``"cosine"`` feeds the
      cosines (the two differ by the temperature, which matters when ``tau`` is learned).
    - ``sort_negatives=False`` (default): the negatives in batch order, as §3.2 writes ``S``; ``True``
      sorts them from most to least similar, which makes ``S`` independent of the (arbitrary) order of
      the batch: a fixed-length description of the set of negatives, hardest first.
    - ``detach_input=False`` (default): gradients flow through ``S`` into the encoders, as nothing in
      the paper stops them; ``True`` treats ``R`` as a constant with respect to the embeddings, the
      assumption of Appendix D's Jacobian (eq. 14-15).
    - ``output="identity"`` (default): the paper's real-valued ``R`` (``R in R``, §3.2), whose sign and
      size the constraint of Appendix B polices on both sides (``ReLU(-R)`` and ``ReLU(R - ||a - t||)``);
      ``"softplus"`` keeps ``R > 0``, which leaves the ``ReLU(-R)`` part always zero.
    - Other batch sizes: a smaller batch (the last of an epoch, a pair set with masked captions) is
      padded at the end with ``pad_value`` (a cosine, ``-1`` = an antipodal clip: a negative that exerts
      no pushing force, eq. 3; scaled by ``1/tau`` with ``input="logits"``); a larger batch keeps its
      first ``K - 1`` negatives (the hardest ones when sorted).
    - Initialisation: the last layer starts at zero weight with its bias set so that every anchor gets
      ``init`` (DynamicSVR starts as StaticSVR and learns to deviate).

    Args (forward):
        similarity: ``[N, N]`` cosine matrix, row ``i`` = anchor ``i``, positive in column ``i``.
        temperature: ``tau`` (float or scalar tensor) for ``input="logits"``; ignored otherwise.

    Returns:
        ``[N]`` radius per anchor.

    Example:
        >>> import torch
        >>> model = DynamicRadius(batch_size=8, init=-0.2)
        >>> [round(r, 6) for r in model(torch.eye(5), temperature=0.07).tolist()]
        [-0.2, -0.2, -0.2, -0.2, -0.2]
    """

    def __init__(
        self,
        batch_size: int,
        hidden: int = 64,
        init: float = DEFAULT_INIT_RADIUS,
        output: str = "identity",
        input: str = "logits",
        sort_negatives: bool = False,
        detach_input: bool = False,
        pad_value: float = -1.0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise MlatrError(f"batch_size must be >= 1, got {batch_size}")
        if output not in RADIUS_OUTPUTS:
            raise MlatrError(f"output must be one of {RADIUS_OUTPUTS}, got {output!r}")
        if input not in RADIUS_INPUTS:
            raise MlatrError(f"input must be one of {RADIUS_INPUTS}, got {input!r}")
        if output == "softplus" and init <= 0:
            raise MlatrError(f"a softplus radius is positive; init must be > 0, got {init}")
        self.batch_size = batch_size
        self.output = output
        self.input = input
        self.sort_negatives = sort_negatives
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

    def features(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        """The predictor's input ``[N, batch_size]``: the positive, then the negatives (see the class)."""
        _check_similarity(similarity)
        if self.detach_input:
            similarity = similarity.detach()
        scale = temperature if self.input == "logits" else 1.0
        n = similarity.shape[0]
        off_diagonal = ~torch.eye(n, dtype=torch.bool, device=similarity.device)
        positive = similarity.diagonal().unsqueeze(1)  # [N, 1]
        negatives = similarity[off_diagonal].reshape(n, n - 1)  # [N, N-1], batch order
        if self.sort_negatives:
            negatives = negatives.sort(dim=1, descending=True).values
        k = self.batch_size - 1
        if negatives.shape[1] >= k:
            negatives = negatives[:, :k]
        else:
            negatives = F.pad(negatives, (0, k - negatives.shape[1]), value=self.pad_value)
        return torch.cat([positive, negatives], dim=1) / scale  # [N, K]

    def forward(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        raw = self.mlp(self.features(similarity, temperature)).squeeze(1)  # [N]
        return F.softplus(raw) if self.output == "softplus" else raw

    def extra_repr(self) -> str:
        return (f"batch_size={self.batch_size}, output={self.output!r}, input={self.input!r}, "
                f"sort_negatives={self.sort_negatives}, detach_input={self.detach_input}")
