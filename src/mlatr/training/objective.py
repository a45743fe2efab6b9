"""The training objective: what one optimizer step minimises, as named loss terms.

One factory, :func:`build_objective`, turns the config's ``objective`` section into an :class:`Objective`;
``Objective(audio, text, selection, temperature)`` returns a :class:`LossOutput` whose ``terms`` the
trainer sums and logs one by one (open_clip's ``output_dict`` pattern). What a config computes, top to
bottom (every step below is one line of :meth:`Objective.forward`):

1. **Scheme** (``objective.scheme``, :mod:`mlatr.losses.schemes`): ``scheme.select`` already chose which
   captions were encoded (ML-CLAP: one drawn language per clip; KCL: all K; CACL: English + one drawn
   other); ``scheme.pairs`` says which embedding sets are contrasted (ML-CLAP: ``audio-text``; KCL: one
   ``audio-text[k]`` pair per language, ATRI eq. 9; CACL: ``audio-eng``, ``audio-other``, ``eng-other``,
   ATRI eq. 12).
2. **Scoring of the pairs**, one of:

   - pooled vectors with the base loss (``objective.base``): term ``contrastive`` =
     ``sum_p total_p / sum_p count_p`` over the pairs (:func:`~mlatr.losses.pairs_loss`: InfoNCE's
     ``1/(2NK)`` for KCL, ``1/(6N)`` for CACL; SigLIP the caption-weighted mean). With
     ``objective.reweight`` the audio-text pairs use SupCLAP's Simple Reweight (App. E.4) instead;
   - a matching head on frames and tokens (``objective.matching`` and/or ``objective.cmsc``; fine-grained
     paper §2): every pair is scored by the head in both directions, giving the terms ``interc`` (eq. 6)
     and, with CMSC, ``jnt`` (eq. 7-9) and ``intrac`` (eq. 10). Each term is the pairs' row-weighted
     mean ``sum_p n_p L_p / sum_p n_p``.

3. **Regulariser** (``objective.svr``, SupCLAP eq. 6 and 9): term ``svr`` over the audio-text pairs of
   the same list (:class:`~mlatr.losses.svr_regularizer.SVRRegularizer`, row-weighted; CACL's
   English-other pair is text-text and is not regularised). SupCLAP as defined (:func:`svr_from_config`);
   ``objective.svr.builder`` names a research variant's builder instead (:func:`svr_builder`).

``rows`` (a distributed local loss, :mod:`mlatr.training.distributed`): only the rows of the given clips
are scored, against the whole batch, with the whole batch's normalisation, so the terms of a partition of
the clips add up to the terms of the batch. Pooled InfoNCE / SigLIP and the matching heads' InterC support
it; SVR, Simple Reweight and CMSC's soft-label terms need the whole batch in every row and do not.

The loss is the sum of the terms. Example: ``scheme=kcl`` + ``svr={radius: dynamic}`` computes
``contrastive`` = KCL's InfoNCE over the K language pairs and ``svr`` = the row-weighted mean over
languages of ``(alpha L_svr + beta L_cons) / 2``, each language's radius predicted by the DynamicRadius
MLP from that language's similarity matrix.

The objective owns the learnable parameters of the loss (SigLIP's bias, Simple Reweight's weight, the
SVR radius model) so that the optimizer and the checkpoint see them. Which options combine is the config's
rule (:func:`mlatr.training.config.check_rules`), what a scheme needs is the scheme's (:func:`check_scheme`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from mlatr.errors import MlatrError
from mlatr.losses import Pair, PairSum, pair_loss, pairs_loss
from mlatr.losses.cmsc import cmsc_loss_terms, cmsc_similarities, interc_loss, interc_rows_loss
from mlatr.losses.schemes import Scheme, Selection, build_scheme
from mlatr.losses.simple_reweight import SimpleReweight
from mlatr.losses.svr_regularizer import SVRRegularizer, build_svr_regularizer
from mlatr.matching import MatchingHead, build_matching_head, chunked_scores, head_from_config
from mlatr.models.outputs import EncoderOutput, at_least_float32

#: Bound on one block of the training-time head scoring. Under autograd blocks do not lower the memory,
#: so this only has to exceed any batch's working set; blocks are chosen for speed (cache-sized on CPU).
TRAINING_SCORING_BUDGET_MB = 1 << 20


@dataclass
class LossOutput:
    """What :class:`Objective` returns: named loss terms (summed into the loss) and detached diagnostics."""

    terms: dict[str, Tensor]
    diagnostics: dict[str, Tensor]

    @property
    def total(self) -> Tensor:
        """The loss: the sum of the terms, in order."""
        values = list(self.terms.values())
        total = values[0]
        for value in values[1:]:
            total = total + value
        return total

    def log_values(self) -> dict[str, float]:
        """``loss_<term>`` for every term and every diagnostic, as floats (a log line's fields)."""
        out = {f"loss_{name}": float(value.detach()) for name, value in self.terms.items()}
        out.update({name: float(value) for name, value in self.diagnostics.items()})
        return out


class Objective(nn.Module):
    """``forward(audio, text, selection, temperature) -> LossOutput`` (see the module docstring).

    Args (forward):
        audio: the batch's audio :class:`EncoderOutput` (``[N, ...]``).
        text: the encoded ``selection.texts`` (flat, in that order), an :class:`EncoderOutput`.
        selection: what :meth:`scheme.select <mlatr.losses.schemes.Scheme.select>` chose for the batch.
        temperature: ``tau`` (float or the model's scalar tensor).
    """

    def __init__(self, scheme: Scheme, base: str = "infonce", *, siglip_bias: float | None = None,
                 reweight: SimpleReweight | None = None, head: MatchingHead | None = None, cmsc: Any = None,
                 svr: SVRRegularizer | None = None):
        super().__init__()
        self.scheme = scheme
        self.base = base
        self.bias = nn.Parameter(torch.tensor(float(siglip_bias))) if siglip_bias is not None else None
        self.reweight = reweight
        self.head = head
        self.cmsc = cmsc
        self.svr = svr

    @property
    def ranking_head(self) -> MatchingHead:
        """The head the trained model ranks with (its own matching head, else pooled cosine)."""
        return self.head if self.head is not None else build_matching_head("cosine")

    @property
    def supports_rows(self) -> bool:
        """Whether :meth:`forward` takes ``rows`` (a local loss): no SVR, Simple Reweight or CMSC."""
        return self.svr is None and self.reweight is None and self.cmsc is None

    def check_rows_support(self) -> None:
        """Raise :class:`MlatrError` unless :meth:`forward` takes ``rows`` (see :attr:`supports_rows`)."""
        if not self.supports_rows:
            raise MlatrError("a local loss (dist.local_loss) supports pooled InfoNCE / SigLIP and the matching "
                             "heads' InterC; objective.svr, objective.reweight and objective.cmsc score every "
                             "row against the whole batch: set dist.local_loss=false")

    def forward(self, audio: EncoderOutput, text: EncoderOutput, selection: Selection,
                temperature: Tensor | float, rows: Tensor | None = None) -> LossOutput:
        frames = self.head is not None and self.head.needs_frames
        audio = audio.float() if frames else EncoderOutput(at_least_float32(audio.pooled))
        text = text.float() if frames else EncoderOutput(at_least_float32(text.pooled))
        mask = selection.mask.to(audio.pooled.device)  # [N, S]
        pairs = self.scheme.pairs(audio, selection.gather(text), mask)  # text: [N, S, ...]
        pooled = [p.pooled() for p in pairs]
        owned = None if rows is None else self._owned_rows(rows, selection)
        diagnostics: dict[str, Tensor] = {}
        if self.head is None:
            terms = {"contrastive": pairs_loss(pooled, pair_loss(self.base, temperature, self.bias),
                                               audio_text_loss=self._reweighted(temperature), rows=owned)}
        else:
            terms = self._head_terms(pairs, temperature, owned)
        if self.svr is not None:
            terms["svr"], svr_diagnostics = self.svr.over_pairs(pooled, temperature, self.bias)
            diagnostics.update({f"svr_{k}": v for k, v in svr_diagnostics.items()})
        if self.bias is not None:
            diagnostics["siglip_bias"] = self.bias.detach()
        if self.reweight is not None:
            diagnostics["reweight_w"] = self.reweight.log_weight.detach().exp()
        return LossOutput(terms, diagnostics)

    def _owned_rows(self, rows: Tensor, selection: Selection) -> list[Tensor]:
        """For every pair the scheme builds, ``[n_p]`` bool: which of its rows belong to the clips ``rows``
        (the scheme's pairs of the clips' ownership flags, built exactly as the embeddings' pairs)."""
        self.check_rows_support()
        flags = rows.to(torch.float32)[:, None]  # [N, 1]
        slotted = flags[:, None, :].expand(-1, selection.index.shape[1], -1)  # [N, S, 1]
        return [p.anchor[:, 0] > 0.5 for p in self.scheme.pairs(flags, slotted, selection.mask)]

    def _reweighted(self, temperature):
        """Simple Reweight (SupCLAP App. E.4) as the pair loss of the audio-text pairs, or None.

        :class:`~mlatr.losses.simple_reweight.SimpleReweight`'s loss (the mean of both directions) is
        returned as ``PairSum(loss * 2n, 2n)``, InfoNCE's normalisation, so at ``w = 1`` the total equals
        the plain InfoNCE one."""
        if self.reweight is None:
            return None

        def loss_fn(anchor: Tensor, target: Tensor) -> PairSum:
            loss, _ = self.reweight(anchor, target, temperature)
            return PairSum(total=loss * (2 * anchor.shape[0]), count=2 * anchor.shape[0])

        return loss_fn

    def _head_terms(self, pairs: list[Pair], temperature, owned: list[Tensor] | None = None) -> dict[str, Tensor]:
        """Each pair scored by the matching head in both directions: InterC (eq. 6; summed over directions,
        divided by the pair's size as printed) or the enabled CMSC terms; pairs combined row-weighted.
        With ``owned``, InterC of the owned rows only (see the module docstring)."""
        totals: dict[str, Tensor] = {}
        weight = 0
        for k, pair in enumerate(pairs):
            n = pair.size
            if owned is not None:
                idx = owned[k].to(pair.pooled().anchor.device).nonzero().squeeze(1)
                group = {"interc": interc_rows_loss(self._scores(pair.anchor.rows(idx), pair.target),
                                                    self._scores(pair.target.rows(idx), pair.anchor), idx,
                                                    temperature)}
            elif self.cmsc is None:
                group = {"interc": interc_loss(self._scores(pair.anchor, pair.target),
                                               self._scores(pair.target, pair.anchor), temperature)}
            elif n < 2 and self.cmsc.intrac:
                continue  # L_IntraC needs two pairs
            else:
                c = self.cmsc
                s = cmsc_similarities(self.head, pair.anchor, pair.target, intra=c.jnt or c.intrac, score=self._scores)
                group = cmsc_loss_terms(s.a2t, s.t2a, s.aa, s.tt, tau=temperature, beta=c.beta, use_interc=c.interc,
                                        use_jnt=c.jnt, use_intrac=c.intrac, mixture=c.mixture)
                group.pop("total")
            for name, value in group.items():
                totals[name] = totals.get(name, 0.0) + n * value
            weight += n
        if not weight:
            raise MlatrError("matching objective: no pair of at least 2 clips in this batch")
        return {name: total / weight for name, total in totals.items()}

    def _scores(self, query: EncoderOutput, context: EncoderOutput) -> Tensor:
        """``head.scores(query, context)`` block by block (:func:`~mlatr.matching.chunked_scores`): the same
        values, in cache-sized blocks on CPU (faster for LGMM at the papers' batch; ``benchmarks/
        bench_matching.py``), one block on a GPU. Under autograd every block is kept for backward."""
        return chunked_scores(self.head, query, context, memory_budget_mb=TRAINING_SCORING_BUDGET_MB)


def check_scheme(o, languages: Sequence[str] | None = None) -> Scheme:
    """The scheme of an ``objective`` section, refused where its needs are not met: an unknown name,
    ``languages`` (``data.languages``; None = not checked) that do not start with its anchor language, the
    CMSC terms with a scheme of text-text pairs. The section's other rules are the config's
    (:func:`mlatr.training.config.validate_config`)."""
    scheme = build_scheme(o.scheme)
    if languages is not None:
        scheme.check_languages(languages)
    if o.cmsc is not None and scheme.text_text_pairs:
        raise MlatrError(f"config: objective.cmsc does not combine with scheme {o.scheme} (it has text-text "
                         "pairs); use a scheme of audio-text pairs only (mlclap, kcl)")
    return scheme


def build_objective(o, batch_size: int, languages: Sequence[str] | None = None,
                    scheme: Scheme | None = None) -> Objective:
    """The :class:`Objective` of an ``objective`` config section (``ObjectiveConfig``); ``batch_size`` sizes
    the DynamicRadius predictor's input (SupCLAP §3.2); ``languages`` (``data.languages``) are checked
    against the scheme's needs (:func:`check_scheme`); ``scheme``: the run's, already built and checked by
    :func:`check_scheme` (the trainer needs it before the objective, to read its data)."""
    scheme = scheme if scheme is not None else check_scheme(o, languages)
    head_path = o.matching is not None or o.cmsc is not None
    svr = None
    if o.svr is not None:
        build = svr_builder(o.svr.builder) if o.svr.builder is not None else svr_from_config
        svr = build(o.svr, o.base, batch_size)
    return Objective(
        scheme, o.base,
        siglip_bias=o.siglip_bias if o.base == "siglip" else None,
        reweight=SimpleReweight() if o.reweight else None,
        head=head_from_config(o.matching) if head_path else None,
        cmsc=o.cmsc,
        svr=svr,
    )


def svr_from_config(s, base: str, batch_size: int, **classes: Any) -> SVRRegularizer:
    """SupCLAP's regularizer (§3, eq. 6 and 9) of an ``objective.svr`` section (``SVRConfig``) for the base loss
    ``base``; ``batch_size`` sizes the DynamicRadius predictor's input (§3.2). ``classes``: the
    ``dynamic_radius`` / ``regularizer`` classes of a research variant
    (:func:`~mlatr.losses.svr_regularizer.build_svr_regularizer`), the paper's by default."""
    return build_svr_regularizer(
        radius=s.radius, direction="bi" if s.bidirectional else "uni", base=base, batch_size=batch_size,
        alpha=s.alpha, beta=s.beta if s.constraint else 0.0, **classes,
    )


def svr_builder(path: str) -> Callable[..., SVRRegularizer]:
    """The builder an ``objective.svr.builder`` import path ``package.module:function`` names, called as
    :func:`svr_from_config` is: research code picks its variant of SVR by name, the losses keep the paper's."""
    module, _, name = path.partition(":")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:
        raise MlatrError(f"config: objective.svr.builder: cannot import {module!r} ({exc})") from None
    if not callable(found):
        raise MlatrError(f"config: objective.svr.builder: {module} has no function {name!r}")
    return found
