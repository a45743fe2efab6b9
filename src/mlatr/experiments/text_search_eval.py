"""Text search with a library's own metadata on libraries never trained on (issue 22).

For one trained model (one fold of :mod:`mlatr.experiments.unseen_library`), the hand-written queries in
eight languages are asked of a held-out library three ways (:data:`mlatr.search.fusion.RANKS`): its audio
embeddings only, its captions only, and the hybrid fusion of sound, caption embeddings and BM25 keywords
(:mod:`mlatr.search.fusion`). The library's captions are only what ships with its files
(:meth:`~mlatr.experiments.real_heads.RealSounds.metadata`): ``names``, the file names as the folder
importer reads them, or ``meaningless`` recorder-style names (``ZOOM0001.wav``). Relevance stays the
keyword relevance of the clips' reviewed English captions (:func:`mlatr.evaluation.queries.keyword_relevance`),
which no ranking sees.

The fusion setting is chosen without the held-out library: every setting of
:data:`~mlatr.search.fusion.FUSION_GRID` is scored on each of the fold's training libraries (each searched
as a library of its own) with both kinds of metadata; among the settings whose hybrid ranking with
meaningless names stays within :data:`BLIND_TOLERANCE` points of audio-only R@10 there (names that say
nothing must not add noise), the one with the best names R@10 (then R@1) is applied to the held-out
library, with both kinds of metadata.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mlatr.evaluation import zero_shot_prompts
from mlatr.evaluation.queries import keyword_relevance, multilingual_query_eval, pessimistic_ranks
from mlatr.experiments.real_heads import METADATA, NONSENSE_SEEDS, RealSounds, _embed
from mlatr.search.fusion import FUSION_GRID, RANKS, FusionSettings, fused_scores
from mlatr.io_utils import atomic_write_with
from mlatr.search.lexical import KeywordIndex
from mlatr.training.heads import TextBank

#: How far (R@10 points, mean over the training libraries) the hybrid ranking with meaningless names may fall
#: below audio-only for a fusion setting to be chosen.
BLIND_TOLERANCE = 0.5


@dataclass
class LibraryScores:
    """One library's per-source query scores, ``[Q, n]`` each (queries in :func:`query_texts` order)."""

    audio: np.ndarray
    caption: np.ndarray  # -inf for a clip whose name has no words
    keyword: np.ndarray
    query_emb: np.ndarray  # [Q, d]
    audio_emb: np.ndarray  # [n, d]
    relevant: np.ndarray  # [G, n] bool

    def evaluate(self, data: RealSounds, rank: str, settings: FusionSettings) -> dict:
        """Text-to-audio per language and MRV of the ranking ``rank`` (``settings``: the fusion's)."""
        q_text, q_lang, q_group = query_texts(data)
        res = multilingual_query_eval(self.query_emb, q_lang, q_group, self.audio_emb, self.relevant, data.languages,
                                      scores=fused_scores(self.audio, self.caption, self.keyword, rank, settings))
        return {"t2a": res["t2a"], "mrv": res["consistency"]["mrv"], "n_queries": res["n_queries"],
                "chance": res["chance"]["t2a"]}

    def recall(self, data: RealSounds, rank: str, settings: FusionSettings) -> tuple[float, float]:
        """``(R@10, R@1)`` over every query with a relevant clip, all languages together (what
        :meth:`evaluate` averages per language; the languages have the same queries), quickly."""
        _, _, q_group = query_texts(data)
        keep = self.relevant.any(axis=1)[q_group]
        scores = fused_scores(self.audio, self.caption, self.keyword, rank, settings)[keep]
        ranks = pessimistic_ranks(scores, self.relevant[q_group[keep]])
        return 100 * float(np.mean(ranks <= 10)), 100 * float(np.mean(ranks <= 1))


def query_texts(data: RealSounds) -> tuple[list[str], list[str], np.ndarray]:
    """The queries' texts, languages and translation groups, every language of every query."""
    langs = data.languages
    q_text = [q["captions"][lang] for q in data.queries for lang in langs]
    q_lang = [lang for _ in data.queries for lang in langs]
    return q_text, q_lang, np.repeat(np.arange(len(data.queries)), len(langs))


