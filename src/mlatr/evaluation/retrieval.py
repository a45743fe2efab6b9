"""Retrieval ranks and metrics (R@k, mAP@10, medR, meanR), vectorized and chunked.

Definitions (DCASE 2022 task 6B / ML-CLAP, as used in ATRI §5.4 Table 1 and SupCLAP §4.1.1), per
language L:

- **t2a**: each caption of L ranks all ``Na`` clips; its rank is the 1-based position of the clip it
  describes. R@k = % of captions with rank <= k; mAP@10 = mean over captions of ``1/rank`` if
  rank <= 10 else 0 (one relevant item per query).
- **a2t**: each clip that has at least one caption in L ranks all captions of L; each of its own
  captions gets a 1-based rank. R@k, medR, meanR use the best (smallest) own rank. mAP@10 of a clip =
  ``sum over its own captions with rank <= 10 of (m / rank_m) / n_own``, where ``rank_m`` is the m-th
  smallest own rank (m hits so far at that position) and ``n_own`` the number of the clip's captions in
  L; mAP@10 is the mean over those clips.
- medR is the median of the 1-based ranks (``x.5`` possible for an even count; the DCASE script floors
  the 0-based median instead), meanR their mean.

**Ties** are resolved optimistically: a rank is ``1 + the number of candidates with a strictly greater
score``. With continuous embeddings ties have probability zero; with duplicated clips or captions the
tied candidates share the better rank.

Speed: one similarity product, cut into blocks of captions x clips so that a block (scores plus the
comparison masks) stays under a memory budget; ranks come from counting, per block, the scores greater
than each target score (no sort, no Python loop over queries). t2a counts accumulate along a row, a2t
counts along a column against the clip's own-caption scores, so both come from the same pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from mlatr.evaluation.inputs import CaptionTable

#: ``block(rows, cols) -> scores[len(rows), cols]``: caption rows x clip columns of the score matrix.
ScoreBlock = Callable[[np.ndarray, slice], np.ndarray]

METRIC_KEYS = ("R1", "R5", "R10", "mAP10", "medR", "meanR")


@dataclass
class Ranks:
    """1-based ranks of every caption (``[Nt]`` int64 each).

    ``t2a[i]``: rank of caption i's clip among all clips for caption i as query.
    ``a2t[i]``: rank of caption i among all captions of its language for its clip as query.
    """

    t2a: np.ndarray
    a2t: np.ndarray


def plan_blocks(n_rows: int, n_cols: int, bytes_per_cell: int, budget_bytes: int,
                split_cols: bool = True, max_cells: int = 1 << 22) -> tuple[int, int]:
    """Block shape ``(rows, cols)`` with ``rows * cols * bytes_per_cell <= budget_bytes``.

    Whole rows are preferred (one call of the scorer per row block); columns are split only when a
    single row is over budget and ``split_cols``. ``max_cells`` caps a block for cache efficiency. At
    least one row and one column, at most 65535 rows (the column counts are summed in uint16).
    """
    cells = max(1, min(budget_bytes // max(1, bytes_per_cell), max_cells))
    if cells >= n_cols or not split_cols:
        cols = n_cols
        rows = max(1, min(n_rows, cells // max(1, n_cols), 0xFFFF))
    else:
        cols = max(1, cells)
        rows = 1
    return rows, cols


def _own_slots(clips: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For captions whose clips are ``clips``: (order sorting them by clip, slot of each in that order).

    The slot is the caption's position among its clip's captions (0, 1, ...).
    """
    order = np.argsort(clips, kind="stable")
    c = clips[order]
    start = np.r_[0, np.nonzero(c[1:] != c[:-1])[0] + 1]
    run_start = np.repeat(start, np.diff(np.r_[start, c.size]))
    return order, np.arange(c.size) - run_start


