"""Moved to :mod:`mlatr.inference.audio` (the one audio path, windows included); this name is kept for code
written against it."""

from mlatr.inference.audio import pool_windows, window_bounds

__all__ = ["pool_windows", "window_bounds"]
