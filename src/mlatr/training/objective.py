"""The training objective: pairing scheme x base loss (+ SupCLAP's SVR regularizer).

Given the pooled audio embeddings of a batch and the texts the pairing scheme selected, the
objective builds the scheme's list of :class:`~mlatr.losses.Pair` (ML-CLAP: audio-text; KCL: one
audio-text pair per language, ATRI eq. 9; CACL: audio-English, audio-other, English-other, ATRI
eq. 12) and scores them with the base objective (InfoNCE or SigLIP) through
:func:`mlatr.losses.pairs_loss`, so every scheme runs with every base loss. A SupCLAP regularizer
(eq. 6) is added over the audio-text pairs of the same list (CACL's English-other pair is text-text
and is not regularized).

This module owns the objective's learnable parameters (SigLIP's bias, SVR's radius model) so the
optimizer and the checkpoint see them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mlatr.data.pairing import Selection
from mlatr.losses import Pair, PairSum, cacl_pairs, kcl_pairs, pair_objective, pairs_loss
from mlatr.training.config import ObjectiveConfig


def scheme_pairs(scheme: str, audio: Tensor, text: Tensor, mask: Tensor) -> list[Pair]:
    """The pairs of one batch: ``audio [N, d]``, ``text [N, S, d]`` gathered by the scheme's slots."""
    if scheme == "mlclap":
        return [Pair(audio, text[:, 0], "audio-text")]
    if scheme == "kcl":
        return kcl_pairs(audio, text, mask)
    if scheme == "cacl":
        # Clips whose caption has no translation contribute to the audio-English term only.
        return cacl_pairs(audio, text[:, 0], text[:, 1], other_mask=mask[:, 1])
    raise ValueError(f"unknown scheme {scheme!r}")


class TrainingObjective(nn.Module):
    """``forward(audio [N, d], text [N, S, d], selection, temperature) -> (loss, logs)``.

    With ``objective.matching`` / ``objective.cmsc`` set, ``forward`` also takes ``audio_out`` /
    ``text_out`` (the encoders' outputs with frames and masks; texts flat in ``selection.texts`` order)
    and delegates to :class:`~mlatr.training.matching_objective.MatchingObjective`."""

    def __init__(self, cfg: ObjectiveConfig, batch_size: int):
        super().__init__()
        self.scheme = cfg.scheme
        self.base = cfg.base
        self.bias = nn.Parameter(torch.tensor(float(cfg.siglip_bias))) if cfg.base == "siglip" else None
        self.svr = None
        #: Fine-grained head path (objective.matching / objective.cmsc), None = pooled vectors only.
        self.matching = None
        if cfg.matching is not None or cfg.cmsc is not None:
            from mlatr.training.matching_objective import MatchingObjective

            self.matching = MatchingObjective(cfg)
        self.reweight = None
        if cfg.reweight:
            from mlatr.losses.simple_reweight import SimpleReweight

            self.reweight = SimpleReweight()
        if cfg.svr is not None:
            from mlatr.losses.svr_objective import build_svr_regularizer

            self.svr = build_svr_regularizer(
                radius=cfg.svr.radius, direction="bi" if cfg.svr.bidirectional else "uni", base=cfg.base,
                batch_size=batch_size, alpha=cfg.svr.alpha, beta=cfg.svr.beta if cfg.svr.constraint else 0.0,
                similarity=cfg.svr.similarity, radius_output=cfg.svr.radius_output, radius_input=cfg.svr.radius_input,
                sort_negatives=cfg.svr.sort_negatives, detach_radius_input=cfg.svr.detach_radius_input,
            )

    def forward(self, audio: Tensor, text: Tensor, selection: Selection, temperature: Tensor | float,
                audio_out=None, text_out=None) -> tuple[Tensor, dict[str, float]]:
        if self.matching is not None:  # scores frames/tokens: needs the full EncoderOutputs
            return self.matching(audio_out, text_out, selection, temperature)
        mask = selection.mask.to(audio.device)
        pairs = scheme_pairs(self.scheme, audio, text, mask)
        objective = pair_objective(self.base, temperature, self.bias)
        reweighted = _reweighted_objective(self.reweight, temperature) if self.reweight is not None else None
        loss = pairs_loss(pairs, objective, audio_text_objective=reweighted)
        logs = {"loss_base": float(loss.detach())}
        if self.reweight is not None:
            logs["reweight_w"] = float(self.reweight.log_weight.detach().exp())
        if self.svr is not None:
            reg, diag = self.svr.over_pairs(pairs, temperature, self.bias)
            loss = loss + reg
            logs.update({f"svr_{k}": float(v) for k, v in diag.items()})
        if self.bias is not None:
            logs["siglip_bias"] = float(self.bias.detach())
        return loss, logs


def _reweighted_objective(reweight, temperature):
    """Simple Reweight (SupCLAP App. E.4) as a pair objective for the scheme's audio-text pairs.

    :class:`~mlatr.losses.simple_reweight.SimpleReweight`'s loss (the mean of both directions) is
    returned as ``PairSum(loss * 2n, 2n)``, InfoNCE's normalisation, so at ``w = 1`` the total equals
    the plain InfoNCE one.
    """

    def objective(anchor: Tensor, target: Tensor) -> PairSum:
        loss, _ = reweight(anchor, target, temperature)
        return PairSum(total=loss * (2 * anchor.shape[0]), count=2 * anchor.shape[0])

    return objective
