"""What ``mlatr serve`` trusts of a request before any route runs (issue 24): an ASGI middleware.

- **Host allow-list** (DNS rebinding): the ``Host`` header, port left out, must be one of
  ``allowed_hosts`` (``*`` allows any); else 400.
- **Bearer token** (optional): with ``token`` set, a request must carry ``Authorization: Bearer TOKEN``
  or the ``mlatr_token`` cookie; ``GET /?token=TOKEN`` sets that cookie (HttpOnly, SameSite=Strict) so
  the web page, its fetches and its audio work in a browser. Else 401. Compared in constant time.
- **Cross-site POST**: a POST whose ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site``, or whose
  ``Origin`` is not this server's own (scheme-less host:port equal to ``Host``), answers 403 (a page on
  another site cannot make a visitor's browser upload to, or reload, this server).
- **Response headers** on every answer: a Content-Security-Policy that allows only this origin's
  script, style, media and fetches and no framing (``frame-ancestors 'none'``), ``X-Content-Type-Options:
  nosniff``, ``X-Frame-Options: DENY``, ``Referrer-Policy: no-referrer``.

Refusals are the API's JSON error body.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable
from urllib.parse import parse_qs, urlsplit

#: The Host names of a server bound to a loopback address.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

TOKEN_COOKIE = "mlatr_token"

SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"media-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                                 b"form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def host_name(host: str) -> str:
    """``host`` (a Host header or an authority) without its port, lower case, IPv6 brackets removed."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback(address: str) -> bool:
    """Whether binding ``address`` serves this machine only."""
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


class ExposureGuard:
    """The checks above around an ASGI ``app``."""

    def __init__(self, app, allowed_hosts: Iterable[str] = LOOPBACK_HOSTS, token: str | None = None):
        self.app = app
        self.allowed = {host_name(h) if h != "*" else "*" for h in allowed_hosts}
        self.token = token.encode() if token else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {}
        for k, v in scope.get("headers", ()):
            headers.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
        extra: list[tuple[bytes, bytes]] = list(SECURITY_HEADERS)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + extra)
            await send(message)

        refusal = self.refusal(scope, headers)
        if refusal is not None:
            return await self.refuse(send_with_headers, *refusal)
        if self.token is not None and scope["method"] == "GET" and scope["path"] == "/":
            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            if given and hmac.compare_digest(given.encode(), self.token):
                extra.append((b"set-cookie", f"{TOKEN_COOKIE}={given}; Path=/; HttpOnly; SameSite=Strict".encode()))
        return await self.app(scope, receive, send_with_headers)

    def refusal(self, scope, headers: dict[str, str]) -> tuple[int, str] | None:
        """``(status, message)`` for a request refused before any route, else ``None``."""
        host = headers.get("host", "")
        if "*" not in self.allowed and host_name(host) not in self.allowed:
            return 400, "this server does not answer to that Host name (mlatr serve --allow-host adds one)"
        if self.token is not None and not self.authorized(scope, headers):
            return 401, "a token is required (Authorization: Bearer TOKEN, or open /?token=TOKEN once)"
        if scope["method"] == "POST":
            site = headers.get("sec-fetch-site", "")
            origin = headers.get("origin")
            if site in ("cross-site", "same-site") or (
                    origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower())):
                return 403, "cross-site POST requests are refused"
        return None

    def authorized(self, scope, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth[:7].lower() == "bearer " and hmac.compare_digest(auth[7:].strip().encode(), self.token):
            return True
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == TOKEN_COOKIE and hmac.compare_digest(value.encode(), self.token):
                return True
        if scope["method"] == "GET" and scope["path"] == "/":
            given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
            return bool(given) and hmac.compare_digest(given.encode(), self.token)
        return False

    @staticmethod
    async def refuse(send, status: int, message: str) -> None:
        body = json.dumps({"error": message, "status": status}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
