"""Cross-lingual consistency: embedding gap, embedding distance, mean rank variance (ATRI §5.4).

All three use the caption groups present in every evaluated language (a group = the translations of
one source caption), so that every language is measured on the same items:

- ATRI eq. 14: ``gap[L] = || mean_i t_i,pivot - mean_i t_i,L ||`` (the norm of the difference of the
  language centroids; Liang et al. 2022), on unit-normalised text embeddings.
- ATRI eq. 15: ``dis[L] = mean_i || t_i,pivot - t_i,L ||``.
- ATRI eq. 16: ``MRV = 1/(N K) sum_i sum_k (Rank_ik - mean_k Rank_ik)^2`` with ``Rank_ik`` the t2a rank
  of group i's caption in language k (K = number of languages, pivot included).
"""

from __future__ import annotations

import numpy as np

from mlatr.evaluation.inputs import CaptionTable


def complete_groups(table: CaptionTable) -> np.ndarray:
    """``[G, K]`` caption indices of the groups present in all K languages (columns in language order)."""
    n_groups, n_lang = int(table.group_ids.shape[0]), len(table.languages)
    where = np.full((n_groups, n_lang), -1, dtype=np.int64)
    where[table.group_idx, table.lang_idx] = np.arange(table.n_text)
    return where[np.all(where >= 0, axis=1)]


def embedding_gap_and_distance(
    text_unit: np.ndarray, groups: np.ndarray, languages: list[str], pivot: str
) -> tuple[dict[str, float], dict[str, float]]:
    """ATRI eq. 14 and 15 for every non-pivot language; NaN when there is no complete group.

    ``text_unit`` [Nt, D] unit rows; ``groups`` from :func:`complete_groups`.
    """
    gap: dict[str, float] = {}
    dis: dict[str, float] = {}
    if pivot not in languages:
        return gap, dis
    p = languages.index(pivot)
    ref = text_unit[groups[:, p]]
    weights = np.full(groups.shape[0], 1.0 / max(1, groups.shape[0]), dtype=text_unit.dtype)
    ref_mean = weights @ ref  # the centroid, by BLAS (a float64 reduction over axis 0 is slow)
    for k, lang in enumerate(languages):
        if k == p:
            continue
        if groups.shape[0] == 0:
            gap[lang] = dis[lang] = float("nan")
            continue
        other = text_unit[groups[:, k]]
        gap[lang] = float(np.linalg.norm((ref_mean - weights @ other).astype(np.float64)))
        diff = ref - other
        dis[lang] = float(np.mean(np.sqrt(np.einsum("ij,ij->i", diff, diff)), dtype=np.float64))
    return gap, dis


def mean_rank_variance(t2a_ranks: np.ndarray, groups: np.ndarray) -> float:
    """ATRI eq. 16 over the complete groups; NaN when there is none."""
    if groups.shape[0] == 0:
        return float("nan")
    r = t2a_ranks[groups].astype(np.float64)  # [G, K]
    return float(np.mean((r - r.mean(axis=1, keepdims=True)) ** 2))