class KeywordScores:
    """BM25 scores of every query against a library's metadata, computed once per library and kind (they
    do not depend on the model)."""

    def __init__(self, data: RealSounds):
        self.data = data
        self._cache: dict[tuple, np.ndarray] = {}

    def __call__(self, rows: Sequence[int], kind: str) -> np.ndarray:
        key = (tuple(rows), kind)
        if key not in self._cache:
            keywords = KeywordIndex([self.data.metadata(i, kind) for i in rows])
            q_text, _, _ = query_texts(self.data)
            self._cache[key] = np.stack([keywords.scores(t) for t in q_text])  # [Q, n]
        return self._cache[key]


def library_scores(model, data: RealSounds, bank: TextBank, rows: Sequence[int], kind: str,
                   keywords: KeywordScores) -> LibraryScores:
    """Per-source scores of the queries over the clips ``rows`` with ``kind`` metadata."""
    rows = list(rows)
    q_text, q_lang, _ = query_texts(data)
    names = [data.metadata(i, kind) for i in rows]
    has = np.array([bool(t) for t in names])
    a, q = _embed(model, data.features[rows], bank.lookup(q_text, q_lang))  # [n, d], [Q, d]
    _, c = _embed(model, data.features[rows], bank.lookup([t or q_text[0] for t in names], ["eng"] * len(rows)))
    caption = np.where(has[None], q @ c.T, -np.inf).astype(np.float32)  # [Q, n]
    relevant = keyword_relevance(data.queries, [" ".join(data.english(i)) for i in rows])
    return LibraryScores(audio=q @ a.T, caption=caption, keyword=keywords(rows, kind), query_emb=q, audio_emb=a,
                         relevant=relevant)


def setting_name(g: FusionSettings) -> str:
    return f"gate={g.caption_gate:g},k={g.rrf_k:g},w={g.caption_weight:g}"


def choose_fusion(model, data: RealSounds, bank: TextBank, libraries: dict[str, list[int]],
                  keywords: KeywordScores) -> tuple[FusionSettings, dict[str, dict[str, float]]]:
    """The setting of :data:`FUSION_GRID` chosen on ``libraries`` (module docstring), and every setting's
    mean names R@10 and meaningless-names R@10 minus audio-only there."""
    libs = [rows for rows in libraries.values()]
    names = [library_scores(model, data, bank, rows, "names", keywords) for rows in libs]
    blind = [library_scores(model, data, bank, rows, "meaningless", keywords) for rows in libs]
    used = [k for k, s in enumerate(names) if s.relevant.any()]
    audio = float(np.mean([blind[k].recall(data, "audio", FUSION_GRID[0])[0] for k in used]))
    table = {}
    for g in FUSION_GRID:
        r10, r1 = np.mean([names[k].recall(data, "hybrid", g) for k in used], axis=0)
        drop = float(np.mean([blind[k].recall(data, "hybrid", g)[0] for k in used])) - audio
        table[g] = {"names_R10": float(r10), "names_R1": float(r1), "meaningless_minus_audio_R10": drop}
    safe = [g for g in FUSION_GRID if table[g]["meaningless_minus_audio_R10"] >= -BLIND_TOLERANCE]
    if safe:
        best = max(safe, key=lambda g: (table[g]["names_R10"], table[g]["names_R1"]))
    else:  # no setting keeps meaningless names harmless: the one that harms least
        best = max(FUSION_GRID, key=lambda g: table[g]["meaningless_minus_audio_R10"])
    return best, {setting_name(g): v for g, v in table.items()}


def text_search_eval(model, data: RealSounds, bank: TextBank, test_rows: Sequence[int],
                     train_libraries: dict[str, list[int]], keywords: KeywordScores) -> dict:
    """``{"fusion": chosen setting, "grid": training-library figures per setting, "names" | "meaningless":
    {rank: {"t2a", "mrv", "n_queries", "chance"}}}`` for the held-out clips ``test_rows``."""
    setting, grid = choose_fusion(model, data, bank, train_libraries, keywords)
    out = {"fusion": setting.to_dict(), "grid": grid}
    for kind in METADATA:
        scores = library_scores(model, data, bank, test_rows, kind, keywords)
        out[kind] = {rank: scores.evaluate(data, rank, setting) for rank in RANKS}
    return out


