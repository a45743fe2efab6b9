"""Relevance (issue 33): library statistics against direct computation, keyword analysis per language,
nonsense queries, nothing_relevant, classification probabilities, the shipped calibration's shape."""

import numpy as np
import pytest

from mlatr.evaluation.nonsense import nonsense_queries
from mlatr.inference.loaded_model import Classification
from mlatr.search.analysis import stop_words, terms
from mlatr.search.hybrid import TextRanker
from mlatr.search.relevance import PRIOR_COUNT, Moments, shipped
from mlatr.search.search import Hit, Results


def test_moments_give_each_querys_mean_and_spread_over_the_library():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((50, 6))
    keep = rng.random(50) > 0.3
    m = Moments.of([x[:20], x[20:]], keep)
    q = rng.standard_normal((3, 6))
    mean, std = m.score_stats(q)
    s = q @ x[keep].T
    n, prior = keep.sum(), (q * q).sum(1) / 6
    # the mixture of the library's scores and PRIOR_COUNT prior draws (mean 0, variance |q|^2 / d)
    m1 = n * s.mean(1) / (n + PRIOR_COUNT)
    m2 = (n * (s ** 2).mean(1) + PRIOR_COUNT * prior) / (n + PRIOR_COUNT)
    assert np.allclose(mean, m1) and np.allclose(std, np.sqrt(m2 - m1 ** 2))
    # five names shared equally by 100 clips (64-d): the one equal to the query is at most sqrt(5 - 1) = 2
    # spreads above the library's own mean, and the prior moves it only a little (the mean's shift counts)
    names = np.repeat(np.eye(64)[:5], 20, axis=0)
    mean5, std5 = Moments.of(names).score_stats(np.eye(64)[:1])
    assert 2.0 < (1.0 - mean5[0]) / std5[0] < 2.15


def test_stop_words_of_all_eight_languages_and_stems():
    for lang in ("eng", "fra", "deu", "spa", "nld", "cat", "jpn", "zho"):
        assert len(stop_words(lang)) > 20, lang
    assert "fire" not in stop_words("eng") and "une" in stop_words("fra") and "的" in stop_words("zho")
    assert terms("Dogs barking", "eng") == ["dog", "bark"]
    assert terms("un chien qui aboie", "fra") == ["chien", "aboi"]
    assert terms("犬が吠えている", "jpn")[:2] == ["犬", "吠"]  # CJK: characters and bigrams, particles out
    assert terms("the", "eng") == terms("の", "jpn") == terms("der", "deu") == []


def test_nonsense_queries_are_seeded_and_cover_the_scripts():
    a, b = nonsense_queries(["eng", "fra"]), nonsense_queries(["eng", "fra"])
    assert a == b and len(a) >= 50 and a != nonsense_queries(["eng", "fra"], seed=1)
    assert {q["script"] for q in a} >= {"latin-letters", "han", "kana", "cyrillic", "arabic"}
    assert all(q["text"].strip() for q in a)


def test_results_say_nothing_relevant_below_the_threshold():
    hits = [Hit(1, 0.5, "a", "/a", [], relevance=0.2), Hit(2, 0.4, "b", "/b", [], relevance=0.1)]
    assert Results(hits, 0.3).nothing_relevant and not Results(hits, 0.2).nothing_relevant
    assert Results(hits, 0.3).to_dict()["nothing_relevant"] is True and Results([], 0.1).nothing_relevant


def test_nonsense_queries_abstain_on_a_small_library():
    """A small built-in library (64-d, named clips): gibberish and random CJK strings find nothing relevant,
    a query equal to a caption does."""
    rng = np.random.default_rng(1)
    n, d = 40, 64
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    audio, caps = unit(rng.standard_normal((n, d))), unit(rng.standard_normal((n, d)))
    names = [f"{w} {i}" for i, w in enumerate(["dog bark", "rain", "door slam", "bell"] * 10)]
    ranker = TextRanker(audio, caps, np.arange(n), names, ["eng"] * n)
    threshold = shipped().text.threshold
    for q in nonsense_queries(["eng", "fra", "jpn", "zho"])[:20]:
        best = ranker.rank(unit(rng.standard_normal(d)), q["text"], q["lang"], 10, "hybrid")[0]
        assert best.relevance < threshold, q
    assert ranker.rank(caps[3], names[3], "eng", 10, "hybrid")[0].relevance >= threshold


def test_classification_probabilities_are_a_tempered_softmax():
    scores = np.array([[0.2, 0.1, -0.1], [0.0, 0.01, 0.0]], np.float32)
    c = Classification(["a", "b", "c"], scores, temperature=0.05, min_probability=0.5)
    e = np.exp(scores / 0.05)
    assert np.allclose(c.probabilities, e / e.sum(1, keepdims=True))
    assert c.none_of_these.tolist() == [False, True]


def test_the_shipped_calibration_is_complete():
    cal = shipped()
    assert cal.text.kind in ("logistic", "trees") and 0 < cal.text.threshold < 1
    assert cal.classify["temperature"] > 0 and 0 < cal.classify["min_probability"] < 1
    assert np.all(np.diff(cal.text.calibrator.y) >= 0) and np.all(np.diff(cal.sound.calibrator.y) >= 0)


@pytest.mark.parametrize("path", ["relevance"])
def test_shipped_weights_are_non_negative(path):
    assert np.all(shipped().text.weights >= 0) and np.all(shipped().sound.weights >= 0)
