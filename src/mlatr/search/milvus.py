"""An index kept in Milvus (``pymilvus``; ``milvus-lite`` for a local file): for libraries beyond one machine.

Targets: ``milvus:PATH.db`` (milvus-lite, an embedded database in one file) or
``milvus://HOST:PORT/COLLECTION`` (a Milvus server or cluster; the same code talks to both). A target
holds three collections, ``NAME`` (clips: ``id`` primary key, unit ``vector``, ``path``, ``info`` JSON
with the captions and the audio file's state when encoded), ``NAME_captions`` (``row`` key, ``clip``
id, ``lang``, ``text``, ``vector``) and ``NAME_meta`` (one row: the index meta as JSON, with the format,
dim and the checkpoint, so ``search`` / ``serve`` load the right model). Vectors are indexed ``FLAT`` with
the inner-product metric (exact search, ATRI eq. 1: results equal the local exact index's); a cluster's
operator may re-index a collection with an approximate index, which Milvus then uses.

Milvus keeps rows, not files: ``--add`` inserts the new clips' rows (two concurrent adds of different clips
keep both; no read-modify-write), a re-encoded clip is an upsert, a deleted clip a delete. Loading a
target (:func:`read_milvus`; :meth:`mlatr.search.index.Index.load` builds the Index from it) reads the clips'
and captions' columns (ids, paths, captions: not the vectors) into the :class:`~mlatr.search.index.Index`,
whose searchers query Milvus.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from mlatr.errors import MlatrError
from mlatr.search.columns import REQUIRED, CaptionColumns, ClipColumns

PREFIX = "milvus:"
DEFAULT_COLLECTION = "mlatr_index"
FORMAT = "mlatr-milvus-1"
#: Rows per insert / query page.
PAGE = 2000


def is_milvus(target: object) -> bool:
    return isinstance(target, str) and target.startswith(PREFIX)


def parse_target(target: str) -> tuple[str, str]:
    """``(uri, collection)`` of ``milvus:PATH.db`` or ``milvus://HOST:PORT/COLLECTION``."""
    rest = target[len(PREFIX):]
    if rest.startswith("//"):
        parts = urlsplit("http:" + rest)
        collection = parts.path.strip("/") or DEFAULT_COLLECTION
        if not parts.hostname or not collection.replace("_", "").isalnum():
            raise MlatrError(f"{target}: expected milvus://HOST:PORT/COLLECTION (a collection name of letters, "
                             "digits and _)")
        return f"http://{parts.hostname}:{parts.port or 19530}", collection
    if not rest.endswith(".db"):
        raise MlatrError(f"{target}: expected milvus:PATH.db (milvus-lite) or milvus://HOST:PORT/COLLECTION")
    return rest, DEFAULT_COLLECTION


def client(target: str):
    """A ``MilvusClient`` for ``target`` and the collection name."""
    try:
        from pymilvus import MilvusClient  # optional extra: imported only for a milvus target
    except ImportError as exc:
        raise MlatrError("a milvus target needs pymilvus (and milvus-lite for milvus:PATH.db): "
                         "pip install 'mlatr[milvus]'") from exc
    uri, collection = parse_target(target)
    try:
        return MilvusClient(uri), collection
    except Exception as exc:  # connection refused, a damaged file: pymilvus raises its own exception types
        raise MlatrError(f"{target}: cannot open ({type(exc).__name__}: {str(exc)[:200]})") from exc


def _create(mc, collection: str, dim: int) -> None:
    from pymilvus import DataType, MilvusClient  # optional extra (mlatr[milvus])

    key = {"is_primary": True, "max_length": 8192}
    text = {"max_length": 65535}
    layout = {collection: [("id", DataType.VARCHAR, key), ("path", DataType.VARCHAR, text),
                           ("info", DataType.JSON, {})],
              f"{collection}_captions": [("row", DataType.VARCHAR, key), ("clip", DataType.VARCHAR, text),
                                         ("lang", DataType.VARCHAR, {"max_length": 16}),
                                         ("text", DataType.VARCHAR, text)],
              f"{collection}_meta": [("key", DataType.VARCHAR, key), ("value", DataType.JSON, {})]}
    for name, fields in layout.items():
        if mc.has_collection(name):
            continue
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        for field_name, kind, opts in fields:
            schema.add_field(field_name, kind, **opts)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim if not name.endswith("_meta") else 2)
        params = mc.prepare_index_params()
        params.add_index(field_name="vector", index_type="FLAT", metric_type="IP")
        mc.create_collection(name, schema=schema, index_params=params)


def read_meta(target: str) -> dict | None:
    """The meta a target records, or None when it holds no index yet."""
    mc, collection = client(target)
    if not mc.has_collection(f"{collection}_meta"):
        return None
    rows = mc.query(f"{collection}_meta", filter='key == "meta"', output_fields=["value"])
    if not rows:
        return None
    meta = rows[0]["value"]
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("dim"), int):
        raise MlatrError(f"{target}: its {collection}_meta collection does not hold an mlatr index meta")
    return meta


