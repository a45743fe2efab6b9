"""1-to-K contrastive learning (KCL, ATRI §4.1): each clip against its captions in all K languages."""

from __future__ import annotations

from torch import Tensor

from mlatr.losses._common import Scalar
from mlatr.losses.pair_losses import PairLoss, pair_loss, pairs_loss
from mlatr.losses.schemes import kcl_pairs


def kcl_loss(
    audio: Tensor,
    text: Tensor,
    temperature: Scalar,
    text_mask: Tensor | None = None,
    base: str | PairLoss = "infonce",
    bias: Scalar | None = None,
) -> Tensor:
    """1-to-K contrastive loss, ATRI §4.1 eq. 9-11: ``L_kcl = 1/(2NK) (L^{a2t}_kcl + L^{t2a}_kcl)``.

    ``L^{a2t}_kcl = -sum_k sum_i log exp(s(a_i, t_ik)/tau) / sum_j exp(s(a_i, t_jk)/tau)`` (eq. 10) and
    ``L^{t2a}_kcl`` the same from each caption ``t_ik`` to the clips (eq. 11): for each language an
    InfoNCE in both directions among the batch's clips, whose denominators run over that language's
    captions only. Every clip sees all K of its captions in every step (no random language).

    With ``text_mask``, language ``k``'s InfoNCE runs among the clips that have a language-``k``
    caption, and the sum is divided by ``2 x`` (number of valid captions); the full mask gives eq. 9.

    ``base="siglip"`` swaps the per-language InfoNCE for :func:`~mlatr.losses.siglip_loss` among
    the same clips: the loss is ``sum_k S_k / sum_k n_k`` with ``S_k`` the summed SigLIP terms of
    language ``k`` and ``n_k`` its clip count, i.e. the mean over languages of the per-language
    SigLIP loss (caption-weighted under a mask).

    Args:
        audio: ``[N, d]``; text: ``[N, K, d]``, ``text[i, k]`` = clip ``i``'s caption in language ``k``.
            L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor (learnable).
        text_mask: ``[N, K]`` bool, True where the caption exists; None = all exist.
        base: ``"infonce"`` (ATRI), ``"siglip"`` or a pair loss ``(u, v) -> PairSum``.
        bias: SigLIP bias (needed for ``base="siglip"``).

    Returns:
        Scalar tensor.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> audio, text = torch.randn(4, 16, generator=g), torch.randn(4, 3, 16, generator=g)
        >>> mask = torch.tensor([[1, 1, 1], [1, 0, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
        >>> loss = kcl_loss(audio, text, temperature=0.07, text_mask=mask)
        >>> same = torch.eye(3).unsqueeze(1).expand(3, 2, 3)   # every caption equals its clip
        >>> round(float(kcl_loss(torch.eye(3), same, temperature=1.0)), 4)   # log(1 + 2/e)
        0.5514

    References:
        Yin et al., "ATRI: Mitigating Multilingual Audio Text Retrieval Inconsistencies by Reducing
        Data Distribution Errors", ACL 2025, §4.1, eq. 9-11.
    """
    return pairs_loss(kcl_pairs(audio, text, text_mask), pair_loss(base, temperature, bias))
