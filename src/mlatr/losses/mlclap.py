"""The ML-CLAP baseline: one randomly drawn language per clip, then symmetric InfoNCE."""

from __future__ import annotations

import torch
from torch import Tensor

from mlatr.losses._common import Pair, Scalar
from mlatr.losses.kcl import check_multilingual
from mlatr.losses.objectives import PairObjective, pair_objective, pairs_loss


def draw_languages(
    text_mask: Tensor, generator: torch.Generator | None = None, exclude: int | None = None
) -> Tensor:
    """For each clip, one language index drawn uniformly among those it has a caption in.

    This is ATRI's ``q_i <-R- {1..K}`` (§3.1 eq. 4, ML-CLAP) or, with ``exclude=0`` (the English
    column), ``q_i <-R- {2..K}`` of CACL (§4.2).

    Inputs:
        text_mask: ``[N, K]`` bool, True where clip ``i`` has a caption in language ``k``.
        generator: the ``torch.Generator`` the draw comes from (its device is used for the draw).
            Required whenever some clip has more than one candidate: randomness is never implicit.
        exclude: a language column never to draw (e.g. 0 = English for CACL's other language).

    Returns:
        ``[N]`` long tensor on ``text_mask``'s device; ``-1`` for a clip with no candidate language.

    Example:
        >>> import torch
        >>> mask = torch.tensor([[True, False, True], [False, True, False]])
        >>> draw_languages(mask, torch.Generator().manual_seed(0), exclude=0).tolist()
        [2, 1]
    """
    if text_mask.dim() != 2 or text_mask.dtype != torch.bool:
        raise ValueError(
            f"text_mask must be a [N, K] bool tensor, got {text_mask.dtype} {tuple(text_mask.shape)}"
        )
    candidates = text_mask.clone()
    if exclude is not None:
        candidates[:, exclude] = False
    counts = candidates.sum(dim=1)
    if generator is None and bool((counts > 1).any()):
        raise ValueError("drawing languages needs an explicit torch.Generator (some clip has several)")
    device = generator.device if generator is not None else candidates.device
    weights = candidates.to(device=device, dtype=torch.float32)
    present = counts.to(device) > 0
    chosen = torch.full((candidates.shape[0],), -1, dtype=torch.long, device=device)
    if bool(present.any()):
        picks = torch.multinomial(weights[present], 1, generator=generator).squeeze(1)
        chosen[present] = picks
    return chosen.to(text_mask.device)


def mlclap_pairs(
    audio: Tensor,
    text: Tensor,
    text_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> list[Pair]:
    """The single pair of the ML-CLAP scheme: each clip with its caption in one drawn language.

    Inputs:
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
    captions = text[kept, chosen[kept]]
    return [Pair(audio.index_select(0, kept), captions, "audio-text")]


def mlclap_loss(
    audio: Tensor,
    text: Tensor,
    temperature: Scalar,
    text_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
    base: str | PairObjective = "infonce",
    bias: Scalar | None = None,
) -> Tensor:
    """ML-CLAP's multilingual objective (ATRI §3.1 eq. 4-5): a random language per clip, then CLIP loss.

    For each clip ``i`` a language ``q_i`` is drawn uniformly among those it has a caption in
    (:func:`draw_languages`), and :func:`~mlatr.losses.clip_loss` is computed on the pairs
    ``(a_i, t_{i q_i})``; with ``base="siglip"``, :func:`~mlatr.losses.siglip_loss` instead.
    Clips with no caption in any language are left out.

    Inputs:
        audio: ``[N, d]``; text: ``[N, K, d]``; both L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor (learnable).
        text_mask: ``[N, K]`` bool, True where the caption exists; None = all exist.
        generator: explicit ``torch.Generator`` for the draw (required unless each clip has a
            single caption); the same generator state gives the same languages.
        base: ``"infonce"`` (ML-CLAP), ``"siglip"`` or a pair objective. bias: SigLIP bias.

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
    return pairs_loss(pairs, pair_objective(base, temperature, bias))
