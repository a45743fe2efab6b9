"""The padded length of a training step, from the lengths of what its clips contribute: typical and worst.

A step encodes its captions in one call of the text encoder, padded to the longest
(:meth:`mlatr.models.hf_text.HFTextEncoder.tokenize`), and its clips in one batch, padded to the longest
after the crop (``collate_waveforms``). So a step's memory is set by its longest caption and clip, and a run's
peak (``torch.cuda.max_memory_allocated``) by its worst step. This module turns per-clip length distributions
into the distribution of a step's padded length, exactly under the sampler's rules (no simulation):

- ``p[c, x] = P(what clip c contributes is at most values[x])``: for captions the longest caption the scheme
  encodes of the clip (:mod:`mlatr.lab.planning.caption_lengths`), for audio the cropped clip length (0 or 1);
  the draws of different clips are independent given which clips are in the batch.
- A step is a uniformly random ``B``-subset of the ``N`` training clips (the epoch plan is a random
  permutation cut into batches, :func:`~mlatr.data.pipeline.epoch_plan.plan_epoch`), so
  ``P(step max <= x) = mean over B-subsets S of prod_{c in S} p[c, x]`` (:func:`mean_subset_product`).
- An epoch's steps hold ``floor(N / B) * B`` distinct clips (the last smaller batch is dropped), so its worst
  step's padded length is the maximum over those clips: the same mean over ``floor(N / B) * B``-subsets.

``typical`` is the median of the step maximum; ``worst`` the expected epoch maximum ``sum_x x (F(x) - F(x-))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def mean_subset_product(p: np.ndarray, k: int) -> np.ndarray:
    """``mean over k-subsets S of the N rows of prod_{c in S} p[c]``, for every column: ``p [N, X] -> [X]``.

    The recurrence over the rows (``a_m``: the mean over ``m``-subsets of the rows seen so far; row ``i`` of
    ``i`` is in a share ``m / i`` of them): ``a_m <- ((i - m) / i) a_m + (m / i) p_i a_{m-1}``. When ``k`` is
    over half of ``N`` it runs on the excluded rows instead (``b_m``, ``m`` rows left out:
    ``b_m <- ((i - m) / i) p_i b_m + (m / i) b_{m-1}``), so its cost is ``N min(k, N - k)`` vector steps.
    Every update is a convex combination: no overflow, however large the binomial coefficients.
    """
    p = np.asarray(p, dtype=np.float64)
    n = p.shape[0]
    if not 0 <= k <= n:
        raise ValueError(f"subset size {k} not in [0, {n}]")
    excluded = n - k < k
    m_max = n - k if excluded else k
    a = np.zeros((m_max + 1, p.shape[1]))
    a[0] = 1.0
    for i in range(1, n + 1):
        top = min(i, m_max)
        m = np.arange(1, top + 1)[:, None]
        row = p[i - 1]
        if excluded:  # the right-hand side is evaluated whole before it is assigned
            a[1:top + 1] = ((i - m) / i) * row * a[1:top + 1] + (m / i) * a[:top]
            a[0] = a[0] * row
        else:
            a[1:top + 1] = ((i - m) / i) * a[1:top + 1] + (m / i) * row * a[:top]
    return a[m_max]


@dataclass
class BatchLengths:
    """One padded quantity (caption tokens or audio seconds) of a run's steps.

    ``values [X]`` ascending; ``step_cdf [X]`` = P(a step's padded length <= value); ``epoch_cdf [X]`` =
    P(the longest step of an epoch <= value); ``typical`` = the step's median; ``step_mean``; ``worst`` = the
    expected epoch maximum; ``clips`` / ``batch_size`` / ``steps`` of the epoch.
    """

    values: np.ndarray
    step_cdf: np.ndarray
    epoch_cdf: np.ndarray
    clips: int
    batch_size: int
    steps: int

    @staticmethod
    def _quantile(values: np.ndarray, cdf: np.ndarray, q: float) -> float:
        return float(values[min(int(np.searchsorted(cdf, q - 1e-12)), len(values) - 1)])

    def step_quantile(self, q: float) -> float:
        return self._quantile(self.values, self.step_cdf, q)

    def epoch_quantile(self, q: float) -> float:
        return self._quantile(self.values, self.epoch_cdf, q)

    @property
    def typical(self) -> float:
        return self.step_quantile(0.5)

    @staticmethod
    def _mean(values: np.ndarray, cdf: np.ndarray) -> float:
        mass = np.diff(np.concatenate([[0.0], cdf]))
        return float((values * mass).sum())

    @property
    def step_mean(self) -> float:
        return self._mean(self.values, self.step_cdf)

    @property
    def worst(self) -> float:
        return self._mean(self.values, self.epoch_cdf)

    def summary(self) -> dict:
        """The figures a plan reports (JSON-able)."""
        return {"typical": self.typical, "step_mean": self.step_mean, "step_p95": self.step_quantile(0.95),
                "worst": self.worst, "epoch_max_p5": self.epoch_quantile(0.05),
                "epoch_max_p95": self.epoch_quantile(0.95), "longest": float(self.values[-1]),
                "clips": self.clips, "batch_size": self.batch_size, "steps_per_epoch": self.steps}


def batch_lengths(p: np.ndarray, values: np.ndarray, batch_size: int, epoch_clips: int | None = None
                  ) -> BatchLengths:
    """The step and epoch distributions of the padded length (module docstring) from ``p [N, X]``.

    ``epoch_clips``: the training set's size when the ``N`` clips are a sample standing in for it (a test
    split planned for a training run). Its clips are then draws from the sample's mixture
    ``F(x) = mean_c p[c, x]``, independent: ``P(step max <= x) = F(x)^B`` and an epoch of
    ``floor(epoch_clips / B)`` steps ``F(x)^(steps B)``.
    """
    n = p.shape[0]
    if epoch_clips is not None:
        if epoch_clips < batch_size:
            raise ValueError(f"{epoch_clips} clips cannot fill a batch of {batch_size}")
        steps = epoch_clips // batch_size
        mixture = np.asarray(p, dtype=np.float64).mean(axis=0)
        step, epoch = mixture ** batch_size, mixture ** (steps * batch_size)
        n = epoch_clips
    else:
        if n < batch_size:
            raise ValueError(f"{n} clips cannot fill a batch of {batch_size}")
        steps = n // batch_size
        step = mean_subset_product(p, batch_size)
        epoch = mean_subset_product(p, steps * batch_size)
    # each is a CDF: non-decreasing, 1 at the largest value; rounding can leave 1 - 1e-16
    step, epoch = np.maximum.accumulate(step), np.maximum.accumulate(epoch)
    step[-1] = epoch[-1] = 1.0
    return BatchLengths(np.asarray(values, dtype=np.float64), step, epoch, n, batch_size, steps)


def at_most(lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``[lengths[c] <= values[x]]`` as floats ``[N, X]``: a clip whose contribution is one fixed length."""
    return (np.asarray(lengths)[:, None] <= np.asarray(values)[None, :]).astype(np.float64)
