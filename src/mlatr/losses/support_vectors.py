"""Support vector regularization (SupCLAP): support vectors, the SVR term and the radius constraint.

SupCLAP moves each anchor embedding a distance ``R`` (the *semantic radius*) towards its positive,
``t_sup = t+ + R * (a+ - t+) / ||a+ - t+||`` (§3.1, eq. 6), and adds a contrastive term whose anchors
are these support vectors. Differentiating through the unit direction rescales the component of every
negative's pushing force perpendicular to the pulling direction by ``1 - R / ||a+ - t+||`` while
leaving the parallel component as it is (Appendix D, eq. 13-18); this is what controls the
"optimization trajectory drift" of §2. The support vector is scored with the scaled cosine of §3.1
(renormalised first).

All functions here are pure: tensors in, tensors out. The radius comes from a radius model
(:mod:`mlatr.losses.radius`); :class:`~mlatr.losses.svr_regularizer.SVRRegularizer` joins the two.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mlatr.errors import MlatrError
from mlatr.losses._common import Scalar, check_pair, check_positive, l2_normalize
from mlatr.losses.pair_losses import BASE_LOSSES

#: Smallest ``||target - anchor||`` used as a divisor; coincident pairs get a zero direction.
DIRECTION_EPS = 1e-8


def radius_column(radius: Scalar, n: int, like: Tensor) -> Tensor:
    """A radius as a tensor broadcastable against ``[n, d]`` rows: ``[]`` (shared) or ``[n, 1]``.

    Args:
        radius: a Python number, a 0-d tensor (one radius for every row, StaticSVR) or one value per
            row, shape ``[n]`` or ``[n, 1]`` (DynamicSVR). Gradients flow through tensors.
        n: the number of rows. like: a tensor whose dtype and device the result takes.

    Raises:
        ValueError: any other shape.
    """
    r = torch.as_tensor(radius, dtype=like.dtype, device=like.device)
    if r.dim() == 0:
        return r
    if r.shape == (n,):
        return r.unsqueeze(1)
    if r.shape == (n, 1):
        return r
    raise MlatrError(f"radius must be a scalar, [n] or [n, 1] with n={n}; got shape {tuple(r.shape)}")


def support_vectors(anchor: Tensor, target: Tensor, radius: Scalar, *, normalize: bool = True) -> Tensor:
    """Support vectors ``anchor + R * (target - anchor) / ||target - anchor||``, row by row.

    SupCLAP §3.1 (eq. 6) and Appendix D: the text support vector ``t_sup = t+ + R u``, with
    ``u = (a+ - t+) / ||a+ - t+||`` the unit pulling direction. Row ``i`` of ``anchor`` is displaced
    towards row ``i`` of ``target`` by ``R_i``. The result is *not* renormalised (it lies inside the
    unit ball for ``0 < R < ||a+ - t+||``): that is the map whose Jacobian
    ``I - R / ||a+ - t+|| (I - u u^T)`` Appendix D analyses (eq. 15). Gradients flow into ``anchor``,
    ``target`` (through the direction) and ``radius``.

    Args:
        anchor, target: ``[n, d]``; ``target[i]`` is the positive of ``anchor[i]``.
        radius: scalar (Python number or 0-d tensor) or per-row ``[n]`` / ``[n, 1]`` tensor.
        normalize: L2-normalise ``anchor`` and ``target`` first (the default and the paper's setting,
            §2.1 "all embedding vectors are L2-normalized"). ``False`` applies the formula to the
            inputs as given (used to test Appendix D's Jacobian in the ambient space).

    Returns:
        ``[n, d]`` support vectors. Where ``anchor[i] == target[i]`` the direction is taken as zero,
        so the support vector is the anchor itself.

    Example:
        >>> import torch
        >>> support_vectors(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), 2 ** 0.5 / 2)
        tensor([[0.5000, 0.5000]])
    """
    check_pair(anchor, target, "support_vectors(anchor, target)")
    if normalize:
        anchor, target = l2_normalize(anchor), l2_normalize(target)
    r = radius_column(radius, anchor.shape[0], anchor)
    offset = target - anchor
    distance = torch.linalg.vector_norm(offset, dim=1, keepdim=True).clamp_min(DIRECTION_EPS)
    return anchor + r * (offset / distance)


def directional_loss(logits: Tensor, base: str, bias: Scalar | None) -> Tensor:
    """One direction of the SVR term from its logits ``[n, n]`` (row ``i`` = support vector ``i``, its positive
    in column ``i``): InfoNCE over each row (eq. 6) or SigLIP's pairwise sigmoid with bias ``b``."""
    if base == "infonce":
        return -torch.log_softmax(logits, dim=1).diagonal().mean()
    n = logits.shape[0]
    labels = 2.0 * torch.eye(n, dtype=logits.dtype, device=logits.device) - 1.0
    return -F.logsigmoid(labels * (logits + bias)).sum(dim=1).mean()


