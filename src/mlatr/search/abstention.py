""""Nothing relevant", fitted for each index: a split-conformal level on queries no library can answer, moved by
a margin that keeps answerable queries (issue 45).

The answer's relevance (:func:`mlatr.search.relevance.answer_relevance`) says how probable it is that one of a
query's hits answers it. How low it must be to say "nothing relevant" depends on the library: in a library of
thousands of distinct descriptions, or of the very clips the model trained on, the best of them stands out by
chance for any query, nonsense included. So each index fits its own level:

1. **The index's level** (:func:`conformal_level`): when an index is built (and again when its library changes:
   ``mlatr index build --add``, ``mlatr index compact``; a stale record is refitted in memory at the first query),
   ``n`` seeded nonsense queries (:func:`mlatr.evaluation.nonsense.nonsense_queries`: letter strings, random
   characters of eleven scripts, in the model's languages in turn) are run against it; their answers' relevance
   logits are the calibration sample. The level is just above the ``ceil((n + 1)(1 - alpha))``-th smallest
   (``alpha`` = :data:`NONSENSE_MISSED`): a further nonsense query exchangeable with them falls below it with
   probability at least ``1 - alpha`` (split conformal prediction; Vovk et al. 2005, Angelopoulos & Bates 2021,
   sec. 1). The record, with the calibration it was fitted for and the library's size, is stored in the index's
   meta through its storage (:meth:`mlatr.search.index.Index.record_abstention`).
2. **The margin** (:func:`crc_margin`), one number of the model's calibration: fitted on the labelled held-out
   folds (:mod:`mlatr.lab.experiments.relevance_fit`), it is the largest shift of every library's level for which
   the answerable queries of the folds, each compared with its own library's level, are called irrelevant at
   most :data:`FALSE_ABSTENTION` of the time with the conformal risk control correction (Angelopoulos, Bates,
   Fisch, Lei & Schuster 2022, thm. 1: for a loss bounded by 1 and non-decreasing in the shift,
   ``(n R(l) + 1) / (n + 1) <= alpha`` on ``n`` exchangeable calibration queries bounds the expected loss of a
   new one by ``alpha``).

A query's answer is "nothing relevant" when the logit of its relevance is below ``level + margin``, that is when
its relevance is below :func:`level_relevance`. Guarantees, as stated: for a library, the share of nonsense
queries of the generator that pass is at most ``alpha`` when the margin is >= 0 (a positive margin only catches
more); the share of answerable queries called irrelevant is at most :data:`FALSE_ABSTENTION` in expectation over
libraries and queries exchangeable with the folds' (real libraries and users' queries are not drawn from the
same distribution: the figures on held-out folds, ``docs/hybrid-search.md``, are what is measured). Queries for
concepts the library lacks have no guarantee: they are what the margin trades against.
"""

from __future__ import annotations

import math

import numpy as np

#: The share of nonsense queries an index's level may let through (split conformal: at most this, in expectation).
NONSENSE_MISSED = 0.05
#: The share of answerable queries the margin may call "nothing relevant" (conformal risk control).
FALSE_ABSTENTION = 0.10
#: How far from 0 and 1 a relevance is taken before its logit (a relevance of exactly 0 or 1 stays finite).
_EDGE = 1e-6


def relevance_logit(relevance: float) -> float:
    """``log(r / (1 - r))`` of a relevance ``r`` kept within ``[1e-6, 1 - 1e-6]``."""
    r = min(max(float(relevance), _EDGE), 1.0 - _EDGE)
    return math.log(r / (1.0 - r))


def conformal_level(null: np.ndarray, alpha: float = NONSENSE_MISSED) -> float:
    """The level (logit) below which an answer is "nothing relevant", from the relevance logits ``null [n]`` of
    nonsense queries run against the index: just above the ``m``-th smallest, ``m = ceil((n + 1)(1 - alpha))``
    (at most ``n``), so that the ``m`` smallest are below it and a new exchangeable one is with probability
    ``m / (n + 1) >= 1 - alpha``."""
    values = np.sort(np.asarray(null, np.float64))
    if not len(values):
        return -math.inf
    m = min(math.ceil((len(values) + 1) * (1.0 - alpha)), len(values))
    return float(np.nextafter(values[m - 1], math.inf))


def crc_margin(excess: np.ndarray, alpha: float = FALSE_ABSTENTION) -> float:
    """The margin (logit) added to every level, from ``excess [n]``: each answerable calibration query's relevance
    logit less its library's level. The false abstention of a query at margin ``l`` is ``excess < l`` (bounded by
    1, non-decreasing in ``l``); the margin is the largest ``l`` with ``(#{excess < l} + 1) / (n + 1) <= alpha``:
    the ``(k + 1)``-th smallest excess, ``k = floor(alpha (n + 1) - 1)`` (``-inf``: no margin is safe, ``inf``:
    every one is)."""
    values = np.sort(np.asarray(excess, np.float64))
    k = math.floor(alpha * (len(values) + 1) - 1)
    if k < 0:
        return -math.inf
    if k >= len(values):
        return math.inf
    return float(values[k])


def level_relevance(level: float, margin: float) -> float:
    """The relevance below which an answer is "nothing relevant": the logistic of ``level + margin``."""
    z = level + margin
    if z == math.inf:
        return 1.0
    if z == -math.inf:
        return 0.0
    return 1.0 / (1.0 + math.exp(-z))
