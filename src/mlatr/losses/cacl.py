"""Audio-English co-anchor contrastive learning (CACL, ATRI §4.2)."""

from __future__ import annotations

import torch
from torch import Tensor

from mlatr.losses._common import Pair, Scalar, check_pair
from mlatr.losses.objectives import PairObjective, pair_objective, pairs_loss


def cacl_pairs(audio: Tensor, eng: Tensor, other: Tensor, other_mask: Tensor | None = None) -> list[Pair]:
    """The three pairs of CACL: (audio, English), (audio, other language), (English, other language).

    Inputs:
        audio, eng, other: ``[N, d]``; row ``i`` of each is clip ``i``'s audio, its English caption
            ``t_i1`` and its caption ``t_iq_i`` in the language drawn for it (ATRI §4.2; see
            :func:`~mlatr.losses.draw_languages` with ``exclude=`` the English column).
        other_mask: ``[N]`` bool, False for clips with no caption in any other language (their
            ``other`` row is ignored); None = all present.

    Returns:
        ``[Pair(audio, eng, "audio-eng"), Pair(audio, other, "audio-other"), Pair(eng, other, "eng-other")]``;
        the last two hold only the rows where ``other_mask`` is True and are omitted when none is.
    """
    check_pair(audio, eng, "cacl audio, eng")
    check_pair(audio, other, "cacl audio, other")
    pairs = [Pair(audio, eng, "audio-eng")]
    if other_mask is not None:
        if other_mask.dtype != torch.bool or tuple(other_mask.shape) != (audio.shape[0],):
            raise ValueError(
                f"other_mask must be a bool tensor of shape ({audio.shape[0]},), "
                f"got {other_mask.dtype} {tuple(other_mask.shape)}"
            )
        rows = other_mask.to(audio.device).nonzero().squeeze(1)
        if rows.numel() == 0:
            return pairs
        if rows.numel() < audio.shape[0]:
            audio, eng, other = (x.index_select(0, rows) for x in (audio, eng, other))
    return pairs + [Pair(audio, other, "audio-other"), Pair(eng, other, "eng-other")]


def cacl_loss(
    audio: Tensor,
    eng: Tensor,
    other: Tensor,
    temperature: Scalar,
    base: str | PairObjective = "infonce",
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

    Inputs:
        audio, eng, other: ``[N, d]`` embeddings, row ``i`` of each from clip ``i``; L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor (learnable).
        base: ``"infonce"`` (ATRI), ``"siglip"`` or a pair objective ``(u, v) -> PairSum``.
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
    return pairs_loss(cacl_pairs(audio, eng, other, other_mask), pair_objective(base, temperature, bias))
