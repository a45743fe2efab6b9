"""Evaluate embeddings, or any caption x clip score matrix, with the retrieval and consistency metrics.

Both entry points share one ranking core (:func:`mlatr.evaluation.retrieval.rank_captions_and_clips`)
and return the dict of the evaluation contract::

    {"t2a": {lang: {R1, R5, R10, mAP10, medR, meanR}, ..., "avg": {...}},
     "a2t": {same},
     "consistency": {"gap": {lang: float}, "dis": {lang: float}, "mrv": float,
                     "gap_avg": float, "dis_avg": float, "n_groups": int},
     "counts": {lang: {"captions": int, "clips": int}}, "pivot": str}

R@k and mAP@10 are percentages, medR and meanR 1-based; ``gap``/``dis`` have one entry per non-pivot
language (ATRI Table 2); ``n_groups`` is the number of caption groups present in every language, the
set the consistency metrics use. Metric definitions: :mod:`mlatr.evaluation.retrieval` and
:mod:`mlatr.evaluation.consistency`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mlatr.errors import MlatrError
from mlatr.evaluation.consistency import complete_groups, embedding_gap_and_distance, mean_rank_variance
from mlatr.evaluation.inputs import (
    CaptionTable,
    check_caption_table,
    check_embeddings,
    float_dtype,
    to_numpy,
    unit_rows,
)
from mlatr.evaluation.retrieval import Ranks, plan_blocks, rank_captions_and_clips, retrieval_metrics

DEFAULT_MEMORY_BUDGET_MB = 512.0


@dataclass
class Evaluation:
    """Metrics plus what produced them: the checked caption table and every caption's ranks."""

    metrics: dict
    table: CaptionTable
    ranks: Ranks


