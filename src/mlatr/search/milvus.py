"""An index kept in Milvus (``pymilvus``; ``milvus-lite`` for a local file): for libraries beyond one machine.

Targets: ``milvus:PATH.db`` (milvus-lite, an embedded database in one file) or
``milvus://HOST:PORT/COLLECTION`` (a Milvus server or cluster; the same code talks to both). A target
holds four collections:

- ``NAME`` (clips): ``id`` primary key, unit ``vector``, ``path``, ``info`` JSON with the captions and the
  audio file's state when encoded;
- ``NAME_captions``: ``row`` key, ``clip`` id, ``lang``, ``text``, unit ``vector``, and the caption's keyword
  terms (:mod:`mlatr.search.analysis`, in its own language) as ``terms``, each term written as a token of
  16 hex digits (:func:`term_token`) so that Milvus's ``standard`` analyzer (milvus-lite has no whitespace
  one) keeps every term whole, stems and Japanese and Chinese words included; a BM25 function turns
  ``terms`` into the ``sparse`` vector (``bm25_k1`` 1.5, ``bm25_b`` 0.75: mlatr's BM25, :mod:`mlatr.search.lexical`);
- ``NAME_meta``: the index meta as JSON (format, dim, checkpoint: ``search`` / ``serve`` load the right
  model) and the library statistics of :mod:`mlatr.search.relevance` as append-only batches: each write
  adds the sums (rows, outer products, count, terms) of what it inserted minus what it deleted
  (:class:`Sums`), so two concurrent ``--add`` of different clips keep both clips and both batches;
- ``NAME_terms``: the keyword terms' document counts, a row per term token and write (negative for deleted
  captions), summed per query term (``TEXT_MATCH`` counts take a scan of every caption per term);
- ``NAME_segments``: the segments of the long clips (:mod:`mlatr.search.segments`): ``key`` (clip id and
  number), ``clip`` id, ``start`` and ``end`` seconds, unit ``vector`` (made with the first write that has any; a
  target without it holds no segment).

Vectors are indexed ``FLAT`` with the inner-product metric (exact search, ATRI eq. 1: the sound ranking
equals the local exact index's); a cluster's operator may re-index a collection approximately.

Milvus keeps rows, not files: ``--add`` inserts the new clips' rows, a re-encoded clip is a delete and an
insert, a deleted clip a delete. Every command opens a target as a fresh process does: it loads each
collection it reads (milvus-lite 3.2 starts a process with every collection released). A Milvus error reaches
the user as one :class:`~mlatr.errors.MlatrError` naming the target.

Text ranking (:class:`MilvusRanker`): Milvus's own hybrid search fuses lists by rank (RRF) or by a weighted
sum of raw scores, and the fitted relevance model (:mod:`mlatr.search.fusion`) reads z-scores against the
library's statistics, a BM25 share of the query's idf mass, a caption's rarity and interactions, so it is
computed in mlatr, by the ranking a local index uses (:func:`mlatr.search.hybrid.rank_candidates`). Milvus
supplies its candidates: each source's top window (audio vector search, caption vector search, BM25 sparse
search), the union's vectors and caption terms fetched and every source of every candidate scored exactly
(cosines; BM25 from the terms, the stored document counts and term total: :func:`bm25_of`); the query's
rare cutoff is read on the library's :class:`~mlatr.search.relevance.RareSample`, whose caption vectors are
fetched once. Where the windows hold every clip this is the local exact ranking.

:class:`MilvusStorage` is a target as a :class:`~mlatr.search.storage.Storage`: its clips' and captions' columns
read here, searched there; written as inserts and deletes (a database needs no writer lock or rewrite).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from mlatr.errors import MissingFileError, MlatrError
from mlatr.file_kinds import special_file
from mlatr.search.analysis import terms as analysed_terms
from mlatr.search.columns import REQUIRED, CaptionColumns, ClipColumns, SegmentColumns
from mlatr.search.eligibility import Allowed
from mlatr.search.fusion import Candidates
from mlatr.search.hybrid import QueryCandidates, Ranking, best_per_clip, rank_candidates
from mlatr.search.lexical import K1, B, idf, saturation
from mlatr.search.milvus_filter import expression, in_filter
from mlatr.search.query_syntax import (
    KeywordQuery,
    ParsedQuery,
    as_parsed,
    clause_mass,
    clause_scores,
    keyword_query,
)
from mlatr.search.query_translation import QueryTranslation
from mlatr.search.relevance import (
    Calibration,
    LibraryStats,
    Moments,
    QueryStats,
    RareSample,
    RelevanceModel,
    rare_sample,
)
from mlatr.search.segments import Segments
from mlatr.search.storage import CheckMeta, Storage, Tables

PREFIX = "milvus:"
DEFAULT_COLLECTION = "mlatr_index"
FORMAT = "mlatr-milvus-2"
#: Rows per insert / query page; ids per ``in`` filter.
PAGE = 2000
#: Keys per ``in`` filter of a fetch: a key of one row (a clip id, a term), of a clip's captions (16 of them).
FETCH, CAPTION_FETCH = 4096, 1024
#: Terms of one caption kept (a ``terms`` field holds at most 65,535 characters, 17 per term).
MAX_TERMS = 3800
#: Each source's window of a text query (the query's ``k`` when larger); Milvus returns at most 16,384.
WINDOW = 256
MAX_WINDOW = 16384
#: A filter allowing at most this many rows is searched among their keys (:meth:`MilvusSearcher.hits`).
FILTER_IN = 16384


def is_milvus(target: object) -> bool:
    return isinstance(target, str) and target.startswith(PREFIX)


#: A collection name Milvus takes, leaving room for the suffixes of :func:`names` (Milvus: 255 characters).
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


def parse_target(target: str) -> tuple[str, str]:
    """``(uri, collection)`` of ``milvus:PATH.db`` or ``milvus://HOST:PORT/COLLECTION``; anything else (a port
    that is no number in 1..65535, credentials, a query or fragment, a collection name Milvus would refuse) is an
    error naming the target."""
    rest = target[len(PREFIX):]
    if rest.startswith("//"):
        usage = f"{target}: expected milvus://HOST:PORT/COLLECTION"
        parts = urlsplit("http:" + rest)
        try:
            port = parts.port or 19530
        except ValueError:  # urllib: "Port could not be cast to integer value", "Port out of range"
            raise MlatrError(f"{usage} (a port in 1..65535)") from None
        if parts.port == 0:
            raise MlatrError(f"{usage} (a port in 1..65535)")
        if parts.username is not None or parts.password is not None:  # the message does not repeat them
            shown = f"{PREFIX}//***@{rest[2:].split('@', 1)[1]}"
            raise MlatrError(f"{shown}: expected milvus://HOST:PORT/COLLECTION without credentials (a target is "
                             "shown in messages and logs)")
        if parts.query or parts.fragment or "?" in rest or "#" in rest:
            raise MlatrError(f"{usage} (no query or fragment)")
        collection = parts.path.strip("/") or DEFAULT_COLLECTION
        if not parts.hostname or not COLLECTION_NAME.fullmatch(collection):
            raise MlatrError(f"{usage} (a collection name of at most 200 ASCII letters, digits and _, not starting "
                             "with a digit)")
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return f"http://{host}:{port}", collection
    if not rest.endswith(".db"):
        raise MlatrError(f"{target}: expected milvus:PATH.db (milvus-lite) or milvus://HOST:PORT/COLLECTION")
    return rest, DEFAULT_COLLECTION


@contextmanager
def reported(target: str) -> Iterator[None]:
    """Any error pymilvus raises inside the block as one :class:`MlatrError` naming ``target``."""
    from pymilvus.exceptions import MilvusException  # optional extra (mlatr[milvus])

    try:
        yield
    except MilvusException as exc:
        message = getattr(exc, "message", None) or str(exc)
        raise MlatrError(f"{target}: Milvus refused: {' '.join(str(message).split())[:300]}") from exc


def client(target: str):
    """A ``MilvusClient`` for ``target`` and the collection name."""
    try:
        from pymilvus import MilvusClient  # optional extra: imported only for a milvus target
    except ImportError as exc:
        raise MlatrError("a milvus target needs pymilvus (and milvus-lite for milvus:PATH.db): "
                         "pip install 'mlatr[milvus]'") from exc
    uri, collection = parse_target(target)
    special = None if uri.startswith("http://") else special_file(uri)
    if special:  # milvus-lite would try to make it its data and print its own traceback
        raise MlatrError(f"{target}: {uri} is not a regular file but {special} (not opened)")
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)  # it logs each error it raises: reported() says it
    try:
        return MilvusClient(uri), collection
    except Exception as exc:  # connection refused, a damaged file: pymilvus raises its own exception types
        raise MlatrError(f"{target}: cannot open ({type(exc).__name__}: {str(exc)[:200]})") from exc


def names(collection: str) -> tuple[str, str, str, str]:
    """The clips', captions', meta and term counts' collections of a target's ``collection``."""
    return collection, f"{collection}_captions", f"{collection}_meta", f"{collection}_terms"


def segments_name(collection: str) -> str:
    """The segments' collection of a target's ``collection``."""
    return f"{collection}_segments"


def _create(mc, collection: str, dim: int) -> None:
    from pymilvus import DataType, Function, FunctionType, MilvusClient  # optional extra (mlatr[milvus])

    key = {"is_primary": True, "max_length": 8192}
    text = {"max_length": 65535}
    clips, captions, meta, _ = names(collection)
    layout = {clips: [("id", DataType.VARCHAR, key), ("path", DataType.VARCHAR, text), ("info", DataType.JSON, {})],
              captions: [("row", DataType.VARCHAR, key), ("clip", DataType.VARCHAR, text),
                         ("lang", DataType.VARCHAR, {"max_length": 16}), ("text", DataType.VARCHAR, text),
                         ("terms", DataType.VARCHAR, {**text, "enable_analyzer": True,
                                                       "analyzer_params": {"tokenizer": "standard"}}),
                         ("n_terms", DataType.INT64, {}), ("sparse", DataType.SPARSE_FLOAT_VECTOR, {})],
              meta: [("key", DataType.VARCHAR, key), ("value", DataType.JSON, {})],
              f"{collection}_terms": [("key", DataType.VARCHAR, key), ("token", DataType.VARCHAR, {"max_length": 16}),
                                      ("df", DataType.INT64, {})],
              segments_name(collection): [("key", DataType.VARCHAR, key), ("clip", DataType.VARCHAR, text),
                                          ("start", DataType.DOUBLE, {}), ("end", DataType.DOUBLE, {})]}
    for name, fields in layout.items():
        if mc.has_collection(name):
            continue
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        for field_name, kind, opts in fields:
            schema.add_field(field_name, kind, **opts)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=2 if name.endswith("_terms") else dim)
        params = mc.prepare_index_params()
        params.add_index(field_name="vector", index_type="FLAT", metric_type="IP")
        if name.endswith("_terms"):
            params.add_index(field_name="token", index_type="INVERTED")
        if name == captions:
            schema.add_function(Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["terms"],
                                         output_field_names=["sparse"]))
            params.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
                             params={"bm25_k1": K1, "bm25_b": B})
        mc.create_collection(name, schema=schema, index_params=params)


def _load(mc, *collections: str) -> None:
    """Load ``collections`` for reading (a process starts with them released; loading a loaded one is a no-op)."""
    for name in collections:
        mc.load_collection(name)


def read_meta(target: str) -> dict | None:
    """The meta a target records, or None when it holds no index yet."""
    meta_name = names(parse_target(target)[1])[2]
    rows = _meta_rows(target, 'key == "meta"', ["value"])
    if not rows:
        return None
    meta = rows[0]["value"]
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("dim"), int):
        found = meta.get("format") if isinstance(meta, dict) else None
        raise MlatrError(f"{target}: its {meta_name} collection does not hold an {FORMAT} index meta (found "
                         f"{found!r}: build the index again with mlatr index build --to {target})")
    return meta


def write_signature(target: str) -> tuple[str, ...] | None:
    """The writes a target holds (each build, ``--add`` and delete appends one batch of statistics, last, under
    a new id), sorted: what a server's watch compares to see another process's writes; None without an index.
    One small query (a row per write)."""
    rows = _meta_rows(target, 'key like "stats/%/audio/total"', ["key"])
    return None if rows is None else tuple(sorted(r["key"].split("/")[1] for r in rows))


def lite_file_missing(target: str) -> bool:
    """Whether ``target`` is a milvus-lite file that does not exist (opening it would create it)."""
    uri = parse_target(target)[0]
    return not uri.startswith("http://") and not os.path.lexists(uri)


def _meta_rows(target: str, filter: str, fields: list[str]) -> list[dict] | None:
    """The rows of the target's meta collection that ``filter`` selects (``fields`` of each); None when the
    target has no meta collection (no index yet; a milvus-lite file that does not exist is not made)."""
    if lite_file_missing(target):
        return None
    mc, collection = client(target)
    meta_name = names(collection)[2]
    with reported(target):
        if not mc.has_collection(meta_name):
            return None
        _load(mc, meta_name)
        return mc.query(meta_name, filter=filter, output_fields=fields)


def term_token(term: str) -> str:
    """A keyword term as the token Milvus stores: 16 hex digits of its BLAKE2b hash (one token for any
    analyzer; two of a library's terms share one with a chance of about ``V^2 / 2^65`` for ``V`` terms)."""
    return hashlib.blake2b(term.encode(), digest_size=8).hexdigest()


def caption_terms(text: str, lang: str | None) -> list[str]:
    """The keyword terms of a caption in ``lang`` (:func:`mlatr.search.analysis.terms`), at most :data:`MAX_TERMS`."""
    return analysed_terms(text, lang)[:MAX_TERMS]


@dataclass
class Sums:
    """The sums that give a set of rows' :class:`~mlatr.search.relevance.Moments`: ``total [d]``, ``outer [d, d]``
    (of ``x x^T``) and ``count``; for captions also ``terms``, the BM25 document lengths' sum (a caption of no
    term counting 1, as mlatr's keyword index does). A deletion adds negative sums."""

    total: np.ndarray
    outer: np.ndarray
    count: int
    terms: int = 0
    doc_freq: Counter | None = None

    @classmethod
    def of(cls, rows: np.ndarray, lengths: Sequence[int] = (), sign: int = 1,
           docs: Sequence[Sequence[str]] = ()) -> Sums:
        """The sums of ``rows`` (``lengths``: their BM25 lengths; ``docs``: their term tokens, for the document
        frequencies), negated with ``sign`` -1."""
        x = np.asarray(rows, np.float64)
        df = Counter()
        for toks in docs:
            df.update(set(toks))
        return cls(sign * x.sum(axis=0), sign * (x.T @ x), sign * len(x), sign * sum(max(n, 1) for n in lengths),
                   Counter({t: sign * n for t, n in df.items()}))

    def __add__(self, other: Sums) -> Sums:
        df = Counter(self.doc_freq or {})
        for t, n in (other.doc_freq or {}).items():
            df[t] = df.get(t, 0) + n
        return Sums(self.total + other.total, self.outer + other.outer, self.count + other.count,
                    self.terms + other.terms, df)

    def moments(self) -> Moments:
        if self.count <= 0:
            return Moments(np.zeros(len(self.total)), np.zeros_like(self.outer), 0)
        mean = self.total / self.count
        return Moments(mean, self.outer / self.count - np.outer(mean, mean), self.count)


def _stats_rows(write: str, kind: str, sums: Sums) -> list[dict]:
    """The meta rows of one write's batch of ``kind`` (audio | captions) statistics: its ``total`` as the
    vector of row ``stats/WRITE/KIND/total`` (with the counts), the rows of ``outer`` as ``.../outer/I``."""
    head = f"stats/{write}/{kind}"
    rows = [{"key": f"{head}/total", "value": {"count": int(sums.count), "terms": int(sums.terms)},
             "vector": sums.total.astype(np.float32).tolist()}]
    rows += [{"key": f"{head}/outer/{i}", "value": {"row": i}, "vector": r.astype(np.float32).tolist()}
             for i, r in enumerate(sums.outer)]
    return rows


def _read_stats(mc, meta_name: str, dim: int) -> dict[str, Sums]:
    """The library's :class:`Sums` per kind: every write's batch added up."""
    out = {kind: Sums(np.zeros(dim), np.zeros((dim, dim)), 0) for kind in ("audio", "captions")}
    for r in _all(mc, meta_name, ["key", "value", "vector"], 'key like "stats/%"'):
        _, _, kind, part, *row = r["key"].split("/")
        s, v = out[kind], np.asarray(r["vector"], np.float64)
        if part == "total":
            s.total += v
            s.count += int(r["value"]["count"])
            s.terms += int(r["value"].get("terms", 0))
        else:
            s.outer[int(row[0])] += v
    return out


def _fetch(mc, name: str, key: str, values: Sequence[str], fields: list[str], page: int = FETCH) -> list[dict]:
    """The rows of collection ``name`` whose ``key`` is one of ``values``, ``fields`` of them, ``page`` values per
    query (a query answers at most :data:`MAX_WINDOW` rows: where one does, its rows are read by the iterator)."""
    out: list[dict] = []
    values = list(values)
    for start in range(0, len(values), page):
        where = in_filter(key, values[start:start + page])
        rows = mc.query(name, filter=where, output_fields=fields, limit=MAX_WINDOW)
        out += rows if len(rows) < MAX_WINDOW else _all(mc, name, fields, where)  # a page of clips of many captions
    return out


def _remove(mc, collection: str, ids: Sequence[str], dim: int) -> tuple[Sums, Sums, list[str]]:
    """Delete the clips ``ids`` present (and their captions); their statistics, negative, and the ids found."""
    clips, captions, _, _ = names(collection)
    segments = segments_name(collection)
    found = _fetch(mc, clips, "id", ids, ["id", "vector"])
    caps = _fetch(mc, captions, "clip", [r["id"] for r in found], ["row", "vector", "n_terms", "terms"],
                  CAPTION_FETCH)
    gone = [r["id"] for r in found]
    audio = Sums.of(np.asarray([r["vector"] for r in found], np.float32).reshape(-1, dim), sign=-1)
    text = Sums.of(np.asarray([r["vector"] for r in caps], np.float32).reshape(-1, dim),
                   [int(r["n_terms"]) for r in caps], sign=-1, docs=[r["terms"].split() for r in caps])
    for start in range(0, len(gone), PAGE):
        chunk = gone[start:start + PAGE]
        mc.delete(clips, ids=chunk)
        mc.delete(captions, filter=in_filter("clip", chunk))
        if mc.has_collection(segments):
            mc.delete(segments, filter=in_filter("clip", chunk))
    return audio, text, gone


def _add_stats(mc, collection: str, audio: Sums, text: Sums) -> None:
    """One write's batch: its statistics in the meta collection, its terms' document counts (a row per term
    and write, ``df`` negative for deleted captions) in the terms collection."""
    _, _, meta_name, terms_name = names(collection)
    write = uuid.uuid4().hex
    rows = _stats_rows(write, "audio", audio) + _stats_rows(write, "captions", text)
    counts = [{"key": f"{t}/{write}", "token": t, "df": int(n), "vector": [0.0, 0.0]}
              for t, n in (text.doc_freq or {}).items() if n]
    for name, data in ((meta_name, rows), (terms_name, counts)):
        for start in range(0, len(data), PAGE):
            mc.insert(name, data[start:start + PAGE])


def write_milvus(target: str, clips: ClipColumns, captions: CaptionColumns, meta: dict, drop_ids: list[str],
                 replace: bool, segments: SegmentColumns | None = None) -> int:
    """Insert the rows of ``clips``, ``captions`` and ``segments`` (in memory) into ``target`` with the index's
    ``meta``, after
    deleting the clips ``drop_ids`` (and, with ``replace``, everything), and the library statistics' batch of
    the change. Returns the rows written."""
    mc, collection = client(target)
    clip_name, caption_name, meta_name, _ = names(collection)
    dim = clips.dim
    with reported(target):
        if replace:
            for name in (*names(collection), segments_name(collection)):
                if mc.has_collection(name):
                    mc.drop_collection(name)
        _create(mc, collection, dim)
        _load(mc, *names(collection), segments_name(collection))
        gone_audio = gone_text = Sums(np.zeros(dim), np.zeros((dim, dim)), 0)
        if not replace:
            gone_audio, gone_text, _ = _remove(mc, collection, sorted(set(drop_ids) | set(clips.ids)), dim)
        audio, text = gone_audio, gone_text
        for start in range(0, len(clips.ids), PAGE):  # a page at a time: rows as lists cost ~30x the vectors
            vecs = np.asarray(clips.embeddings[start:start + PAGE], np.float32)
            mc.insert(clip_name, [{"id": clips.ids[i], "vector": v, **_clip_fields(clips.row(i))}
                                  for i, v in zip(range(start, start + len(vecs)), vecs.tolist(), strict=True)])
            audio = audio + Sums.of(vecs)
        clip_of = captions.clip.tolist()
        for start in range(0, len(clip_of), PAGE):
            vecs = np.asarray(captions.embeddings[start:start + PAGE], np.float32)
            page, docs = [], []
            for j, v in zip(range(start, start + len(vecs)), vecs.tolist(), strict=True):
                row = captions.row(j)
                docs.append([term_token(t) for t in caption_terms(row["text"], row["lang"])])
                page.append({"row": f"{clips.ids[clip_of[j]]}\t{j}", "clip": clips.ids[clip_of[j]], **row,
                             "terms": " ".join(docs[-1]), "n_terms": len(docs[-1]), "vector": v})
            mc.insert(caption_name, page)
            text = text + Sums.of(vecs, [len(d) for d in docs], docs=docs)
        if segments is not None and len(segments):
            seg_clip, seg_times = segments.clip.tolist(), segments.times.tolist()
            for start in range(0, len(seg_clip), PAGE):
                vecs = np.asarray(segments.embeddings[start:start + PAGE], np.float32)
                mc.insert(segments_name(collection), [
                    {"key": f"{clips.ids[seg_clip[j]]}\t{j}", "clip": clips.ids[seg_clip[j]], "start": seg_times[j][0],
                     "end": seg_times[j][1], "vector": v}
                    for j, v in zip(range(start, start + len(vecs)), vecs.tolist(), strict=True)])
        _add_stats(mc, collection, audio, text)
        meta = {k: v for k, v in meta.items() if k not in ("format", "dim", "dtype")}
        mc.upsert(meta_name, [{"key": "meta", "value": {**meta, "format": FORMAT, "dim": dim},
                               "vector": [0.0] * dim}])
    return len(clips.ids) + len(clip_of)


def _clip_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A clip's column values as its Milvus row holds them: ``path`` a field of its own, the others in ``info``."""
    info = dict(row)
    return {"path": info.pop("path"), "info": info}


def record_milvus_meta(target: str, key: str, value: Any) -> None:
    """The target's meta row with ``key`` set to ``value`` (upserted; the rows untouched)."""
    meta = read_meta(target)
    if meta is None:
        raise MlatrError(f"{target}: holds no mlatr index")
    mc, collection = client(target)
    with reported(target):
        mc.upsert(names(collection)[2], [{"key": "meta", "value": {**meta, key: value},
                                          "vector": [0.0] * int(meta["dim"])}])


def delete_milvus(target: str, ids: list[str]) -> int:
    """Delete the clips ``ids`` (and their captions) from ``target``; unknown ids are an error."""
    meta = read_meta(target)
    if meta is None:
        raise MlatrError(f"{target}: holds no mlatr index")
    mc, collection = client(target)
    with reported(target):
        _load(mc, *names(collection), *[n for n in [segments_name(collection)] if mc.has_collection(n)])
        found = {r["id"] for r in _fetch(mc, collection, "id", ids, ["id"])}
        unknown = [i for i in ids if i not in found]
        if unknown:
            raise MlatrError(f"{target}: no clip {', '.join(map(repr, unknown[:5]))}; nothing deleted")
        audio, text, gone = _remove(mc, collection, list(dict.fromkeys(ids)), meta["dim"])
        _add_stats(mc, collection, audio, text)
    return len(gone)


#: Loggers that report, as errors, milvus-lite's embedded server lacking a timestamp call the query
#: iterator tries first (it then falls back to the client's clock): silenced while paging.
NOISY_LOGGERS = ("grpc._server", "pymilvus.client.iterator.query_iterator")


def _all(mc, name: str, fields: list[str], filter: str = "") -> list[dict]:
    """Every row of collection ``name`` (``fields`` of it; those matching ``filter``), paged."""
    loggers = [logging.getLogger(n) for n in NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        # the largest batch a query answers: each batch is a query (pk > last) that scans the collection
        it = mc.query_iterator(name, batch_size=MAX_WINDOW, output_fields=fields, filter=filter)
        out: list[dict] = []
        while True:
            batch = it.next()
            if not batch:
                it.close()
                return out
            out.extend(batch)
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
class MilvusSearcher:
    """Top-k through a Milvus collection; rows are positions in the loaded index (ties: lower row first)."""

    name = "milvus"

    def __init__(self, mc, target: str, collection: str, key: str, row_of: dict[str, int]):
        self.mc, self.target, self.collection, self.key, self.row_of = mc, target, collection, key, row_of
        self.key_of: dict[int, str] = {}  # row -> key, made on first use

    def hits(self, data: list, k: int, field: str = "vector", metric: str = "IP", allowed: Allowed | None = None
             ) -> list[list[tuple[int, float]]]:
        """Per query of ``data`` (vectors, or BM25 texts with ``field`` sparse, ``metric`` BM25): the ``(row,
        score)`` of its ``k`` best rows, as Milvus returns them (a row loaded since: left out); ``allowed``: among
        the rows a filter allows (:meth:`_filtered`)."""
        if allowed is not None:
            return self._filtered(data, k, field, metric, allowed)
        return self._search(data, k, field, metric)

    def _search(self, data: list, k: int, field: str, metric: str, where: str = "") -> list[list[tuple[int, float]]]:
        with reported(self.target):
            found = self.mc.search(self.collection, data=data, limit=min(int(k), MAX_WINDOW), anns_field=field,
                                   output_fields=[self.key], search_params={"metric_type": metric}, filter=where)
        # milvus-lite answers a BM25 score negated (its distance): the score is its magnitude
        return [[(self.row_of[h["entity"][self.key]], abs(float(h["distance"])) if metric == "BM25"
                  else float(h["distance"])) for h in hits if h["entity"][self.key] in self.row_of] for hits in found]

    def _filtered(self, data: list, k: int, field: str, metric: str, allowed: Allowed) -> list[list[tuple[int, float]]]:
        """The ``k`` best allowed rows: where at most :data:`FILTER_IN` rows are allowed, searched among them by
        key (``key in [...]``, :data:`FETCH` keys a search); else with the filter's own expression over ``info``
        (:mod:`mlatr.search.milvus_filter`), the window widened by the rows it lets through that the query's
        words exclude, each answer tested against the filter. So the ``k`` are the best allowed ones unless
        more than :data:`MAX_WINDOW` - ``k`` rows pass the expression but not the words."""
        mask = allowed.mask
        rows = np.flatnonzero(mask)
        if len(rows) <= FILTER_IN:
            if len(self.key_of) != len(self.row_of):
                self.key_of = {row: key for key, row in self.row_of.items()}
            found: list[list[tuple[int, float]]] = [[] for _ in data]
            for start in range(0, len(rows), FETCH):
                keys = [self.key_of[r] for r in rows[start:start + FETCH].tolist() if r in self.key_of]
                part = self._search(data, min(int(k), len(keys)), field, metric, in_filter(self.key, keys)) \
                    if keys else [[] for _ in data]
                found = [a + b for a, b in zip(found, part, strict=True)]
            return [sorted(hits, key=lambda h: (-h[1], h[0]))[:k] for hits in found]
        if "milvus" not in allowed.memo:
            allowed.memo["milvus"] = True if allowed.where is None else expression(allowed.where, allowed.facets)
        where = allowed.memo["milvus"]
        if where is False:
            return [[] for _ in data]
        extra = int(np.count_nonzero(allowed.facet_mask & ~mask))
        found = self._search(data, min(int(k) + extra, MAX_WINDOW), field, metric, "" if where is True else where)
        return [[h for h in hits if mask[h[0]]][:k] for hits in found]

    def top_k(self, queries: np.ndarray, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        queries = np.atleast_2d(np.asarray(queries, np.float32))
        k = min(int(k), len(self.row_of))
        if k <= 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        scores = np.full((len(queries), k), -np.inf, np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        for q, hits in enumerate(self.hits(queries.tolist(), k, allowed=allowed)):
            r = np.asarray([h[0] for h in hits], np.int64)
            s = np.asarray([h[1] for h in hits], np.float32)
            order = np.lexsort((r, -s))[:k]
            scores[q, :len(order)], rows[q, :len(order)] = s[order], r[order]
        return scores, rows


def bm25_of(tokens: Sequence[Sequence[str]], terms: Sequence[str], doc_freq: dict[str, int], count: int,
            avgdl: float) -> np.ndarray:
    """``[c]`` BM25 scores of captions given as their term tokens (:func:`term_token`, ``tokens[j]``: caption
    ``j``'s) for the query ``terms``, with the whole library's statistics: its caption ``count`` and ``avgdl``,
    each term's document frequency ``doc_freq`` (:mod:`mlatr.search.lexical`'s BM25, whose posting lists a
    Milvus target does not have).

    References:
        Robertson & Zaragoza 2009, "The probabilistic relevance framework: BM25 and beyond", eq. 3.15 with
        Lucene's idf and without the constant ``k1 + 1`` factor: the form bm25s scores (:mod:`mlatr.search.lexical`).
    """
    out = np.zeros(len(tokens), np.float64)
    known = [t for t in terms if doc_freq.get(t, 0) > 0]
    if not known:
        return out.astype(np.float32)
    weight = dict(zip(map(term_token, known), idf(np.array([doc_freq[t] for t in known]), count), strict=True))
    for j, toks in enumerate(tokens):
        tf = Counter(t for t in toks if t in weight)
        out[j] = sum(weight[t] * float(saturation(n, max(len(toks), 1), avgdl)) for t, n in tf.items())
    return out.astype(np.float32)


class MilvusRanker:
    """The text ranking of a Milvus target (the module docstring says how and why): the source that supplies
    :func:`~mlatr.search.hybrid.rank_candidates` the :class:`~mlatr.search.hybrid.QueryCandidates` of each
    query from Milvus, with the answers a local index's :class:`~mlatr.search.hybrid.TextRanker` gives
    (:meth:`rank_many`, :meth:`describe`).

    Rows are positions in the loaded index's tables; ``caption_clip``: each caption row's clip row."""

    def __init__(self, mc, target: str, collection: str, clips: ClipColumns, captions: CaptionColumns,
                 sums: dict[str, Sums], window: int = WINDOW, model: RelevanceModel | None = None,
                 answer: RelevanceModel | None = None):
        self.mc, self.target, self.window = mc, target, window
        self.clip_name, self.caption_name, _, self.terms_name = names(collection)
        self.ids, self.caption_text, self.caption_lang = clips.ids, captions.get("text"), captions.get("lang")
        self.dim = clips.dim
        self.row_of = {cid: i for i, cid in enumerate(self.ids)}
        self.caption_clip = np.asarray(captions.clip, np.int64)
        self.stats = LibraryStats(sums["audio"].moments(), sums["captions"].moments())
        self.caption_count = max(sums["captions"].count, 0)
        self.avgdl = sums["captions"].terms / self.caption_count if self.caption_count else 1.0
        self.model = model if model is not None else Calibration.default().text
        self.answer = answer if answer is not None else Calibration.default().answer
        self.audio = MilvusSearcher(mc, target, self.clip_name, "id", self.row_of)
        self.caption_keys: list[str] = []  # caption row -> its primary key, filled by read_milvus
        self.caption_rows: dict[str, int] = {}  # and back
        self.caption_search = MilvusSearcher(mc, target, self.caption_name, "row", self.caption_rows)
        self._rare: RareSample | None = None
        #: the segments of the long clips (:class:`MilvusSegments`, set by read_milvus; None: none)
        self.segments: Segments | None = None

    def rank_many(self, query_vecs: np.ndarray, queries: Sequence[str | ParsedQuery], langs: Sequence[str | None],
                  ks: Sequence[int], ranks: Sequence[str], allowed: Sequence[Allowed | None] | None = None,
                  translations: Sequence[QueryTranslation | None] | None = None) -> list[Ranking]:
        found = self.candidates(query_vecs, queries, langs, ks, allowed=allowed, translations=translations)
        return [rank_candidates(qc, k, rank, self.model, self.answer) for qc, k, rank in zip(found, ks, ranks,
                                                                                              strict=True)]

    def describe(self, vec: np.ndarray, query: str | ParsedQuery, lang: str | None, rows: np.ndarray,
                 sound: np.ndarray, rank: str = "audio", allowed: Allowed | None = None,
                 k: int | None = None, translation: QueryTranslation | None = None) -> Ranking:
        """Relevance and evidence of the clips ``rows`` a sound search found (best first; ``sound``, their cosines,
        read again from Milvus): the candidates are these clips, as a windowed local index describes them; the
        first ``k`` (default: all) are the hits, the answer's relevance reads every row."""
        qc, = self.candidates(np.asarray(vec)[None], [query], [lang], [len(rows)], given=rows,
                              translations=[translation])
        rows = np.asarray(rows, np.int64)
        kept = rows[np.isin(rows, qc.cands.rows)]  # a clip deleted since the index was loaded is not returned
        return rank_candidates(qc, len(kept) if k is None else k, rank, self.model, self.answer,
                               shown=np.searchsorted(qc.cands.rows, kept))

    def candidates(self, vecs: np.ndarray, queries: Sequence[str | ParsedQuery], langs: Sequence[str | None],
                   ks: Sequence[int], given: np.ndarray | None = None,
                   allowed: Sequence[Allowed | None] | None = None,
                   translations: Sequence[QueryTranslation | None] | None = None) -> list[QueryCandidates]:
        """Per query of ``vecs [B, d]``: its candidates, the union of Milvus's windows (each source's top
        ``max(window, k)``: the audio and caption vector searches, the BM25 search; among the clips ``allowed``
        lets through, :meth:`MilvusSearcher.hits`), or the ``given`` clip rows alone; each scored from the vectors
        and terms fetched (a clip deleted since the load left out). ``translations``: per query, its translation
        into the captions' language (None: none), whose caption and BM25 windows join the union and which scores
        the same candidates on the caption side (:attr:`~mlatr.search.hybrid.QueryCandidates.translation`)."""
        vecs = np.asarray(vecs, np.float32)
        parsed = [as_parsed(q) for q in queries]
        kqs = [keyword_query(p, lang, distinct_terms) for p, lang in zip(parsed, langs, strict=True)]
        translations = list(translations) if translations is not None else [None] * len(vecs)
        told = [(as_parsed(t.text), keyword_query(as_parsed(t.text), t.lang, distinct_terms))
                if t is not None else None for t in translations]
        terms = [kq.terms for kq in kqs]
        allowed = list(allowed) if allowed is not None else [None] * len(vecs)
        if given is None:
            width = min(max(self.window, *ks), MAX_WINDOW)
            sound, meaning, keyword = [[] for _ in vecs], [[] for _ in vecs], [[] for _ in vecs]
            for group in _groups(allowed):
                a = allowed[group[0]]
                of_captions = None if a is None else a.of_rows(self.caption_clip)
                for b, hits in zip(group, self.audio.hits(vecs[group].tolist(), width, allowed=a), strict=True):
                    sound[b] = hits
                if self.segments is not None:  # the clips of the best segments join the sound window (the
                    # allowed ones: the unions are filtered below)
                    more = self.segments.searcher.hits(vecs[group].tolist(), width)
                    for b, found in zip(group, more, strict=True):
                        sound[b] = sound[b] + [(int(self.segments.clip[r]), s) for r, s in found]
                for b, hits in zip(group, self.caption_search.hits(vecs[group].tolist(), width, allowed=of_captions),
                                   strict=True):
                    meaning[b] = hits
                worded = [b for b in group if terms[b]]
                if worded:
                    texts = [" ".join(map(term_token, terms[b])) for b in worded]
                    for b, hits in zip(worded, self.caption_search.hits(texts, width, "sparse", "BM25",
                                                                        allowed=of_captions), strict=True):
                        keyword[b] = hits
                # the translations' caption and BM25 windows
                translated = [b for b in group if translations[b] is not None]
                if translated:
                    t_vecs = [np.asarray(translations[b].vec, np.float32).tolist() for b in translated]
                    for b, hits in zip(translated, self.caption_search.hits(t_vecs, width, allowed=of_captions),
                                       strict=True):
                        meaning[b] = meaning[b] + hits
                    worded = [b for b in translated if told[b][1].terms]
                    if worded:
                        texts = [" ".join(map(term_token, told[b][1].terms)) for b in worded]
                        for b, hits in zip(worded, self.caption_search.hits(texts, width, "sparse", "BM25",
                                                                            allowed=of_captions), strict=True):
                            keyword[b] = keyword[b] + hits
            unions = [np.unique(np.asarray([r for r, _ in sound[b]] + [int(self.caption_clip[r]) for r, _ in meaning[b]]
                                           + [int(self.caption_clip[r]) for r, _ in keyword[b]], np.int64))
                      for b in range(len(queries))]
            unions = [u if a is None else u[a.mask[u]] for u, a in zip(unions, allowed, strict=True)]
        else:
            unions = [np.unique(np.asarray(given, np.int64))]
        every = np.unique(np.concatenate(unions)) if unions else np.zeros(0, np.int64)
        audio, caps = self._vectors(every)
        doc_freq = self._doc_freq({t for ts in terms for t in ts} | {t for one in told if one for t in one[1].terms})
        out = []
        for b, rows in enumerate(unions):
            rows = rows[np.isin(rows, list(audio))]  # clips deleted since the load: left out
            cap_rows = np.asarray([j for j in np.flatnonzero(np.isin(self.caption_clip, rows)) if j in caps], np.int64)
            vec = vecs[b]
            sound_b = np.asarray([audio[r] for r in rows.tolist()], np.float32).reshape(-1, self.dim) @ vec
            if self.segments is not None:  # a long clip's sound: its best segment where higher
                sound_b = np.maximum(sound_b, self.segments.best_scores(vec, rows)[0])
            qc = self._scored(rows, sound_b, cap_rows, caps, vec, parsed[b], langs[b], kqs[b], doc_freq)
            if translations[b] is not None:
                t = translations[b]
                qc.translation = self._scored(rows, sound_b, cap_rows, caps, np.asarray(t.vec, np.float32),
                                              told[b][0], t.lang, told[b][1], doc_freq)
            out.append(qc)
        return out

    def _scored(self, rows: np.ndarray, sound: np.ndarray, cap_rows: np.ndarray,
                caps: dict[int, tuple[np.ndarray, list[str]]], vec: np.ndarray, parsed: ParsedQuery,
                lang: str | None, kq: KeywordQuery, doc_freq: dict[str, int]) -> QueryCandidates:
        """The candidate clips ``rows`` (ascending; ``sound [n]``: their sound scores) scored for the query ``vec``
        (text ``parsed`` in ``lang``, keyword side ``kq``) from their fetched captions ``caps`` (rows ``cap_rows``)."""
        owner = np.searchsorted(rows, self.caption_clip[cap_rows])  # [c]
        cap_vecs = np.asarray([caps[j][0] for j in cap_rows], np.float32).reshape(-1, self.dim)
        caption, caption_row = best_per_clip(owner, cap_vecs @ vec, cap_rows, len(rows))
        kw = self._bm25(kq, [caps[j][1] for j in cap_rows], doc_freq)
        keyword, keyword_row = best_per_clip(owner, kw, cap_rows, len(rows))
        keyword = np.where(keyword > 0, keyword, 0.0).astype(np.float32)
        stats = QueryStats.of(self.stats, vec, self._mass(kq, doc_freq), self.rare_sample().cutoff(vec))
        held = {j: set(caps[j][1]) for j in cap_rows.tolist()}
        return QueryCandidates(Candidates(rows, sound, caption, keyword, caption_row, keyword_row), stats,
                               parsed.embedded, lang, kq.terms, partial(_matched_terms, kq.terms, held),
                               self.caption_text, self.caption_lang)

    def _bm25(self, kq: KeywordQuery, tokens: list[list[str]], doc_freq: dict[str, int]) -> np.ndarray:
        """``[c]`` BM25 of captions given as their tokens for ``kq`` (its clauses' where it has ``OR``)."""
        if kq.clauses is None:
            return bm25_of(tokens, kq.terms, doc_freq, self.caption_count, self.avgdl)

        def one(term: str) -> tuple[np.ndarray, np.ndarray]:
            scores = bm25_of(tokens, [term], doc_freq, self.caption_count, self.avgdl)
            return np.flatnonzero(scores > 0), scores[scores > 0]

        out = np.zeros(len(tokens), np.float32)
        rows, scores = clause_scores(kq, one)
        out[rows] = scores
        return out

    def _mass(self, kq: KeywordQuery, doc_freq: dict[str, int]) -> float:
        """The idf mass of ``kq`` in the library (:mod:`mlatr.search.relevance`)."""
        def mass(terms: list[str]) -> float:
            return float(idf(np.array([doc_freq.get(t, 0) for t in terms]), self.caption_count).sum()) if terms else 0.0
        return mass(kq.terms) if kq.clauses is None else clause_mass(kq, mass)

    # ---- documents of the query syntax (mlatr.search.query_syntax.Documents): the loaded captions -------------
    def rows_with(self, terms: list[str]) -> np.ndarray:
        """The caption rows whose terms hold one of ``terms`` (a scan of the captions' terms in Milvus per term)."""
        found: set[int] = set()
        with reported(self.target):
            for term in dict.fromkeys(terms):
                for r in _all(self.mc, self.caption_name, ["row"], f'terms like "%{term_token(term)}%"'):
                    if r["row"] in self.caption_rows:
                        found.add(self.caption_rows[r["row"]])
        return np.asarray(sorted(found), np.int64)

    def text(self, row: int) -> str:
        return self.caption_text[row]

    def lang(self, row: int) -> str | None:
        return self.caption_lang[row]

    def clips(self, rows: np.ndarray) -> np.ndarray:
        return self.caption_clip[np.asarray(rows, np.int64)]

    def rare_sample(self) -> RareSample:
        """The :class:`~mlatr.search.relevance.RareSample` of the loaded index's captioned clips, their caption
        vectors fetched once (by primary key; a clip deleted since the load left out)."""
        if self._rare is None:
            clips = rare_sample(self.caption_clip[self.caption_clip >= 0])
            rows = np.flatnonzero(np.isin(self.caption_clip, clips))
            rows = rows[np.lexsort((rows, self.caption_clip[rows]))]  # clip after clip
            with reported(self.target):
                found = _fetch(self.mc, self.caption_name, "row", [self.caption_keys[j] for j in rows],
                               ["row", "vector"])
            vec_of = {self.caption_rows[r["row"]]: r["vector"] for r in found if r["row"] in self.caption_rows}
            rows = np.asarray([j for j in rows.tolist() if j in vec_of], np.int64)
            owner = self.caption_clip[rows]
            self._rare = RareSample(np.asarray([vec_of[j] for j in rows.tolist()], np.float32).reshape(-1, self.dim),
                                    np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]]) if len(rows) else rows)
        return self._rare

    def clip_vector(self, row: int) -> np.ndarray:
        """``[d]`` clip ``row``'s audio embedding, read from Milvus ("more like this")."""
        with reported(self.target):
            found = _fetch(self.mc, self.clip_name, "id", [self.ids[row]], ["vector"])
        if not found:
            raise MlatrError(f"{self.target}: clip {self.ids[row]!r} was deleted since the index was loaded")
        return np.asarray(found[0]["vector"], np.float32)

    def clip_vectors(self, rows: np.ndarray) -> np.ndarray:
        """``[n, d]`` the audio embeddings of clips ``rows``, fetched from Milvus (a clip deleted since the load:
        zeros)."""
        audio, _ = self._vectors(np.asarray(rows, np.int64), captions=False)
        return np.asarray([audio.get(r, np.zeros(self.dim, np.float32)) for r in np.asarray(rows).tolist()],
                          np.float32).reshape(-1, self.dim)

    def _vectors(self, rows: np.ndarray, captions: bool = True
                 ) -> tuple[dict[int, np.ndarray], dict[int, tuple[np.ndarray, list[str]]]]:
        """The audio vectors of the clips ``rows`` (those still in Milvus) and, per caption row of theirs, its
        vector and terms (``captions``)."""
        ids = [self.ids[r] for r in rows.tolist()]
        with reported(self.target):
            clips = _fetch(self.mc, self.clip_name, "id", ids, ["id", "vector"])
            caps = _fetch(self.mc, self.caption_name, "row", [self.caption_keys[j] for j in
                                                              np.flatnonzero(np.isin(self.caption_clip, rows))],
                          ["row", "vector", "terms"]) if captions else []  # by primary key: a filter on clip
            # scans every caption
        audio = {self.row_of[r["id"]]: np.asarray(r["vector"], np.float32) for r in clips}
        return audio, {self.caption_rows[r["row"]]: (np.asarray(r["vector"], np.float32), r["terms"].split())
                       for r in caps if r["row"] in self.caption_rows}

    def _doc_freq(self, terms: set[str]) -> dict[str, int]:
        """Each of ``terms``' document frequency among the library's captions: the writes' counts added up."""
        token = {t: term_token(t) for t in terms}
        with reported(self.target):
            rows = _fetch(self.mc, self.terms_name, "token", sorted(set(token.values())), ["token", "df"])
        df = Counter()
        for r in rows:
            df[r["token"]] += int(r["df"])
        return {t: df.get(token[t], 0) for t in terms}


def distinct_terms(text: str, lang: str | None) -> list[str]:
    """A text's distinct keyword terms in ``lang``, in order."""
    return list(dict.fromkeys(analysed_terms(text, lang)))


def _groups(allowed: Sequence) -> list[list[int]]:
    """The positions of ``allowed`` grouped by the object at each (the queries of one filter searched together)."""
    groups: dict[int, list[int]] = {}
    for b, a in enumerate(allowed):
        groups.setdefault(id(a), []).append(b)
    return list(groups.values())


def _matched_terms(terms: list[str], held: dict[int, set[str]], row: int) -> list[str]:
    """The query ``terms`` whose tokens caption ``row`` holds (``held``: the fetched captions' tokens)."""
    return [t for t in terms if term_token(t) in held[row]]


class MilvusVectors:
    """The vectors of a collection's rows fetched on demand by primary key (``keys[row]``): a Milvus target's
    segments as :class:`~mlatr.search.segments.Segments` reads them."""

    def __init__(self, mc, target: str, collection: str, keys: list[str], dim: int):
        self.mc, self.target, self.collection, self.keys, self.dim = mc, target, collection, keys, dim

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows), d]`` the rows' vectors (a row deleted since the load: zeros, which never win)."""
        rows = np.asarray(rows, np.int64)
        with reported(self.target):
            found = _fetch(self.mc, self.collection, "key", [self.keys[r] for r in rows.tolist()], ["key", "vector"])
        vec = {r["key"]: r["vector"] for r in found}
        out = np.zeros((len(rows), self.dim), np.float32)
        for i, r in enumerate(rows.tolist()):
            if self.keys[r] in vec:
                out[i] = vec[self.keys[r]]
        return out


