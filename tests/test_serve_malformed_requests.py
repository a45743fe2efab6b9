"""A request h11 cannot parse gets the API's JSON error and the security headers, not uvicorn's plain text."""

from __future__ import annotations

import json
import socket

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from mlatr.serve.slow_clients import deadline_protocol  # noqa: E402
from servetools import running_server  # noqa: E402


@pytest.mark.parametrize("raw", [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n",
                                 b"GET /\x00 HTTP/1.1\r\n\r\n"])
def test_a_malformed_request_gets_the_json_error_and_the_security_headers(raw):
    """Was: uvicorn's plain-text 400, without the API's JSON body or the security headers."""

    async def app(scope, receive, send):  # never reached: the protocol answers a request it cannot parse
        raise AssertionError("routed")

    with running_server(app, http=deadline_protocol()) as base:
        sock = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10)
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])}
    assert head.startswith(b"HTTP/1.1 400")
    assert headers[b"content-type"] == b"application/json"
    assert b"frame-ancestors 'none'" in headers[b"content-security-policy"]
    assert headers[b"x-content-type-options"] == b"nosniff" and headers[b"x-frame-options"] == b"DENY"
    error = json.loads(body)
    assert error["status"] == 400 and error["error"].startswith("malformed HTTP request")