def _directional_svr(sup: Tensor, candidates: Tensor, temperature: Scalar, base: str, bias: Scalar | None) -> Tensor:
    """One direction of the SVR term: support vectors ``sup [n, d]``, renormalised and so scored by §3.1's
    ``s = cos / tau``, against unit ``candidates``."""
    return directional_loss(l2_normalize(sup) @ candidates.transpose(0, 1) / temperature, base, bias)


def check_svr_inputs(audio: Tensor, text: Tensor, temperature: Scalar, base: str, bias: Scalar | None) -> None:
    """Refuse what :func:`svr_loss` cannot score: unpaired rows, ``tau <= 0``, an unknown ``base``, SigLIP
    without its bias."""
    check_pair(audio, text, "svr_loss(audio, text)")
    check_positive(temperature)
    if base not in BASE_LOSSES:
        raise MlatrError(f"unknown SVR base loss {base!r}; expected one of {', '.join(BASE_LOSSES)}")
    if base == "siglip" and bias is None:
        raise MlatrError("SVR with base loss 'siglip' needs the SigLIP bias")


def svr_loss(
    audio: Tensor,
    text: Tensor,
    temperature: Scalar,
    radius_t2a: Scalar,
    radius_a2t: Scalar | None = None,
    base: str = "infonce",
    bias: Scalar | None = None,
) -> Tensor:
    """The support vector regularization term ``L_svr`` (SupCLAP §3.1 eq. 6; "uni" / "bi", §4.1.2).

    With ``a_j``, ``t_i`` the L2-normalised rows and ``s_i = t_i + R_i (a_i - t_i)/||a_i - t_i||`` the
    text support vectors (:func:`support_vectors`), the text-to-audio term is, for ``base="infonce"``,

        ``L_t2a = -1/N sum_i log( exp(cos(s_i, a_i) / tau) / sum_j exp(cos(s_i, a_j) / tau) )``

    (eq. 6: a softmax over all clips of the batch, the own clip included). §3.1 defines the affinity as
    the scaled cosine ``s(a, t) = cos(a, t) / tau`` and eq. 6 applies it to ``t_sup``, so each support
    vector is renormalised before it is scored. The loss is then smallest for a radius near ``||a_i - t_i||``
    (the support vector reaches its clip) and grows past it, the regime of the paper's Figure 3.

    With ``radius_a2t`` the audio side is regularised as well ("bi"):
    ``q_i = a_i + R'_i (t_i - a_i)/||t_i - a_i||`` against the texts, ``L_a2t`` likewise, and the result
    is ``L_t2a + L_a2t`` (a sum of the two directional means, as eq. 5 sums the two InfoNCE directions).
    ``R = 0`` gives back the plain InfoNCE t2a term.

    ``base="siglip"`` replaces the softmax by SigLIP's pairwise sigmoid loss with the support vectors
    as the anchors (same normalisation as :func:`~mlatr.losses.siglip_loss`, ``1/N`` over anchors):

        ``L_t2a = -1/N sum_i sum_j log sigmoid(z_ij (cos(s_i, a_j) / tau + b))``, ``z_ij = +1 if i == j else -1``,

    and ``L_a2t`` with ``q_i`` against the texts; "bi" again sums the two.

    Args:
        audio, text: ``[N, d]``, ``text[i]`` describes ``audio[i]``; L2-normalised inside.
        temperature: ``tau > 0``, float or scalar tensor (learnable).
        radius_t2a: radius of the text support vectors: scalar or ``[N]`` / ``[N, 1]``.
        radius_a2t: radius of the audio support vectors; ``None`` (default) = uni (t2a only).
        base: ``"infonce"`` or ``"siglip"``. bias: SigLIP's ``b`` (required for ``"siglip"``).

    Returns:
        Scalar tensor.

    Raises:
        MlatrError: unknown ``base``, or ``"siglip"`` without a bias.

    Example:
        >>> import torch
        >>> a, t = torch.eye(3), torch.eye(3)[[1, 2, 0]] + torch.eye(3)
        >>> bool(torch.isclose(svr_loss(a, t, 1.0, 0.0), svr_loss(a, t, 1.0, torch.zeros(3))))
        True

    References:
        SupCLAP (Support Vector Regularization for audio-text contrastive learning), §3.1 eq. 6,
        §3.2, Appendix D; Zhai et al., "Sigmoid Loss for Language Image Pre-Training", ICCV 2023.
    """
    check_svr_inputs(audio, text, temperature, base, bias)
    a, t = l2_normalize(audio), l2_normalize(text)
    t_sup = support_vectors(t, a, radius_t2a, normalize=False)  # [N, d]
    loss = _directional_svr(t_sup, a, temperature, base, bias)
    if radius_a2t is not None:
        a_sup = support_vectors(a, t, radius_a2t, normalize=False)  # [N, d]
        loss = loss + _directional_svr(a_sup, t, temperature, base, bias)
    return loss


