"""The "Simple Reweight" baseline of SupCLAP Appendix E.4: a learnable scalar on ``P+``.

SupCLAP compares SVR with scaling the positive probability ``P+`` (eq. 2) by a learnable scalar, to
show that SVR is not "just" gradient re-weighting (Table 7: Simple Reweight *lowers* R@1). The appendix
gives no formula; we read "scale ``P+``" as scaling the positive's weight inside the softmax,

    ``P+_w = w exp(s+) / (w exp(s+) + sum_j exp(s_j-))``,   ``L = -log P+_w``,

i.e. the positive logit shifted by ``log w``. It stays a proper probability and loss, equals InfoNCE
at ``w = 1``, and its gradient ``((P+_w - 1) a+ + sum_j P-_{j,w} a_j-) / tau`` changes the balance of
pulling and pushing with one scalar, with no geometric split into parallel and perpendicular parts
(the contrast Appendix E.4 draws). It *replaces* the base InfoNCE loss (it is not added to it).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mlatr.errors import MlatrError
from mlatr.losses._common import Scalar, check_pair, cosine_logits


def reweighted_infonce_loss(audio: Tensor, text: Tensor, temperature: Scalar, log_weight: Tensor) -> Tensor:
    """Symmetric InfoNCE with the positive's softmax weight scaled by ``w = exp(log_weight)`` (App. E.4).

    ``L = (L_t2a + L_a2t) / 2``, each ``-1/N sum_i log( w e^{s_ii} / (w e^{s_ii} + sum_{j != i} e^{s_ij}) )``
    with ``s_ij = cos / tau`` (rows = texts for t2a, audio for a2t); the same normalisation as
    :func:`~mlatr.losses.clip_loss`, which it equals at ``log_weight = 0``.

    Args:
        audio, text: ``[N, d]`` aligned pairs, L2-normalised inside. temperature: ``tau > 0``.
        log_weight: 0-d tensor ``log w``.

    Returns:
        Scalar tensor.
    """
    check_pair(audio, text, "reweighted_infonce_loss(audio, text)")
    logits = cosine_logits(text, audio, temperature)
    eye = torch.eye(logits.shape[0], dtype=logits.dtype, device=logits.device)
    shifted = logits + eye * log_weight
    t2a = -torch.log_softmax(shifted, dim=1).diagonal().mean()
    a2t = -torch.log_softmax(shifted.transpose(0, 1), dim=1).diagonal().mean()
    return (t2a + a2t) / 2


class SimpleReweight(nn.Module):
    """Learnable-``w`` Simple Reweight baseline (SupCLAP Appendix E.4, Table 7); replaces the base InfoNCE.

    ``forward(audio, text, temperature) -> (loss, {"reweight_w": w})`` with the loss of
    :func:`reweighted_infonce_loss`; ``w = exp(log_weight)`` stays positive and starts at ``init``.

    Example:
        >>> import torch
        >>> loss, diag = SimpleReweight()(torch.eye(3), torch.eye(3), 1.0)
        >>> round(float(loss), 4), float(diag["reweight_w"])   # InfoNCE at w = 1: log(1 + 2/e)
        (0.5514, 1.0)
    """

    def __init__(self, init: float = 1.0) -> None:
        super().__init__()
        if init <= 0:
            raise MlatrError(f"the weight on P+ must start > 0, got {init}")
        self.log_weight = nn.Parameter(torch.tensor(float(init)).log())

    def forward(self, audio: Tensor, text: Tensor, temperature: Scalar) -> tuple[Tensor, dict[str, Tensor]]:
        loss = reweighted_infonce_loss(audio, text, temperature, self.log_weight)
        return loss, {"reweight_w": self.log_weight.detach().exp()}
