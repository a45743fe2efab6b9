"""Matching heads: one interface over global cosine, LGMM and the Table 2 pooling modes.

A head turns two sets of encoded items into a score matrix. Each side is an
:class:`~mlatr.models.outputs.EncoderOutput` (or any object with its attributes ``pooled [N, d]``,
``frames [N, L, d] | None`` and ``mask [N, L] | None``).

Direction convention (LGMM and two of the modes are asymmetric):

- audio-to-text ``[Na, Nt]`` = ``head.scores(audio, text)`` (query = audio: its frames are aggregated)
- text-to-audio ``[Nt, Na]`` = ``head.scores(text, audio)`` (query = text: its tokens are aggregated)

:func:`a2t_t2a_scores` returns both. Row ``r`` of a matrix always ranks the contexts for query ``r``.
For symmetric heads (cosine, max-max, mean-mean) ``t2a == a2t.T``.

A model's config picks its head by name: ``build_matching_head("lgmm", tau_w=0.25, lam=10.0)``;
``head.config()`` gives back ``{"name": ..., **options}`` and :func:`build_matching_head_from_config`
rebuilds it (e.g. from a checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

import torch

from mlatr.errors import MlatrError
from mlatr.matching.lgmm import check_frames, lgmm_local_scores, lgmm_scores
from mlatr.matching.pooling_modes import POOLING_MODES, mode_local_scores, mode_scores
from mlatr.models.outputs import EncoderOutput


class HasFeatures(Protocol):
    """What a head reads from each side."""

    pooled: torch.Tensor | None
    frames: torch.Tensor | None
    mask: torch.Tensor | None


def side_length(side: HasFeatures) -> int:
    """Number of items in ``side``."""
    t = side.frames if side.frames is not None else side.pooled
    if t is None:
        raise MlatrError("a matching side has neither pooled vectors nor frames")
    return int(t.shape[0])


def slice_side(side: HasFeatures, start: int, stop: int) -> EncoderOutput:
    """Items ``start:stop`` of ``side`` (views, no copy)."""
    return EncoderOutput(
        pooled=None if side.pooled is None else side.pooled[start:stop],
        frames=None if side.frames is None else side.frames[start:stop],
        mask=None if side.mask is None else side.mask[start:stop],
    )


class MatchingHead:
    """Base class. Subclasses set ``name``, ``needs_frames`` and implement :meth:`_scores`."""

    name: ClassVar[str] = ""
    needs_frames: ClassVar[bool] = True
    #: Number of live ``[Lq, Lc]`` float buffers per pair at the peak of one chunk (an upper bound used
    #: by :func:`mlatr.matching.chunked_scores` to size chunks).
    live_pair_buffers: ClassVar[int] = 6

    def options(self) -> dict[str, Any]:
        """The constructor options (JSON-able)."""
        return {}

    def config(self) -> dict[str, Any]:
        """``{"name": ..., **options}``, enough for :func:`build_matching_head_from_config` to rebuild it."""
        return {"name": self.name, **self.options()}

    def scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        """``[Nq, Nc]`` score of every query against every context (row = query)."""
        self._check(query, "query")
        self._check(context, "context")
        return self._scores(query, context)

    def __call__(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        return self.scores(query, context)

    def local_scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        """``[Nq, Nc, Lq]`` per-query-position similarities before the last pooling (Figure 2's
        word-to-clip similarities when the query is a caption). Only for frame-based heads."""
        raise MlatrError(f"matching head {self.name!r} has no per-position scores")

    def bytes_per_pair(self, query: HasFeatures, context: HasFeatures) -> int:
        """Upper bound on the working memory one (query, context) pair needs inside a chunk."""
        if not self.needs_frames:
            return 2 * _elem_size(query.pooled)
        lq, lc = query.frames.shape[1], context.frames.shape[1]
        return self.live_pair_buffers * lq * lc * _elem_size(query.frames) + 4 * lq * 8

    def bytes_per_item(self, side: HasFeatures) -> int:
        """Upper bound on the per-item working memory (copies of the inputs, Gram matrices)."""
        if not self.needs_frames:
            return 2 * side.pooled.shape[-1] * _elem_size(side.pooled)
        n, length, d = side.frames.shape
        return (3 * length * d + 2 * length * length + 2 * length) * _elem_size(side.frames)

    def _check(self, side: HasFeatures, which: str) -> None:
        if self.needs_frames:
            if side.frames is None:
                raise MlatrError(f"matching head {self.name!r} needs frame/token features for the {which}")
        elif side.pooled is None:
            raise MlatrError(f"matching head {self.name!r} needs pooled vectors for the {which}")

    def _scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"


def _elem_size(t: torch.Tensor) -> int:
    return torch.empty((), dtype=t.dtype).element_size()


class CosineHead(MatchingHead):
    """Global matching: cosine of the pooled vectors, ``S(a, b) = p_a . p_b / (|p_a| |p_b|)``
    (the single-vector CLAP baseline the paper compares against, Section 1 / Table 1)."""

    name = "cosine"
    needs_frames = False

    def _scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        q = torch.nn.functional.normalize(query.pooled, dim=-1, eps=1e-8)
        c = torch.nn.functional.normalize(context.pooled, dim=-1, eps=1e-8)
        return q @ c.T


class LGMMHead(MatchingHead):
    """Local-to-global multiscale matching (Section 2.1, eq. 1-5); see :func:`mlatr.matching.lgmm_scores`.

    ``scores(audio, text)`` is A2T ``S_g(A, T)`` (audio frames aggregated by the LogSumExp of eq. 5,
    caption tokens attended by the softmax of eq. 2); ``scores(text, audio)`` is T2A ``S_g(T, A)``.
    """

    name = "lgmm"

    def __init__(self, tau_w: float = 0.25, lam: float = 10.0):
        if tau_w <= 0 or lam <= 0:
            raise MlatrError(f"lgmm needs tau_w > 0 and lam > 0, got tau_w={tau_w}, lam={lam}")
        self.tau_w, self.lam = float(tau_w), float(lam)

    def options(self) -> dict[str, Any]:
        return {"tau_w": self.tau_w, "lam": self.lam}

    def _scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        return lgmm_scores(query.frames, query.mask, context.frames, context.mask, self.tau_w, self.lam)

    def local_scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        self._check(query, "query")
        self._check(context, "context")
        return lgmm_local_scores(query.frames, query.mask, context.frames, context.mask, self.tau_w)


class PoolingModeHead(MatchingHead):
    """A Table 2 baseline mode (Section 3.3): ``max-mean``, ``max-max``, ``mean-mean`` or ``mean-max``
    over cosine similarities of local features; see :mod:`mlatr.matching.pooling_modes`."""

    live_pair_buffers = 3

    def __init__(self, mode: str):
        if mode not in POOLING_MODES:
            raise MlatrError(f"unknown matching mode {mode!r}; known: {', '.join(POOLING_MODES)}")
        self.mode = mode

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.mode

    def _scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        return mode_scores(query.frames, query.mask, context.frames, context.mask, self.mode)

    def local_scores(self, query: HasFeatures, context: HasFeatures) -> torch.Tensor:
        self._check(query, "query")
        self._check(context, "context")
        return mode_local_scores(query.frames, query.mask, context.frames, context.mask, self.mode)


def _mode_factory(mode: str):
    def build(**options: Any) -> PoolingModeHead:
        if options:
            raise MlatrError(f"matching head {mode!r} takes no options, got {sorted(options)}")
        return PoolingModeHead(mode)
    return build


#: Registry: explicit name -> factory(**options).
MATCHING_HEADS: dict[str, Any] = {
    "cosine": CosineHead,
    "lgmm": LGMMHead,
    **{mode: _mode_factory(mode) for mode in POOLING_MODES},
}


def build_matching_head(name: str, **options: Any) -> MatchingHead:
    """Build the head registered under ``name`` (``cosine``, ``lgmm``, ``max-mean``, ``max-max``,
    ``mean-mean``, ``mean-max``) with its options, e.g. ``build_matching_head("lgmm", tau_w=0.25)``."""
    if name not in MATCHING_HEADS:
        raise MlatrError(f"unknown matching head {name!r}; known: {', '.join(MATCHING_HEADS)}")
    try:
        return MATCHING_HEADS[name](**options)
    except TypeError as exc:
        raise MlatrError(f"bad options for matching head {name!r}: {exc}") from exc


def build_matching_head_from_config(config: dict[str, Any]) -> MatchingHead:
    """Inverse of :meth:`MatchingHead.config` (:func:`head_from_config`, which also reads training sections)."""
    if "name" not in config:
        raise MlatrError("matching head config has no 'name'")
    return head_from_config(config)


def head_from_config(matching: Any) -> MatchingHead:
    """The one place a head is read from a config: a stored head (``{"name": ..., **options}``, as
    :meth:`MatchingHead.config` writes it), an ``objective.matching`` section (a mapping or an object with
    attributes; ``name`` defaults to ``lgmm``, whose ``tau_w`` / ``lam`` are taken when set: paper 0.25 and 10,
    sec. 3.2), or ``None`` = pooled cosine."""
    if matching is None:
        return build_matching_head("cosine")
    get = matching.get if isinstance(matching, Mapping) else lambda key, default=None: getattr(matching, key, default)
    name = get("name", "lgmm")
    if name != "lgmm":  # the other heads take no option (a section's LGMM defaults are ignored)
        return build_matching_head(name)
    return build_matching_head("lgmm", **{k: get(k) for k in ("tau_w", "lam") if get(k) is not None})


def a2t_t2a_scores(head: MatchingHead, audio: HasFeatures,
                   text: HasFeatures) -> tuple[torch.Tensor, torch.Tensor]:
    """Both directions: ``(a2t [Na, Nt], t2a [Nt, Na])`` with audio resp. text as the query."""
    return head.scores(audio, text), head.scores(text, audio)


__all__ = [
    "CosineHead", "HasFeatures", "LGMMHead", "MATCHING_HEADS", "MatchingHead", "PoolingModeHead",
    "a2t_t2a_scores", "build_matching_head", "build_matching_head_from_config", "check_frames", "head_from_config",
    "side_length",
    "slice_side",
]
