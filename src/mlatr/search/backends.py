"""Top-k inner-product search over unit-norm embeddings: exact numpy, or FAISS (``faiss-cpu``).

Both return the same ranking contract: ``top_k(queries [Q, d], k) -> (scores [Q, k'], rows [Q, k'])``
with ``k' = min(k, N)``, scores descending and, among equal scores, the lower row first. With unit-norm
rows and queries the inner product is the cosine (ATRI eq. 1, the similarity the model was trained on).
"""

from __future__ import annotations

import numpy as np

from mlatr.errors import MlatrError

BACKENDS = ("numpy", "faiss")


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


class NumpyBackend:
    """Exact search with one matrix product per query batch."""

    name = "numpy"

    def __init__(self, embeddings: np.ndarray):
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return top_k_numpy(self.embeddings, np.atleast_2d(queries), k)


class FaissBackend:
    """``faiss.IndexFlatIP`` (exact inner product, BLAS), built from the embeddings on load."""

    name = "faiss"

    def __init__(self, embeddings: np.ndarray):
        try:
            import faiss
        except ImportError as exc:
            raise MlatrError("backend 'faiss' needs the faiss-cpu package (pip install 'mlatr[real]')") from exc
        self.embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        self.index = faiss.IndexFlatIP(self.embeddings.shape[1])
        if len(self.embeddings):
            self.index.add(self.embeddings)

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
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


def make_backend(name: str, embeddings: np.ndarray):
    """The search backend ``name`` (``numpy`` or ``faiss``) over ``embeddings [N, d]``."""
    if name == "numpy":
        return NumpyBackend(embeddings)
    if name == "faiss":
        return FaissBackend(embeddings)
    raise MlatrError(f"unknown search backend {name!r} (choose from {', '.join(BACKENDS)})")
