"""What one request to ``mlatr serve`` may ask for and send: :class:`Limits` (the most results, the longest query,
the largest upload), and :class:`UploadLimit`, the ASGI middleware that holds a request body to its size before
it is parsed.

A body whose ``Content-Length`` exceeds the limit gets ``413`` at once (nothing read); a body sent
without one (chunked) is counted as it arrives and stopped with ``413`` at the first byte over the
limit, so an upload never fills memory or the disk's spool files beyond the limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.exceptions import HTTPException


@dataclass(frozen=True)
class Limits:
    """What one request may ask for: ``max_k`` results, a query of ``max_query_chars``, an upload of
    ``max_upload_bytes``."""

    max_k: int = 100
    max_query_chars: int = 1000
    max_upload_bytes: int = 20 * 2**20


def too_large_message(limit: int) -> str:
    return f"upload too large: the limit is {limit:,} bytes ({limit / 2**20:.1f} MiB)"


class UploadLimit:
    """Wrap ``app``: bodies of requests to ``paths`` may hold at most ``limit`` bytes."""

    def __init__(self, app, limit: int, paths: tuple[str, ...]):
        self.app, self.limit, self.paths = app, int(limit), tuple(paths)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._refuse(send)
            return
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:  # raised inside the body parser; the app's handler answers 413
                    raise HTTPException(413, too_large_message(self.limit))
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"error": too_large_message(self.limit), "status": 413}, separators=(",", ":")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
