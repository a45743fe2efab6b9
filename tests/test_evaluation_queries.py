"""Multilingual query retrieval with keyword relevance (mlatr.evaluation.queries)."""

import numpy as np
import pytest

from mlatr.evaluation.queries import keyword_relevance, multilingual_query_eval


def test_keyword_relevance_matches_whole_words():
    queries = [{"keywords": ["dog", "bark"]}, {"keywords": ["door"]}]
    caps = ["dog bark", "doors open", "hot dog stand", "barking"]
    assert keyword_relevance(queries, caps).tolist() == [[True, False, True, False], [False, False, False, False]]


def test_multilingual_query_eval_by_hand():
    # 3 clips on the unit circle's axes; 2 groups x 2 languages
    audio = np.eye(3, dtype=np.float32)
    q = np.array([[1, 0, 0], [0.6, 0.8, 0],    # group 0: eng, fra
                  [0, 0, 1], [0.8, 0, 0.6]],   # group 1: eng, fra
                 dtype=np.float32)
    relevant = np.array([[False, True, False], [False, False, True]])
    res = multilingual_query_eval(q, ["eng", "fra", "eng", "fra"], np.array([0, 0, 1, 1]), audio, relevant,
                                  ["eng", "fra"])
    # ranks: g0 eng -> clip1 scores 0 behind clip0 (1) and tied with clip2 (0, non-relevant) -> 3;
    # g0 fra -> clip1 0.8 first -> 1; g1 eng -> clip2 first -> 1; g1 fra -> clip2 0.6 behind clip0 0.8 -> 2
    assert res["t2a"]["eng"]["R1"] == 50.0 and res["t2a"]["fra"]["R1"] == 50.0
    assert res["t2a"]["eng"]["medR"] == 2.0 and res["t2a"]["avg"]["R5"] == 100.0
    mrv = np.mean([(3 - 2) ** 2, (1 - 2) ** 2, (1 - 1.5) ** 2, (2 - 1.5) ** 2])
    assert res["consistency"]["mrv"] == pytest.approx(mrv)
    dis = np.mean([np.linalg.norm(q[0] - q[1]), np.linalg.norm(q[2] - q[3])])
    gap = np.linalg.norm((q[0] + q[2]) / 2 - (q[1] + q[3]) / 2)
    assert res["consistency"]["dis"]["fra"] == pytest.approx(dis, rel=1e-6)
    assert res["consistency"]["gap"]["fra"] == pytest.approx(gap, rel=1e-6)
    # a group without relevant clip is left out
    res = multilingual_query_eval(q, ["eng", "fra", "eng", "fra"], np.array([0, 0, 1, 1]), audio,
                                  np.array([[False, True, False], [False, False, False]]), ["eng", "fra"])
    assert res["n_queries"] == 1 and res["t2a"]["eng"]["R1"] == 0.0 and res["t2a"]["fra"]["R1"] == 100.0
