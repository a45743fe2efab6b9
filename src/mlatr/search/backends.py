"""Top-k inner-product search over unit-norm embeddings: exact numpy, or FAISS (``faiss-cpu``).

Both return the same ranking contract: ``top_k(queries [Q, d], k) -> (scores [Q, k'], rows [Q, k'])``
with ``k' = min(k, N)``, scores descending and, among equal scores, the lower row first. With unit-norm
rows and queries the inner product is the cosine (ATRI eq. 1, the similarity the model was trained on).
``top_k(..., allowed=mask)`` (``[N]`` bool: the rows a filter allows, :mod:`mlatr.search.eligibility`) is the
same contract over the allowed rows alone (fewer than ``k'`` where fewer are allowed; short rows padded with
score -inf and row -1).
"""

from __future__ import annotations

import numpy as np

from mlatr.errors import MlatrError

#: ``auto``: a shard's recorded approximate structure (:mod:`mlatr.search.ann`) where it has one, else numpy.
BACKENDS = ("auto", "numpy", "faiss")
#: Rows multiplied at a time by the exact search (bounds the float32 copy of a float16 or mapped shard).
EXACT_CHUNK = 262_144


def top_k_numpy(embeddings: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``queries [Q, d] @ embeddings[N, d].T`` (ties: lower row first)."""
    n = embeddings.shape[0]
    k = min(int(k), n)
    if k <= 0:
        return np.zeros((queries.shape[0], 0), np.float32), np.zeros((queries.shape[0], 0), np.int64)
    scores = queries.astype(np.float32, copy=False) @ embeddings.T  # [Q, N]
    if k < n:
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        # argpartition may cut a tie at the k-th score arbitrarily: widen to every row tied with it
        kth = np.take_along_axis(scores, part, axis=1).min(axis=1, keepdims=True)
        rows_out = np.empty((scores.shape[0], k), np.int64)
        for q in range(scores.shape[0]):
            cand = np.flatnonzero(scores[q] >= kth[q, 0])
            order = np.lexsort((cand, -scores[q, cand]))[:k]
            rows_out[q] = cand[order]
    else:
        idx = np.broadcast_to(np.arange(n), scores.shape)
        rows_out = np.stack([np.lexsort((idx[q], -scores[q])) for q in range(scores.shape[0])]).astype(np.int64)
    return np.take_along_axis(scores, rows_out, axis=1), rows_out


def top_k_allowed(embeddings: np.ndarray, queries: np.ndarray, k: int, allowed: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k of ``queries [Q, d]`` over the rows of ``embeddings [N, d]`` (in memory or memory-mapped, any
    float dtype) that ``allowed [N]`` (bool) lets through, read :data:`EXACT_CHUNK` rows at a time (ties: lower row
    first; padded with -inf / -1 where fewer than ``k`` are allowed)."""
    queries = np.atleast_2d(queries).astype(np.float32, copy=False)
    rows = np.flatnonzero(allowed)
    parts = []
    for start in range(0, len(rows), EXACT_CHUNK):
        chunk = rows[start:start + EXACT_CHUNK]
        s, r = top_k_numpy(np.asarray(embeddings[chunk], np.float32), queries, k)
        parts.append((s, chunk[r]))
    if not parts:
        return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
    return parts[0] if len(parts) == 1 else merge_top_k(parts, k)


class NumpyBackend:
    """Exact search with one matrix product per query batch."""

    name = "numpy"

    def __init__(self, embeddings: np.ndarray):
        self.embeddings = embeddings  # float32 or float16, in memory or memory-mapped

    def top_k(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        if allowed is not None:
            return top_k_allowed(self.embeddings, queries, k, allowed)
        queries = np.atleast_2d(queries).astype(np.float32, copy=False)
        n = self.embeddings.shape[0]
        if n <= EXACT_CHUNK:
            return top_k_numpy(np.asarray(self.embeddings, np.float32), queries, k)
        parts = []
        for start in range(0, n, EXACT_CHUNK):
            s, r = top_k_numpy(np.asarray(self.embeddings[start:start + EXACT_CHUNK], np.float32), queries, k)
            parts.append((s, r + start))
        return merge_top_k(parts, k)


class FaissBackend:
    """``faiss.IndexFlatIP`` (exact inner product, BLAS), built from the embeddings on load."""

    name = "faiss"

    def __init__(self, embeddings: np.ndarray):
        try:
            import faiss  # optional extra (mlatr[real])
        except ImportError as exc:
            raise MlatrError("backend 'faiss' needs the faiss-cpu package (pip install 'mlatr[real]')") from exc
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)  # FAISS keeps its own copy too
        self.index = faiss.IndexFlatIP(self.embeddings.shape[1])
        if len(self.embeddings):
            self.index.add(self.embeddings)

    def top_k(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        if allowed is not None:  # exact over the allowed rows (what a flat index would scan, fewer of them)
            return top_k_allowed(self.embeddings, queries, k, allowed)
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        k = min(int(k), self.index.ntotal)
        if k <= 0:
            return np.zeros((queries.shape[0], 0), np.float32), np.zeros((queries.shape[0], 0), np.int64)
        scores, rows = self.index.search(queries, k)
        # FAISS orders equal scores arbitrarily; restore the lower-row-first contract within ties
        for q in range(rows.shape[0]):
            order = np.lexsort((rows[q], -scores[q]))
            scores[q], rows[q] = scores[q, order], rows[q, order]
        return scores, rows.astype(np.int64)


def merge_top_k(parts: list[tuple[np.ndarray, np.ndarray]], k: int,
                skip: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One top-k from several ``(scores [Q, k_i], rows [Q, k_i])`` over disjoint rows (rows < 0 and rows in
    the sorted array ``skip`` dropped); same order contract as :func:`top_k_numpy`. Short rows are padded
    with score -inf and row -1 only when fewer than ``k`` rows exist in all."""
    scores = np.concatenate([p[0] for p in parts], axis=1)
    rows = np.concatenate([p[1] for p in parts], axis=1)
    n_q = scores.shape[0]
    out = [[] for _ in range(n_q)]
    for q in range(n_q):
        keep = rows[q] >= 0
        if skip is not None and len(skip):
            keep &= ~np.isin(rows[q], skip, assume_unique=False)
        r, s = rows[q][keep], scores[q][keep]
        order = np.lexsort((r, -s))[:k]
        out[q] = (s[order], r[order])
    width = min(k, max((len(o[0]) for o in out), default=0))
    s_out = np.full((n_q, width), -np.inf, np.float32)
    r_out = np.full((n_q, width), -1, np.int64)
    for q, (s, r) in enumerate(out):
        s_out[q, :len(s)], r_out[q, :len(r)] = s[:width], r[:width]
    return s_out, r_out


class ShardedSearcher:
    """Top-k over several shards (each its own searcher, rows offset) with deleted rows skipped."""

    name = "sharded"

    def __init__(self, parts: list[tuple[int, int, object]], deleted_rows: np.ndarray):
        self.parts = parts  # (first row, row count, searcher)
        self.deleted = np.sort(np.asarray(deleted_rows, np.int64))

    def top_k(self, queries: np.ndarray, k: int, rerank: int | None = None, allowed=None
              ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` over every shard; ``rerank``: given to the shards' approximate searchers (their candidates
        per result; default their recorded one), ignored by exact ones; ``allowed``: the rows a filter allows (an
        :class:`~mlatr.search.eligibility.Allowed`, or its ``[N]`` bool mask), the top ``k`` among them."""
        queries = np.atleast_2d(queries)
        mask = getattr(allowed, "mask", allowed)
        found = []
        for first, count, searcher in self.parts:
            if count == 0:
                continue
            extra = {"rerank": rerank} if rerank is not None and hasattr(searcher, "rerank") else {}
            if mask is not None:
                local = np.array(mask[first:first + count], bool)
                local[self.deleted[(self.deleted >= first) & (self.deleted < first + count)] - first] = False
                if not local.any():
                    continue
                s, r = searcher.top_k(queries, min(int(np.count_nonzero(local)), int(k)), allowed=local, **extra)
            else:
                gone = int(np.count_nonzero((self.deleted >= first) & (self.deleted < first + count)))
                s, r = searcher.top_k(queries, min(count, int(k) + gone), **extra)
            found.append((s, np.where(r >= 0, r + first, -1)))
        if not found:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        return merge_top_k(found, int(k), self.deleted)


def make_backend(name: str, embeddings: np.ndarray):
    """The exact search backend ``name`` (``numpy`` or ``faiss``; ``auto`` = numpy) over ``embeddings [N, d]``."""
    if name in ("numpy", "auto"):
        return NumpyBackend(embeddings)
    if name == "faiss":
        return FaissBackend(embeddings)
    raise MlatrError(f"unknown search backend {name!r} (choose from {', '.join(BACKENDS)})")
