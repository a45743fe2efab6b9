"""Fitting and measuring relevance (issue 45, item 4) against hand computations: the ECE's weighting and its
reading range, the cross-fit's exclusion of the measured units and query texts, the conformal level and the risk
control margin, the query halves and the fitted rule on a library where the answer is known."""

import math

import numpy as np
import pytest

from mlatr.lab.experiments import relevance_fit
from mlatr.lab.experiments.relevance_fit import (
    Library,
    auc,
    cross_fit,
    cross_fit_groups,
    expected_calibration_error,
    query_halves,
    with_translation,
)
from mlatr.search.abstention import conformal_level, crc_margin, level_relevance, relevance_logit
from mlatr.search.relevance import FEATURES


def test_ece_weights_each_bin_by_its_share_of_the_predictions():
    prob = np.array([0.05, 0.05, 0.15, 0.95])
    label = np.array([0, 1, 0, 1])
    # bins of width 0.1: {0.05, 0.05} says 0.05, half are relevant: 0.45 off, 2 of 4 predictions;
    # {0.15}: 0.15 off, 1 of 4; {0.95}: 0.05 off, 1 of 4
    ece, table = expected_calibration_error(prob, label)
    assert ece == pytest.approx(0.5 * 0.45 + 0.25 * 0.15 + 0.25 * 0.05)
    assert table == [(pytest.approx(0.05), 0.5, 2), (pytest.approx(0.15), 0.0, 1), (pytest.approx(0.95), 1.0, 1)]
    # over the predictions a user reads (>= 0.1): 0.15 and 0.95 only, each half of them
    read, table = expected_calibration_error(prob, label, low=0.1)
    assert read == pytest.approx(0.5 * 0.15 + 0.5 * 0.05) and [n for _, _, n in table] == [1, 1]
    assert math.isnan(expected_calibration_error(np.array([0.01]), np.array([1]), low=0.1)[0])


def test_auc_is_the_share_of_pairs_ranked_right_ties_one_half():
    # positives 0.9, 0.5; negatives 0.5, 0.1: pairs (0.9>0.5) (0.9>0.1) (0.5=0.5 half) (0.5>0.1): 3.5 of 4
    assert auc(np.array([0.9, 0.5, 0.5, 0.1]), np.array([1, 1, 0, 0])) == pytest.approx(3.5 / 4)
    assert math.isnan(auc(np.array([0.3]), np.array([1])))


def test_the_conformal_level_lets_through_at_most_alpha_of_the_nonsense():
    null = np.arange(1.0, 81.0)  # 80 nonsense logits 1..80
    level = conformal_level(null, alpha=0.05)
    # m = ceil(81 * 0.95) = 77: the 77 smallest are below the level, the 78th is not
    assert np.sum(null < level) == 77 and 77 < level < 78
    assert np.sum(np.arange(1.0, 20.0) < conformal_level(np.arange(1.0, 20.0), 0.05)) == 19  # m = ceil(19) = 19
    assert conformal_level(np.array([]), 0.05) == -math.inf


def test_the_risk_control_margin_is_the_largest_with_few_enough_false_abstentions():
    excess = np.array([-2.0, 5.0, 0.5, -1.0, 3.0, 4.0, 1.0, 2.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
                       16.0, 17.0])  # 20 answerable queries' logits above their library's level
    margin = crc_margin(excess, alpha=0.1)
    # k = floor(0.1 * 21 - 1) = 1 false abstention allowed: the margin is the 2nd smallest excess, -1
    assert margin == -1.0 and np.sum(excess < margin) == 1
    assert (np.sum(excess < margin) + 1) / 21 <= 0.1 < (np.sum(excess <= margin) + 1) / 21
    assert crc_margin(excess[:5], alpha=0.1) == -math.inf  # 5 queries: even one miss is too many
    assert level_relevance(relevance_logit(0.3), 0.0) == pytest.approx(0.3)
    assert level_relevance(0.0, -math.inf) == 0.0


