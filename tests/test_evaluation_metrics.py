"""Retrieval and consistency metrics against the independent per-query loop (test_evaluation_reference)."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import torch

from mlatr.evaluation import evaluate_embeddings, evaluate_scores, zero_shot, zero_shot_prompts
from mlatr.evaluation.retrieval import a2t_metrics, plan_blocks
from test_evaluation_reference import reference_evaluate

LANGS = ["eng", "fra", "deu", "jpn"]


def random_eval_data(seed: int, n_audio: int = 23, caps: int = 3, dim: int = 16):
    """Structured random data with missing translations, clips without captions in a language and
    clips without any caption; caption order shuffled."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_audio, dim))
    audio = centres + 0.8 * rng.normal(size=(n_audio, dim))
    text, ta, tl, tg = [], [], [], []
    for j in range(n_audio - 2):  # the last two clips have no captions at all
        n_caps = 1 + int(rng.integers(caps))
        for c in range(n_caps):
            source = centres[j] + 0.7 * rng.normal(size=dim)
            for k, lang in enumerate(LANGS):
                if lang != "eng" and rng.random() < 0.15:
                    continue  # missing translation
                if lang == "jpn" and j % 5 == 0:
                    continue  # this clip has no Japanese caption
                text.append(source + (0.2 + 0.2 * k) * rng.normal(size=dim))
                ta.append(j)
                tl.append(lang)
                tg.append(f"g{j}-{c}")
    perm = rng.permutation(len(ta))
    pick = lambda x: [x[i] for i in perm]  # noqa: E731
    return audio, np.array(pick(text)), np.array(pick(ta)), np.array(pick(tl)), np.array(pick(tg))


def assert_same(got: dict, want: dict, tol: float = 1e-6) -> None:
    for task in ("t2a", "a2t"):
        assert set(got[task]) == set(want[task])
        for lang, metrics in want[task].items():
            for key, value in metrics.items():
                assert math.isclose(got[task][lang][key], value, rel_tol=0, abs_tol=tol), (task, lang, key)
    for key in ("gap", "dis"):
        assert set(got["consistency"][key]) == set(want["consistency"][key])
        for lang, value in want["consistency"][key].items():
            assert math.isclose(got["consistency"][key][lang], value, abs_tol=tol), (key, lang)
    assert math.isclose(got["consistency"]["mrv"], want["consistency"]["mrv"], abs_tol=tol)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_embeddings_match_the_per_query_loop(seed):
    data = random_eval_data(seed)
    got = evaluate_embeddings(*data)
    assert_same(got, reference_evaluate(*data))
    assert got["counts"]["jpn"]["clips"] < got["counts"]["eng"]["clips"]  # the data does miss translations
    assert 0 < got["t2a"]["eng"]["R1"] < 100 and 0 < got["a2t"]["jpn"]["mAP10"] < 100


@pytest.mark.parametrize("budget_mb", [1e-6, 2e-4, 3e-3])
def test_tiny_memory_budgets_give_identical_results(budget_mb):
    data = random_eval_data(5, n_audio=40)
    want = evaluate_embeddings(*data)
    got = evaluate_embeddings(*data, memory_budget_mb=budget_mb)
    assert got == want


def test_plan_blocks_keeps_50k_by_250k_under_budget():
    budget = 256 * 2**20
    rows, cols = plan_blocks(250_000, 50_000, 6, budget)
    assert rows * cols * 6 <= budget and cols == 50_000 and rows >= 1
    rows, cols = plan_blocks(250_000, 50_000, 6, 1000)  # less than one row: split the columns
    assert rows == 1 and cols * 6 <= 1000


