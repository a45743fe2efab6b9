"""Pieces every contrastive loss shares: unit vectors, cosine logits, the pair structure.

A *pairing scheme* (ML-CLAP, KCL, CACL) turns a batch into a list of :class:`Pair` s: two aligned
sets of embeddings ``anchor [n, d]`` and ``target [n, d]`` where row ``i`` of one matches row ``i`` of
the other and every other row is a negative. A *pair loss* (InfoNCE, SigLIP, ...) scores one
pair and returns a :class:`PairSum`: the loss summed over its terms and the number of terms it
normalises by. A scheme's loss is ``sum(totals) / sum(counts)`` (:func:`mlatr.losses.pairs_loss`),
which reproduces the papers' normalisers exactly (ATRI eq. 9: ``1/(2NK)``; eq. 12: ``1/(6N)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from mlatr.errors import MlatrError

#: A temperature or a bias: a Python number or a (possibly learnable) scalar tensor.
Scalar = float | Tensor


#: :attr:`Pair.kind` of a pair whose anchor holds audio and whose target holds text.
AUDIO_TEXT = "audio-text"
#: :attr:`Pair.kind` of a pair of two text sets (CACL's English-other pair).
TEXT_TEXT = "text-text"


@dataclass(frozen=True)
class Pair:
    """Two aligned embedding sets a scheme asks to contrast: ``anchor[i]`` matches ``target[i]``.

    ``anchor`` and ``target`` are ``[n, d]`` tensors (not necessarily normalised) or, for a matching
    head that scores frames, :class:`~mlatr.models.outputs.EncoderOutput` s of ``n`` items (:meth:`pooled`
    gives the tensor pair); ``name`` says which sets they are, for logs (ML-CLAP ``"audio-text"``; KCL
    ``"audio-text[k]"``, k = language column; CACL ``"audio-eng"``, ``"audio-other"``, ``"eng-other"``).
    ``kind`` says what they hold: :data:`AUDIO_TEXT` (``anchor`` audio, ``target`` text: the pairs an
    audio-text regularizer such as SVR or Simple Reweight applies to) or :data:`TEXT_TEXT`.
    """

    anchor: Any
    target: Any
    name: str
    kind: str = AUDIO_TEXT

    def pooled(self) -> Pair:
        """The same pair with the pooled ``[n, d]`` vectors of each side."""
        return Pair(_pooled(self.anchor), _pooled(self.target), self.name, self.kind)

    @property
    def audio_text(self) -> bool:
        """Whether the anchor holds audio and the target text (:data:`AUDIO_TEXT`)."""
        return self.kind == AUDIO_TEXT

    @property
    def size(self) -> int:
        """Number of aligned rows ``n``."""
        return int(_pooled(self.anchor).shape[0])


@dataclass(frozen=True)
class PairSum:
    """One pair loss's result: ``total`` (scalar tensor, summed over terms) and ``count`` (int)."""

    total: Tensor
    count: int


def _pooled(side: Any) -> Tensor:
    return side if isinstance(side, Tensor) else side.pooled


def take_rows(side: Any, rows: Tensor) -> Any:
    """Rows ``rows`` of a tensor ``[N, ...]`` or of an :class:`~mlatr.models.outputs.EncoderOutput`."""
    return side.index_select(0, rows) if isinstance(side, Tensor) else side.rows(rows)


def take_slot(side: Any, k: int) -> Any:
    """Slot ``k`` of slotted texts: ``side[:, k]`` of a tensor ``[N, S, ...]`` or of an EncoderOutput."""
    return side[:, k] if isinstance(side, Tensor) else side.slot(k)


def l2_normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """Rows of ``x [..., d]`` scaled to unit L2 norm (zero rows stay zero)."""
    return F.normalize(x, p=2.0, dim=-1, eps=eps)


def check_pair(u: Tensor, v: Tensor, what: str = "u, v") -> None:
    """Raise ``ValueError`` unless ``u`` and ``v`` are both ``[n, d]`` with the same ``n, d``, ``n >= 1``."""
    if u.dim() != 2 or v.dim() != 2:
        raise MlatrError(
            f"{what}: expected two [n, d] tensors, got shapes {tuple(u.shape)} and {tuple(v.shape)}"
        )
    if u.shape != v.shape:
        raise MlatrError(f"{what}: shapes differ: {tuple(u.shape)} vs {tuple(v.shape)}")
    if u.shape[0] == 0:
        raise MlatrError(f"{what}: empty batch")


def check_positive(temperature: Scalar) -> None:
    """Raise ``ValueError`` for a non-positive Python-number temperature (tensors are not synced)."""
    if not isinstance(temperature, Tensor) and not temperature > 0:
        raise MlatrError(f"temperature must be > 0, got {temperature!r}")


def cosine_logits(u: Tensor, v: Tensor, temperature: Scalar) -> Tensor:
    """``[n, m]`` matrix ``cos(u_i, v_j) / temperature`` for ``u [n, d]``, ``v [m, d]``.

    This is the scaled cosine similarity ``s(u, v) / tau`` of ATRI eq. 10-11 and SupCLAP §2.1.
    """
    check_positive(temperature)
    return l2_normalize(u) @ l2_normalize(v).transpose(0, 1) / temperature


def diagonal_cross_entropy(logits: Tensor) -> Tensor:
    """Per-row InfoNCE ``-log softmax(logits[i])[i]`` of a square ``[n, n]`` logit matrix -> ``[n]``.

    Row ``i`` is one anchor; its positive is column ``i``, every other column is a negative.
    """
    return -torch.log_softmax(logits, dim=1).diagonal()


def row_cross_entropy(logits: Tensor, positives: Tensor) -> Tensor:
    """Per-row InfoNCE ``-log softmax(logits[k])[positives[k]]`` of ``[r, n]`` logits -> ``[r]``: the rows
    ``positives`` of a square matrix, whose positives sit at those columns (:func:`diagonal_cross_entropy`
    of a subset of rows)."""
    return -torch.log_softmax(logits, dim=1).gather(1, positives[:, None]).squeeze(1)