def test_query_halves_and_cross_fit_groups_split_evenly_and_stably():
    ids = [f"q{i}" for i in range(33)]
    halves = query_halves(ids)
    assert sorted(np.bincount(halves).tolist()) == [16, 17]
    assert query_halves(ids).tolist() == halves.tolist() and query_halves(list(reversed(ids)))[::-1].tolist() == \
        halves.tolist()  # each query's half is its own, not its position's
    groups = cross_fit_groups([f"u{i}" for i in range(14)], 6)
    assert sorted(np.bincount(list(groups.values())).tolist()) == [2, 2, 2, 2, 3, 3]
    assert sorted(cross_fit_groups(["a", "b"], 6).values()) == [0, 1]  # fewer units than groups: one each


def test_a_translation_raises_only_the_caption_features_of_translated_queries():
    rng = np.random.default_rng(0)
    x, xt = rng.random((3, 4, len(FEATURES))), rng.random((3, 4, len(FEATURES)))
    out = with_translation(x, xt, np.array([True, False, True]))
    for col, name in enumerate(FEATURES):
        for q in range(3):
            want = np.maximum(x[q, :, col], xt[q, :, col]) if q != 1 and name in relevance_fit.TRANSLATED \
                else x[q, :, col]
            assert np.array_equal(out[q, :, col], want), (q, name)


def _library(name: str, kind: str, rng, n: int = 30, groups: int = 6) -> Library:
    """A unit whose clip k is relevant to query group k % groups when k < 2 * groups; relevant pairs have a caption
    and a sound that stand out (so a fit can learn them), nonsense and other pairs do not."""
    langs = ["eng", "fra"]
    q_group = np.repeat(np.arange(groups), len(langs))
    relevant = np.zeros((groups, n), bool)
    for k in range(2 * groups):
        relevant[k % groups, k] = True
    relevant[groups - 1] = False  # the last query's concept is absent here
    y = relevant[q_group]

    def feats(pos):
        x = rng.normal(size=pos.shape + (len(FEATURES),)) * [0.05, 1, 0.1, 1, 0.1, 0]
        x[..., 1] += 3 * pos
        x[..., 3] += 4 * pos
        x[..., 4] = 0.6 * pos
        x[..., 5] = pos
        return x

    x = feats(y.astype(float))
    nonsense = {use: feats(np.zeros((8, n))) for use in ("fit", "measure", "index")}
    return Library(name, kind, x, y, langs * groups, q_group, query_halves([f"g{g}" for g in range(groups)])[q_group],
                   relevant, nonsense, rng.random((len(q_group), n)), x[..., 2], rng.normal(size=(len(q_group), 4)),
                   rng.normal(size=(n, 4)))


def test_each_measured_query_comes_from_models_that_never_saw_its_unit_or_its_text(monkeypatch):
    rng = np.random.default_rng(1)
    libs = [_library(f"u{i}", kind, rng) for i in range(4) for kind in ("names", "meaningless")]
    fitted = []
    real_fit_text = relevance_fit.fit_text

    def spy(train, half=None):
        fitted.append(({lib.name for lib in train}, half))
        return real_fit_text(train, half)

    monkeypatch.setattr(relevance_fit, "fit_text", spy)
    res = cross_fit(libs, ["eng", "fra"], progress=lambda _: None)
    groups = res["split"]["groups"]
    assert len(fitted) == len(res["fits"]) == 2 * len(set(groups.values()))
    for (names, half), fit in zip(fitted, res["fits"], strict=True):  # each fit, and what it measured
        assert not names & set(fit["measured_units"]) and half == 1 - fit["measured_half"]
    for g in set(groups.values()):
        held = {n for n, k in groups.items() if k == g}
        fits = [(names, half) for names, half in fitted if not names & held]
        assert len(fits) == 2 and {half for _, half in fits} == {0, 1}, g  # both halves, without the held-out unit
        assert all(names == set(groups) - held for names, _ in fits)  # and with every other unit
    # every unit's every query measured: recall, relevance and abstention have all the units
    assert set(res["libraries"]) == {f"u{i}" for i in range(4)}
    assert res["abstention_counts"]["names"]["nonsense"] == 4 * 8
    sound = res["sound_calibration"]  # each unit's sound-query figures add up to the pooled ones
    assert set(sound["per_unit"]) == {f"u{i}" for i in range(4)}
    assert sum(u["n"] for u in sound["per_unit"].values()) == sound["n"] == 4 * 10 * 10  # 10 relevant clips, top 10
    for kind, units in res["abstention_per_unit"].items():  # each unit's counts add up to the pooled rates
        assert set(units) == {f"u{i}" for i in range(4)}
        for group, count in res["abstention_counts"][kind].items():
            said, of = (sum(u[group][i] for u in units.values()) for i in (0, 1))
            assert of == count and 100 * said / of == pytest.approx(res["abstention"][kind][group])