def read_segments(mc, target: str, collection: str, row_of: dict[str, int], dim: int) -> Segments | None:
    """The segments a target holds, their vectors left in Milvus (:class:`MilvusVectors`); None: none."""
    name = segments_name(collection)
    if not mc.has_collection(name):
        return None
    _load(mc, name)
    rows = [r for r in _all(mc, name, ["key", "clip", "start", "end"]) if r["clip"] in row_of]
    if not rows:
        return None
    rows.sort(key=lambda r: (row_of[r["clip"]], r["start"], r["key"]))
    table = SegmentColumns(np.zeros((0, dim), np.float32), [row_of[r["clip"]] for r in rows],
                           [(r["start"], r["end"]) for r in rows])
    keys = [r["key"] for r in rows]
    searcher = MilvusSearcher(mc, target, name, "key", {key: j for j, key in enumerate(keys)})
    return Segments(table, len(row_of), searcher, vectors=MilvusVectors(mc, target, name, keys, dim))


@dataclass
class MilvusLibrary:
    """What a Milvus target holds for an :class:`~mlatr.search.index.Index` (built by ``Index.load``): the
    index metadata, the clips' and captions' columns without their vectors (in id / row order), a searcher
    over each collection and the text ranker."""

    meta: dict[str, Any]
    clips: ClipColumns
    captions: CaptionColumns
    audio: MilvusSearcher
    caption_search: MilvusSearcher
    ranker: MilvusRanker
    segments: Segments | None = None


