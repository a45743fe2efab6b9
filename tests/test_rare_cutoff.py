"""The rare cutoff of a windowed ranking (one rule for every source: relevance.RareSample): on a library of at
most RARE_SAMPLE captioned clips it is the exact quantile of every live captioned clip's best caption cosine;
beyond, the share of the library above it is a tenth within the sample's error."""

import numpy as np

from mlatr.search.hybrid import TextRanker
from mlatr.search.relevance import RARE_SAMPLE, RARE_SHARE, rare_sample

#: The standard normal's 90 % quantile.
Z_90 = 1.2815515655446004


def _unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _library(n: int, d: int, clusters: int, seed: int):
    """``n`` clips in ``clusters`` kinds, 0-3 captions each near the kind's centre, the captions in no clip order."""
    rng = np.random.default_rng(seed)
    centre = rng.standard_normal((clusters, d))
    kind = rng.integers(0, clusters, n)
    audio = _unit(centre[kind] + rng.standard_normal((n, d)))
    clip = np.repeat(np.arange(n), rng.integers(0, 4, n))
    clip = clip[rng.permutation(len(clip))]
    captions = _unit(centre[kind[clip]] + 1.2 * rng.standard_normal((len(clip), d)))
    return audio, captions, clip, rng


def _best(captions, clip, vec, clips):
    """Brute force: each of ``clips``' best caption cosine with ``vec``."""
    scores = captions @ vec
    return np.array([scores[clip == c].max() for c in clips])


def test_small_library_cutoff_is_the_exact_quantile():
    audio, captions, clip, rng = _library(900, 8, 6, seed=1)
    deleted = np.array([0, 5, 17, 300])
    ranker = TextRanker(audio, captions, clip, ["x"] * len(clip), ["eng"] * len(clip), deleted)
    live = np.setdiff1d(np.unique(clip), deleted)
    assert len(live) <= RARE_SAMPLE
    for vec in _unit(rng.standard_normal((5, 8))):
        best = np.sort(_best(captions, clip, vec, live))[::-1]  # every live captioned clip, best first
        m = int(RARE_SHARE * len(best))
        cutoff = ranker._rare_sample().cutoff(vec)
        assert cutoff == np.float32(best[m])  # the (m + 1)-th highest: at most m clips above it
        assert (best > cutoff).sum() <= m < (best >= cutoff).sum()
        # the exact ranking reads it on every clip it scores: the same value
        assert ranker._exact(vec, audio @ vec, captions @ vec, "x", "eng").stats.caption_cutoff == cutoff


def test_beyond_the_sample_a_tenth_of_the_library_is_above_the_cutoff():
    audio, captions, clip, rng = _library(14000, 16, 40, seed=2)
    deleted = rng.choice(14000, 500, replace=False)
    ranker = TextRanker(audio, captions, clip, ["x"] * len(clip), ["eng"] * len(clip), deleted)
    live = np.setdiff1d(np.unique(clip), deleted)
    assert len(live) > 2 * RARE_SAMPLE
    sample = rare_sample(live)
    assert len(sample) == RARE_SAMPLE and np.isin(sample, live).all()
    assert np.array_equal(sample, rare_sample(live[::-1]))  # fixed: the same clips for the same library
    assert len(ranker._rare_sample().starts) == RARE_SAMPLE
    shares, normal = [], []
    for vec in _unit(captions[rng.choice(len(clip), 12)] + 0.3 * rng.standard_normal((12, 16))):
        best = _best(captions, clip, vec, live)
        shares.append(np.mean(best > ranker._rare_sample().cutoff(vec)))
        mean, std = ranker.stats.captions.score_stats(vec[None].astype(np.float64))
        normal.append(np.mean(best > mean[0] + Z_90 * std[0]))
    # a binomial proportion of 4,096 draws: standard error sqrt(0.1 * 0.9 / 4096) = 0.0047
    assert np.all(np.abs(np.asarray(shares) - RARE_SHARE) < 0.025), shares
    assert abs(np.mean(shares) - RARE_SHARE) < 0.01, shares
    # the normal estimate from the caption moments (Milvus's before the one rule; docs/search-at-scale.md) reads
    # single captions' spread, not each clip's best of several: far more than a tenth lies above it here
    assert np.mean(normal) > 0.15, normal
