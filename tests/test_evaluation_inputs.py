"""Bad input to the evaluation: one clear MlatrError each, naming the array and the position."""

from __future__ import annotations

import numpy as np
import pytest

from mlatr.errors import MlatrError
from mlatr.evaluation import evaluate_embeddings, evaluate_scores, zero_shot


def good():
    rng = np.random.default_rng(0)
    audio = rng.normal(size=(4, 3))
    text = rng.normal(size=(6, 3))
    ta = np.array([0, 1, 2, 0, 1, 2])
    tl = np.array(["eng", "eng", "eng", "fra", "fra", "fra"])
    tg = np.array([0, 1, 2, 0, 1, 2])
    return audio, text, ta, tl, tg


def check(match: str, audio, text, ta, tl, tg, **kw):
    with pytest.raises(MlatrError, match=match):
        evaluate_embeddings(audio, text, ta, tl, tg, **kw)


def test_good_input_passes():
    out = evaluate_embeddings(*good())
    assert set(out["t2a"]) == {"eng", "fra", "avg"} and set(out["consistency"]["gap"]) == {"fra"}


def test_shape_mismatches():
    audio, text, ta, tl, tg = good()
    check(r"audio and text: embedding sizes differ \(audio D=3, text D=2\)", audio, text[:, :2], ta, tl, tg)
    check(r"text_audio: has 5 entries but there are 6 captions", audio, text, ta[:5], tl, tg)
    check(r"text_lang: has 5 entries", audio, text, ta, tl[:5], tg)
    check(r"text_group: has 7 entries", audio, text, ta, tl, np.r_[tg, 9])
    check(r"audio: expected a 2-D array", audio[0], text, ta, tl, tg)
    check(r"text_audio: expected a 1-D array", audio, text, ta[:, None], tl, tg)


def test_nan_and_inf():
    audio, text, ta, tl, tg = good()
    bad = text.copy()
    bad[4, 1] = np.nan
    check(r"text: contains NaN or inf \(first at row 4\)", audio, bad, ta, tl, tg)
    bad = audio.copy()
    bad[2, 0] = np.inf
    check(r"audio: contains NaN or inf \(first at row 2\)", bad, text, ta, tl, tg)
    zero = audio.copy()
    zero[1] = 0
    check(r"audio: row 1 is the zero vector", zero, text, ta, tl, tg)


def test_index_out_of_range():
    audio, text, ta, tl, tg = good()
    ta = ta.copy()
    ta[3] = 4
    check(r"text_audio: index 4 at caption 3 is out of range \(there are 4 audio clips\)", audio, text, ta, tl, tg)
    ta[3] = -1
    check(r"text_audio: index -1 at caption 3", audio, text, ta, tl, tg)
    check(r"text_audio: expected integer clip indices", audio, text, ta + 0.5, tl, tg)


def test_group_with_two_captions_of_one_language():
    audio, text, ta, tl, tg = good()
    tg = np.array([0, 0, 2, 0, 1, 2])
    ta = np.array([0, 0, 2, 0, 1, 2])
    check(r"text_group: group 0 has two captions in language 'eng' \(captions 0 and 1\)", audio, text, ta, tl, tg)


def test_group_spanning_two_clips():
    audio, text, ta, tl, tg = good()
    ta = np.array([0, 1, 2, 3, 1, 2])
    check(r"text_group: group 0 spans two clips", audio, text, ta, tl, tg)


def test_missing_pivot_and_bad_budget():
    audio, text, ta, tl, tg = good()
    check(r"pivot language 'deu' has no captions", audio, text, ta, tl, tg, pivot="deu")
    check(r"memory_budget_mb: must be positive", audio, text, ta, tl, tg, memory_budget_mb=0)


def test_scores_errors():
    audio, text, ta, tl, tg = good()
    scores = text @ audio.T
    with pytest.raises(MlatrError, match=r"text_audio: has 6 entries but there are 5 captions"):
        evaluate_scores(scores[:5], ta, tl, tg)
    bad = scores.copy()
    bad[2, 2] = np.nan
    with pytest.raises(MlatrError, match=r"scores: contains NaN or inf \(first at row 2\)"):
        evaluate_scores(bad, ta, tl, tg)
    with pytest.raises(MlatrError, match="needs n_audio"):
        evaluate_scores(lambda rows: scores[rows], ta, tl, tg)
    with pytest.raises(MlatrError, match=r"the callable returned shape \(6, 3\)"):
        evaluate_scores(lambda rows: scores[rows][:, :3], ta, tl, tg, n_audio=4)
    with pytest.raises(MlatrError, match=r"text: has 5 rows but scores have 6"):
        evaluate_scores(scores, ta, tl, tg, text=text[:5])


def test_zero_shot_errors():
    a, c = np.eye(3), np.eye(3)
    with pytest.raises(MlatrError, match=r"targets: class 3 at clip 1 is out of range \(3 classes\)"):
        zero_shot(a, c, np.array([0, 3, 1]))
    with pytest.raises(MlatrError, match="targets: expected shape"):
        zero_shot(a, c, np.array([0, 1]))
    with pytest.raises(MlatrError, match="embedding sizes differ"):
        zero_shot(a, c[:, :2] + 0.1, np.array([0, 1, 2]))
