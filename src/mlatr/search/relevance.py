"""Relevance: how probable it is that a clip answers a query, from every source's evidence (issue 33).

The sources of a text search score on scales that mean nothing on their own and move from library to
library: a cross-modal cosine in a narrow band (ATRI eq. 1), a text-to-text cosine whose level depends on
the query, a BM25 score that grows with the query's length and the library's vocabulary. So each is first
put on a scale that transfers, *for this query in this library* (:func:`pair_features`):

- ``sound``, ``sound_z``: the query's cosine with the clip's audio embedding, and its z-score among the
  library's clips (how far this clip stands out for this query);
- ``caption``, ``caption_z``: the best cosine of the query with one of the clip's captions, and its
  z-score among the library's captions (a name that says nothing lifts no clip above the others);
- ``keyword``: the clip's best BM25 score divided by the query's idf mass
  (:meth:`~mlatr.search.lexical.KeywordIndex.idf_mass`): the share of what the query could match;
- ``caption_rare``: 1 when at most a tenth (:data:`RARE_SHARE`) of the library's captioned clips have a
  caption as close to the query (:func:`rare_cutoff`). Names that say nothing come in a few kinds, each
  shared by many clips (``ZOOM0001.wav``, ``track_17.ogg``: a fifth of the library each), so the closest of
  them is never rare; a file name that says what the clip is usually is, even where its cosine is low and
  its z-score modest (a short name, a query in another language).

A clip without caption has the library's mean caption cosine and ``caption_z`` 0 (no caption evidence).

A :class:`RelevanceModel` (fitted for one model on libraries it never trained on:
:mod:`mlatr.lab.experiments.relevance_fit`; stored with the model's weights, :class:`Calibration`) maps the features
to a *fused score* (the ranking: higher first) and the fused score to a calibrated probability, ``relevance``
(monotone in the fused score). A model without a calibration of its own ranks by the default ranking's fused
score (:meth:`Calibration.default`) and reports no relevance.

What a query needs of the library are its *statistics* (:class:`LibraryStats`): the mean and covariance of
the clips' audio embeddings and of the captions' embeddings (so a query's mean and spread of cosines over
the library are ``q . mu`` and ``sqrt(q^T Sigma q)``, exact, without scoring every clip) and the keyword
index's document frequencies. A ranking over a candidate set (every clip, or the union of each source's
top window found by approximate search) needs only the candidates' scores and these statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from mlatr.calibration_file import FORMAT as CALIBRATION_FORMAT
from mlatr.calibration_file import calibration_id, default_ranking, read_calibration
from mlatr.errors import MlatrError

#: The features of a (query, clip) pair, in the order the models take them.
FEATURES = ("sound", "sound_z", "caption", "caption_z", "keyword", "caption_rare")

#: A clip's caption is rare for a query when at most this share of the library's captioned clips have one
#: as close (``caption_rare``).
RARE_SHARE = 0.1

#: Smallest spread of a query's cosines taken as real (a library of one clip, identical captions).
_MIN_STD = 1e-3

#: Weight (in clips) of the prior in a library's statistics (:meth:`Moments.score_stats`).
PRIOR_COUNT = 10


@dataclass
class Moments:
    """Mean ``[d]`` and covariance ``[d, d]`` of a set of ``count`` embeddings (rows)."""

    mean: np.ndarray
    cov: np.ndarray
    count: int

    @classmethod
    def of(cls, parts, keep=None) -> Moments:
        """The moments of the rows of ``parts`` (a list of ``[n_i, d]`` arrays, memory-mapped or not), only
        those where ``keep`` (``[sum n_i]`` bool) is set; accumulated part by part in float64."""
        return cls.of_sums(*sums_of(parts, keep))

    @classmethod
    def of_sums(cls, total: np.ndarray, outer: np.ndarray, count: int) -> Moments:
        """The moments of rows whose sum is ``total [d]``, sum of outer products ``outer [d, d]`` and number
        ``count`` (:func:`sums_of`: what an index folder's shard stores, so that a library's statistics are
        the sums of its shards', less its deleted rows')."""
        if count == 0:
            return cls(np.zeros(len(total)), np.zeros((len(total), len(total))), 0)
        mean = total / count
        return cls(mean, outer / count - np.outer(mean, mean), int(count))

    def score_stats(self, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(mean [B], std [B])`` of the inner products of each of ``queries [B, d]`` with the rows, pooled
        with :data:`PRIOR_COUNT` random unit vectors (mean 0, covariance ``I / d``): the mean and spread of
        the mixture of the library's rows and the prior's (its second moment, so the shift of the mean
        counts in the spread). A library of a few clips says little about how a query's cosines spread, so
        a caption equal to the query still stands out in it; a library of hundreds is its own estimate. A
        name shared by a fifth of a library of a hundred clips stays near 2 spreads above the mean (k equally
        shared values are at most ``sqrt(k - 1)`` above their own mean; the prior adds a little)."""
        q = np.asarray(queries, np.float64)
        n, d = self.count, max(len(self.mean), 1)
        mu = q @ self.mean  # [B]
        var = ((q @ self.cov) * q).sum(axis=1)  # q^T Sigma q, one matrix product (a 3-operand einsum is 20x slower)
        prior = (q * q).sum(axis=1) / d
        mean = n * mu / (n + PRIOR_COUNT)
        second = (n * (var + mu * mu) + PRIOR_COUNT * prior) / (n + PRIOR_COUNT)
        return mean, np.sqrt(np.maximum(second - mean * mean, 0.0))