def positive_distances(audio: Tensor, text: Tensor) -> Tensor:
    """``||a_i - t_i||`` of the L2-normalised positive pairs, ``[N]`` (the distance in eq. 8 and B)."""
    check_pair(audio, text, "positive_distances(audio, text)")
    return torch.linalg.vector_norm(l2_normalize(audio) - l2_normalize(text), dim=1)


def constraint_loss(audio: Tensor, text: Tensor, radius: Scalar, *, detach_distance: bool = True) -> Tensor:
    """Radius constraint ``L_cons`` of SupCLAP Appendix B (eq. 9), averaged over the batch.

        ``L_cons = 1/N sum_i [ ReLU(R_i - ||a_i - t_i||) + ReLU(-R_i) ]``

    on L2-normalised ``a_i``, ``t_i``. The first part penalises a radius that overshoots the positive
    (``1 - R/||a - t||`` would turn negative and invert the perpendicular force), the second a negative
    radius (which would amplify it). A scalar ``R`` is used for every row.

    Appendix B puts the constraint "on the radius predictor module", so by default the distance is
    detached and only the radius receives its gradient (otherwise the first part would also push
    every positive pair apart). ``detach_distance=False`` differentiates through it as well.

    Args:
        audio, text: ``[N, d]`` positive pairs. radius: scalar or ``[N]`` / ``[N, 1]``.

    Returns:
        Scalar tensor ``>= 0``.

    Example:
        >>> import torch
        >>> a, t = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])   # distance sqrt(2)
        >>> round(float(constraint_loss(a, t, 2.0)), 4), float(constraint_loss(a, t, -0.5))
        (0.5858, 0.5)
    """
    distance = positive_distances(audio, text)
    if detach_distance:
        distance = distance.detach()
    r = radius_column(radius, distance.shape[0], distance)
    r = r.squeeze(1) if r.dim() == 2 else r
    return (F.relu(r - distance) + F.relu(-r)).mean()
