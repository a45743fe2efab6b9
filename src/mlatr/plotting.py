"""Matplotlib for mlatr's figures: imported on first use, on the file-only Agg backend.

matplotlib is heavy to import and needs no display here, so every figure asks :func:`pyplot` for it
instead of importing it at module level.
"""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend (figures are written to files, never shown)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
