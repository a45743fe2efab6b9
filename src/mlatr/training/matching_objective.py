"""The fine-grained training objective: a matching head's scores + InterC, optionally the CMSC terms.

Paper: "Fine-grained audio-text retrieval: local-to-global multiscale matching and cross-modal
similarity consistency" (``shared/seeds/fine-grained-atr-lgmm-cmsc.txt``). Section 2.1 scores a pair
with a matching head (LGMM, eq. 1-5; or a Table 2 baseline mode, or pooled cosine); Section 2.2 trains
with ``L_InterC`` (eq. 6, bidirectional NT-Xent over the head's scores) and, with CMSC, ``L = L_InterC +
L_Jnt + L_IntraC`` (eq. 11), each term switchable (Table 3), the intra-modal similarities scored by the
same head (:func:`mlatr.losses.cmsc.cmsc_similarities`).

It is used when the config sets ``objective.matching`` and/or ``objective.cmsc`` (see
:func:`uses_matching_objective`); otherwise the trainer keeps the pooled-cosine InfoNCE path unchanged.
The loss of one audio-text group is the paper's as printed (eq. 6 sums the two directions and divides
by ``B``: twice the pooled path's InfoNCE, which averages them); ``tau`` is the model's temperature
(paper: 0.07).

How the head composes with the pairing schemes (a group = the clips of a batch and one caption each):

- ``mlclap``: one group (each clip with its drawn caption): the paper's setting exactly.
- ``kcl``: one group per language ``k`` (the clips with a language-``k`` caption), as the pooled KCL
  pairs (ATRI eq. 9); CMSC's ``aa`` is the same audio subset for every language, ``tt`` is per language.
- ``cacl``: the three CACL groups (audio-English, audio-other, English-other) scored by the head in both
  directions with InterC only; CMSC is refused (its audio/text roles do not fit a text-text group).

Groups are combined as ``sum_g B_g L_g / sum_g B_g`` (``B_g`` = clips in group ``g``), so KCL/CACL with
InterC keep the pooled path's per-caption weighting.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mlatr.data.pairing import Selection
from mlatr.errors import MlatrError
from mlatr.losses.cmsc import SOFT_LABEL_MIXTURES, cmsc_loss_terms, cmsc_similarities, interc_loss
from mlatr.matching.chunked import chunked_scores
from mlatr.matching.heads import MatchingHead, Side, build_matching_head

#: Bound on one block of the training-time head scoring. Under autograd blocks do not lower the memory,
#: so this only has to exceed any batch's working set; blocks are chosen for speed (cache-sized on CPU).
TRAINING_SCORING_BUDGET_MB = 1 << 20


def uses_matching_objective(objective_cfg) -> bool:
    """True when ``objective.matching`` or ``objective.cmsc`` is set (the head path is used)."""
    return getattr(objective_cfg, "matching", None) is not None or getattr(objective_cfg, "cmsc", None) is not None


def head_from_matching_config(matching_cfg) -> MatchingHead:
    """The head named by an ``objective.matching`` section (None = pooled cosine). LGMM takes ``tau_w``
    and ``lam`` (paper: 0.25 and 10, Section 3.2); the other heads take no options."""
    if matching_cfg is None:
        return build_matching_head("cosine")
    if matching_cfg.name == "lgmm":
        return build_matching_head("lgmm", tau_w=matching_cfg.tau_w, lam=matching_cfg.lam)
    return build_matching_head(matching_cfg.name)


def check_matching_objective(objective_cfg) -> None:
    """Raise :class:`MlatrError` for combinations the head path does not support."""
    if not uses_matching_objective(objective_cfg):
        return
    o = objective_cfg
    head_from_matching_config(o.matching)  # unknown head name / bad options
    if o.base != "infonce":
        raise MlatrError("config: objective.matching / objective.cmsc train with NT-Xent (the fine-grained "
                         f"paper's eq. 6): objective.base must be infonce, got {o.base!r}")
    if o.svr is not None:
        raise MlatrError("config: objective.svr does not combine with objective.matching / objective.cmsc "
                         "(SVR regularizes pooled pairs)")
    if getattr(o, "reweight", False):
        raise MlatrError("config: objective.reweight does not combine with objective.matching / objective.cmsc")
    if o.cmsc is not None:
        c = o.cmsc
        if not (c.interc or c.jnt or c.intrac):
            raise MlatrError("config: objective.cmsc switches every term off (interc, jnt, intrac)")
        if not 0.0 <= c.beta <= 1.0:
            raise MlatrError(f"config: objective.cmsc.beta must be in [0, 1], got {c.beta}")
        if c.mixture not in SOFT_LABEL_MIXTURES:
            raise MlatrError(f"config: objective.cmsc.mixture must be one of {', '.join(SOFT_LABEL_MIXTURES)}, "
                             f"got {c.mixture!r}")
        if o.scheme == "cacl":
            raise MlatrError("config: objective.cmsc does not combine with scheme cacl (its English-other "
                             "pair is text-text); use mlclap or kcl")


def _side(out, rows: Tensor) -> Side:
    """Items ``rows`` of an :class:`~mlatr.models.outputs.EncoderOutput` as float32 tensors."""
    return Side(
        pooled=out.pooled.index_select(0, rows).float(),
        frames=None if out.frames is None else out.frames.index_select(0, rows).float(),
        mask=None if out.mask is None else out.mask.index_select(0, rows),
    )


class MatchingObjective:
    """``(audio_out, text_out, selection, temperature) -> (loss, logs)`` on frames and tokens.

    ``audio_out``: the batch's audio :class:`EncoderOutput` (``[N, ...]``); ``text_out``: the encoded
    ``selection.texts`` (flat, in that order). Holds no parameters.
    """

    def __init__(self, objective_cfg):
        self.scheme = objective_cfg.scheme
        self.head = head_from_matching_config(objective_cfg.matching)
        self.cmsc = objective_cfg.cmsc

    def __call__(self, audio_out, text_out, selection: Selection, temperature: Tensor | float
                 ) -> tuple[Tensor, dict[str, float]]:
        if audio_out is None or text_out is None:
            raise MlatrError("the matching-head objective needs the encoder outputs (frames and masks)")
        device = audio_out.pooled.device
        index = selection.index.to(device)
        mask = index >= 0
        groups: list[tuple[Side, Side, bool]] = []  # (query side, context side, audio-text?)
        if self.scheme in ("mlclap", "kcl"):
            for k in range(index.shape[1] if self.scheme == "kcl" else 1):
                rows = mask[:, k].nonzero().squeeze(1)
                if rows.numel():
                    groups.append((_side(audio_out, rows), _side(text_out, index[rows, k]), True))
        elif self.scheme == "cacl":
            all_rows = torch.arange(index.shape[0], device=device)
            groups.append((_side(audio_out, all_rows), _side(text_out, index[:, 0]), True))
            rows = mask[:, 1].nonzero().squeeze(1)
            if rows.numel():
                groups.append((_side(audio_out, rows), _side(text_out, index[rows, 1]), True))
                groups.append((_side(text_out, index[rows, 0]), _side(text_out, index[rows, 1]), False))
        else:
            raise MlatrError(f"unknown scheme {self.scheme!r}")
        totals: dict[str, Tensor] = {}
        weight = 0
        for anchor, target, _ in groups:
            n = int(anchor.pooled.shape[0])
            terms = self._group_terms(anchor, target, temperature)
            if terms is None:
                continue
            for name, value in terms.items():
                totals[name] = totals.get(name, 0.0) + n * value
            weight += n
        if not weight:
            raise MlatrError("matching objective: no group of at least 2 pairs in this batch")
        loss = totals["total"] / weight
        logs = {"loss_base": float(loss.detach())}
        logs.update({f"cmsc_{k}": float(v.detach()) / weight for k, v in totals.items() if k != "total"})
        return loss, logs

    def _group_terms(self, anchor: Side, target: Side, temperature) -> dict[str, Tensor] | None:
        if self.cmsc is None:
            a2t, t2a = self._scores(anchor, target), self._scores(target, anchor)
            value = interc_loss(a2t, t2a, temperature)
            return {"total": value}
        if anchor.pooled.shape[0] < 2 and self.cmsc.intrac:
            return None  # L_IntraC needs two pairs
        s = cmsc_similarities(self.head, anchor, target, intra=self.cmsc.jnt or self.cmsc.intrac, score=self._scores)
        return cmsc_loss_terms(s.a2t, s.t2a, s.aa, s.tt, tau=temperature, beta=self.cmsc.beta,
                               use_interc=self.cmsc.interc, use_jnt=self.cmsc.jnt, use_intrac=self.cmsc.intrac,
                               mixture=self.cmsc.mixture)

    def _scores(self, query: Side, context: Side) -> Tensor:
        """``head.scores(query, context)`` computed block by block (:func:`~mlatr.matching.chunked_scores`):
        the same values, but on CPU in cache-sized blocks, which halves the forward + backward time of LGMM
        at the paper's batch (B=128, d=512: 0.87 s vs 1.62 s on the 2-core CPU); on a GPU one block. Under
        autograd every block's tensors are kept for backward, so memory is that of the unchunked call."""
        return chunked_scores(self.head, query, context, memory_budget_mb=TRAINING_SCORING_BUDGET_MB)

    def config(self) -> dict[str, Any]:
        return self.head.config()


def head_from_checkpoint(state: dict[str, Any]) -> MatchingHead:
    """The matching head a checkpoint's model ranks with: ``state["matching_head"]`` (written by the
    trainer), else the training config's ``objective.matching``, else pooled cosine (older checkpoints)."""
    from mlatr.matching import build_matching_head_from_config

    stored = state.get("matching_head")
    if stored:
        return build_matching_head_from_config(dict(stored))
    matching = ((state.get("train_config") or {}).get("objective") or {}).get("matching")
    if matching:
        name = matching.get("name", "lgmm")
        options = {k: matching[k] for k in ("tau_w", "lam") if k in matching} if name == "lgmm" else {}
        return build_matching_head(name, **options)
    return build_matching_head("cosine")
