"""Matplotlib for mlatr's figures: imported on first use, on the file-only Agg backend.

matplotlib is heavy to import and needs no display here, so every figure asks :func:`pyplot` for it
instead of importing it at module level.
"""

from __future__ import annotations

from pathlib import Path

from mlatr.io_utils import atomic_write_with


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend (figures are written to files, never shown)."""
    import matplotlib  # matplotlib's import time, paid only by a command that plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after matplotlib.use: the backend is chosen first

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` atomically (format from the suffix, png by default); returns the path."""
    path = Path(path)
    atomic_write_with(path, lambda fh: fig.savefig(fh, format=path.suffix.lstrip(".") or "png", dpi=130,
                                                     bbox_inches="tight"))
    return path
