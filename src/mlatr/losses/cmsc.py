"""Cross-modal similarity consistency (CMSC) losses.

Paper: "Fine-grained audio-text retrieval: local-to-global multiscale matching and cross-modal
similarity consistency", Section 2.2, eq. 6-11.

Every function takes *score matrices* of a batch of ``B`` aligned pairs ``(A_m, T_m)``, so any matching
head's scores work (:mod:`mlatr.matching`; :func:`cmsc_similarities` computes all four with one head):

- ``a2t [B, B]``: ``a2t[m, n] = S_g(A_m, T_n)`` (audio as the query),
- ``t2a [B, B]``: ``t2a[n, m] = S_g(T_n, A_m)`` (text as the query). LGMM is asymmetric, so the T2A
  terms may use their own matrix; ``t2a=None`` means ``a2t.T``, which is eq. 6 and eq. 10 *literally*
  (the paper writes every cross-modal score as ``S_g(A_m, T_n)``),
- ``aa [B, B]``: ``aa[m, n] = S_g(A_m, A_n)``, ``tt [B, B]``: ``tt[m, n] = S_g(T_m, T_n)`` -- the
  intra-modal similarities, computed with the same head.

Scores are *not* re-normalised here (the heads' scores are cosines or LogSumExp-pooled cosines); the
temperature ``tau`` (paper: 0.07, Section 3.2) divides them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mlatr.errors import MlatrError
from mlatr.losses._common import row_cross_entropy

#: Paper hyper-parameters (Section 3.2).
TAU = 0.07
BETA = 0.3


def _square(name: str, x: Tensor | None, b: int | None = None) -> Tensor:
    if x is None:
        raise MlatrError(f"cmsc: {name} scores are required for this term")
    if x.dim() != 2 or x.shape[0] != x.shape[1]:
        raise MlatrError(f"cmsc: {name} must be a square [B, B] score matrix, got {tuple(x.shape)}")
    if b is not None and x.shape[0] != b:
        raise MlatrError(f"cmsc: {name} is {tuple(x.shape)}, expected [{b}, {b}]")
    return x


def _t2a(a2t: Tensor, t2a: Tensor | None) -> Tensor:
    return a2t.T if t2a is None else _square("t2a", t2a, a2t.shape[0])


def interc_loss(a2t: Tensor, t2a: Tensor | None = None, tau: float = TAU) -> Tensor:
    """Inter-modal contrastive loss ``L_InterC`` (eq. 6), bidirectional NT-Xent:

    ``-(1/B) * ( sum_m log softmax(a2t[m, :] / tau)[m] + sum_n log softmax(t2a[n, :] / tau)[n] )``

    With ``t2a = a2t.T`` (default) the second sum is
    ``log exp(S_g(A_n,T_n)/tau) / sum_m exp(S_g(A_m,T_n)/tau)`` exactly as printed.
    As in eq. 6 the two directions are summed, not averaged.
    """
    a2t = _square("a2t", a2t)
    t2a = _t2a(a2t, t2a)
    b = a2t.shape[0]
    a_term = torch.log_softmax(a2t / tau, dim=1).diagonal().sum()
    t_term = torch.log_softmax(t2a / tau, dim=1).diagonal().sum()
    return -(a_term + t_term) / b


def interc_rows_loss(a2t_rows: Tensor, t2a_rows: Tensor, rows: Tensor, tau: float = TAU) -> Tensor:
    """The part of :func:`interc_loss` owed to the anchors ``rows`` (``[r]`` long): ``a2t_rows [r, B]`` are
    rows ``rows`` of ``a2t``, ``t2a_rows [r, B]`` those of ``t2a``. The parts of a partition of the rows add
    up to the whole loss (the normaliser stays ``1/B``): a distributed local loss."""
    b = a2t_rows.shape[1]
    return (row_cross_entropy(a2t_rows / tau, rows).sum() + row_cross_entropy(t2a_rows / tau, rows).sum()) / b


#: How eq. 7-8 mix the intra-modal similarities with the binary labels (:func:`soft_labels`).
SOFT_LABEL_MIXTURES = ("probability", "logit")


def match_distribution(labels: Tensor) -> Tensor:
    """``Y`` (float ``[B, B]``) with every row divided by its sum: uniform over each row's matches.

    Raises :class:`MlatrError` when a row has no match (eq. 7-8 need at least one positive per anchor).
    """
    counts = labels.sum(dim=1, keepdim=True)  # [B, 1]
    if bool((counts <= 0).any()):
        raise MlatrError("cmsc: every row of the label matrix needs at least one match")
    return labels / counts


def soft_labels(intra: Tensor, beta: float = BETA, labels: Tensor | None = None, tau: float = TAU,
                mixture: str = "probability") -> Tensor:
    """The soft-label distributions of eq. 7-8, one per anchor row: ``[B, B]``, rows sum to 1.

    ``S_hat(A_m, A_n) = beta * S(A_m, A_n) + (1 - beta) * y(A_m, T_n)`` mixes a weak intra-modal label with
    the binary cross-modal label ``Y`` (``labels``, bool or float; default: the identity, ``A_m`` matches
    ``T_n`` iff ``m == n``; pass it when a batch holds several captions of one clip). The paper does not say
    how the mixture becomes the distribution ``{S_hat(A_m, A_n)}``; two readings:

    - ``mixture="probability"`` (default): mix distributions, ``P_m = beta * softmax_n(intra[m, n] / tau)
      + (1 - beta) * Y_m / sum(Y_m)``. The binary label keeps weight ``1 - beta`` on the matches and the
      intra-modal softmax spreads ``beta`` over the candidates by similarity: the weak label eq. 7
      intends. At ``tau = 0.07`` that softmax still favours the anchor itself (self-similarity 1), so the
      mass that leaves the matches goes to near-duplicates, the items a binary label wrongly calls negative.
    - ``mixture="logit"``: mix scores, then one softmax, ``P_m = softmax_n((beta * intra[m, n]
      + (1 - beta) * Y[m, n]) / tau)``. At ``tau = 0.07`` the label gives the diagonal a logit margin of
      ``(1 - beta) / tau = 10``, so almost all mass sits on the matches and ``L_Jnt`` becomes a second
      ``L_InterC`` (kept as an option: mlatr's earlier form).
    """
    intra = _square("intra", intra)
    if mixture not in SOFT_LABEL_MIXTURES:
        raise MlatrError(f"cmsc: unknown soft-label mixture {mixture!r}; expected one of "
                         f"{', '.join(SOFT_LABEL_MIXTURES)}")
    if labels is None:
        labels = torch.eye(intra.shape[0], dtype=intra.dtype, device=intra.device)
    labels = _square("labels", labels, intra.shape[0]).to(intra.dtype)
    if mixture == "logit":
        return torch.softmax((beta * intra + (1.0 - beta) * labels) / tau, dim=1)
    return beta * torch.softmax(intra / tau, dim=1) + (1.0 - beta) * match_distribution(labels)


def _row_kl(target: Tensor, pred_scores: Tensor, tau: float) -> Tensor:
    """``mean_m KL(target[m] || softmax(pred[m]/tau))`` for target distributions ``[B, B]`` (0 log 0 = 0)."""
    log_q = torch.log_softmax(pred_scores / tau, dim=1)  # [B, B]
    return (torch.xlogy(target, target) - target * log_q).sum(dim=1).mean()


def jnt_loss(a2t: Tensor, aa: Tensor, tt: Tensor, t2a: Tensor | None = None, beta: float = BETA,
             tau: float = TAU, labels: Tensor | None = None, detach_targets: bool = True,
             mixture: str = "probability") -> Tensor:
    """Joint inter- and intra-modal soft supervision ``L_Jnt`` (eq. 7-9).

    ``L_Jnt = KL(S_hat(A,A) || S_g(A,T)) / 2 + KL(S_hat(T,T) || S_g(T,A)) / 2``, row by row (anchor ``m``,
    over the ``B`` candidates ``n``):

    - target ``P_m``: :func:`soft_labels` of ``aa`` (eq. 7; ``tt`` for the text term, eq. 8) with the
      given ``mixture`` (default: distributions mixed in probability space);
    - prediction ``Q_m = softmax_n(a2t[m, n] / tau)`` (resp. ``t2a[m, n] = S_g(T_m, A_n)``): the very
      distribution ``L_InterC`` trains;
    - ``KL(P || Q) = mean_m sum_n P_mn (log P_mn - log Q_mn)``.

    ``labels[m, n]`` (default: identity) says whether audio ``A_m`` matches text ``T_n``; rows with several
    matches spread the label mass evenly over them; the text term uses the transpose. The soft labels are
    labels: by default (``detach_targets``) no gradient flows into ``aa``/``tt`` through this term.
    """
    a2t = _square("a2t", a2t)
    b = a2t.shape[0]
    t2a = _t2a(a2t, t2a)
    target_a = soft_labels(_square("aa", aa, b), beta, labels, tau, mixture)
    target_t = soft_labels(_square("tt", tt, b), beta, None if labels is None else labels.T, tau, mixture)
    if detach_targets:
        target_a, target_t = target_a.detach(), target_t.detach()
    return _row_kl(target_a, a2t, tau) / 2 + _row_kl(target_t, t2a, tau) / 2


def intrac_loss(a2t: Tensor, aa: Tensor, tt: Tensor, t2a: Tensor | None = None, tau: float = TAU) -> Tensor:
    """Intra-modal contrastive loss ``L_IntraC`` (eq. 10), as printed:

    ``-(1/B) * ( sum_m log [ exp(S_g(A_m,T_m)/tau) / sum_{n != m} exp(S_g(A_m,A_n)/tau) ]
                + sum_n log [ exp(S_g(A_n,T_n)/tau) / sum_{m != n} exp(S_g(T_m,T_n)/tau) ] )``

    The numerator is the cross-modal positive (``a2t[m, m]``; ``t2a[n, n]`` for the text term, equal to
    ``a2t[n, n]`` when ``t2a`` is None) and the denominator holds the intra-modal negatives only (no
    ``n == m`` term), i.e. row ``m`` of ``aa`` and column ``n`` of ``tt`` without the diagonal. The loss
    can be negative. Needs ``B >= 2``.
    """
    a2t = _square("a2t", a2t)
    b = a2t.shape[0]
    if b < 2:
        raise MlatrError("cmsc: L_IntraC needs a batch of at least 2 pairs")
    t2a = _t2a(a2t, t2a)
    off = ~torch.eye(b, dtype=torch.bool, device=a2t.device)
    neg_a = (_square("aa", aa, b) / tau).masked_fill(~off, float("-inf")).logsumexp(dim=1)     # over n != m
    neg_t = (_square("tt", tt, b) / tau).masked_fill(~off, float("-inf")).logsumexp(dim=0)     # over m != n
    a_term = (a2t.diagonal() / tau - neg_a).sum()
    t_term = (t2a.diagonal() / tau - neg_t).sum()
    return -(a_term + t_term) / b


def cmsc_loss_terms(a2t: Tensor, t2a: Tensor | None = None, aa: Tensor | None = None,
                    tt: Tensor | None = None, *, tau: float = TAU, beta: float = BETA,
                    labels: Tensor | None = None,
                    use_interc: bool = True, use_jnt: bool = True, use_intrac: bool = True,
                    detach_targets: bool = True, mixture: str = "probability") -> dict[str, Tensor]:
    """The enabled terms of eq. 11 and their sum: ``{"interc", "jnt", "intrac", "total"}`` (disabled terms
    are absent). The switches give Table 3's ablation rows: ``L``, ``-L_Jnt`` (``use_jnt=False``),
    ``-L_IntraC`` (``use_intrac=False``), ``-L_IntraC - L_Jnt`` (both off: ``L_InterC`` alone, the
    setting of Table 2). ``aa``/``tt`` are only needed by the intra-modal terms."""
    if not (use_interc or use_jnt or use_intrac):
        raise MlatrError("cmsc: every term is switched off")
    terms: dict[str, Tensor] = {}
    if use_interc:
        terms["interc"] = interc_loss(a2t, t2a, tau)
    if use_jnt:
        terms["jnt"] = jnt_loss(a2t, aa, tt, t2a, beta, tau, labels, detach_targets, mixture)
    if use_intrac:
        terms["intrac"] = intrac_loss(a2t, aa, tt, t2a, tau)
    terms["total"] = torch.stack(list(terms.values())).sum()
    return terms


def cmsc_loss(a2t: Tensor, t2a: Tensor | None = None, aa: Tensor | None = None, tt: Tensor | None = None,
              **options) -> Tensor:
    """Eq. 11: ``L = L_InterC + L_Jnt + L_IntraC`` (scalar); options as :func:`cmsc_loss_terms`."""
    return cmsc_loss_terms(a2t, t2a, aa, tt, **options)["total"]


@dataclass
class CMSCScores:
    """The four ``[B, B]`` score matrices CMSC needs (``aa``/``tt`` None when not computed)."""

    a2t: Tensor
    t2a: Tensor
    aa: Tensor | None = None
    tt: Tensor | None = None


def cmsc_similarities(head, audio, text, intra: bool = True, score=None) -> CMSCScores:
    """Score a batch with one matching head (Section 2.2: "intra-modal similarities are calculated with
    the matching method in Section 2.1"): ``a2t = head(audio, text)``, ``t2a = head(text, audio)``,
    ``aa = head(audio, audio)``, ``tt = head(text, text)`` (the last two only if ``intra``).
    ``audio``/``text`` carry ``pooled``/``frames``/``mask`` as :mod:`mlatr.matching.heads` expects.
    ``score(query, context)`` replaces ``head.scores`` when given (e.g. block-wise scoring with
    :func:`mlatr.matching.chunked_scores`; same values)."""
    score = head.scores if score is None else score
    return CMSCScores(
        a2t=score(audio, text),
        t2a=score(text, audio),
        aa=score(audio, audio) if intra else None,
        tt=score(text, text) if intra else None,
    )