def read_milvus(target: str) -> MilvusLibrary:
    """The metadata, rows, library statistics and searchers of a Milvus target (the vectors stay in Milvus)."""
    if lite_file_missing(target):
        raise MissingFileError(parse_target(target)[0], f"the milvus-lite file of {target}")
    meta = read_meta(target)
    if meta is None:
        raise MlatrError(f"{target}: holds no mlatr index (build one with mlatr index build --to {target})")
    mc, collection = client(target)
    clip_name, caption_name, meta_name, terms_name = names(collection)
    with reported(target):
        _load(mc, clip_name, caption_name, meta_name, terms_name)
        clips = sorted(_all(mc, clip_name, ["id", "path", "info"]), key=lambda r: r["id"])
        caps = sorted(_all(mc, caption_name, ["row", "clip", "lang", "text"]), key=lambda r: r["row"])
        sums = _read_stats(mc, meta_name, meta["dim"])
    row_of = {r["id"]: i for i, r in enumerate(clips)}
    dim = meta["dim"]
    fields = [{"path": r["path"], **r["info"]} for r in clips]
    for c in ClipColumns.columns:
        if c.default is REQUIRED and any(c.key not in f for f in fields):
            raise MlatrError(f"{target}: a clip row without {c.key!r} (a damaged index: build it again)")
    table = ClipColumns(np.zeros((0, dim), np.float32), [r["id"] for r in clips],
                        {c.key: [f.get(c.key, c.default) for f in fields] for c in ClipColumns.columns})
    captions = CaptionColumns(np.zeros((0, dim), np.float32), [row_of.get(c["clip"], -1) for c in caps],
                              {c.key: [r[c.key] for r in caps] for c in CaptionColumns.columns})
    ranker = MilvusRanker(mc, target, collection, table, captions, sums)
    ranker.caption_keys[:] = [c["row"] for c in caps]
    ranker.caption_rows.update({key: j for j, key in enumerate(ranker.caption_keys)})
    with reported(target):
        ranker.segments = read_segments(mc, target, collection, row_of, dim)
    return MilvusLibrary(meta, table, captions, ranker.audio, ranker.caption_search, ranker, ranker.segments)


