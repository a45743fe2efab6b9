"""Baseline fine-grained matching modes of Table 2: max-mean, max-max, mean-mean, mean-max.

Paper: "Fine-grained audio-text retrieval: local-to-global multiscale matching and cross-modal
similarity consistency", Section 3.3 ("Comparison with Other Fine-grained Matching Modes", Table 2)
and Section 3.4 (Figure 2(b)). The paper names the modes without formulas; the definitions here are:

For query ``a`` with valid positions ``i`` and context ``b`` with valid positions ``j``, let
``c_ij = cos(q_i, c_j)`` (cosine of local features; norms floored at 1e-8). A mode ``"X-Y"`` is

    score(a, b) = Y_i [ X_j c_ij ]

i.e. ``X`` first aggregates over the *context* positions for each query position (the word-to-clip
similarity of Figure 2 for T2A), then ``Y`` aggregates over the *query* positions. ``max`` and
``mean`` are taken over valid positions only:

- ``max-mean``:  mean_i max_j c_ij   ("selects the most salient frame and averages over all words")
- ``max-max``:   max_i  max_j c_ij
- ``mean-mean``: mean_i mean_j c_ij
- ``mean-max``:  max_i  mean_j c_ij

As with LGMM, the query is audio for A2T (``[Na, Nt]``) and text for T2A (``[Nt, Na]``); ``max-max``
and ``mean-mean`` are symmetric (``t2a == a2t.T``), the other two are not.
"""

from __future__ import annotations

import torch

from mlatr.errors import MlatrError
from mlatr.matching.lgmm import check_frames, sq_floor, zero_padding

#: The Table 2 modes, as (aggregation over context positions j, aggregation over query positions i).
POOLING_MODES: dict[str, tuple[str, str]] = {
    "max-mean": ("max", "mean"),
    "max-max": ("max", "max"),
    "mean-mean": ("mean", "mean"),
    "mean-max": ("mean", "max"),
}


def _masked_reduce(x: torch.Tensor, mask: torch.Tensor, how: str, dim: int) -> torch.Tensor:
    """Reduce ``x`` over ``dim`` using only positions where ``mask`` (broadcastable) is True."""
    if how == "max":
        return x.masked_fill(~mask, float("-inf")).amax(dim=dim)
    mask_f = mask.to(x.dtype)
    return (x * mask_f).sum(dim=dim) / mask_f.sum(dim=dim)


def _mode_local(q: torch.Tensor, c: torch.Tensor, cm: torch.Tensor, over_context: str) -> torch.Tensor:
    """``X_j c_ij`` on zero-padded inputs: ``[a, b, Lq]``."""
    qn = q / q.pow(2).sum(-1, keepdim=True).clamp_min(sq_floor(q.dtype)).sqrt()
    cn = c / c.pow(2).sum(-1, keepdim=True).clamp_min(sq_floor(c.dtype)).sqrt()
    cos = torch.einsum("aid,bjd->abij", qn, cn)                     # [a, b, Lq, Lc]
    return _masked_reduce(cos, cm[None, :, None, :], over_context, dim=-1)


def mode_local_scores(query: torch.Tensor, query_mask: torch.Tensor | None, context: torch.Tensor,
                      context_mask: torch.Tensor | None, mode: str = "max-mean") -> torch.Tensor:
    """First stage of a Table 2 mode: ``X_j cos(q_i, c_j)`` for every pair, ``[Nq, Nc, Lq]``.

    For ``max-*`` modes this is the word-to-clip similarity of Figure 2(b) when the query is text.
    Entries at padded query positions are meaningless and must be ignored.
    """
    over_context, _ = _mode(mode)
    qm = check_frames(query, query_mask, "query")
    cm = check_frames(context, context_mask, "context")
    return _mode_local(zero_padding(query, qm), zero_padding(context, cm), cm, over_context)


def mode_scores(query: torch.Tensor, query_mask: torch.Tensor | None, context: torch.Tensor,
                context_mask: torch.Tensor | None, mode: str = "max-mean") -> torch.Tensor:
    """Score every query against every context with a Table 2 mode (see the module docstring).

    Args:
        query: ``[Nq, Lq, d]``; query_mask: ``[Nq, Lq]`` bool or None.
        context: ``[Nc, Lc, d]``; context_mask: ``[Nc, Lc]`` bool or None.
        mode: one of ``max-mean``, ``max-max``, ``mean-mean``, ``mean-max``.

    Returns:
        ``[Nq, Nc]`` scores in ``[-1, 1]``.
    """
    qm = check_frames(query, query_mask, "query")
    _, over_query = _mode(mode)
    local = mode_local_scores(query, qm, context, context_mask, mode)
    return _masked_reduce(local, qm[:, None, :], over_query, dim=-1)


def _mode(mode: str) -> tuple[str, str]:
    if mode not in POOLING_MODES:
        raise MlatrError(f"unknown matching mode {mode!r}; known: {', '.join(POOLING_MODES)}")
    return POOLING_MODES[mode]
