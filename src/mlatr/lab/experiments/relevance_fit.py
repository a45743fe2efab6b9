"""Fit and measure a model's text-search relevance, "nothing relevant" and classification probabilities on
libraries it never trained on (issues 33 and 45).

Input: the fold embeddings of the model's leave-one-library-out run (``FOLD.npz``: ``mlatr demo-real``'s
``unseen/embeddings`` (:func:`mlatr.lab.experiments.learning_curve.run_learning_curve` with ``keep_embeddings``), or
``mlatr experiment unseen-library``'s ``embeddings/ENC/HEADS``;
:func:`mlatr.lab.experiments.text_search_eval.fold_embeddings`):
for each held-out unit (a library, or a fold of several small ones), what the model trained without it makes
of its clips, its file names, the 32 x 8 hand-written queries, three draws of nonsense queries and the
zero-shot prompts of its folder labels.

**Cross-fitted twice over** (:func:`cross_fit`): the held-out units are dealt into :data:`CROSS_FIT_GROUPS`
groups (:func:`cross_fit_groups`) and the hand-written queries into two halves by a hash of their id
(:func:`query_halves`: all eight languages of a query in one half). The figures of a query on a unit come
from models fitted on the *other* groups' units and on the *other* half's queries (with the ``fit`` draw of
nonsense queries): no measured library and no measured query text (in any language) was fitted on. Nonsense
figures use the ``measure`` draw; each unit's own "nothing relevant" level uses the ``index`` draw, as an
index fits it at build (:mod:`mlatr.search.abstention`).

What is fitted (:func:`fit_calibration`, the same fits on every unit and every query for the model's own
calibration, stored with its weights: :func:`calibrate_command` with ``model``):

- the hit relevance model (:func:`fit_text`): a logistic regression on the monotone expansion of the pair
  features (:func:`mlatr.search.relevance.expand`) with non-negative weights, its probability calibrated by
  isotonic regression on the top :data:`SHOWN` hits of every fitted query;
- the answer model (:func:`fit_answer`): whether one of the top :data:`~mlatr.search.relevance.ANSWER_DEPTH`
  hits is relevant, from what the whole ranking says, its probability calibrated on the hand-written queries
  and kept between the best hit's relevance and the chance that one of the hits is (what the hits say);
- the "nothing relevant" rule (:func:`fit_margin`): each index's own split-conformal level on nonsense queries
  run against it (:func:`conformal_level`), moved by a margin chosen by conformal risk control so that
  answerable queries are wrongly called irrelevant at most :data:`FALSE_ABSTENTION` of the time;
- the sound-query relevance (:func:`fit_sound`) and the classification temperature (:func:`fit_temperature`).

Rankings compared (:data:`RANKINGS`): ``audio`` (sound only), ``captions`` (caption cosine only), ``rrf`` (issue
22's default: weighted reciprocal-rank fusion) and ``logistic`` (the default). Calibration is measured as the
expected calibration error of the top :data:`SHOWN` hits (pooled, over the hits of relevance >= 0.1 a user reads,
and per library) and the AUC with which the first hit's relevance separates right first hits from wrong ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from mlatr.data.splits import hash_unit
from mlatr.errors import MlatrError
from mlatr.evaluation.queries import keyword_relevance, multilingual_query_eval, pessimistic_ranks
from mlatr.inference.checkpoint import read_checkpoint, store_calibration
from mlatr.inference.loaded_model import Classification
from mlatr.inference.model_folder import is_model_folder, read_model_folder
from mlatr.inference.model_identity import weights_sha256
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.lab.experiments.real_heads import METADATA, NONSENSE_SEEDS, RealSounds
from mlatr.lab.experiments.text_search_eval import query_texts
from mlatr.plotting import pyplot
from mlatr.search.abstention import FALSE_ABSTENTION, NONSENSE_MISSED, conformal_level, crc_margin, relevance_logit
from mlatr.search.analysis import tokens
from mlatr.search.fusion import TRANSLATED
from mlatr.search.lexical import KeywordIndex
from mlatr.search.relevance import (
    ANSWER_FEATURES,
    FEATURES,
    Calibration,
    Calibrator,
    LibraryStats,
    Moments,
    QueryStats,
    RelevanceModel,
    answer_features,
    answer_relevance,
    expand,
    pair_features,
    rare_cutoff,
)

RANKINGS = ("audio", "captions", "rrf", "logistic")
#: The shown hits on which calibration (ECE) is measured: the top ``SHOWN`` of each query.
SHOWN = 10
#: Bins of the reliability diagram and ECE.
ECE_BINS = 10
#: The relevance from which a hit is one a user reads (issue 45: ECE over these, beside the pooled figure).
READ_FROM = 0.1
#: Groups the held-out units are dealt into for cross-fitting (fewer when there are fewer units).
CROSS_FIT_GROUPS = 6
#: Share of the non-relevant (query, clip) pairs kept to fit the hit model (each weighs 1 / this; the positives
#: are all kept). Seeded per library.
NEGATIVE_SHARE = 0.25
#: The query groups of the "nothing relevant" rates (issue 33, item 3 (a)-(c)).
GROUPS = ("nonsense", "no_relevant", "relevant")


@dataclass
class Library:
    """One held-out unit with one kind of metadata: per-query features and labels."""

    name: str
    kind: str
    x: np.ndarray  # [Q, n, F] features of the hand-written queries
    y: np.ndarray  # [Q, n] relevant
    q_lang: list[str]
    q_group: np.ndarray  # [Q] the query each row asks (its translation group)
    q_half: np.ndarray  # [Q] 0 or 1: the half of the queries it belongs to (query_halves)
    relevant: np.ndarray  # [G, n]
    nonsense: dict[str, np.ndarray]  # use -> [Z, n, F]
    rrf: np.ndarray  # [Q, n] the previous default's fused scores
    captions: np.ndarray  # [Q, n] caption cosines (-inf: no caption)
    query_emb: np.ndarray
    audio_emb: np.ndarray

    @property
    def has(self) -> np.ndarray:
        """``[Q]`` whether the unit holds a clip relevant to each query row."""
        return self.relevant.any(axis=1)[self.q_group]


def query_halves(ids: list[str]) -> np.ndarray:
    """``[G]`` 0 or 1 for each hand-written query (by id): the queries ordered by ``hash_unit("half:" + id)``,
    alternately in one half and the other (so the halves differ by one query at most, whatever the ids)."""
    order = np.argsort([hash_unit(f"half:{i}") for i in ids], kind="stable")
    halves = np.zeros(len(ids), np.int64)
    halves[order[1::2]] = 1
    return halves


def cross_fit_groups(names: list[str], groups: int = CROSS_FIT_GROUPS) -> dict[str, int]:
    """The cross-fit group of each held-out unit: the units ordered by ``hash_unit("group:" + name)``, dealt into
    ``min(groups, units)`` groups in turn."""
    k = max(1, min(groups, len(names)))
    order = sorted(names, key=lambda n: hash_unit(f"group:{n}"))
    return {name: i % k for i, name in enumerate(order)}


def _scores(q: np.ndarray, a: np.ndarray, c: np.ndarray, has: np.ndarray, texts: list[str], langs: list[str],
            names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``([Q, n, F] features, [Q, n] old-tokenizer BM25)`` of the queries ``q`` over one library, as
    :class:`~mlatr.search.hybrid.TextRanker` computes them."""
    stats = LibraryStats(Moments.of(a), Moments.of(c, has))
    sound = q @ a.T
    caption = np.where(has[None], q @ c.T, -np.inf)
    keywords = KeywordIndex(names, ["eng"] * len(names))
    feats = []
    for i, (text, lang) in enumerate(zip(texts, langs, strict=True)):
        terms = keywords.terms(text, lang)
        query = QueryStats.of(stats, q[i], keywords.idf_mass(terms), rare_cutoff(caption[i]))
        feats.append(pair_features(sound[i], caption[i], keywords.scores_of(terms), query))
    old = KeywordIndex(names, analyse=lambda t, _lang: tokens(t))
    old_kw = np.stack([old.scores(t, None) for t in texts]) if texts else np.zeros((0, len(names)))
    return np.stack(feats).astype(np.float32), old_kw


