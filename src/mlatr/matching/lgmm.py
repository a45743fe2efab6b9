"""Local-to-global multiscale matching (LGMM), batched over all query x context pairs.

Paper: "Fine-grained audio-text retrieval: local-to-global multiscale matching and cross-modal
similarity consistency", Section 2.1, eq. 1-5.

The *query* is the side whose positions ``i`` are aggregated by the final LogSumExp; the *context* is
the side that is attended over (softmax over ``j``). The paper's worked example is A2T: query = audio
frames, context = caption tokens. LGMM is asymmetric, so:

- audio-to-text scores ``[Na, Nt]`` = ``lgmm_scores(audio_frames, audio_mask, text_tokens, text_mask)``
- text-to-audio scores ``[Nt, Na]`` = ``lgmm_scores(text_tokens, text_mask, audio_frames, audio_mask)``

and in general ``t2a != a2t.T``.

Implementation note: the text-aware vector ``v_i = sum_j w_ij c_j`` (eq. 3) is never built (it would
be ``[Nq, Nc, Lq, d]``). Its two uses in eq. 4 are rewritten exactly through the local similarity
matrix and the context's Gram matrix ``G = C C^T``:
``q_i . v_i = sum_j w_ij s_ij`` and ``|v_i|^2 = sum_jk w_ij G_jk w_ik``. This costs
``Lq*Lc*Lc`` instead of ``Lq*Lc*d`` per pair and keeps the per-pair working set at ``O(Lq*Lc)``.
"""

from __future__ import annotations

import torch

from mlatr.errors import MlatrError

#: Floor under norms, so that zero vectors (e.g. padding) give finite values and finite gradients.
NORM_EPS = 1e-8


def sq_floor(dtype: torch.dtype) -> float:
    """Floor for squared norms: ``NORM_EPS**2``, raised to the smallest normal number of ``dtype`` so that
    half precision (where 1e-16 underflows to 0) still gives finite values and gradients."""
    return max(NORM_EPS**2, torch.finfo(dtype).tiny)


def check_frames(frames: torch.Tensor, mask: torch.Tensor | None, side: str) -> torch.Tensor:
    """Validate ``frames [N, L, d]`` and ``mask [N, L]`` (True = valid); return the bool mask.

    ``mask=None`` means every position is valid. Each row must have at least one valid position.
    """
    if frames.dim() != 3:
        raise MlatrError(f"{side} frames must be [N, L, d], got shape {tuple(frames.shape)}")
    if mask is None:
        return torch.ones(frames.shape[:2], dtype=torch.bool, device=frames.device)
    if tuple(mask.shape) != tuple(frames.shape[:2]):
        raise MlatrError(f"{side} mask must be [N, L] = {tuple(frames.shape[:2])}, got {tuple(mask.shape)}")
    mask = mask.to(device=frames.device, dtype=torch.bool)
    if frames.shape[0] and not bool(mask.any(dim=1).all()):
        bad = int((~mask.any(dim=1)).nonzero()[0, 0])
        raise MlatrError(f"{side} row {bad} has no valid position in its mask")
    return mask