def sums_of(parts, keep=None, chunk: int = 65_536) -> tuple[np.ndarray, np.ndarray, int]:
    """``(total [d], outer [d, d], count)``: the sum, the sum of outer products and the number of the rows of
    ``parts`` (one ``[n, d]`` array or a list of them) where ``keep`` (``[sum n_i]`` bool, None: all) is set,
    in float64, ``chunk`` rows at a time (a memory-mapped shard is never copied whole)."""
    parts = [parts] if isinstance(parts, np.ndarray) else list(parts)
    d = parts[0].shape[1] if parts else 0
    total, outer, count, first = np.zeros(d), np.zeros((d, d)), 0, 0
    for p in parts:
        for start in range(0, len(p), chunk):
            rows = np.asarray(p[start:start + chunk], np.float64)
            if keep is not None:
                rows = rows[np.asarray(keep[first + start:first + start + len(rows)], bool)]
            total += rows.sum(axis=0)
            outer += rows.T @ rows
            count += len(rows)
        first += len(p)
    return total, outer, count


@dataclass
class LibraryStats:
    """What a query's features need of a library besides the candidates' scores (module docstring):
    ``audio`` (the live clips' audio embeddings), ``captions`` (the live clips' captions' embeddings)."""

    audio: Moments
    captions: Moments


@dataclass
class QueryStats:
    """One query's view of the library: mean and spread of its sound and caption cosines, its idf mass and
    the caption cosine above which a clip's best caption is rare (:func:`rare_cutoff`)."""

    sound_mean: float
    sound_std: float
    caption_mean: float
    caption_std: float
    idf_mass: float
    caption_cutoff: float = np.inf

    @classmethod
    def of(cls, stats: LibraryStats, vec: np.ndarray, idf_mass: float, caption_cutoff: float = np.inf) -> QueryStats:
        """The statistics of the embedded query ``vec [d]`` (idf mass from the keyword index, the caption
        cutoff from :func:`rare_cutoff` of the library's best caption cosines; inf: no caption is rare)."""
        sm, ss = stats.audio.score_stats(vec[None])
        cm, cs = stats.captions.score_stats(vec[None]) if stats.captions.count else (np.zeros(1), np.zeros(1))
        return cls(float(sm[0]), float(ss[0]), float(cm[0]), float(cs[0]), float(idf_mass), float(caption_cutoff))