def rrf_scores(sound: np.ndarray, caption: np.ndarray, keyword: np.ndarray, gate: float = 0.4, k: float = 5.0,
               weight: float = 1.0) -> np.ndarray:
    """The previous default ranking (issue 22, commit d32382e): weighted reciprocal-rank fusion
    ``sum_s w_s / (k + rank_s)`` of sound (every clip), caption (cosine >= ``gate``) and keyword (BM25 > 0)."""
    def ranks(scores, eligible):
        masked = np.where(eligible, scores, -np.inf)
        order = np.argsort(-masked, axis=-1, kind="stable")
        r = np.empty_like(order)
        np.put_along_axis(r, order, np.broadcast_to(np.arange(1, scores.shape[-1] + 1), order.shape), axis=-1)
        return np.where(eligible, r, 0)
    total = np.zeros(sound.shape)
    for r, w in ((ranks(sound, np.isfinite(sound)), 1.0), (ranks(caption, caption >= gate), weight),
                 (ranks(keyword, keyword > 0), weight)):
        total += np.where(r > 0, w / (k + np.maximum(r, 1)), 0.0)
    return total


def with_translation(x: np.ndarray, translated: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The features ``x [Q, n, F]`` where the rows ``rows [Q]`` (queries with a translation) take, for each
    :data:`TRANSLATED` feature, the better of the query's and its translation's (``translated [Q, n, F]``, whose
    sound features are the query's own): what a search that translates the query sees
    (:func:`mlatr.search.fusion.features`, where Apertium's pair is installed; :func:`load_libraries` applies it
    when asked)."""
    out = x.copy()
    cols = [FEATURES.index(c) for c in TRANSLATED]
    out[np.ix_(rows, np.arange(x.shape[1]), cols)] = np.maximum(x[rows][..., cols], translated[rows][..., cols])
    return out


def load_libraries(folder: str | Path, data: RealSounds, translate: bool = False) -> list[Library]:
    """Every held-out unit of ``folder`` (``*.npz`` fold embeddings) with each kind of metadata; with ``translate``
    and the queries' translations kept, the caption and keyword features of a translated query are the better of
    its own and its translation's (:func:`with_translation`: what a search computes where Apertium's Spanish and
    Catalan pairs are installed; without, what one computes where they are not).
    A unit kept before the ``index`` draw of nonsense queries existed uses its ``fit`` draw for its own level."""
    files = sorted(Path(folder).glob("*.npz"))
    if not files:
        raise MlatrError(f"{folder}: no fold embeddings (*.npz); run mlatr demo-real or mlatr experiment "
                         "unseen-library first")
    q_text, q_lang, q_group = query_texts(data)
    halves = query_halves([q["id"] for q in data.queries])
    nonsense = {use: data.nonsense(seed) for use, seed in NONSENSE_SEEDS.items()}
    out = []
    for f in files:
        z = np.load(f)
        if translate and "queries_translated" not in z:
            raise MlatrError(f"{f}: kept without the queries' translations, so a translated reading of it would be "
                             "the untranslated one; keep the fold embeddings again with the current code (the "
                             "translations are made where Apertium's Spanish and Catalan pairs are installed)")
        rows = z["rows"].tolist()
        relevant = keyword_relevance(data.queries, [" ".join(data.english(i)) for i in rows])
        for kind in METADATA:
            names = [data.metadata(i, kind) for i in rows]
            c, has = z[f"caption_{kind}"], z[f"has_{kind}"]
            x, old_kw = _scores(z["queries"], z["audio"], c, has, q_text, q_lang, names)
            caption = np.where(has[None], z["queries"] @ c.T, -np.inf)
            if translate:
                english = z["query_translations"].tolist()
                rows_t = np.array([bool(t) for t in english])
                qt = z["queries_translated"]
                xt, _ = _scores(qt, z["audio"], c, has, [t or text for t, text in zip(english, q_text, strict=True)],
                                ["eng" if t else lang for t, lang in zip(english, q_lang, strict=True)], names)
                x = with_translation(x, xt, rows_t)
                caption = np.where(rows_t[:, None], np.maximum(caption, np.where(has[None], qt @ c.T, -np.inf)),
                                   caption)
            rrf = rrf_scores(z["queries"] @ z["audio"].T, caption, old_kw)
            ns = {use: _scores(z[f"nonsense_{use if f'nonsense_{use}' in z else 'fit'}"], z["audio"], c, has,
                               [x_["text"] for x_ in qs], [x_["lang"] for x_ in qs], names)[0]
                  for use, qs in nonsense.items()}
            out.append(Library(f.stem, kind, x, relevant[q_group], q_lang, q_group, halves[q_group], relevant, ns,
                               rrf, caption, z["queries"], z["audio"]))
    return out


# ---- the hit relevance model --------------------------------------------------------------------------

def _fitted_rows(lib: Library, half: int | None) -> np.ndarray:
    """``[Q]`` the query rows of ``lib`` a fit on ``half`` reads (None: every row)."""
    return np.ones(len(lib.q_half), bool) if half is None else lib.q_half == half


def _training_rows(libs: list[Library], half: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x [P, F], y [P], weight [P])`` of the pairs of ``libs``' queries of ``half`` and their ``fit`` nonsense
    queries (negatives): every positive pair and a seeded share :data:`NEGATIVE_SHARE` of the negatives (weighted up
    by its inverse); each library and kind weighs the same in all."""
    xs, ys, ws = [], [], []
    for lib in libs:
        f = lib.x.shape[-1]
        x = np.concatenate([lib.x[_fitted_rows(lib, half)].reshape(-1, f), lib.nonsense["fit"].reshape(-1, f)])
        y = np.concatenate([lib.y[_fitted_rows(lib, half)].reshape(-1), np.zeros(lib.nonsense["fit"].shape[0]
                                                                                   * lib.nonsense["fit"].shape[1])])
        rng = np.random.default_rng(int(hash_unit(f"negatives:{lib.name}:{lib.kind}") * 2 ** 32))
        keep = (y > 0) | (rng.random(len(y)) < NEGATIVE_SHARE)
        x, y, w = x[keep], y[keep], np.where(y > 0, 1.0, 1.0 / NEGATIVE_SHARE)[keep]
        xs.append(x)
        ys.append(y)
        ws.append(w / w.sum())
    w = np.concatenate(ws)
    return np.concatenate(xs).astype(np.float64), np.concatenate(ys), w * len(w) / w.sum()


def fit_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, features: tuple[str, ...] = FEATURES) -> RelevanceModel:
    """Weighted logistic regression on :func:`~mlatr.search.relevance.expand`'s inputs with non-negative
    weights (L-BFGS-B with bounds; the intercept free; a small L2 penalty)."""
    phi = expand(x, features)  # [P, E]
    w = w / w.sum()
    l2 = 1e-4

    def loss(theta):
        z = phi @ theta[:-1] + theta[-1]
        p = 1.0 / (1.0 + np.exp(-z))
        value = float(np.sum(w * (np.logaddexp(0.0, z) - y * z))) + l2 * float(theta[:-1] @ theta[:-1])
        grad = np.concatenate([phi.T @ (w * (p - y)) + 2 * l2 * theta[:-1], [np.sum(w * (p - y))]])
        return value, grad

    theta0 = np.zeros(phi.shape[1] + 1)
    bounds = [(0.0, None)] * phi.shape[1] + [(None, None)]
    res = minimize(loss, theta0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": 1000})
    return RelevanceModel("logistic", features, Calibrator(np.zeros(2), np.zeros(2)), 0.5,
                          weights=res.x[:-1].astype(np.float64), bias=float(res.x[-1]))


def _scores_of(model: RelevanceModel, x: np.ndarray) -> np.ndarray:
    """``[Q, n]`` the fused scores of the candidate lists ``x [Q, n, F]``."""
    return model.score(x.reshape(-1, x.shape[-1])).reshape(x.shape[:2])


def _top(model: RelevanceModel, x: np.ndarray, k: int = SHOWN) -> tuple[np.ndarray, np.ndarray]:
    """``(order [Q, k], fused scores [Q, k])`` of the fused ranking of ``x [Q, n, F]``."""
    scores = _scores_of(model, x)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, 1)


