"""Moved to :mod:`mlatr.inference.encoding` (the inference layer); this name is kept for code written against it."""

from mlatr.inference.encoding import EncodedSplit, encode_manifest, encode_texts, pad_frames

__all__ = ["EncodedSplit", "encode_manifest", "encode_texts", "pad_frames"]
