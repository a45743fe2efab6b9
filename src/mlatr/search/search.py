"""Queries against an :class:`~mlatr.search.index.Index`: text-to-audio, audio-to-audio, audio-to-caption.

A query is encoded by the index's own model (``DualEncoder.encode_text`` / ``encode_audio``: projected,
unit norm, ATRI sec. 3.1) and ranked by inner product = cosine (ATRI eq. 1) with the backend.

The query language ``lang`` (ISO 639-3) goes to the text encoder with the text. Frozen multilingual
backbones (``e5-small``, ``use-multilingual``) do not need it to read the text, but check it (USE has
no Catalan); the small trained text encoder (``small-transformer``) uses it only if it was trained with a
language embedding (``languages=[...]``), and ignores it otherwise.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from mlatr import languages
from mlatr.audio.io import crop_or_pad, load_audio
from mlatr.errors import MlatrError
from mlatr.long_clips import encode_waveform
from mlatr.search.hybrid import check_rank
from mlatr.search.query_language import query_languages

#: Windows of one sound query encoded per call.
QUERY_WINDOW_BATCH = 16


@dataclass
class Hit:
    """One ranked clip: 1-based ``rank``, ``score`` (a cosine; for a hybrid text search the fused score of
    :mod:`mlatr.search.fusion`), ``id``, absolute ``path``, English captions, and the ``evidence`` that
    ranked it (:mod:`mlatr.search.hybrid`; empty for sound-to-sound search)."""

    rank: int
    score: float
    id: str
    path: str
    captions: list[str]
    evidence: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CaptionHit:
    """One ranked caption of an indexed clip (sound-to-caption search)."""

    rank: int
    score: float
    text: str
    lang: str
    id: str
    path: str

    def to_dict(self) -> dict:
        return asdict(self)


def _check_k(k: int) -> int:
    if int(k) < 1:
        raise MlatrError(f"k must be at least 1, not {k}")
    return int(k)


def clip_hits(index, scores: np.ndarray, rows: np.ndarray) -> list[Hit]:
    """Ranked :class:`Hit` list from one query's ``scores [k]`` and ``rows [k]``."""
    return [Hit(rank=r + 1, score=float(s), id=index.ids[i], path=index.paths[i],
                captions=[c for c in index.captions[i].get("eng", []) if c])
            for r, (s, i) in enumerate(zip(scores.tolist(), rows.tolist(), strict=True))]


def encode_query_text(index, query: str, lang: str | None) -> np.ndarray:
    """``[d]`` unit-norm embedding of ``query`` in ``lang`` by the index's model.

    ``lang=None`` (language not given) is allowed when the model's text encoder does not read the
    language (:mod:`mlatr.search.query_language`); the text is then embedded alone.
    """
    if not query.strip():
        raise MlatrError("empty text query")
    model = index.model().model
    if lang is None:
        accepted = query_languages(model.text_encoder)
        if accepted.required:
            raise MlatrError("this index's text encoder reads the query's language: give one of "
                             + ", ".join(accepted.choices()))
    else:
        lang = languages.normalize(lang)
    with torch.no_grad():
        out = model.encode_text([query], None if lang is None else [lang])
    return out.pooled[0].float().cpu().numpy()


def encode_query_audio(index, path: str | os.PathLike) -> np.ndarray:
    """``[d]`` unit-norm embedding of the sound file at ``path``, centre-cropped to the index's length and
    encoded as the index's clips were (windows of ``window_seconds``: :mod:`mlatr.long_clips`)."""
    sr, max_seconds = int(index.meta["sample_rate"]), float(index.meta["max_seconds"])
    wave = load_audio(path, sr)
    limit = int(round(max_seconds * sr))
    if wave.shape[0] > limit:
        wave, _ = crop_or_pad(wave, limit, mode="center")
    loaded = index.model()
    window = int(round(float(index.meta.get("window_seconds") or max_seconds) * sr))
    return encode_waveform(loaded.model, wave, window, QUERY_WINDOW_BATCH, loaded.device)


def search_vector(index, query: np.ndarray, k: int = 10) -> list[Hit]:
    """Clips nearest to an embedding ``query [d]`` (already in the index's space)."""
    if query.shape != (index.dim,):
        raise MlatrError(f"query embedding has shape {query.shape}, the index holds {index.dim}-d vectors")
    if not np.isfinite(query).all():
        raise MlatrError("the model gave a non-finite query embedding (NaN or inf); no result can be ranked")
    scores, rows = index.searcher("audio").top_k(query[None].astype(np.float32), _check_k(k))
    return clip_hits(index, scores[0], rows[0])


def search_text(index, query: str, lang: str | None = "eng", k: int = 10, rank: str = "hybrid") -> list[Hit]:
    """Text-to-audio: the ``k`` best clips for ``query`` (``lang=None``: see :func:`encode_query_text`) by
    ``rank``: ``audio`` (the clips' audio embeddings nearest to the query's, through the index's backend),
    ``captions`` or ``hybrid`` (:mod:`mlatr.search.hybrid`). Each hit carries its evidence."""
    check_rank(rank)
    vec = encode_query_text(index, query, lang)
    if rank == "audio":
        hits = search_vector(index, vec, k)
        for h in hits:
            h.evidence = [{"source": "sound", "score": h.score, "rank": h.rank}]
        return hits
    ranked = index.text_ranker().rank(vec, query, _check_k(k), rank)
    hits = clip_hits(index, np.asarray([s for _, s, _ in ranked]), np.asarray([i for i, _, _ in ranked], np.int64))
    for h, (_, _, evidence) in zip(hits, ranked, strict=True):
        h.evidence = evidence
    return hits


def search_audio(index, path: str | os.PathLike, k: int = 10) -> tuple[list[Hit], list[CaptionHit]]:
    """Sound-to-sound (clips) and sound-to-caption (the indexed clips' captions) for the file ``path``."""
    q = encode_query_audio(index, path)
    return search_vector(index, q, k), nearest_captions(index, q, k)


def nearest_captions(index, query: np.ndarray, k: int) -> list[CaptionHit]:
    """The ``k`` indexed captions nearest to an audio embedding ``query [d]`` (sound-to-caption)."""
    captions: list[CaptionHit] = []
    if len(index.caption_text):
        scores, rows = index.searcher("captions").top_k(query[None].astype(np.float32), _check_k(k))
        for r, (s, i) in enumerate(zip(scores[0].tolist(), rows[0].tolist(), strict=True)):
            clip = int(index.caption_clip[i])
            captions.append(CaptionHit(rank=r + 1, score=float(s), text=index.caption_text[i],
                                       lang=index.caption_lang[i], id=index.ids[clip], path=index.paths[clip]))
    return captions


def search_similar(index, row: int, k: int = 10) -> tuple[list[Hit], list[CaptionHit]]:
    """"More like this": the ``k`` clips nearest to indexed clip ``row``'s stored audio embedding (itself
    left out), and the captions nearest to it."""
    q = index.embeddings[row]
    hits = [h for h in search_vector(index, q, _check_k(k) + 1) if h.id != index.ids[row]][:k]
    for r, h in enumerate(hits):
        h.rank = r + 1
    return hits, nearest_captions(index, q, k)