def rare_cutoff(caption: np.ndarray) -> float:
    """The cosine a clip's best caption cosine must exceed for at most :data:`RARE_SHARE` of the captioned
    clips to have one as close, from every captioned clip's best caption cosine ``caption [n]`` (NaN or
    ``-inf``: no caption): the ``(m + 1)``-th highest, ``m = floor(RARE_SHARE * n)`` (inf when ``m`` is 0).
    One partial sort, O(n). A ranking that does not score every clip reads it on :class:`RareSample`."""
    values = np.asarray(caption, np.float64)
    values = values[np.isfinite(values)]
    m = int(RARE_SHARE * len(values))
    if m == 0:
        return float("inf")
    return float(-np.partition(-values, m)[m])


#: Captioned clips on which a ranking that does not score every clip reads a query's rare cutoff.
RARE_SAMPLE = 4096


def rare_sample(captioned: np.ndarray, size: int = RARE_SAMPLE) -> np.ndarray:
    """The clip rows (ascending) of :class:`RareSample`: every one of the live captioned clips ``captioned [n]``
    where ``n <= size``, else a fixed uniform sample of ``size`` of them (without replacement, seed 0)."""
    captioned = np.asarray(captioned, np.int64)
    if len(captioned) > 1 and bool((captioned[1:] >= captioned[:-1]).all()):  # in clip order, as every store keeps
        captioned = captioned[np.r_[True, captioned[1:] != captioned[:-1]]]  # its captions: one pass, no sort
    else:
        captioned = np.unique(captioned)
    if len(captioned) <= size:
        return captioned
    return np.sort(np.random.default_rng(0).choice(captioned, size, replace=False))


@dataclass
class RareSample:
    """The best caption cosines on which a windowed ranking reads a query's rare cutoff: ``vectors [c, d]``, the
    caption embeddings of the clips of :func:`rare_sample`, clip after clip, and ``starts [s]``, each sampled
    clip's first (a source fills it from its own store: :mod:`mlatr.search.hybrid`).

    The rule (one for every source): :func:`rare_cutoff` of the sampled clips' best caption cosines. With at
    most :data:`RARE_SAMPLE` captioned clips the sample is all of them and the cutoff exact; beyond, the share
    of the library above it is the sample's 10 % quantile's, distribution-free (a binomial proportion:
    standard error ``sqrt(0.1 * 0.9 / 4096)``, about 0.005, whatever the library's size or the shape of its
    cosines; ``tests/test_rare_cutoff.py``). A normal estimate from the library's caption moments (``mean +
    1.28 std``) would need no sample, but it reads the spread of single captions where the rule is about each
    clip's best of several, and assumes one mode where a library has many: it leaves more than a tenth above
    it."""

    vectors: np.ndarray
    starts: np.ndarray

    def cutoff(self, vec: np.ndarray) -> float:
        """The query ``vec [d]``'s rare cutoff (inf without any captioned clip)."""
        if not len(self.starts):
            return float("inf")
        return rare_cutoff(np.maximum.reduceat(self.vectors @ np.asarray(vec, self.vectors.dtype), self.starts))


def pair_features(sound: np.ndarray, caption: np.ndarray, keyword: np.ndarray, q: QueryStats) -> np.ndarray:
    """``[n, len(FEATURES)]`` features of one query's candidates: ``sound [n]`` audio cosines, ``caption [n]``
    best caption cosines (NaN or ``-inf``: the clip has no caption), ``keyword [n]`` best BM25 scores."""
    sound = np.asarray(sound, np.float64)
    caption = np.asarray(caption, np.float64)
    has = np.isfinite(caption)
    cap = np.where(has, caption, q.caption_mean)
    cap_z = np.where(has, (cap - q.caption_mean) / max(q.caption_std, _MIN_STD), 0.0)
    kw = np.asarray(keyword, np.float64) / q.idf_mass if q.idf_mass > 0 else np.zeros(len(sound))
    rare = (has & (caption > q.caption_cutoff)).astype(np.float64)
    return np.stack([sound, (sound - q.sound_mean) / max(q.sound_std, _MIN_STD), cap, cap_z, kw, rare], axis=1)


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class Calibrator:
    """An increasing step function from a fused score to a probability (isotonic regression's thresholds,
    interpolated linearly between them; flat beyond the ends)."""

    x: np.ndarray
    y: np.ndarray

    def __call__(self, score: np.ndarray) -> np.ndarray:
        return np.interp(np.asarray(score, np.float64), self.x, self.y)

    def to_dict(self) -> dict:
        return {"x": [float(v) for v in self.x], "y": [float(v) for v in self.y]}

    @classmethod
    def from_dict(cls, d: dict) -> Calibrator:
        return cls(np.asarray(d["x"], np.float64), np.asarray(d["y"], np.float64))


