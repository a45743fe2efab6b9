"""What each shard of an index folder stores for text queries' library-wide statistics, and how the shards'
parts are combined into the library's as it is now (issue 36).

A text query's features need two things of the whole library (:mod:`mlatr.search.relevance`): the mean and
covariance of the live clips' audio embeddings and of their captions' embeddings (:class:`LibraryStats`),
and the keyword index's corpus statistics (:mod:`mlatr.search.lexical`). Computing either from the rows
costs a pass over every vector (``O(N d^2)``) or every caption's analysis, seconds to minutes at a million
clips, at every load. So a shard stores, when it is written (build, ``--add``, ``compact``), what never
changes for it:

- ``moments.npz``: the sum, the sum of outer products and the number of its clips' audio embeddings and of
  its captions' embeddings (:func:`~mlatr.search.relevance.sums_of`, float64);
- ``keywords.*``: its captions' keyword counts (:class:`~mlatr.search.lexical.Postings`).

The library's statistics are then combined when it is loaded: the shards' sums added, less the sums of
the deleted rows (the tombstones, read from their vectors: ``O(deleted d^2)``), and the keyword parts
combined with each caption's liveness (:meth:`~mlatr.search.lexical.KeywordIndex.of_parts`: ``N``,
``avgdl`` and ``df`` over the live captions of every shard, when a query comes). Both then equal what a
fresh build over the same live clips computes (``tests/test_keyword_index.py``). A shard written before
they were stored (or with another text analysis) has them computed from its rows when loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mlatr.errors import InputError
from mlatr.search.lexical import KeywordIndex, Postings
from mlatr.search.relevance import LibraryStats, Moments, sums_of

MOMENTS = "moments.npz"
_KEYS = ("audio_total", "audio_outer", "audio_count", "caption_total", "caption_outer", "caption_count")


def write_shard_stats(folder: Path, audio: np.ndarray, captions: np.ndarray, texts: Sequence[str],
                      langs: Sequence[str]) -> None:
    """Write a shard's ``moments.npz`` (of its ``audio [n, d]`` and ``captions [m, d]`` embeddings) and its
    keyword postings (of the caption ``texts`` in ``langs``) into ``folder``."""
    a, c = sums_of(audio), sums_of(captions)
    np.savez(folder / MOMENTS, **dict(zip(_KEYS, (*a[:2], np.int64(a[2]), *c[:2], np.int64(c[2])), strict=True)))
    Postings.of_texts(list(texts), list(langs)).save(folder)


def _read_moments(folder: Path, n: int, m: int, d: int) -> dict | None:
    """A shard's stored sums (``n`` clips, ``m`` captions, ``d`` dimensions), checked; None when it stores none."""
    path = folder / MOMENTS
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in _KEYS}
    except Exception as exc:  # OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile: truncated or foreign
        raise InputError(f"not readable shard moments ({exc}); rebuild with mlatr index compact", file=str(path)) \
            from exc
    shapes = {"total": (d,), "outer": (d, d), "count": ()}
    for k, v in out.items():
        if v.shape != shapes[k.split("_")[1]] or not np.issubdtype(v.dtype, np.number) or not np.isfinite(v).all():
            raise InputError(f"{k}: {v.dtype} of shape {list(v.shape)}, expected finite numbers of shape "
                             f"{list(shapes[k.split('_')[1]])}; rebuild with mlatr index compact", file=str(path))
    if int(out["audio_count"]) != n or int(out["caption_count"]) != m:
        raise InputError(f"moments of {int(out['audio_count'])} clips / {int(out['caption_count'])} captions, the "
                         f"shard holds {n} / {m}; rebuild with mlatr index compact", file=str(path))
    return out


def library_stats(shards, audio_deleted: np.ndarray, caption_deleted: np.ndarray) -> LibraryStats | None:
    """The :class:`LibraryStats` of an index folder's ``shards`` (:class:`~mlatr.search.shards.Shard`) without
    the deleted clips (``audio_deleted [N]``, ``caption_deleted [M]``: bool over the global rows), from the
    shards' stored sums; None when a shard stores none (computed from the rows instead)."""
    d = shards[0].clips.embeddings.shape[1] if shards else 0
    sums = {k: np.zeros((d, d)) if k.endswith("outer") else np.zeros(d) if k.endswith("total") else 0
            for k in _KEYS}
    first_clip = first_cap = 0
    for shard in shards:
        n, m = len(shard.clips), len(shard.captions)
        stored = _read_moments(shard.folder, n, m, d)
        if stored is None:
            return None
        for k in _KEYS:
            sums[k] = sums[k] + stored[k]
        for which, emb, gone in (("audio", shard.clips.embeddings, audio_deleted[first_clip:first_clip + n]),
                                 ("caption", shard.captions.embeddings, caption_deleted[first_cap:first_cap + m])):
            rows = np.flatnonzero(gone)
            if len(rows):  # a tombstone takes its row out of the sums
                t, o, c = sums_of(np.asarray(emb[rows]))
                sums[f"{which}_total"] = sums[f"{which}_total"] - t
                sums[f"{which}_outer"] = sums[f"{which}_outer"] - o
                sums[f"{which}_count"] = sums[f"{which}_count"] - c
        first_clip, first_cap = first_clip + n, first_cap + m
    return LibraryStats(Moments.of_sums(sums["audio_total"], sums["audio_outer"], int(sums["audio_count"])),
                        Moments.of_sums(sums["caption_total"], sums["caption_outer"], int(sums["caption_count"])))


def keyword_index(shards, caption_live: np.ndarray) -> KeywordIndex:
    """The keyword index of an index folder's ``shards`` over their live captions (``caption_live [M]``: bool
    over the global caption rows): each shard's stored postings, or, for a shard storing none (or made
    with another analysis), its captions analysed now. Caption rows are the global ones."""
    parts, live, first = [], [], 0
    for shard in shards:
        m = len(shard.captions)
        part = Postings.load(shard.folder, m)
        if part is None:
            part = Postings.of_texts(list(shard.captions.get("text")), list(shard.captions.get("lang")))
        parts.append(part)
        live.append(np.asarray(caption_live[first:first + m], bool))
        first += m
    return KeywordIndex.of_parts(parts, live)
