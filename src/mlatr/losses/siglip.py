"""Pairwise sigmoid loss (SigLIP) and its pair loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mlatr.losses._common import PairSum, Scalar, check_pair, cosine_logits


def siglip_pair(u: Tensor, v: Tensor, temperature: Scalar, bias: Scalar, rows: Tensor | None = None) -> PairSum:
    """Sigmoid loss of one aligned pair, summed over all ``n * n`` (u_i, v_j) terms.

    ``logit_ij = cos(u_i, v_j) / tau + b``, ``z_ij = +1`` if ``i == j`` else ``-1``, and
    ``total = -sum_ij log sigmoid(z_ij * logit_ij)``. The matrix already covers both directions
    (each term is a binary decision about one (u_i, v_j) pair), so unlike :func:`infonce_pair` it is
    not doubled; ``count = n`` is the SigLIP normaliser ``1/|B|``.

    Args:
        u, v: ``[n, d]`` embeddings, ``u[i]`` matches ``v[i]``; L2-normalised here.
        temperature: ``tau > 0`` (SigLIP's ``1/t``), float or scalar tensor (learnable).
        bias: ``b``, float or scalar tensor (learnable; SigLIP initialises it to -10 with ``tau=0.1``).
        rows: optional ``[n]`` bool: sum only the terms of these ``u`` rows (``count`` stays ``n``), so the
            totals over a partition of the rows add up to the whole pair's (a distributed local loss).

    Returns:
        :class:`~mlatr.losses.PairSum` with ``total`` the summed loss and ``count = n``.

    Example:
        >>> import torch
        >>> s = siglip_pair(torch.eye(2), torch.eye(2), temperature=1.0, bias=0.0)
        >>> s.count, round(float(s.total), 4)   # 2 log(1 + 1/e) + 2 log 2
        (2, 2.0128)

    References:
        Zhai et al., "Sigmoid Loss for Language Image Pre-Training", ICCV 2023, §3.3 eq. 1.
    """
    check_pair(u, v)
    n = u.shape[0]
    if rows is not None:
        idx = rows.to(u.device).nonzero().squeeze(1)
        logits = cosine_logits(u[idx], v, temperature) + bias
        labels = -torch.ones_like(logits)
        labels[torch.arange(idx.shape[0], device=idx.device), idx] = 1.0
        return PairSum(total=-F.logsigmoid(labels * logits).sum(), count=n)
    logits = cosine_logits(u, v, temperature) + bias
    labels = 2.0 * torch.eye(n, dtype=logits.dtype, device=logits.device) - 1.0
    total = -F.logsigmoid(labels * logits).sum()
    return PairSum(total=total, count=n)


def siglip_loss(u: Tensor, v: Tensor, temperature: Scalar, bias: Scalar) -> Tensor:
    """SigLIP: ``-1/N sum_ij log sigmoid(z_ij (cos(u_i, v_j)/tau + b))``, ``z = +1`` on the diagonal, -1 off.

    The sigmoid baseline of SupCLAP §4.2.1 (Tables 1, 8): every (u_i, v_j) is an independent binary
    match / no-match decision, with no softmax over the batch.

    Args:
        u, v: ``[N, d]`` embeddings, ``u[i]`` matches ``v[i]``; L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor. bias: ``b``, float or scalar tensor.

    Returns:
        Scalar tensor (``total / N`` of :func:`siglip_pair`).

    Example:
        >>> import torch
        >>> round(float(siglip_loss(torch.eye(2), torch.eye(2), temperature=1.0, bias=0.0)), 4)
        1.0064
        >>> g = torch.Generator().manual_seed(0)
        >>> audio, text = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
        >>> loss = siglip_loss(audio, text, temperature=0.1, bias=-10.0)

    References:
        Zhai et al., "Sigmoid Loss for Language Image Pre-Training", ICCV 2023, §3.3 eq. 1.
        SupCLAP §4.2.1 (the SigLIP baseline).
    """
    pair = siglip_pair(u, v, temperature, bias)
    return pair.total / pair.count
