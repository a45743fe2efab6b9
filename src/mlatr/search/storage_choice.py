"""Which :class:`~mlatr.search.storage.Storage` an index lives in, chosen once from where it is named.

Each storage says which names are its own (:meth:`~mlatr.search.storage.Storage.claims`), asked in the order of
:data:`STORAGES`: ``milvus:PATH.db`` and ``milvus://HOST:PORT/COLLECTION`` name a Milvus target, a file or a name
ending in ``.npz`` the single-file index, anything else an index folder (made when the first rows are written).
Every reader and writer opens its index through :func:`open_storage`; nothing else looks at the name.
"""

from __future__ import annotations

import os

from mlatr.search.milvus import MilvusStorage
from mlatr.search.npz_index import NpzStorage
from mlatr.search.shards import FolderStorage
from mlatr.search.storage import Storage

#: The storages an index may live in, by what names them (a new storage: one module, one line here).
STORAGES: tuple[type[Storage], ...] = (MilvusStorage, NpzStorage, FolderStorage)


def open_storage(where: str | os.PathLike) -> Storage:
    """The storage the index named ``where`` lives in (module docstring)."""
    return next(kind for kind in STORAGES if kind.claims(where))(where)
