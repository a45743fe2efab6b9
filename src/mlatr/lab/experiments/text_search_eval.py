"""What a fold's model makes of a held-out library, kept for text search (issues 22 and 33).

For one trained model (one fold of :mod:`mlatr.lab.experiments.unseen_library`), :func:`fold_embeddings` keeps
the embeddings of the held-out library's clips, of the two kinds of metadata captions it can have
(:meth:`~mlatr.lab.experiments.real_heads.RealSounds.metadata`: ``names``, the file names as the folder importer
reads them, or ``meaningless`` recorder-style names such as ``ZOOM0001.wav``), of the hand-written queries
in eight languages (and of their English translations, where the queries were translated), of nonsense queries
and of the zero-shot prompts of its folder labels. The text-search
ranking, its relevance, "nothing relevant" and the classification probabilities are fitted and measured on
them (:mod:`mlatr.lab.experiments.relevance_fit`), cross-fitted over the libraries, without training again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mlatr.evaluation import zero_shot_prompts
from mlatr.io_utils import atomic_write_with
from mlatr.lab.experiments.real_heads import METADATA, NONSENSE_SEEDS, RealSounds, _embed
from mlatr.training.head_training import TextBank


def query_texts(data: RealSounds) -> tuple[list[str], list[str], np.ndarray]:
    """The queries' texts, languages and translation groups, every language of every query."""
    langs = data.languages
    q_text = [q["captions"][lang] for q in data.queries for lang in langs]
    q_lang = [lang for _ in data.queries for lang in langs]
    return q_text, q_lang, np.repeat(np.arange(len(data.queries)), len(langs))


def fold_embeddings(model, data: RealSounds, bank: TextBank, rows: Sequence[int]) -> dict[str, np.ndarray]:
    """What a fold's model makes of a held-out library, for fitting and measuring what ranks and scores
    text search on top of it (:mod:`mlatr.lab.experiments.relevance_fit`): the clips' audio embeddings, the
    embeddings of the queries (:func:`query_texts` order), of the nonsense queries (``nonsense_fit``,
    ``nonsense_measure``: :meth:`RealSounds.nonsense`), of each kind of metadata caption (:data:`METADATA`;
    ``has_KIND``: the name has words), and of the zero-shot prompts of the library's folder labels in every language
    (``prompts [L, C, d]``, ``classes [C]``; ``label [n]``: each clip's first label, ``""`` for none)."""
    rows = list(rows)
    q_text, q_lang, _ = query_texts(data)
    a, q = _embed(model, data.features[rows], bank.lookup(q_text, q_lang))  # [n, d], [Q, d]
    out = {"rows": np.asarray(rows, np.int64), "audio": a, "queries": q}
    translated = [data.query_translations.get((lang, text), "") for text, lang in zip(q_text, q_lang, strict=True)]
    if any(translated):  # the queries' English translations (:meth:`RealSounds.translate_queries`), "" for none
        out["query_translations"] = np.array(translated, dtype=str)
        out["queries_translated"] = _embed(model, data.features[rows[:1]], bank.lookup(
            [t or text for t, text in zip(translated, q_text, strict=True)],
            ["eng" if t else lang for t, lang in zip(translated, q_lang, strict=True)]))[1]  # [Q, d]
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