def test_peak_memory_stays_below_the_full_score_matrix():
    rng = np.random.default_rng(0)
    n_audio, n_text, dim = 300, 3000, 8
    audio = rng.normal(size=(n_audio, dim)).astype(np.float32)
    text = rng.normal(size=(n_text, dim)).astype(np.float32)
    ta = rng.integers(n_audio, size=n_text)
    args = (audio, text, ta, ["eng"] * n_text, np.arange(n_text))
    tracemalloc.start()
    evaluate_embeddings(*args, memory_budget_mb=0.05)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    full = n_audio * n_text * 4
    assert peak < full / 4, (peak, full)


def test_float32_and_torch_inputs_agree_with_float64():
    audio, text, ta, tl, tg = random_eval_data(7)
    want = evaluate_embeddings(audio, text, ta, tl, tg)
    f32 = torch.float32
    got = evaluate_embeddings(torch.tensor(audio, dtype=f32), torch.tensor(text, dtype=f32),
                              torch.tensor(ta), list(tl), list(tg))
    assert_same(got, want, tol=1e-4)


def test_scores_path_matches_embeddings_and_reference():
    audio, text, ta, tl, tg = random_eval_data(11)
    a = audio / np.linalg.norm(audio, axis=1, keepdims=True)
    t = text / np.linalg.norm(text, axis=1, keepdims=True)
    scores = t @ a.T
    from_emb = evaluate_embeddings(audio, text, ta, tl, tg)
    got = evaluate_scores(scores, ta, tl, tg, text=text)
    assert_same(got, from_emb)
    # a score matrix that is not a cosine (here: a non-linear transform plus a per-clip bias)
    other = np.tanh(3 * scores) + np.linspace(0, 0.3, scores.shape[1])[None, :]
    want = reference_evaluate(None, None, ta, tl, tg, scores=other)
    got = evaluate_scores(other, ta, tl, tg)
    for task in ("t2a", "a2t"):
        for lang in want[task]:
            for key in want[task][lang]:
                assert math.isclose(got[task][lang][key], want[task][lang][key], abs_tol=1e-6)
    assert math.isclose(got["consistency"]["mrv"], want["consistency"]["mrv"], abs_tol=1e-6)
    assert all(math.isnan(v) for v in got["consistency"]["gap"].values())
    assert set(got["consistency"]["gap"]) == {"fra", "deu", "jpn"}


@pytest.mark.parametrize("budget_mb", [1e-6, 512.0])
def test_score_callable_matches_the_matrix(budget_mb):
    audio, text, ta, tl, tg = random_eval_data(3)
    scores = np.sin(5 * text[:, :1]) * audio[:, 0][None, :] + text @ audio.T / 10
    calls = []

    def rows_fn(rows):
        calls.append(rows.size)
        return torch.tensor(scores[rows])

    want = evaluate_scores(scores, ta, tl, tg)
    got = evaluate_scores(rows_fn, ta, tl, tg, n_audio=audio.shape[0], memory_budget_mb=budget_mb)
    assert got["t2a"] == want["t2a"] and got["a2t"] == want["a2t"]
    assert got["consistency"]["mrv"] == want["consistency"]["mrv"]
    assert sum(calls) == (len(ta) if budget_mb > 1 else 2 * len(ta))


def test_ties_are_optimistic():
    # clips 0 and 1 are identical: both captions of clip 1 tie with clip 0 and get rank 1
    audio = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    text = np.array([[1.0, 0.1], [1.0, 0.1], [0.1, 1.0]])
    out = evaluate_embeddings(audio, text, [0, 1, 2], ["eng"] * 3, [0, 1, 2])
    assert out["t2a"]["eng"]["R1"] == 100.0
    # a2t: clip 0 and clip 1 tie between captions 0 and 1 -> both own ranks 1
    assert out["a2t"]["eng"]["R1"] == 100.0
    assert_same(out, reference_evaluate(audio, text, [0, 1, 2], ["eng"] * 3, [0, 1, 2]))


