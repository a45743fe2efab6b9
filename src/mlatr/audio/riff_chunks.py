"""The chunks of a RIFF / RF64 / BW64 (WAV) or IFF (AIFF) file, walked by their headers without reading them.

:func:`iter_chunks` yields ``(id, size)`` with the file positioned at the chunk's data, and moves on to the
next chunk after the caller looked at it. An RF64 / BW64 file's 64-bit sizes come from its ``ds64`` chunk
(:func:`rf64_sizes`); a chunk whose 32-bit size is the RF64 placeholder and that ``ds64`` does not size ends
the walk, as do a short header and :data:`MAX_CHUNKS` chunks (a file of millions of empty chunks).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

#: Chunks walked at most in one file (a real WAV holds a handful; bext, iXML and the data among them).
MAX_CHUNKS = 10_000
#: The 32-bit size an RF64 / BW64 file writes for a chunk its ds64 chunk sizes.
RF64_PLACEHOLDER = 0xFFFFFFFF


def iter_chunks(fh: BinaryIO, byte_order: str, sizes: dict[bytes, int] | None = None) -> Iterator[tuple[bytes, int]]:
    """``(id, size)`` of each chunk from the current position (``byte_order``: ``"<"`` RIFF, ``">"`` IFF);
    ``sizes``: an RF64 file's 64-bit sizes by chunk id (:func:`rf64_sizes`)."""
    for _ in range(MAX_CHUNKS):
        head = fh.read(8)
        if len(head) < 8:
            return
        kind, size = head[:4], struct.unpack(byte_order + "I", head[4:])[0]
        if size == RF64_PLACEHOLDER and sizes is not None:
            if kind not in sizes:
                return
            size = sizes[kind]
        start = fh.tell()
        yield kind, size
        fh.seek(start + size + (size & 1))


def rf64_sizes(fh: BinaryIO) -> dict[bytes, int]:
    """The 64-bit chunk sizes of an RF64 / BW64 file's ``ds64`` chunk (``fh`` after the 12-byte header, left
    there): ``data`` and any chunk its table lists; empty when the first chunk is no ``ds64``."""
    start = fh.tell()
    try:
        head = fh.read(8)
        if len(head) < 8 or head[:4] != b"ds64":
            return {}
        body = fh.read(min(struct.unpack("<I", head[4:])[0], 28 + 12 * 64))
        if len(body) < 28:
            return {}
        _riff, data, _frames, table = struct.unpack("<QQQI", body[:28])
        sizes = {b"data": data}
        for i in range(min(table, (len(body) - 28) // 12)):
            kind, size = struct.unpack("<4sQ", body[28 + 12 * i: 40 + 12 * i])
            sizes[kind] = size
        return sizes
    finally:
        fh.seek(start)
