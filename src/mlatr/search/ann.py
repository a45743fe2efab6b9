"""Approximate nearest-neighbour search for large shards, with its recall measured when it is built.

A shard of fewer than ``exact_below`` rows (default :data:`EXACT_BELOW`) is searched exactly. A larger
one gets a FAISS structure (``faiss-cpu``, the ``real`` extra) chosen by size:

- ``hnsw``: a graph (HNSW, M links per node) over 8-bit scalar-quantised copies of the vectors
  (``IndexHNSWSQ``: a quarter of the float32 bytes), searched with ``efSearch``;
- ``ivfpq`` (above :data:`HNSW_UP_TO` rows): ``nlist`` inverted lists of product-quantised codes
  (``m`` sub-vectors of 8 bits), ``nprobe`` lists visited per query.

Either returns ``rerank * k`` candidates, which are re-scored exactly against the shard's own vectors
(memory-mapped from ``embeddings.npy``): the scores given back are exact cosines, only the candidate set is
approximate. :func:`build_ann` measures recall@10 against exact search on a sample of perturbed stored
vectors, doubles the search-time knob (``efSearch`` / ``nprobe``) until that recall reaches
``target_recall_pct`` (or the knob its cap), and records the recall with every parameter in the index
manifest; search reads the parameters from there.

**Filtered search** (``top_k(..., allowed=mask)``: the rows a filter allows, :mod:`mlatr.search.eligibility`):
where the filter leaves at most :data:`FILTER_EXACT_BELOW` rows of the shard (the size below which a shard is
searched exactly anyway) or under :data:`FILTER_ANN_FRACTION` of them, the allowed rows are searched exactly.
Otherwise the structure is searched unfiltered for a wider set of candidates (``rerank * k`` divided by the allowed
fraction, times :data:`FILTER_WIDEN`), re-scored exactly, and the allowed ones kept: where at least ``k`` allowed
rows lie in the better ``1 / FILTER_WIDEN`` of the candidates, they are the best ``k`` allowed rows (an allowed row
scoring higher would be among the candidates, up to the structure's recall, which is weakest in the tail of a wide
search: hence the margin); where fewer do, that query's allowed rows are searched exactly. So a filtered
search always fills its ``k`` when ``k`` rows are allowed, and a filter that follows the sound (a library, a
category: the query's neighbourhood all filtered out) costs an exact search, never a wrong answer. FAISS's own ID
selector was measured and not used: it walks the graph among the filtered-out rows and, for such a filter,
misses much of the allowed top 10 (the figures: ``benchmarks/bench_filtered_ann.py``, docs/hybrid-search.md).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mlatr.errors import MlatrError
from mlatr.search.backends import NumpyBackend, top_k_allowed

#: Shards with fewer rows are searched exactly.
EXACT_BELOW = 50_000
#: Up to this many rows a shard gets HNSW, above IVF-PQ.
HNSW_UP_TO = 5_000_000
KINDS = ("auto", "exact", "hnsw", "ivfpq")
DEFAULTS: dict[str, dict[str, Any]] = {
    "hnsw": {"M": 32, "efConstruction": 64, "efSearch": 64, "rerank": 4, "target_recall_pct": 95},
    "ivfpq": {"nprobe": 16, "pq_bits": 8, "rerank": 10, "target_recall_pct": 95},
}
#: The search-time knob raised (doubling, up to its cap) until the measured recall@10 reaches the target.
SEARCH_KNOB = {"hnsw": ("efSearch", 1024), "ivfpq": ("nprobe", 1024)}
#: Queries of the recall sample, and the noise added to each sampled stored vector.
RECALL_QUERIES = 200
RECALL_NOISE = 0.5
#: Rows cast to float32 at a time when adding to a FAISS structure.
CHUNK = 65_536
#: A filter leaving at most this many rows of a shard, or under this fraction of them, is searched exactly
#: (module docstring).
FILTER_EXACT_BELOW = EXACT_BELOW
FILTER_ANN_FRACTION = 0.2
#: How many more candidates than the allowed fraction calls for a filtered approximate search reads.
FILTER_WIDEN = 2


def faiss_module():
    """The ``faiss`` module (optional: ``pip install 'mlatr[real]'``)."""
    try:
        import faiss  # optional extra: imported only where approximate search is used
    except ImportError as exc:
        raise MlatrError("approximate search needs the faiss-cpu package (pip install 'mlatr[real]'), or build "
                         "with --ann exact") from exc
    return faiss


def choose_kind(kind: str, n: int, exact_below: int = EXACT_BELOW) -> str:
    """The structure for a shard of ``n`` rows: ``kind`` itself unless ``auto``."""
    if kind not in KINDS:
        raise MlatrError(f"--ann: unknown kind {kind!r} (choose from {', '.join(KINDS)})")
    if kind != "auto":
        return kind
    if n < exact_below:
        return "exact"
    return "hnsw" if n <= HNSW_UP_TO else "ivfpq"


def _params(kind: str, n: int, dim: int, overrides: dict[str, Any]) -> dict[str, Any]:
    params = dict(DEFAULTS[kind])
    if kind == "ivfpq":
        params["nlist"] = int(max(16, min(65536, 4 * math.sqrt(n))))
        # sub-vectors of 8 dimensions or more, at most 64 of them
        params["m"] = next(m for m in (64, 32, 16, 8, 4, 2, 1) if dim % m == 0 and dim // m >= min(8, dim))
    unknown = set(overrides) - set(params)
    if unknown:
        raise MlatrError(f"--ann-param: {', '.join(sorted(unknown))} is not a parameter of {kind} "
                         f"(it has {', '.join(sorted(params))})")
    params.update({k: int(v) for k, v in overrides.items()})
    return params


def _new_structure(kind: str, dim: int, params: dict[str, Any]):
    faiss = faiss_module()
    if kind == "hnsw":
        index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, params["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["efConstruction"]
        return index
    quantizer = faiss.IndexFlatIP(dim)
    return faiss.IndexIVFPQ(quantizer, dim, params["nlist"], params["m"], params["pq_bits"],
                            faiss.METRIC_INNER_PRODUCT)


def _set_search_params(kind: str, index, params: dict[str, Any]) -> None:
    if kind == "hnsw":
        index.hnsw.efSearch = params["efSearch"]
    else:
        index.nprobe = params["nprobe"]


def recall_sample(embeddings: np.ndarray, n_queries: int = RECALL_QUERIES, seed: int = 0) -> np.ndarray:
    """``[q, d]`` unit-norm queries: stored rows with Gaussian noise (not the rows themselves, which any
    structure finds trivially)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(embeddings.shape[0], size=min(n_queries, embeddings.shape[0]), replace=False))
    q = np.asarray(embeddings[rows], np.float32)
    q = q + RECALL_NOISE * rng.standard_normal(q.shape).astype(np.float32) / math.sqrt(q.shape[1])
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of each query's true top-k rows among its found top-k rows."""
    pairs = zip(found, truth, strict=True)
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / max(1, len(t)) for f, t in pairs]))


