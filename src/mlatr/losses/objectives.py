"""Pair objectives by name, and the loss of a scheme's list of pairs.

The pairing schemes (:func:`~mlatr.losses.mlclap_pairs`, :func:`~mlatr.losses.kcl_pairs`,
:func:`~mlatr.losses.cacl_pairs`) decide *which* embedding sets are contrasted; a pair objective
decides *how* one pair is scored. :func:`pairs_loss` joins them::

    objective = pair_objective("siglip", temperature=0.1, bias=-10.0)
    loss = pairs_loss(kcl_pairs(audio, text, text_mask), objective)

so every scheme runs with every base loss, and a regularizer written as a pair objective (or as a
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

#: ``objective(anchor [n, d], target [n, d]) -> PairSum``, hyper-parameters already bound.
PairObjective = Callable[[Tensor, Tensor], PairSum]

#: Names accepted by :func:`pair_objective` (and by the ``base=`` argument of the scheme losses).
BASE_OBJECTIVES = ("infonce", "siglip")


def pair_objective(
    base: str | PairObjective, temperature: Scalar, bias: Scalar | None = None
) -> PairObjective:
    """The pair objective named ``base`` with its hyper-parameters bound.

    Inputs:
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
        >>> objective = pair_objective("infonce", temperature=1.0)
        >>> objective(torch.eye(3), torch.eye(3)).count
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
    raise MlatrError(f"unknown base loss {base!r}; expected one of {', '.join(BASE_OBJECTIVES)}")


def pairs_loss(pairs: Sequence[Pair], objective: PairObjective,
               audio_text_objective: PairObjective | None = None) -> Tensor:
    """``sum_p total_p / sum_p count_p`` over the pairs a scheme produced.

    With InfoNCE this is exactly the papers' normalisation: KCL's ``1/(2NK)`` (ATRI eq. 9, ``K``
    pairs of ``2N`` terms) and CACL's ``1/(6N)`` (ATRI eq. 12, three pairs of ``2N`` terms). With
    SigLIP it is the caption-weighted mean of the per-pair SigLIP losses (the plain mean when all
    pairs have the same size).

    Inputs:
        pairs: non-empty list of :class:`~mlatr.losses.Pair`.
        objective: from :func:`pair_objective`.
        audio_text_objective: if given, scores the audio-text pairs instead (names starting with
            ``"audio-"``, the naming contract of the scheme functions), e.g. SupCLAP's Simple Reweight
            baseline; text-text pairs (CACL's English-other) keep ``objective``.

    Returns:
        Scalar tensor.
    """
    if not pairs:
        raise ValueError("pairs_loss: no pairs to contrast (every caption is masked out?)")
    sums = [(audio_text_objective if audio_text_objective is not None and p.name.startswith("audio-")
             else objective)(p.anchor, p.target) for p in pairs]
    total = torch.stack([s.total for s in sums]).sum()
    return total / sum(s.count for s in sums)