def test_a2t_map_by_hand():
    # one clip, 3 own captions at ranks 1, 4, 12 -> (1/1 + 2/4 + 0) / 3; second clip: 1 caption at rank 2
    m = a2t_metrics(np.array([4, 12, 1, 2]), np.array([0, 0, 0, 1]))
    assert math.isclose(m["mAP10"], 100 * ((1 + 0.5) / 3 + 0.5) / 2)
    assert m["R1"] == 50.0 and m["R5"] == 100.0 and m["medR"] == 1.5 and m["meanR"] == 1.5


def test_consistency_by_hand():
    # two groups in eng and fra; fra vectors are the eng ones rotated by 90 degrees in the plane
    audio = np.array([[1.0, 0.0], [0.0, 1.0]])
    text = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [-1.0, 0.0]])
    out = evaluate_embeddings(audio, text, [0, 1, 0, 1], ["eng", "eng", "fra", "fra"], [0, 1, 0, 1])
    # gap = |(0.5, 0.5) - (-0.5, 0.5)| = 1; dis = sqrt(2)
    assert math.isclose(out["consistency"]["gap"]["fra"], 1.0)
    assert math.isclose(out["consistency"]["dis"]["fra"], math.sqrt(2))
    # t2a ranks: eng 1, 1; fra: caption (0,1) for clip 0 -> rank 2; (-1,0) for clip 1 -> scores -1, 0 -> 1
    # MRV = mean of squared deviations: group 0 (1, 2) -> 0.25 each; group 1 (1, 1) -> 0 => 0.5 / 4
    assert math.isclose(out["consistency"]["mrv"], 0.125)
    assert out["consistency"]["n_groups"] == 2


def test_zero_shot_by_hand():
    classes = np.eye(6)
    audio = np.eye(6)[[0, 1, 2]] + np.array([[0, 0.5, 0, 0, 0, 0], [0.9, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    audio[2] = [0.5, 0.5, 0.1, 0.5, 0.5, 0.5]  # class 2 ranked 6th of 6
    out = zero_shot(audio, classes, np.array([0, 1, 2]))
    assert out == {"top1": pytest.approx(100 * 2 / 3), "top5": pytest.approx(100 * 2 / 3)}
    out = zero_shot(torch.tensor(audio), torch.tensor(classes), torch.tensor([1, 1, 2]))
    assert out["top1"] == pytest.approx(100 / 3)  # clip 0 has class 1 second


def test_zero_shot_from_scores_by_hand():
    from mlatr.errors import MlatrError
    from mlatr.evaluation import zero_shot_from_scores

    scores = np.array([[0.9, 0.1, 0.2, 0.0, 0.0, 0.0, 0.3],    # class 0 first
                       [0.5, 0.5, 0.1, 0.0, 0.0, 0.0, 0.0],    # class 1 tied first: optimistic rank 1
                       [0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.7]])   # class 5 ranked 7th of 7
    out = zero_shot_from_scores(scores, np.array([0, 1, 5]))
    assert out == {"top1": pytest.approx(200 / 3), "top5": pytest.approx(200 / 3)}
    out = zero_shot_from_scores(scores, np.array([2, 2, 4]))  # ranks 3, 3, 6
    assert out == {"top1": 0.0, "top5": pytest.approx(200 / 3)}
    with pytest.raises(MlatrError, match="out of range"):
        zero_shot_from_scores(scores, np.array([0, 1, 7]))
    with pytest.raises(MlatrError, match="NaN"):
        zero_shot_from_scores(np.full((1, 2), np.nan), np.array([0]))


def test_prompts():
    want = ["This is a sound of dog.", "This is a sound of car horn."]
    assert zero_shot_prompts(["dog", "car_horn"]) == want
    assert zero_shot_prompts(["chien"], "fra") == ["C'est un son de chien."]
    for lang in ("eng", "fra", "deu", "spa", "nld", "cat", "jpn", "zho"):
        (p,) = zero_shot_prompts(["X"], lang)
        assert "X" in p and p != "X"
