"""SupCLAP's training diagnostics: trajectory drift (Figure 1) and positive-pair similarity (Figure 4).

- :func:`drift_cosines` (pure): for each text, the cosine between its update ``Δt = t_after − t_before``
  and the pulling direction ``a⁺ − t⁺`` (SupCLAP §2 / Figure 1: "drift is measured by the cosine
  similarity between the update vector and the pulling force vector; higher = less drift"), and the
  share of the update perpendicular to the pull, ``||Δt_⊥|| / ||Δt||`` (the component SVR suppresses,
  §3.1, eq. 8).
- :class:`DriftMonitor`: a :class:`~mlatr.training.trainer.Trainer` callback that measures it on every
  optimizer step and adds ``drift_cos`` and ``drift_perp`` (batch means) to the step's log line.
- :func:`positive_similarities` (pure): ``cos(t_i, a_{text_audio[i]})`` of every caption of an encoded
  split (Figure 4's distribution).

The semantic radius of Figure 3 needs no callback: the SVR objective logs ``svr_radius`` (the static
value, or the dynamic model's batch mean) in every step line.

Enable from a config with ``train.diagnostics: [drift]`` (or ``train.diagnostics=[drift]`` on the
command line); :func:`diagnostic_callbacks` maps the names to callbacks.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import Tensor

from mlatr.errors import MlatrError
from mlatr.evaluation.inputs import unit_rows


def drift_cosines(t_before: Tensor, t_after: Tensor, a_pos: Tensor, eps: float = 1e-12) -> tuple[Tensor, Tensor]:
    """Per-text drift of one optimizer step (SupCLAP Figure 1).

    Args:
        t_before, t_after: ``[T, d]`` text embeddings before and after the step (same texts, same mode).
        a_pos: ``[T, d]`` the positive clip's embedding of each text (the step's ``a⁺``).

    Returns:
        ``(cos [T], perp [T])``: ``cos = <Δt, p> / (||Δt|| ||p||)`` with ``Δt = t_after − t_before`` and
        ``p = a⁺ − t_before``; ``perp = ||Δt − (<Δt, p̂>) p̂|| / ||Δt||`` (= ``sqrt(1 − cos²)``), the share
        of the update perpendicular to the pull. Rows whose update or pull is zero give ``cos = 0``,
        ``perp = 0``.
    """
    if t_before.shape != t_after.shape or t_before.shape != a_pos.shape or t_before.dim() != 2:
        raise MlatrError(f"drift_cosines: expected three [T, d] tensors, got {tuple(t_before.shape)}, "
                         f"{tuple(t_after.shape)}, {tuple(a_pos.shape)}")
    delta = t_after - t_before
    pull = a_pos - t_before
    dn = delta.norm(dim=1)
    pn = pull.norm(dim=1)
    ok = (dn > eps) & (pn > eps)
    cos = torch.where(ok, (delta * pull).sum(1) / (dn * pn).clamp_min(eps), torch.zeros_like(dn))
    along = ((delta * pull).sum(1) / pn.clamp_min(eps) ** 2).unsqueeze(1) * pull
    perp = torch.where(ok, (delta - along).norm(dim=1) / dn.clamp_min(eps), torch.zeros_like(dn))
    return cos, perp


def text_owner(index: Tensor, n_texts: int) -> Tensor:
    """``[T]`` clip row of each flat text from a selection's ``index [N, S]`` (``-1`` = empty slot)."""
    owner = torch.full((n_texts,), -1, dtype=torch.long)
    rows = torch.arange(index.shape[0]).unsqueeze(1).expand_as(index)
    mask = index >= 0
    owner[index[mask]] = rows[mask]
    return owner


class DriftMonitor:
    """Trainer callback: trajectory drift of the text embeddings at every optimizer step (Figure 1).

    At step ``k`` the step's texts are encoded twice in eval mode (no dropout, no gradient): with a
    shadow copy of the text tower holding the weights *before* the step (kept from step ``k − 1``) and
    with the updated model. ``a⁺`` is the clip embedding the step's loss saw (``info["audio_emb"]``).
    Eval mode makes ``Δt`` the effect of the weight update alone (the training forward had dropout).
    The first step after start or resume has no "before" weights and is not measured.
    Logs ``drift_cos`` (mean cosine, higher = less drift) and ``drift_perp`` (mean perpendicular share).
    """

    def __init__(self) -> None:
        self._shadow: Any = None

    @torch.no_grad()
    def __call__(self, trainer, info: dict[str, Any]) -> None:
        model = trainer.model
        selection = info["selection"]
        if self._shadow is not None:
            was_training = model.training
            model.eval()
            self._shadow.eval()
            try:
                before = self._shadow.encode_text(selection.texts, selection.langs).pooled.float()
                after = model.encode_text(selection.texts, selection.langs).pooled.float()
            finally:
                model.train(was_training)
            owner = text_owner(selection.index, len(selection.texts)).to(before.device)
            keep = owner >= 0
            a_pos = info["audio_emb"].float().to(before.device)[owner[keep]]
            cos, perp = drift_cosines(before[keep], after[keep], a_pos)
            trainer.extra_logs["drift_cos"] = float(cos.mean())
            trainer.extra_logs["drift_perp"] = float(perp.mean())
        self._sync(model)

    def _sync(self, model) -> None:
        """Copy the current text tower (encoder + projection) into the shadow."""
        if self._shadow is None:
            self._shadow = copy.deepcopy(model)
        else:
            self._shadow.text_encoder.load_state_dict(model.text_encoder.state_dict())
            self._shadow.text_projection.load_state_dict(model.text_projection.state_dict())


#: Diagnostics by name (``train.diagnostics`` in the config).
DIAGNOSTICS = {"drift": DriftMonitor}


def diagnostic_callbacks(names: list[str]) -> list:
    """Fresh callbacks for the diagnostic names of ``train.diagnostics``."""
    unknown = [n for n in names if n not in DIAGNOSTICS]
    if unknown:
        raise MlatrError(f"config: train.diagnostics: unknown {unknown} (known: {', '.join(DIAGNOSTICS)})")
    return [DIAGNOSTICS[n]() for n in names]


def positive_similarities(audio: np.ndarray, text: np.ndarray, text_audio: np.ndarray) -> np.ndarray:
    """``[Nt]`` cosine of every caption with its own clip (SupCLAP Figure 4), from an encoded split.

    Inputs are the evaluation contract's arrays (:meth:`mlatr.inference.encoded_split.EncodedSplit.arrays`): ``audio
    [Na, D]``, ``text [Nt, D]`` (normalised here) and ``text_audio [Nt]``.
    """
    audio = np.asarray(audio, dtype=np.float64)
    text = np.asarray(text, dtype=np.float64)
    text_audio = np.asarray(text_audio, dtype=np.int64)
    if text.ndim != 2 or audio.ndim != 2 or text.shape[1] != audio.shape[1] or text_audio.shape != (len(text),):
        raise MlatrError(f"positive_similarities: shapes audio {audio.shape}, text {text.shape}, "
                         f"text_audio {text_audio.shape} do not fit")
    a, t = unit_rows(audio), unit_rows(text)
    return np.einsum("ij,ij->i", t, a[text_audio])
