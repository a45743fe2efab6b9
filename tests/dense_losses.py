"""The papers' multilingual losses on dense embeddings (every language encoded, ``text [N, K, d]``), composed
as the objective composes them: a scheme's pairs (:func:`mlatr.losses.kcl_pairs`, :func:`mlatr.losses.cacl_pairs`,
ML-CLAP's drawn language) each scored by a base loss (:func:`mlatr.losses.pair_loss`, summed by
:func:`mlatr.losses.pairs_loss`). The tests check these against hand-written references of ATRI eq. 4-5,
9-13; ML-CLAP's draw here (:func:`mlclap_pairs`) is the one :class:`~mlatr.losses.schemes.MLCLAPScheme`
draws before encoding (:func:`mlatr.losses.draw_languages`)."""

from __future__ import annotations

import torch

from mlatr.losses import Pair, cacl_pairs, draw_languages, kcl_pairs, pair_loss, pairs_loss
from mlatr.losses._common import take_rows
from mlatr.losses.schemes import check_multilingual


def kcl_loss(audio, text, temperature, text_mask=None, base="infonce", bias=None):
    """1-to-K contrastive loss (ATRI §4.1 eq. 9-11)."""
    return pairs_loss(kcl_pairs(audio, text, text_mask), pair_loss(base, temperature, bias))


def cacl_loss(audio, eng, other, temperature, base="infonce", bias=None, other_mask=None):
    """Audio-English co-anchor contrastive loss (ATRI §4.2 eq. 12-13)."""
    return pairs_loss(cacl_pairs(audio, eng, other, other_mask), pair_loss(base, temperature, bias))


def mlclap_pairs(audio, text, text_mask=None, generator=None) -> list[Pair]:
    """ML-CLAP's single pair: each clip with its caption in one drawn language (clips with none left out)."""
    check_multilingual(audio, text, text_mask)
    mask = text_mask if text_mask is not None else torch.ones(text.shape[:2], dtype=torch.bool)
    chosen = draw_languages(mask.to(text.device), generator)
    kept = (chosen >= 0).nonzero().squeeze(1)
    if kept.numel() == 0:
        return []
    return [Pair(take_rows(audio, kept), text[kept, chosen[kept]], "audio-text")]


def mlclap_loss(audio, text, temperature, text_mask=None, generator=None, base="infonce", bias=None):
    """ML-CLAP's multilingual objective (ATRI §3.1 eq. 4-5)."""
    return pairs_loss(mlclap_pairs(audio, text, text_mask, generator), pair_loss(base, temperature, bias))
