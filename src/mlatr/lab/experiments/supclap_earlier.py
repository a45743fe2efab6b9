"""mlatr's earlier form of SupCLAP's SVR (before the fidelity fix of issue 11), kept for one ablation row.

The losses (:mod:`mlatr.losses.support_vectors`, :mod:`mlatr.losses.radius`) carry SupCLAP as defined; the
supclap grid's row ``infonce-bi-dynamic-earlier`` trains this form instead, named in its config by
``objective.svr.builder`` (:data:`mlatr.lab.experiments.supclap.EARLIER_FORM`, the import path of
:func:`earlier_svr`). It departs from the paper in five ways:

- the support vector is scored by a dot product, unnormalised (:func:`dot_svr_loss`): the linearised map
  whose Jacobian Appendix D analyses (eq. 13-15), where §3.1 / eq. 6 score it by ``cos / tau``;
- the radius predictor of §3.2 (:class:`EarlierRadius`) reads cosines instead of ``s = cos / tau``,
- its negatives sorted from most to least similar instead of in batch order,
- detached, so that ``R`` is a constant with respect to the embeddings (Appendix D's assumption),
- and a softplus output ``R > 0`` instead of the paper's real ``R`` (which leaves the ``ReLU(-R)`` part of
  Appendix B's constraint, eq. 9, always zero).

docs/experiments.md ("SupCLAP as defined ... vs mlatr's earlier form") reports the two side by side.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from mlatr.errors import MlatrError
from mlatr.losses._common import Scalar, l2_normalize
from mlatr.losses.radius import DEFAULT_INIT_RADIUS, DynamicRadius
from mlatr.losses.support_vectors import check_svr_inputs, directional_loss, support_vectors
from mlatr.losses.svr_regularizer import SVRRegularizer
from mlatr.training.objective import svr_from_config


class EarlierRadius(DynamicRadius):
    """§3.2's radius predictor as mlatr first read it: ``R = softplus(f_theta(S))`` on detached cosines, the
    negatives sorted hardest first (a fixed-length description of the set of negatives, independent of the
    batch's order; a larger batch keeps its ``K - 1`` hardest). Starts at ``init > 0`` for every anchor.

    Example:
        >>> import torch
        >>> [round(r, 6) for r in EarlierRadius(batch_size=8, init=0.2)(torch.eye(3), 0.07).tolist()]
        [0.2, 0.2, 0.2]
    """

    def __init__(self, batch_size: int, hidden: int = 64, init: float = DEFAULT_INIT_RADIUS,
                 pad_value: float = -1.0) -> None:
        if init <= 0:
            raise MlatrError(f"a softplus radius is positive; init must be > 0, got {init}")
        super().__init__(batch_size, hidden=hidden, init=init, pad_value=pad_value)
        with torch.no_grad():
            self.mlp[-1].bias.fill_(math.log(math.expm1(init)))  # softplus of it = init

    def negatives(self, similarity: Tensor) -> Tensor:
        return super().negatives(similarity).sort(dim=1, descending=True).values

    def features(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        """``[N, batch_size]``: detached cosines (``temperature`` ignored), the positive, then the sorted negatives."""
        return super().features(similarity.detach(), 1.0)

    def forward(self, similarity: Tensor, temperature: Scalar = 1.0) -> Tensor:
        return F.softplus(super().forward(similarity, temperature))


def dot_svr_loss(audio: Tensor, text: Tensor, temperature: Scalar, radius_t2a: Scalar,
                 radius_a2t: Scalar | None = None, base: str = "infonce", bias: Scalar | None = None) -> Tensor:
    """``L_svr`` (SupCLAP eq. 6) with the support vectors scored unnormalised: ``s_i . a_j / tau``.

    The same as :func:`~mlatr.losses.svr_loss` but for the score: with ``s_i = t_i + R_i u_i`` (``u_i`` the unit
    pull ``a_i - t_i``), this is the linearised map whose Jacobian ``I - R/||a - t|| (I - u u^T)`` Appendix D
    analyses (eq. 15). A larger ``R`` lengthens ``s_i`` and so acts like a larger logit scale: the term falls
    monotonically in ``R``, which let a learned radius run away.
    """
    check_svr_inputs(audio, text, temperature, base, bias)
    a, t = l2_normalize(audio), l2_normalize(text)
    t_sup = support_vectors(t, a, radius_t2a, normalize=False)  # [N, d]
    loss = directional_loss(t_sup @ a.transpose(0, 1) / temperature, base, bias)
    if radius_a2t is not None:
        a_sup = support_vectors(a, t, radius_a2t, normalize=False)  # [N, d]
        loss = loss + directional_loss(a_sup @ t.transpose(0, 1) / temperature, base, bias)
    return loss


class DotScoredSVR(SVRRegularizer):
    """:class:`~mlatr.losses.SVRRegularizer` (SupCLAP eq. 9) whose ``L_svr`` is :func:`dot_svr_loss`."""

    def svr_term(self, audio: Tensor, text: Tensor, temperature: Scalar, r_t2a: Tensor, r_a2t: Tensor | None,
                 bias: Scalar | None) -> Tensor:
        return dot_svr_loss(audio, text, temperature, r_t2a, r_a2t, base=self.base, bias=bias)


def earlier_svr(s, base: str, batch_size: int) -> SVRRegularizer:
    """The earlier form's regularizer of an ``objective.svr`` section (the module docstring)."""
    return svr_from_config(s, base, batch_size, dynamic_radius=EarlierRadius, regularizer=DotScoredSVR)