def test_the_fitted_rule_catches_nonsense_and_keeps_answerable_queries_on_separable_libraries():
    rng = np.random.default_rng(2)
    libs = [_library(f"u{i}", kind, rng, n=40) for i in range(6) for kind in ("names", "meaningless")]
    res = cross_fit(libs, ["eng", "fra"], progress=lambda _: None)
    a = res["abstention"]["names"]
    assert a["nonsense"] >= 90 and a["relevant"] <= 10 + 1e-9
    c = res["calibration"]
    assert c["auc_first"] > 0.9 and 0 <= c["ece_read"] <= 1
    for kind in ("names", "meaningless"):
        # the trade-off sweeps the margin: abstention never falls as it rises
        for group in ("nonsense", "no_relevant", "relevant"):
            assert np.all(np.diff(res["tradeoff"][kind][group]) >= 0)



def _sound_library(rng, n: int = 40) -> Library:
    """A unit of ``n`` clips in 4 concepts (clip k in concept k % 4, all relevant to some query), audio near each
    concept's centre, so that a clip's nearest neighbours are mostly its own concept's."""
    centres = rng.normal(size=(4, 8))
    audio = centres[np.arange(n) % 4] + 0.6 * rng.normal(size=(n, 8))
    audio /= np.linalg.norm(audio, axis=1, keepdims=True)
    relevant = np.zeros((4, n), bool)
    relevant[np.arange(n) % 4, np.arange(n)] = True
    lib = _library("s", "names", rng, n=n, groups=4)
    lib.relevant, lib.audio_emb = relevant, audio
    return lib


def test_sound_pairs_are_each_relevant_clips_nearest_neighbours_as_a_user_reads_them():
    rng = np.random.default_rng(5)
    lib = _sound_library(rng)
    for shown in (3, None):
        x, y = relevance_fit.sound_pairs(lib, shown)
        k = 39 if shown is None else shown
        assert x.shape == (40 * k, 2) and y.shape == (40 * k,)
        for q in (0, 17, 39):  # brute force: the k other clips of highest cosine, relevant when same concept
            cos = [(float(lib.audio_emb[q] @ lib.audio_emb[j]), j) for j in range(40) if j != q]
            near = sorted(cos, reverse=True)[:k]
            assert np.allclose(x[q * k:(q + 1) * k, 0], [c for c, _ in near])
            assert y[q * k:(q + 1) * k].tolist() == [float(j % 4 == q % 4) for _, j in near]


def test_the_sound_relevance_is_calibrated_on_the_hits_a_user_reads():
    """Isotonic regression keeps the mean of what it is fitted on: the mean relevance over the fitted libraries'
    shown hits is their share of relevant pairs, which differs from that over every pair (fitted there, the mean
    would follow every pair's)."""
    rng = np.random.default_rng(6)
    libs = [_sound_library(rng) for _ in range(3)]
    model = relevance_fit.fit_sound(libs)
    shown = [relevance_fit.sound_pairs(lib) for lib in libs]
    p = np.concatenate([model.relevance(model.score(x)) for x, _ in shown])
    y = np.concatenate([y for _, y in shown])
    every = np.concatenate([relevance_fit.sound_pairs(lib, None)[1] for lib in libs])
    assert abs(y.mean() - every.mean()) > 0.2  # the two readings differ on these libraries
    assert p.mean() == pytest.approx(y.mean(), abs=1e-9)
