"""Base losses by name (one aligned pair of embedding sets at a time), and the loss of a list of pairs.

The pairing schemes (:mod:`mlatr.losses.schemes`) decide *which* embedding sets are contrasted; a pair
loss decides *how* one pair is scored. :func:`pairs_loss` joins them::

    loss_fn = pair_loss("siglip", temperature=0.1, bias=-10.0)
    loss = pairs_loss(kcl_pairs(audio, text, text_mask), loss_fn)

so every scheme runs with every base loss, and a regularizer written as a pair loss (or as a
function of ``(pair.anchor, pair.target)``) can be added over the very same pairs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from mlatr.errors import MlatrError
from mlatr.losses._common import Pair, PairSum, Scalar
from mlatr.losses.clip import infonce_pair
from mlatr.losses.siglip import siglip_pair

#: ``loss_fn(anchor [n, d], target [n, d]) -> PairSum``, hyper-parameters already bound.
PairLoss = Callable[[Tensor, Tensor], PairSum]

#: The base losses (``objective.base``; the ``base=`` argument of the scheme losses and of SVR).
BASE_LOSSES = ("infonce", "siglip")


def pair_loss(base: str | PairLoss, temperature: Scalar, bias: Scalar | None = None) -> PairLoss:
    """The base loss named ``base`` with its hyper-parameters bound.

    Args:
        base: ``"infonce"`` (:func:`~mlatr.losses.infonce_pair`, sums both directions, ``count = 2n``)
            or ``"siglip"`` (:func:`~mlatr.losses.siglip_pair`, ``count = n``, needs ``bias``);
            a callable ``(anchor, target) -> PairSum`` is returned unchanged.
        temperature: ``tau > 0``, float or scalar tensor. bias: SigLIP's ``b`` (ignored by InfoNCE).

    Returns:
        A callable ``(anchor [n, d], target [n, d]) -> PairSum``.

    Raises:
        MlatrError: unknown name, or ``"siglip"`` without a bias.

    Example:
        >>> import torch
        >>> loss_fn = pair_loss("infonce", temperature=1.0)
        >>> loss_fn(torch.eye(3), torch.eye(3)).count
        6
    """
    if callable(base):
        return base
    if base == "infonce":
        return partial(infonce_pair, temperature=temperature)
    if base == "siglip":
        if bias is None:
            raise MlatrError("base loss 'siglip' needs a bias (SigLIP initialises it to -10)")
        return partial(siglip_pair, temperature=temperature, bias=bias)
    raise MlatrError(f"unknown base loss {base!r}; expected one of {', '.join(BASE_LOSSES)}")


def pairs_loss(pairs: Sequence[Pair], loss_fn: PairLoss, audio_text_loss: PairLoss | None = None, *,
               rows: Sequence[Tensor] | None = None) -> Tensor:
    """``sum_p total_p / sum_p count_p`` over the pairs a scheme produced.

    With InfoNCE this is exactly the papers' normalisation: KCL's ``1/(2NK)`` (ATRI eq. 9, ``K``
    pairs of ``2N`` terms) and CACL's ``1/(6N)`` (ATRI eq. 12, three pairs of ``2N`` terms). With
    SigLIP it is the caption-weighted mean of the per-pair SigLIP losses (the plain mean when all
    pairs have the same size).

    Args:
        pairs: non-empty list of :class:`~mlatr.losses.Pair` with tensor sides (:meth:`Pair.pooled`).
        loss_fn: from :func:`pair_loss`.
        audio_text_loss: if given, scores the audio-text pairs instead (:attr:`Pair.audio_text
            <mlatr.losses.Pair.audio_text>`), e.g. SupCLAP's Simple Reweight baseline; text-text pairs
            (CACL's English-other) keep ``loss_fn``.
        rows: optional ``[n_p]`` bool per pair: score only those rows (``loss_fn(..., rows=r)``, the base
            losses of :func:`pair_loss`); the result is then this part's share of the loss, the shares of a
            partition of the rows summing to it (a distributed local loss).

    Returns:
        Scalar tensor.
    """
    if not pairs:
        raise MlatrError("pairs_loss: no pairs to contrast (every caption is masked out?)")
    if rows is not None:
        if audio_text_loss is not None:
            raise MlatrError("pairs_loss: rows= needs the base losses of pair_loss (not audio_text_loss)")
        sums = [loss_fn(p.anchor, p.target, rows=r) for p, r in zip(pairs, rows, strict=True)]
        return torch.stack([s.total for s in sums]).sum() / sum(s.count for s in sums)
    sums = [(audio_text_loss if audio_text_loss is not None and p.audio_text
             else loss_fn)(p.anchor, p.target) for p in pairs]
    total = torch.stack([s.total for s in sums]).sum()
    return total / sum(s.count for s in sums)