def build_ann(folder: Path, embeddings: np.ndarray, kind: str = "auto", overrides: dict[str, Any] | None = None,
              exact_below: int = EXACT_BELOW, progress: bool = False, name: str = "ann") -> dict[str, Any] | None:
    """Build the approximate structure of a shard's ``embeddings`` into ``folder/NAME.faiss`` (none when exact
    search is chosen; ``name``: ``ann`` for the clips' audio, ``caption_ann`` for their captions); returns
    what the manifest records: kind, parameters, recall@10 and its sample size."""
    n, dim = embeddings.shape
    kind = choose_kind(kind, n, exact_below)
    if kind == "exact":
        return None
    faiss = faiss_module()
    params = _params(kind, n, dim, overrides or {})
    index = _new_structure(kind, dim, params)
    rng = np.random.default_rng(0)
    train = np.asarray(embeddings[np.sort(rng.choice(n, size=min(n, 100_000), replace=False))], np.float32)
    index.train(train)
    del train

    for start in tqdm(range(0, n, CHUNK), desc=f"{name} {kind}", disable=not progress, unit="chunk"):
        index.add(np.ascontiguousarray(embeddings[start:start + CHUNK], np.float32))
    faiss.write_index(index, str(folder / f"{name}.faiss"))
    queries = recall_sample(embeddings)
    truth = NumpyBackend(embeddings).top_k(queries, 10)[1]
    knob, cap = SEARCH_KNOB[kind]
    if kind == "ivfpq":
        cap = min(cap, params["nlist"])
    while True:  # the smallest knob value (doubling) whose recall@10 on the sample reaches the target
        entry = {"kind": kind, "params": dict(params), "file": f"{name}.faiss"}
        found = recall_at(AnnSearcher(embeddings, index, entry).top_k(queries, 10)[1], truth)
        if found * 100 >= params["target_recall_pct"] or params[knob] >= cap:
            break
        params[knob] = min(cap, 2 * params[knob])
    entry["recall_at_10"] = round(found, 4)
    entry["recall_queries"] = int(len(queries))
    (folder / f"{name}.json").write_text(json.dumps(entry), encoding="utf-8")
    return entry