def calibrate(model: RelevanceModel, libs: list[Library], half: int | None = None) -> RelevanceModel:
    """``model`` with an isotonic calibrator fitted on the top :data:`SHOWN` hits of the queries of ``half`` (and of
    the ``fit`` nonsense queries) of ``libs``, where the relevance is read."""
    s, y = [], []
    for lib in libs:
        rows = _fitted_rows(lib, half)
        for x, labels in ((lib.x[rows], lib.y[rows]), (lib.nonsense["fit"], np.zeros(lib.nonsense["fit"].shape[:2]))):
            order, scores = _top(model, x)
            s.append(scores.ravel())
            y.append(np.take_along_axis(labels, order, 1).ravel())
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(np.concatenate(s), np.concatenate(y))
    model.calibrator = Calibrator(np.asarray(iso.X_thresholds_, np.float64), np.asarray(iso.y_thresholds_, np.float64))
    return model


def fit_text(libs: list[Library], half: int | None = None) -> RelevanceModel:
    """The hit relevance model fitted on the queries of ``half`` of ``libs`` (module docstring)."""
    return calibrate(fit_logistic(*_training_rows(libs, half)), libs, half)


# ---- the answer model and the "nothing relevant" rule -------------------------------------------------

def answer_rows(model: RelevanceModel, x: np.ndarray) -> np.ndarray:
    """``[Q, len(ANSWER_FEATURES)]`` the :func:`~mlatr.search.relevance.answer_features` of the queries'
    candidate lists ``x [Q, n, F]`` ranked by ``model``."""
    scores = _scores_of(model, x)
    rel = model.relevance(scores)
    return np.stack([answer_features(scores[i], rel[i], x[i]) for i in range(len(x))])


def answered(model: RelevanceModel, lib: Library, rows: np.ndarray | None = None) -> np.ndarray:
    """``[Q]`` whether one of the top :data:`SHOWN` hits of each query row of ``lib`` (``rows``: those) is
    relevant: what the answer's relevance is the probability of."""
    rows = np.ones(len(lib.x), bool) if rows is None else rows
    order, _ = _top(model, lib.x[rows])
    return np.take_along_axis(lib.y[rows], order, 1).any(axis=1)


def _monotone_calibrator(score: np.ndarray, label: np.ndarray) -> Calibrator:
    """A strictly increasing map from a score to a probability (Platt scaling: a logistic regression on the
    score alone), sampled at 201 points over the scores' range: no plateau, so a higher score always reads
    as a higher probability (isotonic regression would make whole ranges of answers equal)."""
    lo, hi = float(np.min(score)), float(np.max(score))
    grid = np.linspace(lo, hi if hi > lo else lo + 1.0, 201)
    if len(set(np.asarray(label, bool).tolist())) < 2:  # one outcome only (a tiny library): its frequency
        return Calibrator(grid, np.full(len(grid), float(np.mean(label))))
    lr = LogisticRegression(C=1e6, max_iter=1000).fit(score[:, None], label)
    return Calibrator(grid, lr.predict_proba(grid[:, None])[:, 1])


def fit_answer(libs: list[Library], model: RelevanceModel, half: int | None = None) -> RelevanceModel:
    """The answer model on ``libs``' queries of ``half`` (ranked by ``model``): a logistic regression (scikit-learn,
    L2, C = 1) of "one of the top hits is relevant" on the :data:`ANSWER_FEATURES` of the hand-written queries and
    of the ``fit`` nonsense draw (the three groups of :data:`GROUPS` weighing the same), its probability calibrated
    (strictly increasing, :func:`_monotone_calibrator`) on the hand-written queries alone."""
    xs, groups, labels = [], [], []
    for lib in libs:
        rows = _fitted_rows(lib, half)
        has = lib.has[rows]
        xs += [answer_rows(model, lib.x[rows]), answer_rows(model, lib.nonsense["fit"])]
        groups += [np.where(has, 2, 1), np.zeros(len(lib.nonsense["fit"]), np.int64)]
        labels += [answered(model, lib, rows), np.zeros(len(lib.nonsense["fit"]), bool)]
    x, g, label = np.concatenate(xs), np.concatenate(groups), np.concatenate(labels)
    w = np.zeros(len(g))
    for k in range(len(GROUPS)):
        w[g == k] = len(g) / max(int(np.sum(g == k)), 1) / len(GROUPS)
    lr = LogisticRegression(C=1.0, max_iter=5000).fit(x, label, sample_weight=w)
    answer = RelevanceModel("linear", ANSWER_FEATURES, Calibrator(np.zeros(2), np.zeros(2)), 0.5,
                            weights=lr.coef_[0].astype(np.float64), bias=float(lr.intercept_[0]))
    real = g > 0
    answer.calibrator = _monotone_calibrator(answer.score(x[real]), label[real])
    return answer


def answer_logits(model: RelevanceModel, answer: RelevanceModel, x: np.ndarray) -> np.ndarray:
    """``[Q]`` the logit of the answer's relevance (:func:`~mlatr.search.relevance.answer_relevance`,
    :func:`~mlatr.search.abstention.relevance_logit`) of the candidate lists ``x [Q, n, F]``: what "nothing
    relevant" compares with a level."""
    return np.array([relevance_logit(answer_relevance(answer, r)) for r in answer_rows(model, x)])


