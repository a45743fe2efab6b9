"""Symmetric InfoNCE (the CLIP / CLAP contrastive loss) and its pair loss."""

from __future__ import annotations

from torch import Tensor

from mlatr.losses._common import PairSum, Scalar, check_pair, cosine_logits, diagonal_cross_entropy, row_cross_entropy


def infonce_pair(u: Tensor, v: Tensor, temperature: Scalar, rows: Tensor | None = None) -> PairSum:
    """InfoNCE of one aligned pair, summed over both directions (ATRI eq. 13, SupCLAP eq. 5).

    ``L^{uv} = -sum_i log softmax_j(s(u_i, v_j)/tau)[i] - sum_i log softmax_j(s(v_i, u_j)/tau)[i]``
    with ``s`` the cosine similarity. This is the building block of :func:`clip_loss`
    and of every scheme's pairs under InfoNCE (:func:`~mlatr.losses.pairs_loss`).

    Args:
        u, v: ``[n, d]`` embeddings, ``u[i]`` matches ``v[i]``; L2-normalised here.
        temperature: ``tau > 0``, a float or a scalar tensor (learnable).
        rows: optional ``[n]`` bool: score only these rows in both directions (``u_i`` against every
            ``v_j`` and ``v_i`` against every ``u_j``, ``i`` in ``rows``); ``count`` stays ``2n``, so the
            totals over a partition of the rows add up to the whole pair's (a distributed local loss).

    Returns:
        :class:`~mlatr.losses.PairSum` with ``total`` the sum of the ``2n`` cross-entropy terms (of the
        selected rows) and ``count = 2n``.

    Example:
        >>> import torch
        >>> s = infonce_pair(torch.eye(3), torch.eye(3), temperature=1.0)
        >>> s.count, round(float(s.total), 4)   # 6 terms of log(1 + 2/e)
        (6, 3.3087)

    References:
        Yin et al., "ATRI: Mitigating Multilingual Audio Text Retrieval Inconsistencies by Reducing
        Data Distribution Errors", ACL 2025, §4.2, eq. 13.
    """
    check_pair(u, v)
    if rows is not None:
        idx = rows.to(u.device).nonzero().squeeze(1)
        total = (row_cross_entropy(cosine_logits(u[idx], v, temperature), idx).sum()
                 + row_cross_entropy(cosine_logits(v[idx], u, temperature), idx).sum())
        return PairSum(total=total, count=2 * u.shape[0])
    logits = cosine_logits(u, v, temperature)
    total = diagonal_cross_entropy(logits).sum() + diagonal_cross_entropy(logits.transpose(0, 1)).sum()
    return PairSum(total=total, count=2 * u.shape[0])


def clip_loss(u: Tensor, v: Tensor, temperature: Scalar) -> Tensor:
    """Symmetric InfoNCE: ``(CE(u->v) + CE(v->u)) / 2``, each averaged over the batch.

    The standard CLIP / CLAP objective (SupCLAP §3.1, eq. 5, averaged over the batch; ATRI §3.1's
    ML-CLAP baseline): logits are ``cos(u_i, v_j) / tau``, the positive of row ``i`` is column ``i``.

    Args:
        u: ``[N, d]`` embeddings (e.g. audio); v: ``[N, d]`` (e.g. text), ``u[i]`` matches ``v[i]``.
            Both are L2-normalised inside, so their scale does not matter.
        temperature: ``tau > 0``, a float or a scalar tensor (learnable).

    Returns:
        Scalar tensor ``1/(2N) * L^{uv}`` with ``L^{uv}`` of :func:`infonce_pair`.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> audio, text = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
        >>> loss = clip_loss(audio, text, temperature=0.07)
        >>> round(float(clip_loss(torch.eye(3), torch.eye(3), temperature=1.0)), 4)   # log(1 + 2/e)
        0.5514

    References:
        Radford et al., "Learning Transferable Visual Models From Natural Language Supervision",
        ICML 2021. Luo, Yin et al., "SupCLAP: Controlling Optimization Trajectory Drift in Audio-Text
        Contrastive Learning with Support Vector Regularization", §2.1 eq. 1 and §3.1 eq. 5.
    """
    pair = infonce_pair(u, v, temperature)
    return pair.total / pair.count
