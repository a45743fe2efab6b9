"""Connections that send a request too slowly are closed (slowloris): uvicorn's HTTP protocols with deadlines.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but waits for ever on a client that
opens a connection and sends its request headers a byte at a time, so a few hundred such sockets hold
every slot of the server. :func:`deadline_protocol` makes an HTTP protocol with two deadlines: the request
line and headers must have arrived ``header_seconds`` after the connection opened (or after the previous
response on a kept-alive connection), and the whole body ``body_seconds`` after the headers; a connection
past either is closed without an answer. A middleware cannot do this: it runs only once the headers are in.

Two parsers carry the deadlines: ``httptools`` (the C parser of ``uvicorn[standard]``, part of
``mlatr[serve]``; used when it is installed: less CPU per request than the pure-Python parser, figures in
docs/search-at-scale.md) and ``h11`` (always there with uvicorn).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

Parser = Literal["auto", "httptools", "h11"]


class _Deadline:
    """What both protocols share: one pending deadline per connection, which closes it when it fires; the
    first one armed when the connection opens."""

    header_seconds, body_seconds = 10.0, 120.0
    _deadline = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm(self.header_seconds)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

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


def httptools_available() -> bool:
    """Whether the ``httptools`` parser can be used (``pip install httptools``, part of ``mlatr[serve]``)."""
    return importlib.util.find_spec("httptools") is not None


def deadline_protocol(header_seconds: float = 10.0, body_seconds: float = 120.0, parser: Parser = "auto") -> type:
    """An HTTP protocol class (for ``uvicorn.Config(http=...)``) with the two deadlines above; ``parser``:
    ``auto`` takes ``httptools`` when it is installed, else ``h11``."""
    use_httptools = parser == "httptools" or (parser == "auto" and httptools_available())
    base = _httptools_protocol() if use_httptools else DeadlineH11
    return type(base.__name__, (base,), {"header_seconds": header_seconds, "body_seconds": body_seconds})


class DeadlineH11(_Deadline, H11Protocol):
    """h11 (pure Python) with the deadlines: h11 tells the request's state after each chunk of data."""

    _reading_body = False

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


@functools.cache
def _httptools_protocol() -> type:
    """httptools (C) with the deadlines, made on first use: httptools is optional (h11 serves without it),
    and importing uvicorn's module for it imports httptools."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class DeadlineHttpTools(_Deadline, HttpToolsProtocol):
        # httptools calls on_headers_complete / on_message_complete from inside data_received
        _reading_body = False

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._reading_body = True
            self._arm(self.body_seconds)  # disarmed at once below when the request has no body

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._reading_body = False
            if self.cycle is not None and self.cycle.response_complete:
                self._arm(self.header_seconds)  # answered before its body was in: the next request's deadline
            else:
                self._disarm()  # the whole request is in, its answer is being made

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # answered before its body was read (the body deadline still runs), else the next request's
            if not self._reading_body and not self.transport.is_closing():
                self._arm(self.header_seconds)

    return DeadlineHttpTools
