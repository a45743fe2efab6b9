"""Connections that send a request too slowly are closed (slowloris): uvicorn's h11 protocol with deadlines.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but waits for ever on a client that
opens a connection and sends its request headers a byte at a time, so a few hundred such sockets hold
every slot of the server. :func:`deadline_protocol` makes an h11 protocol with two deadlines: the request
line and headers must have arrived ``header_seconds`` after the connection opened (or after the previous
response on a kept-alive connection), and the whole body ``body_seconds`` after the headers; a connection
past either is closed without an answer. A middleware cannot do this: it runs only once the headers are in.

uvicorn's C parser (``httptools``) was tried in its place and measured no less CPU per request than h11
in ``benchmarks/bench_serve.py`` (docs/search-at-scale.md), so the pure-Python parser stays.

A request h11 cannot parse (a malformed request line, a header without a colon) is answered by the protocol
itself, before any route or middleware: :meth:`DeadlineH11.send_400_response` gives it the API's JSON error body
(``{"error", "status"}``) and the security headers every other answer carries, where uvicorn wrote plain text.
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from mlatr.serve.exposure import SECURITY_HEADERS


class DeadlineH11(H11Protocol):
    """h11 with the two deadlines (class attributes; :func:`deadline_protocol` sets them): one pending
    deadline per connection, which closes it when it fires."""

    header_seconds, body_seconds = 10.0, 120.0
    _deadline = None
    _reading_body = False

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm(self.header_seconds)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.SEND_BODY and not self._reading_body:
            self._reading_body = True
            self._arm(self.body_seconds)
        elif state is not h11.IDLE and state is not h11.SEND_BODY:  # the whole request is in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._reading_body = False
        if self.conn.our_state is h11.IDLE or self.conn.their_state is h11.IDLE:
            self._arm(self.header_seconds)  # the next request on a kept-alive connection


    def send_400_response(self, msg: str) -> None:
        """A malformed request's 400, as the API answers every error: a JSON body and the security headers."""
        body = json.dumps({"error": f"malformed HTTP request ({msg.rstrip('.')})", "status": 400}).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii")),
                   (b"connection", b"close"), *SECURITY_HEADERS]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                      h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def deadline_protocol(header_seconds: float = 10.0, body_seconds: float = 120.0) -> type[H11Protocol]:
    """An :class:`H11Protocol` (for ``uvicorn.Config(http=...)``) with the two deadlines above."""
    return type("DeadlineH11", (DeadlineH11,), {"header_seconds": header_seconds, "body_seconds": body_seconds})