def rank_captions_and_clips(
    block: ScoreBlock,
    own: np.ndarray,
    table: CaptionTable,
    bytes_per_cell: int,
    budget_bytes: int,
    split_cols: bool = True,
    progress: bool = False,
) -> Ranks:
    """t2a and a2t ranks of every caption from a score matrix given block by block.

    ``own[i]`` must equal the entry ``(i, text_audio[i])`` that ``block`` returns (the target score).
    Memory: one block (see :func:`plan_blocks`) plus ``O(Nt + Na * max captions per clip)``.
    """
    n_text, n_audio = table.n_text, table.n_audio
    t2a_greater = np.zeros(n_text, dtype=np.int64)
    a2t = np.zeros(n_text, dtype=np.int64)
    row_block, col_block = plan_blocks(n_text, n_audio, bytes_per_cell, budget_bytes, split_cols)
    per_lang = [np.nonzero(table.lang_idx == k)[0] for k in range(len(table.languages))]
    n_steps = sum(-(-r.size // row_block) for r in per_lang) * -(-n_audio // col_block)
    # One reusable comparison mask (fresh allocations cost page faults); counts are summed over the
    # mask's bytes in uint16/uint32 (a block has at most 65535 rows, see plan_blocks' callers).
    mask_flat = np.empty(min(row_block, max(r.size for r in per_lang)) * col_block, dtype=bool)
    row_sum_dtype = np.uint16 if col_block <= 0xFFFF else np.uint32
    bar = None
    if progress:
        bar = tqdm(total=n_steps, desc="ranking", unit="block", leave=False)
    for rows_l in per_lang:
        clips = table.text_audio[rows_l]
        order, slot = _own_slots(clips)
        n_slots = int(slot.max()) + 1
        # thresholds[k, j]: score of clip j's k-th own caption in this language (+inf: no such caption)
        thresholds = np.full((n_slots, n_audio), np.inf, dtype=own.dtype)
        thresholds[slot, clips[order]] = own[rows_l[order]]
        greater = np.zeros((n_slots, n_audio), dtype=np.int64)
        n_blocks = -(-rows_l.size // row_block)
        step = -(-rows_l.size // n_blocks)  # equal-sized row blocks
        for r0 in range(0, rows_l.size, step):
            rows = rows_l[r0:r0 + step]
            target = own[rows][:, None]
            for c0 in range(0, n_audio, col_block):
                cols = slice(c0, min(n_audio, c0 + col_block))
                s = block(rows, cols)
                mask = mask_flat[: s.size].reshape(s.shape)
                bytes_ = mask.view(np.uint8)
                np.greater(s, target, out=mask)
                t2a_greater[rows] += np.add.reduce(bytes_, axis=1, dtype=row_sum_dtype)
                for k in range(n_slots):
                    np.greater(s, thresholds[k, cols], out=mask)
                    greater[k, cols] += np.add.reduce(bytes_, axis=0, dtype=np.uint16)
                if bar is not None:
                    bar.update(1)
        a2t[rows_l[order]] = greater[slot, clips[order]] + 1
    if bar is not None:
        bar.close()
    return Ranks(t2a=t2a_greater + 1, a2t=a2t)


def _summary(best_ranks: np.ndarray, map10: float) -> dict[str, float]:
    r = best_ranks.astype(np.float64)
    return {
        "R1": 100.0 * float(np.mean(r <= 1)),
        "R5": 100.0 * float(np.mean(r <= 5)),
        "R10": 100.0 * float(np.mean(r <= 10)),
        "mAP10": map10,
        "medR": float(np.median(r)),
        "meanR": float(np.mean(r)),
    }


def t2a_metrics(ranks: np.ndarray) -> dict[str, float]:
    """R@1/5/10, mAP@10 (percent), medR, meanR from the t2a ranks of one language's captions."""
    r = ranks.astype(np.float64)
    map10 = 100.0 * float(np.mean(np.where(r <= 10, 1.0 / r, 0.0)))
    return _summary(r, map10)


def a2t_metrics(ranks: np.ndarray, clips: np.ndarray) -> dict[str, float]:
    """a2t metrics from the a2t ranks of one language's captions and the clips they describe.

    Only clips with at least one caption here are queries (missing translations shrink the set).
    """
    order = np.lexsort((ranks, clips))
    c, r = clips[order], ranks[order].astype(np.float64)
    start = np.r_[0, np.nonzero(c[1:] != c[:-1])[0] + 1]
    n_own = np.diff(np.r_[start, c.size])
    hits = np.arange(c.size) - np.repeat(start, n_own) + 1.0  # m: own captions ranked so far
    contrib = np.where(r <= 10, hits / r, 0.0)
    ap = np.add.reduceat(contrib, start) / n_own
    best = r[start]
    return _summary(best, 100.0 * float(np.mean(ap)))


def average_metrics(per_language: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over languages (the ``avg`` row of ATRI Table 1)."""
    return {k: float(np.mean([m[k] for m in per_language.values()])) for k in METRIC_KEYS}


def retrieval_metrics(ranks: Ranks, table: CaptionTable) -> dict[str, dict]:
    """``{"t2a": {lang: metrics, "avg": ...}, "a2t": {...}}`` from the ranks of all captions."""
    t2a: dict[str, dict[str, float]] = {}
    a2t: dict[str, dict[str, float]] = {}
    for k, lang in enumerate(table.languages):
        rows = np.nonzero(table.lang_idx == k)[0]
        t2a[lang] = t2a_metrics(ranks.t2a[rows])
        a2t[lang] = a2t_metrics(ranks.a2t[rows], table.text_audio[rows])
    t2a["avg"] = average_metrics(t2a)
    a2t["avg"] = average_metrics(a2t)
    return {"t2a": t2a, "a2t": a2t}