class MilvusStorage(Storage):
    """A Milvus target (module docstring). :attr:`library`: what :meth:`read` found (its searchers and ranker)."""

    format = FORMAT

    def __init__(self, where: str):
        super().__init__(str(where))
        parse_target(self.where)  # a malformed target is refused where it is named
        self.library: MilvusLibrary | None = None

    @classmethod
    def claims(cls, where) -> bool:
        return is_milvus(where)

    def exists(self) -> bool:
        return read_meta(self.where) is not None

    @property
    def local_file(self):
        """A milvus-lite target's ``PATH.db``; None for a Milvus server's collection."""
        uri = parse_target(self.where)[0]
        return None if uri.startswith("http://") else Path(uri)

    @property
    def opens_in_several_processes(self) -> bool:
        """A Milvus server's target, yes; a milvus-lite file is opened by one process only."""
        return parse_target(self.where)[0].startswith("http://")

    def signature(self) -> tuple | None:
        return write_signature(self.where)

    def read(self) -> Tables:
        self.library = read_milvus(self.where)
        meta = {k: v for k, v in self.library.meta.items() if k != "format"}
        segments = self.library.segments
        return Tables(self.library.clips, self.library.captions, meta, segments=None if segments is None else
                      SegmentColumns(np.zeros((0, meta["dim"]), np.float32), segments.clip, segments.times))

    def describe(self, tables: Tables) -> str:
        return "milvus"

    def _part_name(self) -> str:
        return "milvus"

    def searcher(self, tables: Tables, which: str, backend: str):
        """Milvus's own vector search (the backend is Milvus's: ``backend`` is not used)."""
        return self.library.audio if which == "audio" else self.library.caption_search

    def moments(self, tables: Tables, backend: str) -> Segments | None:
        """The segments collection: searched there, vectors fetched for the clips scored."""
        return self.library.segments

    def text_ranker(self, tables: Tables, backend: str, window: int | None = None, searchers: tuple | None = None,
                    segments: Segments | None = None):
        """:class:`MilvusRanker`: the union of Milvus's own windows (``window`` is Milvus's: not used)."""
        return self.library.ranker

    def check_output(self) -> None:
        pass  # rows in a database: nothing to check or clear before the build

    def write(self, part: Tables, *, add: bool, drop: dict[str, int], dtype: str, ann, check: CheckMeta | None
              ) -> int:
        """Inserts and deletes (the rows of ``drop`` and of the ids ``part`` writes again), or everything replaced
        without ``add``; the bytes Milvus takes are its own (0)."""
        write_milvus(self.where, part.clips, part.captions, part.meta, list(drop), replace=not add,
                     segments=part.segments)
        return 0

    def replace(self, tables: Tables, dtype: str = "float32", ann=None) -> None:
        live = tables.live()
        write_milvus(self.where, live.clips, live.captions, live.meta, [], replace=True, segments=live.segments)

    def delete(self, ids) -> int:
        return delete_milvus(self.where, list(ids))

    def record_meta(self, key: str, value) -> None:
        record_milvus_meta(self.where, key, value)