def summarize_text_search(folds: dict[str, dict]) -> dict | None:
    """Means over the held-out libraries with a relevant clip for some query: ``{kind: {rank: {"t2a":
    {lang: {R1, R10}}, "mrv"}}, "fusion": {setting: times chosen}}``; None without text-search results."""
    runs = [f["text_search"] for f in folds.values() if "text_search" in f
            and f["text_search"]["names"]["audio"]["n_queries"]]
    if not runs:
        return None
    langs = list(runs[0]["names"]["audio"]["t2a"])
    out: dict = {"libraries": len(runs), "fusion": {}}
    for r in runs:
        key = setting_name(FusionSettings(**r["fusion"]))
        out["fusion"][key] = out["fusion"].get(key, 0) + 1
    for kind in METADATA:
        out[kind] = {rank: {"t2a": {lang: {m: float(np.mean([r[kind][rank]["t2a"][lang][m] for r in runs]))
                                           for m in ("R1", "R10")} for lang in langs},
                            "mrv": float(np.mean([r[kind][rank]["mrv"] for r in runs]))} for rank in RANKS}
    out["chance"] = {m: float(np.mean([r["names"]["audio"]["chance"][m] for r in runs])) for m in ("R1", "R10")}
    return out


def fold_embeddings(model, data: RealSounds, bank: TextBank, rows: Sequence[int]) -> dict[str, np.ndarray]:
    """What a fold's model makes of a held-out library, for fitting and measuring what ranks and scores
    text search on top of it (:mod:`mlatr.experiments.relevance_fit`): the clips' audio embeddings, the
    embeddings of the queries (:func:`query_texts` order), of the nonsense queries
    (``nonsense_fit``, ``nonsense_measure``: :meth:`RealSounds.nonsense`), of each kind of metadata caption (:data:`METADATA`; ``has_KIND``: the
    name has words), and of the zero-shot prompts of the library's folder labels in every language
    (``prompts [L, C, d]``, ``classes [C]``; ``label [n]``: each clip's first label, ``""`` for none)."""
    rows = list(rows)
    q_text, q_lang, _ = query_texts(data)
    a, q = _embed(model, data.features[rows], bank.lookup(q_text, q_lang))  # [n, d], [Q, d]
    out = {"rows": np.asarray(rows, np.int64), "audio": a, "queries": q}
    for use, seed in NONSENSE_SEEDS.items():
        nonsense = data.nonsense(seed)
        out[f"nonsense_{use}"] = _embed(model, data.features[rows[:1]], bank.lookup(
            [x["text"] for x in nonsense], [x["lang"] for x in nonsense]))[1]  # [Z, d]
    for kind in METADATA:
        names = [data.metadata(i, kind) for i in rows]
        _, c = _embed(model, data.features[rows[:1]], bank.lookup([t or q_text[0] for t in names], ["eng"] * len(rows)))
        out[f"caption_{kind}"] = c
        out[f"has_{kind}"] = np.array([bool(t) for t in names])
    labels = [(data.manifest.clips[i].labels or [""])[0] for i in rows]
    classes = sorted(set(labels) - {""})
    out["label"], out["classes"] = np.array(labels, dtype=str), np.array(classes, dtype=str)
    prompts = []
    for lang in data.languages:
        texts = zero_shot_prompts([data.label_in(c, lang) for c in classes], lang)
        prompts.append(_embed(model, data.features[rows[:1]], bank.lookup(texts, [lang] * len(texts)))[1]
                       if classes else np.zeros((0, a.shape[1]), np.float32))
    out["prompts"] = np.stack(prompts)  # [L, C, d]
    return out


def save_fold_embeddings(path, arrays: dict[str, np.ndarray]) -> None:
    """Write :func:`fold_embeddings` as one ``.npz`` (atomically)."""
    atomic_write_with(path, lambda fh: np.savez(fh, **arrays))
