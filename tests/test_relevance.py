"""Relevance (issue 33): library statistics against direct computation, keyword analysis per language,
nonsense queries, nothing_relevant, classification probabilities, the shipped calibration's shape."""

import numpy as np
import pytest

from mlatr.evaluation.nonsense import nonsense_queries
from mlatr.inference.loaded_model import Classification
from mlatr.search.analysis import stop_words, terms
from mlatr.search.hybrid import TextRanker
from mlatr.search.relevance import (
    ANSWER_FEATURES,
    FEATURES,
    PRIOR_COUNT,
    RARE_SHARE,
    Calibration,
    Moments,
    QueryStats,
    answer_features,
    answer_relevance,
    pair_features,
    rare_cutoff,
)
from mlatr.search.results import Hit, Results


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
    assert terms("犬が吠えている", "jpn") == ["犬", "吠える"]  # words, particles out
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
    # the answer's relevance, when given, decides (the library may hold a relevant clip beyond the best hit)
    assert Results(hits, 0.3, relevance=0.6).to_dict()["relevance"] == 0.6
    assert not Results(hits, 0.3, relevance=0.6).nothing_relevant and Results(hits, 0.7, relevance=0.6).nothing_relevant
    # no relevance known (a Milvus index's sound ranking): hits are not called irrelevant
    unknown = [Hit(1, 0.5, "a", "/a", [])]
    assert Results(unknown, 0.3).relevance is None and not Results(unknown, 0.3).nothing_relevant


def test_a_caption_is_rare_when_at_most_a_tenth_of_the_library_is_as_close():
    rng = np.random.default_rng(3)
    for n in (5, 9, 10, 37, 200):
        caption = np.round(rng.random(n), 1)  # many ties
        caption[rng.random(n) < 0.2] = -np.inf  # clips without caption
        cutoff = rare_cutoff(caption)
        has = np.isfinite(caption)
        for v in caption[has]:
            assert (v > cutoff) == (np.sum(caption[has] >= v) <= int(RARE_SHARE * has.sum())), (n, v)
        x = pair_features(np.zeros(n), caption, np.zeros(n), QueryStats(0, 1, 0, 1, 0, cutoff))
        assert np.array_equal(x[:, FEATURES.index("caption_rare")], has & (caption > cutoff))
    # five names shared equally: the closest is shared by a fifth, never rare
    assert not np.any(np.repeat([0.1, 0.2, 0.3, 0.4, 0.5], 20) > rare_cutoff(np.repeat([0.1, 0.2, 0.3, 0.4, 0.5], 20)))


def test_the_answer_reads_the_whole_ranking_and_is_never_below_its_best_hit():
    rng = np.random.default_rng(4)
    n = 30
    x = rng.standard_normal((n, len(FEATURES)))
    score, rel = rng.standard_normal(n), rng.random(n)
    f = dict(zip(ANSWER_FEATURES, answer_features(score, rel, x), strict=True))
    top = np.argsort(-score)[:10]
    assert f["best"] == rel[top[0]] and f["any"] == pytest.approx(1 - np.prod(1 - rel[top]))
    assert f["gap"] == pytest.approx(score[top[0]] - score[top[1:]].mean())
    assert f["sound_z_top5"] == pytest.approx(np.sort(x[:, 1])[-5:].mean()) and f["keyword"] == x[:, 4].max()
    model = Calibration.default().answer
    for best in (0.0, 0.5, 0.99):
        feats = answer_features(score, np.where(np.arange(n) == top[0], best, 0.0), x)
        assert best <= answer_relevance(model, feats) <= 1.0


def test_nonsense_queries_abstain_on_a_small_library():
    """A small built-in library (named clips; 512-d as the default model's embeddings, USE / near-identity,
    so that unrelated vectors have its spread of cosines, about 1 / sqrt(d)): gibberish and random CJK
    strings find nothing relevant, a query equal to a caption does."""
    rng = np.random.default_rng(1)
    n, d = 40, 512
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    audio, caps = unit(rng.standard_normal((n, d))), unit(rng.standard_normal((n, d)))
    names = [f"{w} {i}" for i, w in enumerate(["dog bark", "rain", "door slam", "bell"] * 10)]
    ranker = TextRanker(audio, caps, np.arange(n), names, ["eng"] * n)
    threshold = Calibration.default().answer.threshold
    for q in nonsense_queries(["eng", "fra", "jpn", "zho"])[:20]:
        answer = ranker.rank(unit(rng.standard_normal(d)), q["text"], q["lang"], 10, "hybrid")
        assert answer.relevance < threshold and answer[0].relevance <= answer.relevance, q
    found = ranker.rank(caps[3], names[3], "eng", 10, "hybrid")
    assert found[0].row == 3 and found.relevance >= threshold


def test_classification_probabilities_are_a_tempered_softmax():
    scores = np.array([[0.2, 0.1, -0.1], [0.0, 0.01, 0.0]], np.float32)
    c = Classification(["a", "b", "c"], scores, temperature=0.05, min_probability=0.5)
    e = np.exp(scores / 0.05)
    assert np.allclose(c.probabilities, e / e.sum(1, keepdims=True))
    assert c.none_of_these.tolist() == [False, True]


def test_the_shipped_calibration_is_complete():
    cal = Calibration.default()
    assert cal.text.kind in ("logistic", "trees") and 0 < cal.text.threshold < 1
    assert cal.answer.kind == "linear" and cal.answer.features == ANSWER_FEATURES and 0 < cal.answer.threshold < 1
    assert np.all(np.diff(cal.answer.calibrator.y) >= 0)
    assert cal.classify["temperature"] > 0 and 0 < cal.classify["min_probability"] < 1
    assert np.all(np.diff(cal.text.calibrator.y) >= 0) and np.all(np.diff(cal.sound.calibrator.y) >= 0)


def test_shipped_weights_are_non_negative():
    assert np.all(Calibration.default().text.weights >= 0) and np.all(Calibration.default().sound.weights >= 0)