def rowwise_dot(text: np.ndarray, audio: np.ndarray, text_audio: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """``[Nt]``: ``text[i] . audio[text_audio[i]]``, gathered ``chunk`` rows at a time."""
    out = np.empty(text.shape[0], dtype=text.dtype)
    for r0 in range(0, text.shape[0], chunk):
        r1 = min(text.shape[0], r0 + chunk)
        out[r0:r1] = np.einsum("ij,ij->i", text[r0:r1], audio[text_audio[r0:r1]])
    return out


def _budget_bytes(memory_budget_mb: float) -> int:
    if not memory_budget_mb > 0:
        raise MlatrError(f"memory_budget_mb: must be positive, got {memory_budget_mb}")
    return int(memory_budget_mb * 2**20)


def _assemble(ranks: Ranks, table: CaptionTable, text_unit: np.ndarray | None) -> dict:
    out: dict[str, Any] = retrieval_metrics(ranks, table)
    groups = complete_groups(table)
    if text_unit is not None:
        gap, dis = embedding_gap_and_distance(text_unit, groups, table.languages, table.pivot)
    else:
        nan = float("nan")
        gap = {lang: nan for lang in table.languages if lang != table.pivot}
        dis = dict(gap)
    out["consistency"] = {
        "gap": gap,
        "dis": dis,
        "mrv": mean_rank_variance(ranks.t2a, groups),
        "gap_avg": float(np.mean(list(gap.values()))) if gap else float("nan"),
        "dis_avg": float(np.mean(list(dis.values()))) if dis else float("nan"),
        "n_groups": int(groups.shape[0]),
    }
    out["counts"] = {
        lang: {
            "captions": int(np.count_nonzero(table.lang_idx == k)),
            "clips": int(np.unique(table.text_audio[table.lang_idx == k]).size),
        }
        for k, lang in enumerate(table.languages)
    }
    out["pivot"] = table.pivot
    return out


def evaluate_embeddings_with_ranks(
    audio: Any, text: Any, text_audio: Any, text_lang: Any, text_group: Any, pivot: str = "eng",
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB, progress: bool = False,
) -> Evaluation:
    """:func:`evaluate_embeddings`, also returning the caption table and per-caption ranks."""
    a = check_embeddings("audio", audio)
    t = check_embeddings("text", text)
    if a.shape[1] != t.shape[1]:
        raise MlatrError(
            f"audio and text: embedding sizes differ (audio D={a.shape[1]}, text D={t.shape[1]})"
        )
    table = check_caption_table(a.shape[0], text_audio, text_lang, text_group, t.shape[0], pivot)
    dtype = float_dtype(a, t)
    a_unit, t_unit = unit_rows(a, dtype), unit_rows(t, dtype)
    # Target scores by a row-wise dot product; written into each block so that every comparison sees
    # the same value for a caption-clip pair (a matmul may round an entry differently).
    own = rowwise_dot(t_unit, a_unit, table.text_audio)
    budget = _budget_bytes(memory_budget_mb)
    bytes_per_cell = 2 * dtype.itemsize + 1  # scores, a reused output buffer, the comparison mask
    rows, cols = plan_blocks(table.n_text, table.n_audio, bytes_per_cell, budget)
    out_flat = np.empty(rows * cols, dtype=dtype)

    def block(rows: np.ndarray, cols: slice) -> np.ndarray:
        s = out_flat[: rows.size * (cols.stop - cols.start)].reshape(rows.size, cols.stop - cols.start)
        np.matmul(t_unit[rows], a_unit[cols].T, out=s)
        clip = table.text_audio[rows]
        inside = (clip >= cols.start) & (clip < cols.stop)
        s[np.nonzero(inside)[0], clip[inside] - cols.start] = own[rows[inside]]
        return s

    ranks = rank_captions_and_clips(block, own, table, bytes_per_cell, budget, progress=progress)
    return Evaluation(_assemble(ranks, table, t_unit), table, ranks)


def evaluate_embeddings(
    audio: Any, text: Any, text_audio: Any, text_lang: Any, text_group: Any, pivot: str = "eng",
    memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB, progress: bool = False,
) -> dict:
    """Retrieval (t2a, a2t) and consistency metrics of a multilingual embedding space.

    ``audio [Na, D]`` and ``text [Nt, D]`` (numpy or torch; compared by cosine similarity, normalised
    here; float64 inputs are evaluated in float64, others in float32), ``text_audio [Nt]`` clip index
    of each caption, ``text_lang [Nt]`` language codes, ``text_group [Nt]`` ids shared by translations.
    ``pivot`` is the reference language of the consistency metrics (ATRI eq. 14-15). The score matrix
    is never held whole: blocks stay under ``memory_budget_mb``. Returns the dict described in the
    module docstring. Metric definitions: ATRI §5.4, SupCLAP §4.1.1 (DCASE / ML-CLAP conventions);
    ties count optimistically (rank = 1 + number of strictly greater scores).
    """
    return evaluate_embeddings_with_ranks(
        audio, text, text_audio, text_lang, text_group, pivot, memory_budget_mb, progress
    ).metrics


ScoreRows = Callable[[np.ndarray], Any]


def evaluate_scores_with_ranks(
    scores: Any, text_audio: Any, text_lang: Any, text_group: Any, text: Any = None, pivot: str = "eng",
    n_audio: int | None = None, memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB, progress: bool = False,
    a2t_scores: Any = None,
) -> Evaluation:
    """:func:`evaluate_scores`, also returning the caption table and per-caption ranks."""
    if callable(scores):
        if n_audio is None:
            raise MlatrError("evaluate_scores: a score callable needs n_audio (the number of clips)")
        n_text = to_numpy(text_audio).shape[0]
        rows_fn = _checked_rows(scores, int(n_audio))
    else:
        s = to_numpy(scores)
        if s.ndim != 2:
            raise MlatrError(f"scores: expected a 2-D array [Nt, Na], got shape {tuple(s.shape)}")
        if n_audio is not None and n_audio != s.shape[1]:
            raise MlatrError(f"scores: has {s.shape[1]} columns but n_audio={n_audio}")
        n_text, n_audio = s.shape
        if not np.issubdtype(s.dtype, np.number):
            raise MlatrError(f"scores: expected numbers, got dtype {s.dtype}")
        bad = ~np.isfinite(s)
        if bad.any():
            raise MlatrError(f"scores: contains NaN or inf (first at row {int(np.argwhere(bad)[0][0])})")
        rows_fn = None
    table = check_caption_table(int(n_audio), text_audio, text_lang, text_group, n_text, pivot)
    t_unit = None
    if text is not None:
        t = check_embeddings("text", text)
        if t.shape[0] != n_text:
            raise MlatrError(f"text: has {t.shape[0]} rows but scores have {n_text} (captions)")
        t_unit = unit_rows(t, float_dtype(t))
    budget = _budget_bytes(memory_budget_mb)
    if rows_fn is not None:
        s = _materialise_if_small(rows_fn, n_text, int(n_audio), budget)
    if s is not None:
        s = s if s.dtype in (np.float32, np.float64) else s.astype(np.float64)
        own = s[np.arange(n_text), table.text_audio]
        ranks = rank_captions_and_clips(
            lambda rows, cols: s[rows, cols], own, table, s.dtype.itemsize + 2, budget, progress=progress
        )
    else:
        # Two passes over the callable: the target scores first, then the ranking.
        own = _own_scores(rows_fn, table, budget)
        ranks = rank_captions_and_clips(
            lambda rows, cols: rows_fn(rows), own, table, own.dtype.itemsize + 2, budget,
            split_cols=False, progress=progress,
        )
    if a2t_scores is not None:
        ranks = Ranks(t2a=ranks.t2a, a2t=_a2t_ranks(a2t_scores, table, budget, progress))
    return Evaluation(_assemble(ranks, table, t_unit), table, ranks)


def _a2t_ranks(a2t_scores: Any, table: CaptionTable, budget: int, progress: bool) -> np.ndarray:
    """a2t ranks of every caption from a separate clip x caption matrix ``[Na, Nt]`` (or a callable
    ``a2t(clip_rows) -> [len(clip_rows), Nt]``): the same ranking core, fed the transposed matrix, so
    the a2t rank of caption ``i`` is ``1 + #{captions k of its language: a2t[j, k] > a2t[j, i]}`` with
    ``j`` its clip."""
    n_audio, n_text = table.n_audio, table.n_text
    if callable(a2t_scores):
        fn = a2t_scores

        def clip_rows(rows: np.ndarray) -> np.ndarray:
            s = to_numpy(fn(rows))
            if s.shape != (rows.size, n_text):
                raise MlatrError(f"a2t_scores: the callable returned shape {tuple(s.shape)} for "
                                 f"{rows.size} clips; expected ({rows.size}, {n_text})")
            return s

        if n_audio * n_text * 8 * 2 <= budget:
            a = clip_rows(np.arange(n_audio))
        else:
            a = None
    else:
        a = to_numpy(a2t_scores)
        if a.shape != (n_audio, n_text):
            raise MlatrError(f"a2t_scores: expected shape [Na, Nt] = ({n_audio}, {n_text}), "
                             f"got {tuple(a.shape)}")
    if a is not None:
        if not np.issubdtype(a.dtype, np.number):
            raise MlatrError(f"a2t_scores: expected numbers, got dtype {a.dtype}")
        a = a if a.dtype in (np.float32, np.float64) else a.astype(np.float64)
        bad = ~np.isfinite(a)
        if bad.any():
            raise MlatrError(f"a2t_scores: contains NaN or inf (first at clip row {int(np.argwhere(bad)[0][0])})")
        own = a[table.text_audio, np.arange(n_text)]

        def block(rows: np.ndarray, cols: slice) -> np.ndarray:
            return a[cols, rows].T
        itemsize = a.dtype.itemsize
    else:
        parts = []
        step = max(1, budget // (n_text * 16))
        for c0 in range(0, n_audio, step):
            clips = np.arange(c0, min(n_audio, c0 + step))
            s = clip_rows(clips)
            if not np.all(np.isfinite(s)):
                raise MlatrError(f"a2t_scores: the callable returned NaN or inf for clip rows from {c0}")
            caps = np.nonzero((table.text_audio >= c0) & (table.text_audio < clips[-1] + 1))[0]
            parts.append((caps, s[table.text_audio[caps] - c0, caps]))
        own = np.empty(n_text, dtype=parts[0][1].dtype if parts else np.float64)
        for caps, vals in parts:
            own[caps] = vals

        def block(rows: np.ndarray, cols: slice) -> np.ndarray:
            return to_numpy(clip_rows(np.arange(cols.start, cols.stop)))[:, rows].T.astype(own.dtype, copy=False)
        itemsize = own.dtype.itemsize
    return rank_captions_and_clips(block, own, table, itemsize + 2, budget, progress=progress).a2t


def _checked_rows(fn: ScoreRows, n_audio: int) -> Callable[[np.ndarray], np.ndarray]:
    def rows_fn(rows: np.ndarray) -> np.ndarray:
        s = to_numpy(fn(rows))
        if s.shape != (rows.size, n_audio):
            raise MlatrError(
                f"scores: the callable returned shape {tuple(s.shape)} for {rows.size} rows; "
                f"expected ({rows.size}, {n_audio})"
            )
        if not np.all(np.isfinite(s)):
            raise MlatrError(f"scores: the callable returned NaN or inf for caption rows from {int(rows[0])}")
        return s if s.dtype in (np.float32, np.float64) else s.astype(np.float64)

    return rows_fn


def _materialise_if_small(rows_fn, n_text: int, n_audio: int, budget: int) -> np.ndarray | None:
    if n_text * n_audio * 8 * 2 > budget:
        return None
    return rows_fn(np.arange(n_text))


def _own_scores(rows_fn, table: CaptionTable, budget: int) -> np.ndarray:
    step = max(1, budget // (table.n_audio * 10))
    parts = []
    for r0 in range(0, table.n_text, step):
        rows = np.arange(r0, min(table.n_text, r0 + step))
        parts.append(rows_fn(rows)[np.arange(rows.size), table.text_audio[rows]])
    return np.concatenate(parts)


def evaluate_scores(
    scores: Any, text_audio: Any, text_lang: Any, text_group: Any, text: Any = None, pivot: str = "eng",
    n_audio: int | None = None, memory_budget_mb: float = DEFAULT_MEMORY_BUDGET_MB, progress: bool = False,
    a2t_scores: Any = None,
) -> dict:
    """The metrics of :func:`evaluate_embeddings` from a given score matrix (e.g. an LGMM head's).

    ``scores``: ``[Nt, Na]`` array/tensor (higher = more similar), or a callable
    ``scores(rows: int array) -> [len(rows), Na]`` giving rows on demand (then ``n_audio`` is
    required; the rows are materialised when they fit the memory budget, otherwise the callable is
    called twice per row: once for the target scores, once for the ranking). ``text`` (optional
    ``[Nt, D]``) enables the embedding gap/distance; without it ``gap``/``dis`` are NaN for every
    non-pivot language. MRV comes from the ranks and is always given.

    ``a2t_scores`` (optional): a separate audio-to-text matrix ``[Na, Nt]`` (row = clip query), or a
    callable ``a2t_scores(clip_rows) -> [len(clip_rows), Nt]``, for asymmetric heads such as LGMM
    (fine-grained paper, Section 2.1: ``S_g(A, T) != S_g(T, A)``). Then the a2t metrics rank with it
    and the t2a metrics (and MRV) with ``scores``; without it both come from ``scores`` (``a2t =
    scores.T``, the same results).
    """
    return evaluate_scores_with_ranks(
        scores, text_audio, text_lang, text_group, text, pivot, n_audio, memory_budget_mb, progress, a2t_scores
    ).metrics