def write_milvus(target: str, clips: ClipColumns, captions: CaptionColumns, meta: dict, drop_ids: list[str],
                 replace: bool) -> int:
    """Insert the rows of ``clips`` and ``captions`` (in memory) into ``target`` with the index's ``meta``, after
    deleting the clips ``drop_ids`` (and, with ``replace``, everything). Returns the rows written."""
    mc, collection = client(target)
    names = (collection, f"{collection}_captions", f"{collection}_meta")
    if replace:
        for name in names:
            if mc.has_collection(name):
                mc.drop_collection(name)
    _create(mc, collection, clips.dim)
    gone = sorted(set(drop_ids) | set(clips.ids))
    if gone and not replace:
        for start in range(0, len(gone), PAGE):
            chunk = gone[start:start + PAGE]
            mc.delete(collection, ids=chunk)
            mc.delete(f"{collection}_captions", filter=f"clip in {json.dumps(chunk)}")
    rows = [{"id": cid, "vector": np.asarray(clips.embeddings[i], np.float32).tolist(), **_clip_fields(clips.row(i))}
            for i, cid in enumerate(clips.ids)]
    caps = [{"row": f"{clips.ids[c]}\t{j}", "clip": clips.ids[c], **captions.row(j),
             "vector": np.asarray(captions.embeddings[j], np.float32).tolist()}
            for j, c in enumerate(captions.clip.tolist())]
    for name, data in ((collection, rows), (f"{collection}_captions", caps)):
        for start in range(0, len(data), PAGE):
            mc.insert(name, data[start:start + PAGE])
    meta = {k: v for k, v in meta.items() if k not in ("format", "dim", "dtype")}
    mc.upsert(f"{collection}_meta", [{"key": "meta", "value": {**meta, "format": FORMAT, "dim": clips.dim},
                                      "vector": [0.0, 0.0]}])
    return len(rows) + len(caps)


def _clip_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A clip's column values as its Milvus row holds them: ``path`` a field of its own, the others in ``info``."""
    info = dict(row)
    return {"path": info.pop("path"), "info": info}


def delete_milvus(target: str, ids: list[str]) -> int:
    """Delete the clips ``ids`` (and their captions) from ``target``; unknown ids are an error."""
    mc, collection = client(target)
    found = {r["id"] for r in mc.query(collection, filter=f"id in {json.dumps(list(ids))}", output_fields=["id"])}
    unknown = [i for i in ids if i not in found]
    if unknown:
        raise MlatrError(f"{target}: no clip {', '.join(map(repr, unknown[:5]))}; nothing deleted")
    mc.delete(collection, ids=list(ids))
    mc.delete(f"{collection}_captions", filter=f"clip in {json.dumps(list(ids))}")
    return len(found)


#: Loggers that report, as errors, milvus-lite's embedded server lacking a timestamp call the query
#: iterator tries first (it then falls back to the client's clock): silenced while paging.
NOISY_LOGGERS = ("grpc._server", "pymilvus.client.iterator.query_iterator")


def _all(mc, name: str, fields: list[str]) -> list[dict]:
    """Every row of collection ``name`` (``fields`` of it), paged."""
    loggers = [logging.getLogger(n) for n in NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        it = mc.query_iterator(name, batch_size=PAGE, output_fields=fields)
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

    def __init__(self, mc, collection: str, key: str, row_of: dict[str, int]):
        self.mc, self.collection, self.key, self.row_of = mc, collection, key, row_of

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.atleast_2d(np.asarray(queries, np.float32))
        k = min(int(k), len(self.row_of))
        if k <= 0:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        found = self.mc.search(self.collection, data=queries.tolist(), limit=k, output_fields=[self.key],
                               search_params={"metric_type": "IP"})
        scores = np.full((len(queries), k), -np.inf, np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        for q, hits in enumerate(found):
            r = np.asarray([self.row_of.get(h["entity"][self.key], -1) for h in hits], np.int64)
            s = np.asarray([h["distance"] for h in hits], np.float32)
            order = np.lexsort((r, -s))[:k]
            scores[q, :len(order)], rows[q, :len(order)] = s[order], r[order]
        return scores, rows


@dataclass
class MilvusLibrary:
    """What a Milvus target holds for an :class:`~mlatr.search.index.Index` (built by ``Index.load``): the
    index metadata, the clips' and captions' columns without their vectors (in id / row order) and a
    searcher over each collection."""

    meta: dict[str, Any]
    clips: ClipColumns
    captions: CaptionColumns
    audio: MilvusSearcher
    caption_search: MilvusSearcher


def read_milvus(target: str) -> MilvusLibrary:
    """The metadata, rows and searchers of a Milvus target (the vectors stay in Milvus)."""
    meta = read_meta(target)
    if meta is None:
        raise MlatrError(f"{target}: holds no mlatr index (build one with mlatr index build --to {target})")
    mc, collection = client(target)
    mc.load_collection(collection)
    mc.load_collection(f"{collection}_captions")
    clips = sorted(_all(mc, collection, ["id", "path", "info"]), key=lambda r: r["id"])
    caps = sorted(_all(mc, f"{collection}_captions", ["row", "clip", "lang", "text"]), key=lambda r: r["row"])
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
    return MilvusLibrary(meta, table, captions, MilvusSearcher(mc, collection, "id", row_of),
                         MilvusSearcher(mc, f"{collection}_captions", "row", {c["row"]: j for j, c in enumerate(caps)}))