def unit_level(model: RelevanceModel, answer: RelevanceModel, lib: Library) -> float:
    """A unit's own "nothing relevant" level (logit): :func:`~mlatr.search.abstention.conformal_level` of its
    ``index`` draw of nonsense queries, as an index built of it fits it."""
    return conformal_level(answer_logits(model, answer, lib.nonsense["index"]))


def fit_margin(libs: list[Library], model: RelevanceModel, answer: RelevanceModel, half: int | None = None) -> float:
    """The margin added to every index's conformal level (:func:`~mlatr.search.abstention.crc_margin`) so that
    the answerable queries of ``half`` of ``libs`` (each compared with its own unit's level) are called irrelevant
    at most :data:`~mlatr.search.abstention.FALSE_ABSTENTION` of the time (conformal risk control)."""
    excess = [answer_logits(model, answer, lib.x[_fitted_rows(lib, half) & lib.has]) - unit_level(model, answer, lib)
              for lib in libs]
    return crc_margin(np.concatenate(excess))


# ---- measuring -------------------------------------------------------------------------------------------

def expected_calibration_error(prob: np.ndarray, label: np.ndarray, bins: int = ECE_BINS,
                               low: float = 0.0) -> tuple[float, list]:
    """ECE over equal-width bins of ``[low, 1]`` (``prob`` below ``low`` left out): the mean over the predictions of
    ``|bin's mean probability - bin's frequency|``, each bin weighing its share of the predictions, and
    ``[(mean prob, frequency, count)]`` per non-empty bin."""
    prob, label = np.asarray(prob, float).ravel(), np.asarray(label, float).ravel()
    keep = prob >= low
    prob, label = prob[keep], label[keep]
    if not len(prob):
        return float("nan"), []
    which = np.minimum(((prob - low) / (1.0 - low) * bins).astype(int), bins - 1)
    ece, table = 0.0, []
    for b in range(bins):
        sel = which == b
        if sel.any():
            conf, freq = float(prob[sel].mean()), float(label[sel].mean())
            ece += sel.sum() / len(prob) * abs(conf - freq)
            table.append((conf, freq, int(sel.sum())))
    return float(ece), table


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """The probability that a random positive scores above a random negative, ties counting one half
    (Mann-Whitney); NaN without both."""
    score, label = np.asarray(score, float), np.asarray(label, bool)
    pos, neg = score[label], score[~label]
    if not len(pos) or not len(neg):
        return float("nan")
    neg = np.sort(neg)
    below = np.searchsorted(neg, pos, side="left")
    tied = np.searchsorted(neg, pos, side="right") - below
    return float((below + 0.5 * tied).sum() / (len(pos) * len(neg)))


def _r10(lib: Library, scores: np.ndarray) -> float:
    keep = lib.has
    if not keep.any():
        return float("nan")
    return 100 * float(np.mean(pessimistic_ranks(scores[keep], lib.y[keep]) <= 10))


def lost_to_captions(lib: Library, scores: np.ndarray) -> dict:
    """What the ranking ``scores [Q, n]`` of ``lib`` loses and gains against captions only at 10: the
    query-language pairs each finds a relevant clip for in its top 10 and the other does not, and for those
    it loses, the range of the relevant clip's caption rank, cosine and z-score (its best relevant clip by
    caption)."""
    keep = lib.has
    ours, theirs = pessimistic_ranks(scores, lib.y), pessimistic_ranks(lib.captions, lib.y)
    lost = np.flatnonzero(keep & (theirs <= 10) & (ours > 10))
    gained = int(np.sum(keep & (theirs > 10) & (ours <= 10)))
    out = {"lost": len(lost), "gained": gained, "pairs": int(keep.sum()),
           "lost_langs": [lib.q_lang[i] for i in lost]}
    if len(lost):
        best = [np.flatnonzero(lib.y[i])[np.argmax(lib.captions[i, lib.y[i] > 0])] for i in lost]
        cap, cz = lib.x[..., FEATURES.index("caption")], lib.x[..., FEATURES.index("caption_z")]
        for key, values in (("caption_rank", theirs[lost]), ("ranked", ours[lost]),
                            ("caption", cap[lost, best]), ("caption_z", cz[lost, best])):
            out[key] = [float(np.min(values)), float(np.max(values))]
    return out


#: The margins the trade-off figure sweeps (added to every unit's conformal level, logit).
SWEEP = np.linspace(-6.0, 6.0, 121)


@dataclass
class _Measured:
    """What the cross-fit measures of one unit and kind, each query row from the models that did not see it."""

    scores: np.ndarray  # [Q, n] the default ranking's fused scores
    relevance: np.ndarray  # [Q, n] its relevance
    excess: np.ndarray  # [Q] answer logit less the unit's level (of the query's model)
    margin: np.ndarray  # [Q] that model's fitted margin
    nonsense_excess: np.ndarray  # [Z] the measure draw's, from the half-0 models
    nonsense_margin: float
    answer: np.ndarray  # [Q] the answer's relevance
    answered: np.ndarray  # [Q] one of the top hits is relevant


def cross_fit(libs: list[Library], languages: list[str], progress=print) -> dict:
    """Every ranking on every held-out unit, the default's calibration, "nothing relevant" and the sound-query
    relevance, each query from models fitted on the other groups' units and the other half's queries
    (module docstring): ``{"libraries": {name: {kind: {ranking: {"t2a": {lang: {R1, R10}}, "mrv",
    "n_queries"}}}}, "calibration", "answer_calibration", "abstention", "tradeoff", "margins",
    "sound_calibration", "split"}``."""
    names = sorted({lib.name for lib in libs})
    group_of = cross_fit_groups(names)
    measured: dict[tuple[str, str], _Measured] = {}
    margins, sound_shown, sound_all, fits = {}, {}, {}, []
    for g in sorted(set(group_of.values())):
        train = [lib for lib in libs if group_of[lib.name] != g]
        test = [lib for lib in libs if group_of[lib.name] == g]
        sound = fit_sound(train)
        for lib in test:
            if lib.kind == METADATA[0]:
                for shown, into in ((SHOWN, sound_shown), (None, sound_all)):
                    x, y = sound_pairs(lib, shown)
                    if len(y):
                        into[lib.name] = (sound.relevance(sound.score(x)), y)
        for half in (0, 1):
            progress(f"fitting without group {g} ({', '.join(sorted({lib.name for lib in test}))}), "
                     f"on query half {1 - half}")
            model = fit_text(train, 1 - half)
            answer = fit_answer(train, model, 1 - half)
            margin = fit_margin(train, model, answer, 1 - half)
            margins[f"{g}/{half}"] = margin
            fits.append({"measured_units": sorted({lib.name for lib in test}), "measured_half": half})
            for lib in test:
                rows = lib.q_half == half
                key = (lib.name, lib.kind)
                if key not in measured:
                    q, z = lib.x.shape[:2]
                    measured[key] = _Measured(np.zeros((q, z)), np.zeros((q, z)), np.zeros(q), np.zeros(q),
                                              np.zeros(0), 0.0, np.zeros(q), np.zeros(q, bool))
                m = measured[key]
                scores = _scores_of(model, lib.x[rows])
                m.scores[rows], m.relevance[rows] = scores, model.relevance(scores)
                level = unit_level(model, answer, lib)
                logits = answer_logits(model, answer, lib.x[rows])
                m.excess[rows], m.margin[rows] = logits - level, margin
                m.answer[rows] = 1.0 / (1.0 + np.exp(-logits))
                m.answered[rows] = answered(model, lib, rows)
                if half == 0:
                    m.nonsense_excess = answer_logits(model, answer, lib.nonsense["measure"]) - level
                    m.nonsense_margin = margin
    out = {"default": "logistic", "margins": margins, "fits": fits,
           "split": {"groups": {n: group_of[n] for n in names},
                     "halves": {"ids": None}}}  # filled by measure()
    out.update(_rankings(libs, measured, languages))
    out.update(_calibration(libs, measured))
    out.update(_abstention(libs, measured))
    out["sound_calibration"] = _sound_calibration(sound_shown, sound_all)
    return out