@dataclass
class RelevanceModel:
    """Features -> fused score -> relevance (module docstring), from data.

    ``kind`` ``logistic``: the fused score is ``w . phi(x) + b`` on the expanded features ``phi``
    (:func:`expand`, ``w >= 0``); ``kind`` ``linear``: ``w . x + b`` on the features as they are (the
    answer model, :func:`answer_features`); ``kind`` ``trees``: the sum of a gradient-boosted ensemble's leaf values
    (``trees``: per tree, arrays ``feature``, ``threshold``, ``left``, ``right``, ``value``; a node with
    ``left == -1`` is a leaf), plus ``bias``. ``calibrator`` maps the fused score to the relevance;
    ``threshold``: the relevance a hit must reach for the list not to be "nothing relevant";
    ``features``: the names of the columns the model reads."""

    kind: str
    features: tuple[str, ...]
    calibrator: Calibrator
    threshold: float
    weights: np.ndarray | None = None
    bias: float = 0.0
    trees: list[dict[str, np.ndarray]] | None = None
    about: str = ""

    def score(self, x: np.ndarray) -> np.ndarray:
        """``[n]`` fused scores of the feature rows ``x [n, len(self.features)]``."""
        x = np.asarray(x, np.float64)
        if self.kind == "logistic":
            return expand(x, self.features) @ self.weights + self.bias
        if self.kind == "linear":
            return x @ self.weights + self.bias
        out = np.full(len(x), self.bias)
        for t in self.trees:
            node = np.zeros(len(x), np.int64)
            for _ in range(t["depth"]):
                leaf = t["left"][node] < 0
                go_left = x[np.arange(len(x)), np.maximum(t["feature"][node], 0)] <= t["threshold"][node]
                node = np.where(leaf, node, np.where(go_left, t["left"][node], t["right"][node]))
            out += t["value"][node]
        return out

    def relevance(self, scores: np.ndarray) -> np.ndarray:
        """``[n]`` calibrated probabilities of relevance of fused ``scores``."""
        return np.clip(self.calibrator(scores), 0.0, 1.0)

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "features": list(self.features), "calibrator": self.calibrator.to_dict(),
               "threshold": self.threshold, "bias": self.bias, "about": self.about}
        if self.kind == "logistic":
            out.update(weights=self.weights.tolist(), expanded=expanded_names(self.features))
        elif self.kind == "linear":
            out["weights"] = self.weights.tolist()
        else:
            out["trees"] = [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in t.items()}
                            for t in self.trees]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> RelevanceModel:
        kind = d["kind"]
        if kind not in ("logistic", "linear", "trees"):
            raise MlatrError(f"relevance model: unknown kind {kind!r} (logistic, linear or trees)")
        common = {"kind": kind, "features": tuple(d["features"]), "calibrator": Calibrator.from_dict(d["calibrator"]),
                  "threshold": float(d["threshold"]), "bias": float(d.get("bias", 0.0)), "about": d.get("about", "")}
        if kind in ("logistic", "linear"):
            return cls(**common, weights=np.asarray(d["weights"], np.float64))
        trees = [{"feature": np.asarray(t["feature"], np.int64), "threshold": np.asarray(t["threshold"], np.float64),
                  "left": np.asarray(t["left"], np.int64), "right": np.asarray(t["right"], np.int64),
                  "value": np.asarray(t["value"], np.float64), "depth": int(t["depth"])} for t in d["trees"]]
        return cls(**common, trees=trees)


