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

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mlatr.errors import MlatrError
from mlatr.losses._common import Scalar

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
    predictor was built for. It is read as the paper writes it:

    - ``s = cos / tau``, as §3.1 defines ``s`` (it differs from the cosine when ``tau`` is learned);
    - the negatives in batch order (:meth:`negatives`), as §3.2 writes ``S``;
    - gradients flow through ``S`` into the encoders, as nothing in the paper stops them;
    - the output is the paper's real-valued ``R`` (``R in R``, §3.2), whose sign and size the constraint of
      Appendix B (eq. 9) polices on both sides (``ReLU(-R)`` and ``ReLU(R - ||a - t||)``).

    What the paper leaves open:

    - Other batch sizes: a smaller batch (the last of an epoch, a pair set with masked captions) is
      padded at the end with ``pad_value`` (a cosine, ``-1`` = an antipodal clip: a negative that exerts
      no pushing force, eq. 3; scaled by ``1/tau`` as the rest); a larger batch keeps its first ``K - 1``
      negatives.
    - Initialisation: the last layer starts at zero weight with its bias set so that every anchor gets
      ``init`` (DynamicSVR starts as StaticSVR and learns to deviate).

    Args (forward):
        similarity: ``[N, N]`` cosine matrix, row ``i`` = anchor ``i``, positive in column ``i``.
        temperature: ``tau`` (float or scalar tensor).

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
        pad_value: float = -1.0,
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise MlatrError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
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
            last.bias.fill_(init)

    def negatives(self, similarity: Tensor) -> Tensor:
        """Each anchor's negatives ``[N, N-1]``: the off-diagonal entries of its row, in batch order (§3.2)."""
        n = similarity.shape[0]
        off_diagonal = ~torch.eye(n, dtype=torch.bool, device=similarity.device)
        return similarity[off_diagonal].reshape(n, n - 1)

    def features(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        """The predictor's input ``[N, batch_size]``: the positive, then the negatives, over ``tau`` (the class)."""
        _check_similarity(similarity)
        positive = similarity.diagonal().unsqueeze(1)  # [N, 1]
        negatives = self.negatives(similarity)
        k = self.batch_size - 1
        if negatives.shape[1] >= k:
            negatives = negatives[:, :k]
        else:
            negatives = F.pad(negatives, (0, k - negatives.shape[1]), value=self.pad_value)
        return torch.cat([positive, negatives], dim=1) / temperature  # [N, K]

    def forward(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        return self.mlp(self.features(similarity, temperature)).squeeze(1)  # [N]

    def extra_repr(self) -> str:
        return f"batch_size={self.batch_size}"