@dataclass(frozen=True)
class AnnBuild:
    """How a new shard's approximate structures are built (:func:`build_ann`'s arguments): called with the
    shard's temporary folder, its clips' or its captions' embeddings and the structure's name by
    :func:`mlatr.search.shards.write_shard`."""

    kind: str = "auto"
    params: dict | None = None
    exact_below: int = EXACT_BELOW
    progress: bool = False

    def __call__(self, folder: Path, embeddings: np.ndarray, name: str = "ann") -> dict | None:
        return build_ann(folder, embeddings, self.kind, self.params, self.exact_below, self.progress, name)


class AnnSearcher:
    """Top-k over one shard through its FAISS structure, candidates re-scored exactly (see the module)."""

    name = "ann"

    def __init__(self, embeddings: np.ndarray, index, entry: dict[str, Any]):
        self.embeddings, self.index, self.entry = np.asarray(embeddings), index, entry  # a map's plain view
        self.rerank = int(entry["params"].get("rerank", 1))
        _set_search_params(entry["kind"], index, entry["params"])

    @classmethod
    def open(cls, folder: Path, embeddings: np.ndarray, entry: dict[str, Any]) -> AnnSearcher:
        faiss = faiss_module()
        path = folder / str(entry.get("file", "ann.faiss"))
        if not path.is_file():
            raise MlatrError(f"{path}: missing (the manifest records an {entry.get('kind')} structure); "
                             "rebuild the shard with mlatr index compact")
        try:
            # memory-mapped where this FAISS can (IO_FLAG_MMAP_IFC): the codes are paged in as searches touch
            # them, instead of the whole file read at start
            index = faiss.read_index(str(path), getattr(faiss, "IO_FLAG_MMAP_IFC", 0))
        except RuntimeError as exc:
            raise MlatrError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0][:200]})") from exc
        if index.ntotal != embeddings.shape[0] or index.d != embeddings.shape[1]:
            raise MlatrError(f"{path}: {index.ntotal} vectors of dim {index.d}, the shard holds "
                             f"{embeddings.shape[0]} of dim {embeddings.shape[1]}")
        return cls(embeddings, index, entry)

    def top_k(self, queries: np.ndarray, k: int, rerank: int | None = None, allowed: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores [Q, k], rows [Q, k])``: the structure's ``rerank * k`` candidates (default: the recorded
        ``rerank``; 1 for a fused ranking's window, whose recall is measured as a whole) re-scored exactly;
        ``allowed`` (``[n]`` bool): among the rows a filter allows (module docstring)."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), np.float32)
        n = self.embeddings.shape[0]
        per = max(1, self.rerank if rerank is None else int(rerank))
        if allowed is not None:
            count = int(np.count_nonzero(allowed))
            if count <= FILTER_EXACT_BELOW or count < FILTER_ANN_FRACTION * n:
                return top_k_allowed(self.embeddings, queries, k, allowed)
            k = min(int(k), count)
            wide = min(n, math.ceil(k * per * FILTER_WIDEN * n / count))
        else:
            k = min(int(k), n)
            wide = min(n, max(k, k * per))
        _, cand = self.index.search(queries, wide)  # [Q, wide], -1 where fewer were found
        scores_out = np.full((len(queries), k), -np.inf, np.float32)
        rows_out = np.full((len(queries), k), -1, np.int64)
        short = []  # queries whose candidates hold fewer than k allowed rows
        for q in range(len(queries)):
            rows = np.unique(cand[q][cand[q] >= 0])
            exact = np.asarray(self.embeddings[rows], np.float32) @ queries[q]  # [c]
            order = np.lexsort((rows, -exact))
            if allowed is not None:  # the k best allowed rows, within the better part of the candidates
                order = order[:len(order) // FILTER_WIDEN]
                order = order[allowed[rows[order]]]
                if len(order) < k:
                    short.append(q)
                    continue
            order = order[:k]
            scores_out[q, :len(order)], rows_out[q, :len(order)] = exact[order], rows[order]
        if short:
            scores_out[short], rows_out[short] = top_k_allowed(self.embeddings, queries[short], k, allowed)
        return scores_out, rows_out