def expand(x: np.ndarray, features: tuple[str, ...]) -> np.ndarray:
    """The logistic model's inputs from the feature rows ``x [n, len(features)]`` (:func:`expanded_names`),
    each non-decreasing in the evidence it reads, so that with the non-negative weights the fit keeps, more
    evidence from a source never lowers a clip's fused score: the sound cosine and its z-score with hinges
    ``max(0, sound_z - t)``; the caption only where it stands out of the library's captions (hinges
    ``max(0, caption_z - t)`` for t >= 2, and the caption cosine above 0.5 / 0.7 where ``caption_z > 2``: a
    name shared by a fifth of the library or more has ``caption_z`` near 2 at most, so names that say nothing
    move no clip unless close to the query in meaning); a caption close to the query in itself (cosine above
    0.6 / 0.8: in a library of a few clips no caption can stand out by its z-score); the keyword share with
    a hinge; the agreement ``max(0, sound_z) * max(0, caption_z - 2)``; and where the caption is rare
    (``caption_rare``) the caption z-score from 1 and 1.5 and the cosine above 0.2 (where the z-score passes
    1): a name only a tenth of the library shares counts below the z-score of 2 that a name shared by a fifth
    can reach.
    A model of the sound alone (sound queries) has only the first five."""
    col = {name: x[:, i] for i, name in enumerate(features)}
    sz = col["sound_z"]
    out = [col["sound"], sz, np.maximum(sz - 1, 0), np.maximum(sz - 2, 0), np.maximum(sz - 3, 0)]
    if "caption_z" in col:
        cz, cap = col["caption_z"], col["caption"]
        stands_out = (cz > 2.0).astype(np.float64)
        out += [np.maximum(cz - 2, 0), np.maximum(cz - 3, 0), np.maximum(cz - 4, 0), np.maximum(cz - 6, 0),
                np.maximum(cap - 0.5, 0) * stands_out, np.maximum(cap - 0.7, 0) * stands_out,
                np.maximum(cap - 0.6, 0), np.maximum(cap - 0.8, 0), np.maximum(sz, 0) * np.maximum(cz - 2, 0)]
    if "keyword" in col:
        out += [col["keyword"], np.maximum(col["keyword"] - 0.5, 0)]
    if "caption_rare" in col:
        cz, rare = col["caption_z"], col["caption_rare"]
        out += [np.maximum(cz - 1, 0) * rare, np.maximum(cz - 1.5, 0) * rare,
                np.maximum(col["caption"] - 0.2, 0) * rare * (cz > 1)]
    return np.stack(out, axis=1)


def expanded_names(features: tuple[str, ...]) -> list[str]:
    """The names of :func:`expand`'s columns for a model reading ``features``."""
    names = ["sound", "sound_z", "sound_z>1", "sound_z>2", "sound_z>3"]
    if "caption_z" in features:
        names += ["caption_z>2", "caption_z>3", "caption_z>4", "caption_z>6", "caption>0.5|z>2", "caption>0.7|z>2",
                  "caption>0.6", "caption>0.8", "agree"]
    if "keyword" in features:
        names += ["keyword", "keyword>0.5"]
    if "caption_rare" in features:
        names += ["caption_z>1|rare", "caption_z>1.5|rare", "caption>0.2|rare,z>1"]
    return names


#: What the answer model reads of a query's ranked library (:func:`answer_features`).
ANSWER_FEATURES = ("best", "any", "gap", "caption", "caption_z", "caption_z_top3", "sound", "sound_z",
                   "sound_z_top5", "keyword")

#: The hits the answer model looks at: the top of the fused ranking.
ANSWER_DEPTH = 10