def _rankings(libs: list[Library], measured: dict, languages: list[str]) -> dict:
    per_lib: dict = {}
    lost: dict = {}
    for lib in libs:
        m = measured[(lib.name, lib.kind)]
        res = {}
        for ranking in RANKINGS:
            scores = {"audio": lib.x[..., FEATURES.index("sound")], "captions": lib.captions, "rrf": lib.rrf,
                      "logistic": m.scores}[ranking]
            ev = multilingual_query_eval(lib.query_emb, lib.q_lang, lib.q_group, lib.audio_emb, lib.relevant,
                                         languages, scores=scores)
            res[ranking] = {"t2a": {lang: {k: ev["t2a"][lang][k] for k in ("R1", "R10")} for lang in ev["t2a"]},
                            "mrv": ev["consistency"]["mrv"], "n_queries": ev["n_queries"]}
        per_lib.setdefault(lib.name, {})[lib.kind] = res
        lost.setdefault(lib.name, {})[lib.kind] = lost_to_captions(lib, m.scores)
    return {"libraries": per_lib, "against_captions": lost}


def _calibration(libs: list[Library], measured: dict) -> dict:
    """ECE of the top hits (pooled; over those of relevance >= :data:`READ_FROM`; per unit), over every pair, the
    first hit's AUC, and the answer's ECE against what it is the probability of."""
    shown_p, shown_y, all_p, all_y, first_p, first_y, ans_p, ans_y = [], [], [], [], [], [], [], []
    per_unit: dict = {}
    for lib in libs:
        m = measured[(lib.name, lib.kind)]
        order = np.argsort(-m.scores, axis=1, kind="stable")[:, :SHOWN]
        p, y = np.take_along_axis(m.relevance, order, 1), np.take_along_axis(lib.y, order, 1)
        shown_p.append(p.ravel())
        shown_y.append(y.ravel())
        all_p.append(m.relevance.ravel())
        all_y.append(lib.y.ravel())
        first_p.append(p[:, 0])
        first_y.append(y[:, 0])
        ans_p.append(m.answer)
        ans_y.append(m.answered)
        if lib.kind == METADATA[0]:
            e, _ = expected_calibration_error(p, y, low=READ_FROM)
            per_unit[lib.name] = {"ece_read": e, "n_read": int(np.sum(p >= READ_FROM)),
                                  "ece": expected_calibration_error(p, y)[0], "n": int(p.size)}
    p, y = np.concatenate(shown_p), np.concatenate(shown_y)
    ece, table = expected_calibration_error(p, y)
    ece_read, table_read = expected_calibration_error(p, y, low=READ_FROM)
    fp, fy = np.concatenate(first_p), np.concatenate(first_y)
    ece_a, table_a = expected_calibration_error(np.concatenate(ans_p), np.concatenate(ans_y))
    return {"calibration": {"ece_shown": ece, "n_shown": int(p.size), "bins": table, "ece_read": ece_read,
                            "n_read": int(np.sum(p >= READ_FROM)), "bins_read": table_read,
                            "share_read": float(np.mean(p >= READ_FROM)),
                            "ece_all_pairs": expected_calibration_error(np.concatenate(all_p),
                                                                        np.concatenate(all_y))[0],
                            "per_unit": per_unit, "auc_first": auc(fp, fy), "n_first": int(len(fy)),
                            "first_right": float(np.mean(fy))},
            "answer_calibration": {"ece": ece_a, "bins": table_a, "n": int(sum(len(v) for v in ans_p))}}


def _abstention(libs: list[Library], measured: dict) -> dict:
    """"Nothing relevant" rates of each group at each query's fitted rule (pooled, and each unit's counts), and the
    trade-off as the margin moves."""
    values: dict = {kind: {g: [] for g in GROUPS} for kind in METADATA}
    said: dict = {kind: {g: [] for g in GROUPS} for kind in METADATA}
    wrong_top: dict = {kind: [] for kind in METADATA}  # answerable with a relevant clip in the top hits
    per_unit: dict = {kind: {} for kind in METADATA}
    for lib in libs:
        m = measured[(lib.name, lib.kind)]
        has = lib.has
        for group, excess, margin in (("nonsense", m.nonsense_excess, np.full(len(m.nonsense_excess),
                                                                             m.nonsense_margin)),
                                      ("no_relevant", m.excess[~has], m.margin[~has]),
                                      ("relevant", m.excess[has], m.margin[has])):
            values[lib.kind][group].append(excess)
            said[lib.kind][group].append(excess < margin)
            per_unit[lib.kind].setdefault(lib.name, {})[group] = [int(np.sum(excess < margin)), int(len(excess))]
        wrong_top[lib.kind].append((m.excess < m.margin)[has & m.answered])
    rate = {kind: {g: 100 * float(np.mean(np.concatenate(v))) for g, v in groups.items()}
            for kind, groups in said.items()}
    for kind in METADATA:
        rate[kind]["relevant_in_top"] = 100 * float(np.mean(np.concatenate(wrong_top[kind])))
    sweep = {kind: {g: [100 * float(np.mean(np.concatenate(v) < s)) for s in SWEEP] for g, v in groups.items()}
             for kind, groups in values.items()}
    return {"abstention": rate, "tradeoff": {"margin": SWEEP.tolist(), **sweep},
            "abstention_counts": {kind: {g: int(sum(len(v) for v in vs)) for g, vs in groups.items()}
                                  for kind, groups in values.items()},
            "abstention_per_unit": per_unit}  # {kind: {unit: {group: [said, of]}}}


