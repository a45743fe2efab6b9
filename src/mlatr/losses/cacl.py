"""Audio-English co-anchor contrastive learning (CACL, ATRI §4.2)."""

from __future__ import annotations

from torch import Tensor

from mlatr.losses._common import Scalar
from mlatr.losses.pair_losses import PairLoss, pair_loss, pairs_loss
from mlatr.losses.schemes import cacl_pairs


def cacl_loss(
    audio: Tensor,
    eng: Tensor,
    other: Tensor,
    temperature: Scalar,
    base: str | PairLoss = "infonce",
    bias: Scalar | None = None,
    other_mask: Tensor | None = None,
) -> Tensor:
    """Audio-English co-anchor contrastive loss, ATRI §4.2 eq. 12-13.

    ``L_cacl = 1/(6N) (L^{ae} + L^{at} + L^{et})`` where each ``L^{uv}`` (eq. 13) is an InfoNCE summed
    over both directions: audio-English (``L^{ae}``), audio-other language (``L^{at}``) and
    English-other language (``L^{et}``), so English acts as a second anchor for the other language.
    The number of captions per step does not grow with the number of languages.

    With ``other_mask [N]`` (False = the clip has no caption besides English), ``L^{at}`` and
    ``L^{et}`` run among the clips that have one and the sum is divided by ``2N + 4 n_other``; the
    full mask gives eq. 12.

    ``base="siglip"`` scores each of the three pairs with SigLIP (shared ``tau`` and ``b``) instead:
    ``(S_ae + S_at + S_et) / (3N)``, the mean of the three :func:`~mlatr.losses.siglip_loss` values.

    Args:
        audio, eng, other: ``[N, d]`` embeddings, row ``i`` of each from clip ``i``; L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor (learnable).
        base: ``"infonce"`` (ATRI), ``"siglip"`` or a pair loss ``(u, v) -> PairSum``.
        bias: SigLIP bias (needed for ``base="siglip"``).
        other_mask: ``[N]`` bool, True where ``other[i]`` is a real caption; None = all are.

    Returns:
        Scalar tensor.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> audio, eng, other = (torch.randn(4, 16, generator=g) for _ in range(3))
        >>> loss = cacl_loss(audio, eng, other, temperature=0.07)
        >>> round(float(cacl_loss(torch.eye(3), torch.eye(3), torch.eye(3), temperature=1.0)), 4)
        0.5514

    References:
        Yin et al., "ATRI: Mitigating Multilingual Audio Text Retrieval Inconsistencies by Reducing
        Data Distribution Errors", ACL 2025, §4.2, eq. 12-13. SupCLAP Table 8 (CACL with SigLIP/SVR).
    """
    return pairs_loss(cacl_pairs(audio, eng, other, other_mask), pair_loss(base, temperature, bias))