def answer_features(score: np.ndarray, relevance: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``[len(ANSWER_FEATURES)]`` what a query's whole answer says, from the fused ``score [n]``, ``relevance
    [n]`` and features ``x [n, len(FEATURES)]`` of every candidate: the best hit's relevance (``best``), the
    chance that one of the top :data:`ANSWER_DEPTH` is relevant were they independent (``any``), how far the
    top fused score stands above the next ones (``gap``), the highest caption cosine and caption z-score and
    the mean of the three highest z-scores, the same for the sound (its five highest z-scores) and the
    highest keyword share. A nonsense query finds neither a caption nor a sound that stands out; a query
    whose concept the library lacks finds them less often than one it holds."""
    score, relevance, x = (np.asarray(v, np.float64) for v in (score, relevance, x))
    if len(score) == 0:
        return np.zeros(len(ANSWER_FEATURES))
    top = np.argsort(-score, kind="stable")[:ANSWER_DEPTH]
    col = {name: x[:, i] for i, name in enumerate(FEATURES)}
    rest = score[top[1:]].mean() if len(top) > 1 else score[top[0]]
    return np.array([relevance[top[0]], 1.0 - np.prod(1.0 - relevance[top]), score[top[0]] - rest,
                     col["caption"].max(), col["caption_z"].max(), _top_mean(col["caption_z"], 3),
                     col["sound"].max(), col["sound_z"].max(), _top_mean(col["sound_z"], 5), col["keyword"].max()])


def _top_mean(values: np.ndarray, k: int) -> float:
    return float(np.sort(values)[-k:].mean())


def answer_relevance(model: RelevanceModel, features: np.ndarray) -> float:
    """The probability that one of the query's top :data:`ANSWER_DEPTH` hits answers it, from the
    :func:`answer_features` of its answer: the answer model's calibrated probability, kept where its hits put it
    (one story, issue 45): never below the best hit's relevance (that hit alone answers with that probability)
    and never above ``any``, the chance that one of them does were they independent (relevance events of one
    query's hits go together, which makes that chance an upper bound: an answer whose best hit is 0.13 cannot
    be "probably relevant")."""
    features = np.asarray(features, np.float64)
    p = float(model.relevance(model.score(features[None]))[0])
    best, any_ = float(features[ANSWER_FEATURES.index("best")]), float(features[ANSWER_FEATURES.index("any")])
    return min(max(p, best), max(any_, best))


@dataclass
class Calibration:
    """A model's calibration (:mod:`mlatr.calibration_file`): the text-query relevance model (``text``), the answer
    model of a text query (``answer``: whether one of its hits is relevant, :func:`answer_relevance`), the
    sound-query one (``sound``, features ``sound``, ``sound_z`` of the audio-to-audio cosines), the zero-shot
    classification temperature and "none of these" level (``classify``), the "nothing relevant" rule each index
    fits its threshold with (``abstention``, :mod:`mlatr.search.abstention`), the weights it was fitted for
    (``weights_sha256``; None: fitted for no model, the default ranking) and what it was fitted on (``fitted``)."""

    text: RelevanceModel
    answer: RelevanceModel
    sound: RelevanceModel
    classify: dict
    fitted: dict
    weights_sha256: str | None = None
    abstention: dict = field(default_factory=dict)
    #: the short name of the stored dict it was read from (:func:`~mlatr.calibration_file.calibration_id`)
    source_id: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        return cls.from_dict(read_calibration(path))

    @classmethod
    def default(cls) -> Calibration:
        """The default ranking (:data:`~mlatr.calibration_file.DEFAULT_RANKING_PATH`): the fused order of a model
        without a calibration of its own, whose probabilities are never reported."""
        return _default()

    @classmethod
    def from_dict(cls, d: dict) -> Calibration:
        return cls(RelevanceModel.from_dict(d["text"]), RelevanceModel.from_dict(d["answer"]),
                   RelevanceModel.from_dict(d["sound"]), dict(d["classify"]), dict(d.get("fitted", {})),
                   d.get("weights_sha256"), dict(d.get("abstention", {})), calibration_id(d))

    def to_dict(self) -> dict:
        return {"format": CALIBRATION_FORMAT, "weights_sha256": self.weights_sha256, "fitted": self.fitted,
                "text": self.text.to_dict(), "answer": self.answer.to_dict(), "sound": self.sound.to_dict(),
                "classify": self.classify, "abstention": self.abstention}

    @property
    def id(self) -> str:
        """The short name of the stored calibration (:func:`~mlatr.calibration_file.calibration_id` of the dict it
        was read from, or of :meth:`to_dict` for one fitted here): what the model card, ``index info`` and an
        index's "nothing relevant" record name it by."""
        return self.source_id or calibration_id(self.to_dict())


@lru_cache(maxsize=1)
def _default() -> Calibration:
    return Calibration.from_dict(default_ranking())