def _sound_calibration(shown: dict[str, tuple[np.ndarray, np.ndarray]],
                       every: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict:
    """ECE of the sound-query relevance over the hits a user reads (each query clip's top :data:`SHOWN`; pooled and
    per unit), its AUC there, and the ECE over every pair; ``shown`` and ``every``: each held-out unit's
    (relevance, label)."""
    if not shown:
        return {"ece": float("nan"), "bins": [], "auc": float("nan"), "ece_all_pairs": float("nan"), "per_unit": {}}
    p, y = (np.concatenate([pair[i] for pair in shown.values()]) for i in (0, 1))
    ece, table = expected_calibration_error(p, y)
    return {"ece": ece, "bins": table, "n": int(len(y)), "auc": auc(p, y),
            "ece_all_pairs": expected_calibration_error(*(np.concatenate([pair[i] for pair in every.values()])
                                                          for i in (0, 1)))[0],
            "per_unit": {name: {"ece": expected_calibration_error(up, uy)[0], "n": int(len(uy)),
                                "relevant": float(np.mean(uy)), "relevance": float(np.mean(up))}
                         for name, (up, uy) in shown.items()}}


# ---- sound queries and classification ---------------------------------------------------------------

def sound_pairs(lib: Library, shown: int | None = SHOWN) -> tuple[np.ndarray, np.ndarray]:
    """``(x [P, 2], y [P])``: each clip of ``lib`` relevant to some hand-written query, as a sound query, against
    its ``shown`` nearest other clips by audio cosine (the hits a user reads; None: every other clip): features
    ``sound``, ``sound_z`` of their audio cosine; relevant when the two clips share a query they are relevant to."""
    a = lib.audio_emb
    concepts = lib.relevant.T.astype(np.float64)  # [n, G]
    queries = np.flatnonzero(concepts.any(axis=1))
    if len(queries) == 0 or len(a) < 3:
        return np.zeros((0, 2)), np.zeros(0)
    sims = a[queries] @ a.T  # [nq, n]
    mean, std = Moments.of(a).score_stats(a[queries])
    z = (sims - mean[:, None]) / np.maximum(std[:, None], 1e-3)
    same = (concepts[queries] @ concepts.T) > 0
    sims[np.arange(len(queries)), queries] = -np.inf  # not the query clip itself
    k = len(a) - 1 if shown is None else min(shown, len(a) - 1)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    sims, z, same = (np.take_along_axis(m, order, 1).ravel() for m in (sims, z, same))
    return np.stack([sims, z], axis=1), same.astype(np.float64)


def fit_sound(libs: list[Library]) -> RelevanceModel:
    """The sound-query relevance model on ``libs``, fitted where it is read, as the text model is: logistic on the
    sound features of each query clip's top :data:`SHOWN` hits (each library weighing the same), calibrated by an
    isotonic regression on those hits."""
    xs, ys, ws = [], [], []
    for lib in libs:
        if lib.kind != METADATA[0]:
            continue
        x, y = sound_pairs(lib)
        if len(y):
            xs.append(x)
            ys.append(y)
            ws.append(np.full(len(y), 1.0 / len(y)))
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    model = fit_logistic(x, y, w, features=("sound", "sound_z"))
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(model.score(x), y)
    model.calibrator = Calibrator(np.asarray(iso.X_thresholds_, np.float64), np.asarray(iso.y_thresholds_, np.float64))
    return model


def classification_logits(folder: str | Path, languages: list[str]) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
    """``{unit: [(cosines [n, C], targets [n]) per language]}`` of the units with two folder labels or more (the
    clips' audio against the zero-shot prompts of the unit's labels)."""
    out = {}
    for f in sorted(Path(folder).glob("*.npz")):
        z = np.load(f)
        classes = list(z["classes"])
        if len(classes) < 2:
            continue
        labelled = np.flatnonzero(z["label"] != "")
        targets = np.array([classes.index(lb) for lb in z["label"][labelled]])
        out[f.stem] = [(z["audio"][labelled] @ z["prompts"][k].T, targets) for k in range(len(languages))]
    return out


def fit_temperature(pairs: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The softmax temperature minimising the mean negative log-likelihood of the targets (each library and
    language weighing the same)."""
    def nll(log_t):
        t = np.exp(log_t)
        total = 0.0
        for cos, y in pairs:
            logits = cos / t
            logits = logits - logits.max(axis=1, keepdims=True)
            total += float(np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(y)), y]))
        return total / len(pairs)
    res = minimize(lambda v: nll(v[0]), np.array([np.log(0.05)]), method="Nelder-Mead")
    return float(np.exp(res.x[0]))


def softmax(cos: np.ndarray, temperature: float) -> np.ndarray:
    """``[n, C]`` the class probabilities ``mlatr classify`` gives for the cosines ``cos [n, C]``."""
    return Classification([str(c) for c in range(cos.shape[1])], cos, temperature).probabilities


def classification_figures(folder: str | Path, languages: list[str], group_of: dict[str, int]) -> dict:
    """Top-1, ECE and "none of these" of the zero-shot folder labels, each unit's temperature fitted on the other
    cross-fit groups' units."""
    logits = classification_logits(folder, languages)
    cls: dict = {"libraries": {}}
    probs, correct, none_in, none_out = [], [], [], []
    for name, pairs in logits.items():
        others = [p for other, ps in logits.items() if group_of.get(other) != group_of.get(name) for p in ps]
        t = fit_temperature(others or [p for ps in logits.values() for p in ps])
        accs = []
        for cos, y in pairs:
            p = softmax(cos, t)
            probs.append(p.max(axis=1))
            correct.append(p.argmax(axis=1) == y)
            accs.append(100 * float(np.mean(p.argmax(axis=1) == y)))
            none_in.append(p.max(axis=1) < 0.5)
            keep = np.ones(cos.shape, bool)
            keep[np.arange(len(y)), y] = False  # the true label left out: "none of these" is the right answer
            if cos.shape[1] > 2:
                none_out.append(softmax(cos[keep].reshape(len(y), -1), t).max(axis=1) < 0.5)
        cls["libraries"][name] = {"top1": float(np.mean(accs)), "temperature": t, "classes": int(pairs[0][0].shape[1])}
    if not probs:
        return {**cls, "top1": float("nan"), "ece": float("nan"), "bins": [], "none_when_present": float("nan"),
                "none_when_absent": float("nan")}
    ece_c, table_c = expected_calibration_error(np.concatenate(probs), np.concatenate(correct))
    cls.update(top1=float(np.mean([v["top1"] for v in cls["libraries"].values()])), ece=ece_c, bins=table_c,
               none_when_present=100 * float(np.mean(np.concatenate(none_in))),
               none_when_absent=100 * float(np.mean(np.concatenate(none_out))) if none_out else float("nan"))
    return cls


# ---- the one command: fit, measure, write -------------------------------------------------------------

def fit_calibration(libs: list[Library], folder: str | Path, languages: list[str], fitted: dict,
                    weights_sha256: str | None) -> Calibration:
    """The model's calibration fitted on every unit and every query of ``libs`` (module docstring), for the weights
    ``weights_sha256``."""
    text = fit_text(libs)
    answer = fit_answer(libs, text)
    margin = fit_margin(libs, text, answer)
    sound = fit_sound(libs)
    levels = [unit_level(text, answer, lib) for lib in libs]
    text.threshold = answer.threshold = float(1.0 / (1.0 + np.exp(-(np.median(levels) + margin))))
    sound.threshold = text.threshold  # a sound query's default level (no index draw of sound queries)
    logits = classification_logits(folder, languages)
    temperature = fit_temperature([p for pairs in logits.values() for p in pairs]) if logits else None
    classify = {"temperature": temperature, "min_probability": 0.5} if temperature else {}
    abstention = {"margin": margin, "nonsense_missed": NONSENSE_MISSED, "false_abstention": FALSE_ABSTENTION,
                  "nonsense_seed": NONSENSE_SEEDS["index"]}
    return Calibration(text, answer, sound, classify, fitted, weights_sha256, abstention)


def measure(libs: list[Library], folder: str | Path, data: RealSounds, progress=print) -> dict:
    """The cross-fitted figures (:func:`cross_fit`) and classification's."""
    res = cross_fit(libs, data.languages, progress=progress)
    halves = query_halves([q["id"] for q in data.queries])
    res["split"]["halves"] = {q["id"]: int(h) for q, h in zip(data.queries, halves, strict=True)}
    res["classification"] = classification_figures(folder, data.languages, res["split"]["groups"])
    return res


def measure_folder(folder: str | Path, data: RealSounds, progress=print) -> dict:
    """:func:`measure` of a run's fold embeddings, JSON-able."""
    libs = load_libraries(folder, data)
    return json.loads(json.dumps(measure(libs, folder, data, progress), default=float))


#: How the report names each ranking.
LABELS = {"audio": "sound only", "captions": "captions only", "rrf": "old fusion (RRF)", "logistic": "default (fused)"}


def _avg(values) -> float:
    values = [v for v in values if v == v]
    return float(np.mean(values)) if values else float("nan")


def _f(x: float, digits: int = 1) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def _meets(v: dict) -> bool:
    """The default's R@10 at least the better of sound only and captions only, less 1 (issue 33 item 1, issue 45
    item 6)."""
    return v["logistic"] >= max(v["audio"], v["captions"]) - 1 - 1e-9


def text_search_report(runs: dict, languages: list[str]) -> list[str]:
    """Markdown lines: for every run with cross-fitted text-search figures (:func:`measure_folder`), recall
    per language and per unit for each ranking and metadata, calibration, abstention, classification."""
    lines = []
    for key, run in runs.items():
        ts = run.get("text_search")
        if not ts:
            continue
        libs = {n: r for n, r in ts["libraries"].items() if r[METADATA[0]]["audio"]["n_queries"]}
        rankings = list(next(iter(libs.values()))[METADATA[0]])
        lines += ["", f"## Text search with the library's own names: {key}", "",
                  f"Mean over {len(libs)} held-out units with a relevant clip for some query; each query's ranking "
                  "and relevance from models fitted on other units and on the other half of the queries (cross-"
                  "fitted). The library's captions are its file names (`names`) or recorder-style names "
                  "(`meaningless`). `ok`: default R@10 >= max(sound only, captions only) - 1.", "",
                  "| metadata / ranking | metric | " + " | ".join([*languages, "avg"]) + " | MRV |",
                  "|---|---|" + "---:|" * (len(languages) + 2)]
        means = {}
        for kind in METADATA:
            for ranking in rankings:
                for metric in ("R1", "R10"):
                    vals = [_avg([r[kind][ranking]["t2a"][lang][metric] for r in libs.values()])
                            for lang in [*languages, "avg"]]
                    means[kind, ranking, metric] = vals
                    mrv = _f(_avg([r[kind][ranking]["mrv"] for r in libs.values()]), 0) if metric == "R1" else ""
                    lines.append(f"| {kind} / {LABELS.get(ranking, ranking)} | R@{metric[1:]} | "
                                 + " | ".join(_f(v) for v in vals) + f" | {mrv} |")
            checks = [_meets({rk: means[kind, rk, "R10"][i] for rk in rankings}) for i in range(len(languages) + 1)]
            lines.append(f"| {kind}: requirement | R@10 | " + " | ".join("ok" if c else "**miss**" for c in checks)
                         + " |  |")
        lines += ["", "Per held-out unit, R@10 (avg of the languages) and the default's R@1.", "",
                  "| unit | metadata | " + " | ".join(LABELS.get(r, r) for r in rankings) + " | default R@1 | ok |",
                  "|---|---|" + "---:|" * (len(rankings) + 1) + "---|"]
        for name, r in libs.items():
            for kind in METADATA:
                v = {rk: r[kind][rk]["t2a"]["avg"]["R10"] for rk in rankings}
                r1 = _f(r[kind]["logistic"]["t2a"]["avg"]["R1"])
                lines.append(f"| {name} | {kind} | " + " | ".join(_f(v[rk]) for rk in rankings)
                             + f" | {r1} | {'ok' if _meets(v) else '**miss**'} |")
        c, a, ac, sc = ts["calibration"], ts["abstention"], ts["answer_calibration"], ts["sound_calibration"]
        lines += ["", f"Relevance calibration (default ranking, top {SHOWN} hits of every query, held-out units): "
                  f"ECE {c['ece_shown']:.3f} over {c['n_shown']} hits; over the {c['n_read']} hits of relevance >= "
                  f"{READ_FROM} ({100 * c['share_read']:.1f} %) ECE {c['ece_read']:.3f}; over every (query, clip) "
                  f"pair {c['ece_all_pairs']:.3f}. The first hit's relevance separates right first hits from wrong "
                  f"ones with AUC {c['auc_first']:.3f} ({c['n_first']} first hits, {100 * c['first_right']:.1f} % "
                  f"right). Sound queries (each relevant clip's top {SHOWN} neighbours): ECE "
                  f"{sc['ece']:.3f}, AUC {sc.get('auc', np.nan):.3f}; over every pair "
                  f"{sc.get('ece_all_pairs', np.nan):.3f}. The answer's relevance (one of "
                  f"the top hits is relevant): ECE {ac['ece']:.3f} over {ac['n']} queries.", "",
                  f"Per unit (names), ECE over the hits of relevance >= {READ_FROM}: "
                  + "; ".join(f"{n} {_f(v['ece_read'], 3)} ({v['n_read']})" for n, v in c["per_unit"].items()) + ".",
                  "", "| \"nothing relevant\" rate, % | (a) nonsense queries | (b) no relevant clip in the library "
                  "| (c) a relevant clip | (c') a relevant clip in the top hits |", "|---|---:|---:|---:|---:|"]
        counts = ts["abstention_counts"]
        for kind in METADATA:
            lines.append(f"| {kind} | " + " | ".join(_f(a[kind][g]) for g in (*GROUPS, "relevant_in_top")) + " |")
            lines.append(f"| {kind}: queries | " + " | ".join(str(counts[kind][g]) for g in GROUPS) + " | |")
        misses = [(name, kind, ts["against_captions"][name][kind]) for name, r in libs.items() for kind in METADATA
                  if not _meets({rk: r[kind][rk]["t2a"]["avg"]["R10"] for rk in rankings})]
        for name, kind, m in misses:
            lines += [f"Miss {name} / {kind}: against captions only, {m['lost']} query-language pairs lost "
                      f"({', '.join(m['lost_langs'])}), {m['gained']} gained, of {m['pairs']}"
                      + (f"; the lost pairs' relevant clip is {m['caption_rank'][0]:.0f}-{m['caption_rank'][1]:.0f}"
                         f" by caption (cosine {m['caption'][0]:.2f}-{m['caption'][1]:.2f}, z-score "
                         f"{m['caption_z'][0]:.2f}-{m['caption_z'][1]:.2f}) and {m['ranked'][0]:.0f}-"
                         f"{m['ranked'][1]:.0f} in the default ranking" if m["lost"] else "") + "."]
        cl = ts["classification"]
        lines += ["", f"Zero-shot folder labels, softmax with a temperature fitted on the other groups' units: top-1 "
                  f"{_f(cl['top1'])} %, ECE {_f(cl['ece'], 3)}; \"none of these\" (best label below 0.5) "
                  f"{_f(cl['none_when_present'])} % when the true label is offered, "
                  f"{_f(cl['none_when_absent'])} % when it is left out."]
    return lines


def plot_reliability(ts: dict, path: str | Path) -> Path:
    """Reliability diagram: mean relevance against the share of relevant hits per bin (text queries: the top hits
    and those of relevance >= 0.1; the answer; sound queries), and the classification's best label."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfect calibration")
    curves = [(f"text queries, top {SHOWN} hits (ECE {ts['calibration']['ece_shown']:.3f})",
               ts["calibration"]["bins"]),
              (f"text queries, hits >= {READ_FROM} (ECE {ts['calibration']['ece_read']:.3f})",
               ts["calibration"]["bins_read"]),
              (f"text queries, the answer (ECE {ts['answer_calibration']['ece']:.3f})",
               ts["answer_calibration"]["bins"]),
              (f"sound queries (ECE {ts['sound_calibration']['ece']:.3f})", ts["sound_calibration"]["bins"])]
    if ts.get("classification", {}).get("bins"):
        curves.append((f"classification, best label (ECE {ts['classification']['ece']:.3f})",
                       ts["classification"]["bins"]))
    for label, bins in curves:
        if not bins:
            continue
        conf, freq, count = (np.array(v) for v in zip(*bins, strict=True))
        ax.plot(conf, freq, marker="o", label=label)
        for x_, y_, n in zip(conf, freq, count, strict=True):
            ax.annotate(str(int(n)), (x_, y_), fontsize=6, xytext=(3, -8), textcoords="offset points")
    ax.set_xlabel("predicted probability (bin mean)")
    ax.set_ylabel("observed frequency")
    ax.set_title("Relevance on libraries never trained on")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_tradeoff(ts: dict, path: str | Path) -> Path:
    """"Nothing relevant" as the margin over each library's conformal level moves: the share of answerable
    queries wrongly called irrelevant (x) against the share of nonsense and of absent-concept queries caught (y),
    one panel per kind of metadata; the fitted rule's measured point marked."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(METADATA), figsize=(11, 5), sharey=True)
    t = ts["tradeoff"]
    for ax, kind in zip(np.atleast_1d(axes), METADATA, strict=True):
        wrong = np.array(t[kind]["relevant"])
        for group, label in (("nonsense", "(a) nonsense caught"), ("no_relevant", "(b) absent concepts caught")):
            line, = ax.plot(wrong, t[kind][group], label=label)
            ax.plot(ts["abstention"][kind]["relevant"], ts["abstention"][kind][group], marker="o",
                    color=line.get_color())
        ax.axvline(100 * FALSE_ABSTENTION, color="grey", linestyle=":", linewidth=1, label="(c) goal")
        ax.axhline(95, color="grey", linestyle="--", linewidth=1, label="(a) goal")
        ax.axhline(80, color="grey", linestyle="-.", linewidth=1, label="(b) goal")
        ax.set_xlabel("(c) answerable queries called \"nothing relevant\" (%)")
        ax.set_title(f"library captions: {kind} (dot: the fitted rule)")
        ax.set_xlim(0, 100)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("caught (%)")
    np.atleast_1d(axes)[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def source_commit() -> str | None:
    """The git commit of the sources this module runs from (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def calibrate_recipe(folder: Path, data: RealSounds, out: Path, weights: str | None = None,
                     about: dict | None = None, progress=_progress, translate: bool = False
                     ) -> tuple[dict, Calibration | None]:
    """Measure the recipe of fold embeddings ``folder`` cross-fitted (:func:`measure`), write ``out/results.json``,
    ``report.md``, ``reliability.png`` and ``nothing-relevant-tradeoff.png``, and with ``weights`` (the SHA-256 of a
    model of that recipe) fit its calibration on every unit and query (:func:`fit_calibration`). ``translate``:
    measure and fit on the features of searches that translate Spanish and Catalan queries into English, as a
    search does where Apertium's pairs are installed (:func:`load_libraries`; the calibration records it).
    Returns ``(results, calibration or None)``."""
    libs = load_libraries(folder, data, translate)
    res = json.loads(json.dumps(measure(libs, folder, data, progress=progress), default=float))
    about = {"command": "mlatr experiment calibrate", "commit": source_commit(), "embeddings": str(folder),
             "translated_queries": translate,
             "clips": len(data.manifest), "units": sorted({lib.name for lib in libs}), **(about or {})}
    res["about"] = about
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "results.json", res)
    plot_reliability(res, out / "reliability.png")
    plot_tradeoff(res, out / "nothing-relevant-tradeoff.png")
    report = "\n".join(["# Text-search ranking, relevance and classification (cross-fitted)", "",
                        f"Fold embeddings {folder}; corpus {about.get('manifest', '?')} ({len(data.manifest)} "
                        f"clips); sources at commit {about['commit'] or 'unknown'}.",
                        *text_search_report({folder.name: {"text_search": res}}, data.languages)]) + "\n"
    cal = None
    if weights is not None:
        cal = fit_calibration(libs, folder, data.languages, about, weights)
        report += f"\nfitted the calibration {cal.id} for the weights sha256 {weights[:12]}\n"
    atomic_write_text(out / "report.md", report)
    return res, cal


def calibration_summary(res: dict, cal: Calibration) -> dict:
    """What a model card says of a model's calibration: which one, and its cross-fitted figures."""
    c, a = res["calibration"], res["abstention"]
    return {"id": cal.id, "weights_sha256": cal.weights_sha256, "fitted": cal.fitted,
            "ece_shown": c["ece_shown"], "ece_read": c["ece_read"], "auc_first": c["auc_first"],
            "abstention": {kind: a[kind] for kind in METADATA}, "margin": cal.abstention.get("margin")}


def calibrate_command(folder: Path, manifest: str | Path, cache_dir: Path, out: Path,
                      model: str | Path | None = None, translate: bool = False) -> str:
    """``mlatr experiment calibrate``: :func:`calibrate_recipe`, and with ``model`` (a checkpoint or model folder of
    the recipe) its calibration stored in it (:func:`~mlatr.inference.checkpoint.store_calibration`). Returns the
    report."""
    data = RealSounds.load(manifest, cache_dir / "aisfx.npz", progress=False)
    weights = None
    if model is not None:
        state = read_model_folder(model) if is_model_folder(model) else read_checkpoint(model)
        weights = weights_sha256(state["model"])
    _, cal = calibrate_recipe(folder, data, out, weights, {"manifest": str(manifest),
                                                           **({"model": str(model)} if model else {})},
                              translate=translate)
    if cal is not None:
        store_calibration(model, cal.to_dict())
        atomic_write_text(out / "report.md", (out / "report.md").read_text(encoding="utf-8")
                          + f"stored it in {model}\n")
    return (out / "report.md").read_text(encoding="utf-8")
