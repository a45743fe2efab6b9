"""Embeddings written for other tools: an NPZ, or a Parquet table (pyarrow, the optional ``parquet`` extra).

One row per item: ``id`` (string), ``path`` (the audio file, or null for a text), ``text`` and ``lang`` (for
texts, else null), ``embedding`` (a fixed-size list of ``d`` float32). The NPZ holds the same columns as
arrays (``ids``, ``paths``, ``texts``, ``langs``, ``embeddings [n, d]``). Written atomically.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_with


def is_parquet(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a Parquet file (``.parquet`` / ``.pq``)."""
    return Path(path).suffix.lower() in (".parquet", ".pq")


def require_parquet():
    """The ``pyarrow`` module, or an error saying how to install it. Imported here: an optional extra."""
    try:
        import pyarrow  # optional extra (mlatr[parquet])
        import pyarrow.parquet  # noqa: F401 (optional extra, mlatr[parquet])
    except ImportError as exc:
        raise MlatrError("writing Parquet needs pyarrow: pip install 'mlatr[parquet]'") from exc
    return pyarrow


def embedding_columns(ids: Sequence[str], embeddings: np.ndarray, paths: Sequence[str | None] | None = None,
                      texts: Sequence[str | None] | None = None, langs: Sequence[str | None] | None = None
                      ) -> dict[str, list | np.ndarray]:
    """The table's columns (absent ones as nulls), checked to have one entry per row."""
    n = len(ids)
    if embeddings.ndim != 2 or embeddings.shape[0] != n:
        raise MlatrError(f"{embeddings.shape} embeddings for {n} ids")
    cols: dict[str, list | np.ndarray] = {"id": [str(i) for i in ids]}
    for name, values in (("path", paths), ("text", texts), ("lang", langs)):
        cols[name] = [None] * n if values is None else list(values)
        if len(cols[name]) != n:
            raise MlatrError(f"{len(cols[name])} {name} values for {n} ids")
    cols["embedding"] = np.ascontiguousarray(embeddings, dtype=np.float32)
    return cols


def write_embeddings_parquet(path: str | os.PathLike, ids: Sequence[str], paths: Sequence[str | None] | None,
                             embeddings: np.ndarray, texts: Sequence[str | None] | None = None,
                             langs: Sequence[str | None] | None = None) -> None:
    """Write the Parquet table described in the module docstring."""
    pa = require_parquet()
    cols = embedding_columns(ids, embeddings, paths, texts, langs)
    emb = cols.pop("embedding")
    d = emb.shape[1]
    arrays = {k: pa.array(v, type=pa.string()) for k, v in cols.items()}
    arrays["embedding"] = pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1), type=pa.float32()), d)
    table = pa.table(arrays)
    buffer = io.BytesIO()
    pa.parquet.write_table(table, buffer)
    atomic_write_with(path, lambda fh: fh.write(buffer.getvalue()))


def write_embeddings_npz(path: str | os.PathLike, ids: Sequence[str], paths: Sequence[str | None] | None,
                         embeddings: np.ndarray, texts: Sequence[str | None] | None = None,
                         langs: Sequence[str | None] | None = None) -> None:
    """The same columns as an NPZ (nulls as empty strings)."""
    cols = embedding_columns(ids, embeddings, paths, texts, langs)
    arrays = {"ids": np.asarray(cols["id"], dtype=str), "embeddings": cols["embedding"]}
    for name, key in (("path", "paths"), ("text", "texts"), ("lang", "langs")):
        arrays[key] = np.asarray(["" if v is None else str(v) for v in cols[name]], dtype=str)
    atomic_write_with(path, lambda fh: np.savez(fh, **arrays))


def write_embeddings(path: str | os.PathLike, ids: Sequence[str], paths: Sequence[str | None] | None,
                     embeddings: np.ndarray, texts: Sequence[str | None] | None = None,
                     langs: Sequence[str | None] | None = None) -> None:
    """Parquet for ``.parquet`` / ``.pq``, else NPZ."""
    writer = write_embeddings_parquet if is_parquet(path) else write_embeddings_npz
    writer(path, ids, paths, embeddings, texts, langs)
