"""evaluate_scores with a separate audio-to-text matrix (asymmetric heads such as LGMM)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlatr.errors import MlatrError
from mlatr.evaluation import evaluate_scores
from test_evaluation_metrics import random_eval_data
from test_evaluation_reference import reference_evaluate


def _matrices(seed: int):
    audio, text, ta, tl, tg = random_eval_data(seed)
    a = audio / np.linalg.norm(audio, axis=1, keepdims=True)
    t = text / np.linalg.norm(text, axis=1, keepdims=True)
    t2a = t @ a.T
    rng = np.random.default_rng(seed + 100)
    a2t = np.tanh(2 * t2a.T) + 0.4 * rng.normal(size=t2a.T.shape)  # a different clip x caption matrix
    return t2a, a2t, ta, tl, tg


def _close(got: dict, want: dict, task: str) -> None:
    assert set(got[task]) == set(want[task])
    for lang in want[task]:
        for key, value in want[task][lang].items():
            assert math.isclose(got[task][lang][key], value, abs_tol=1e-9), (task, lang, key)


def test_transposed_a2t_changes_nothing():
    t2a, _, ta, tl, tg = _matrices(3)
    base = evaluate_scores(t2a, ta, tl, tg)
    same = evaluate_scores(t2a, ta, tl, tg, a2t_scores=t2a.T.copy())
    for task in ("t2a", "a2t"):
        _close(same, base, task)
    assert same["consistency"]["mrv"] == base["consistency"]["mrv"]


@pytest.mark.parametrize("budget", [512.0, 0.01])  # whole matrix / many small blocks
@pytest.mark.parametrize("as_callable", [False, True])
def test_a2t_metrics_follow_the_a2t_matrix(budget, as_callable):
    t2a, a2t, ta, tl, tg = _matrices(5)
    want_t2a = reference_evaluate(None, None, ta, tl, tg, scores=t2a)
    want_a2t = reference_evaluate(None, None, ta, tl, tg, scores=a2t.T)
    arg = (lambda rows: a2t[rows]) if as_callable else a2t
    got = evaluate_scores(t2a, ta, tl, tg, a2t_scores=arg, memory_budget_mb=budget)
    _close(got, want_t2a, "t2a")
    _close(got, want_a2t, "a2t")
    # MRV is a t2a quantity: it follows ``scores``
    assert math.isclose(got["consistency"]["mrv"], want_t2a["consistency"]["mrv"], abs_tol=1e-9)
    # and the a2t metrics really differ from those of t2a.T
    plain = reference_evaluate(None, None, ta, tl, tg, scores=t2a)
    assert any(plain["a2t"][lang]["R1"] != want_a2t["a2t"][lang]["R1"] for lang in plain["a2t"])


def test_a2t_shape_and_values_are_checked():
    t2a, a2t, ta, tl, tg = _matrices(1)
    with pytest.raises(MlatrError, match="a2t_scores"):
        evaluate_scores(t2a, ta, tl, tg, a2t_scores=a2t.T)
    bad = a2t.copy()
    bad[2, 3] = np.nan
    with pytest.raises(MlatrError, match="NaN"):
        evaluate_scores(t2a, ta, tl, tg, a2t_scores=bad)
