"""The ML-CLAP baseline on dense multilingual embeddings: one drawn language per clip, then symmetric InfoNCE.

Training draws the language before encoding (:class:`~mlatr.losses.schemes.MLCLAPScheme`, so only the
drawn captions are encoded); these functions take every language already encoded, ``text [N, K, d]``, and
draw with the same rule (:func:`~mlatr.losses.schemes.draw_languages`): the same generator state picks
the same languages in both.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mlatr.losses._common import Pair, Scalar, take_rows
from mlatr.losses.pair_losses import PairLoss, pair_loss, pairs_loss
from mlatr.losses.schemes import check_multilingual, draw_languages


def mlclap_pairs(
    audio: Tensor,
    text: Tensor,
    text_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> list[Pair]:
    """The single pair of the ML-CLAP scheme: each clip with its caption in one drawn language.

    Args:
        audio: ``[N, d]``; text: ``[N, K, d]``; text_mask: ``[N, K]`` bool (None = all present);
        generator: for :func:`draw_languages`. Clips with no caption at all are left out.

    Returns:
        ``[Pair(audio[kept], text[kept, q_kept], "audio-text")]``.
    """
    check_multilingual(audio, text, text_mask)
    mask = text_mask
    if mask is None:
        mask = torch.ones(text.shape[:2], dtype=torch.bool, device=text.device)
    chosen = draw_languages(mask.to(text.device), generator)
    kept = (chosen >= 0).nonzero().squeeze(1)
    if kept.numel() == 0:
        return []
    captions = text[kept, chosen[kept]]  # [n, d]
    return [Pair(take_rows(audio, kept), captions, "audio-text")]


def mlclap_loss(
    audio: Tensor,
    text: Tensor,
    temperature: Scalar,
    text_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
    base: str | PairLoss = "infonce",
    bias: Scalar | None = None,
) -> Tensor:
    """ML-CLAP's multilingual objective (ATRI §3.1 eq. 4-5): a random language per clip, then CLIP loss.

    For each clip ``i`` a language ``q_i`` is drawn uniformly among those it has a caption in
    (:func:`draw_languages`), and :func:`~mlatr.losses.clip_loss` is computed on the pairs
    ``(a_i, t_{i q_i})``; with ``base="siglip"``, :func:`~mlatr.losses.siglip_loss` instead.
    Clips with no caption in any language are left out.

    Args:
        audio: ``[N, d]``; text: ``[N, K, d]``; both L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor (learnable).
        text_mask: ``[N, K]`` bool, True where the caption exists; None = all exist.
        generator: explicit ``torch.Generator`` for the draw (required unless each clip has a
            single caption); the same generator state gives the same languages.
        base: ``"infonce"`` (ML-CLAP), ``"siglip"`` or a pair loss. bias: SigLIP bias.

    Returns:
        Scalar tensor.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> audio, text = torch.randn(4, 16, generator=g), torch.randn(4, 3, 16, generator=g)
        >>> loss = mlclap_loss(audio, text, temperature=0.07, generator=torch.Generator().manual_seed(1))

    References:
        Yan et al., "Bridging Language Gaps in Audio-Text Retrieval" (ML-CLAP), Interspeech 2024.
        Yin et al., "ATRI", ACL 2025, §3.1 eq. 4-5.
    """
    pairs = mlclap_pairs(audio, text, text_mask, generator)
    return pairs_loss(pairs, pair_loss(base, temperature, bias))