def zero_padding(frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Return ``frames`` with padded positions set to 0, so that their contents (huge, inf, NaN) never
    reach any arithmetic."""
    return frames.masked_fill(~mask.unsqueeze(-1), 0.0)


def lgmm_local_scores(query: torch.Tensor, query_mask: torch.Tensor | None, context: torch.Tensor,
                      context_mask: torch.Tensor | None, tau_w: float = 0.25) -> torch.Tensor:
    """Local-global similarities ``S(q_i, v_i)`` of eq. 4 for every pair: ``[Nq, Nc, Lq]``.

    For query ``a`` (positions ``i``) and context ``b`` (positions ``j``), valid positions only:

    - eq. 1: ``s_ij = q_i . c_j``
    - eq. 2: ``sbar_ij = s_ij / sqrt(sum_i s_ij^2)`` (sum over the query's valid positions ``i``),
      ``w_ij = softmax_j(sbar_ij / tau_w)`` over the context's valid positions ``j``
    - eq. 3: ``v_i = sum_j w_ij c_j`` (text-aware frame vector for A2T)
    - eq. 4: ``S_i = cos(q_i, v_i)``

    Entries at padded query positions ``i`` are meaningless (finite) and must be ignored; use
    ``query_mask``. This is the word-to-clip (T2A) or frame-to-caption (A2T) similarity of the paper's
    Figure 2. Norms are floored at ``NORM_EPS`` (see :func:`sq_floor`).
    """
    qm = check_frames(query, query_mask, "query")
    cm = check_frames(context, context_mask, "context")
    if query.shape[-1] != context.shape[-1]:
        raise MlatrError(f"query dim {query.shape[-1]} != context dim {context.shape[-1]}")
    q = zero_padding(query, qm)
    c = zero_padding(context, cm)
    return _local_scores(q, c, cm, tau_w)


def _local_scores(q: torch.Tensor, c: torch.Tensor, cm: torch.Tensor, tau_w: float) -> torch.Tensor:
    """Core of eq. 1-4 on zero-padded ``q [a, Lq, d]``, ``c [b, Lc, d]``; returns ``[a, b, Lq]``."""
    s = torch.einsum("aid,bjd->abij", q, c)                       # eq. 1, [a, b, Lq, Lc]
    col_sq = s.pow(2).sum(dim=2, keepdim=True)                      # padded i rows of s are 0
    scale = col_sq.clamp_min(sq_floor(s.dtype)).rsqrt() / tau_w          # [a, b, 1, Lc], small
    logits = s * scale                                              # eq. 2, sbar / tau_w
    logits = logits.masked_fill(~cm[None, :, None, :], float("-inf"))
    w = torch.softmax(logits, dim=-1)                               # eq. 2, padded j get weight 0
    del logits
    q_dot_v = (w * s).sum(dim=-1)                                   # q_i . v_i, [a, b, Lq]
    del s
    gram = c @ c.transpose(1, 2)                                    # [b, Lc, Lc]
    v_sq = (torch.matmul(w, gram.unsqueeze(0)) * w).sum(dim=-1)     # |v_i|^2, [a, b, Lq]
    v_norm = v_sq.clamp_min(sq_floor(v_sq.dtype)).sqrt()
    q_norm = q.pow(2).sum(dim=-1).clamp_min(sq_floor(q.dtype)).sqrt()     # [a, Lq]
    return q_dot_v / (q_norm.unsqueeze(1) * v_norm)                 # eq. 4


def lse_pool(local: torch.Tensor, query_mask: torch.Tensor, lam: float = 10.0) -> torch.Tensor:
    """Eq. 5: ``S_g = (1/lam) * log(sum_{valid i} exp(lam * S_i))`` over the last axis of
    ``local [..., Nc, Lq]`` with ``query_mask [Nq, Lq]``; returns ``[Nq, Nc]``."""
    masked = (lam * local).masked_fill(~query_mask[:, None, :], float("-inf"))
    return torch.logsumexp(masked, dim=-1) / lam


def lgmm_scores(query: torch.Tensor, query_mask: torch.Tensor | None, context: torch.Tensor,
                context_mask: torch.Tensor | None, tau_w: float = 0.25, lam: float = 10.0) -> torch.Tensor:
    """LGMM global similarity ``S_g`` (Section 2.1, eq. 1-5) of every query against every context.

    Args:
        query: ``[Nq, Lq, d]`` local features of the query side (audio frames for A2T, tokens for T2A).
        query_mask: ``[Nq, Lq]`` bool, True = valid, or None (all valid).
        context: ``[Nc, Lc, d]`` local features of the context side.
        context_mask: ``[Nc, Lc]`` bool, or None.
        tau_w: softmax temperature of eq. 2 (paper: 0.25).
        lam: inverse temperature of the LogSumExp pooling of eq. 5 (paper: 10).

    Returns:
        ``[Nq, Nc]`` scores; row ``a`` column ``b`` is ``S_g(query_a, context_b)``. Padded positions
        never contribute, whatever they hold. Materialises ``O(Nq*Nc*Lq*Lc)`` floats: for large sets
        use :func:`mlatr.matching.chunked_scores`.
    """
    qm = check_frames(query, query_mask, "query")
    local = lgmm_local_scores(query, qm, context, context_mask, tau_w)
    return lse_pool(local, qm, lam)
