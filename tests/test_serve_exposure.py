"""What mlatr serve trusts of a request: Host allow-list, bearer token, security headers,
cross-site POSTs, error messages without internal names, slow clients disconnected."""

import socket
import time
import urllib.parse

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from mlatr.commands.serve import exposure  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402
from mlatr.serve.app import create_app  # noqa: E402
from mlatr.serve.exposure import host_name, is_loopback  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from mlatr.serve.slow_clients import deadline_protocol  # noqa: E402
from servetools import multipart, request, running_server  # noqa: E402


@pytest.fixture(scope="module")
def live(served_toy):
    live = LiveIndex(served_toy[2])
    live.reload()
    return live


@pytest.fixture(scope="module")
def server(live):
    with running_server(create_app(live)) as base:
        yield base


def port_of(base):
    return urllib.parse.urlsplit(base).port


def test_host_names_and_loopback_unit():
    assert host_name("LocalHost:8000") == "localhost"
    assert host_name("[::1]:8000") == "::1" and host_name("::1") == "::1"
    assert host_name("127.0.0.1") == "127.0.0.1"
    for address in ["127.0.0.1", "127.9.9.9", "::1", "localhost", "[::1]"]:
        assert is_loopback(address), address
    for address in ["0.0.0.0", "::", "192.168.1.4", "example.org"]:
        assert not is_loopback(address), address


def test_host_allow_list(server, live):
    port = port_of(server)
    for host in [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"]:
        assert request(server + "/health", headers={"Host": host}).status == 200, host
    for host in ["evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example", ""]:
        r = request(server + "/health", headers={"Host": host})
        assert r.status == 400 and "Host" in r.json()["error"], host
    with running_server(create_app(live, allowed_hosts=["search.example.org"])) as base:
        assert request(base + "/health", headers={"Host": "search.example.org:80"}).status == 200
        assert request(base + "/health").status == 400  # 127.0.0.1 is not on that list
    with running_server(create_app(live, allowed_hosts=["*"])) as base:
        assert request(base + "/health", headers={"Host": "anything.example"}).status == 200


def test_bearer_token(live):
    with running_server(create_app(live, token="s3cret-tok")) as base:
        for headers in [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Bearer "},
                        {"Authorization": "Basic s3cret-tok"}, {"Cookie": "mlatr_token=wrong"},
                        {"Cookie": "other=s3cret-tok"}]:
            for path in ["/health", "/search?q=a+tone", "/audio/clip000", "/static/app.js", "/"]:
                r = request(base + path, headers=headers)
                assert r.status == 401 and "token" in r.json()["error"], (headers, path)
        assert request(base + "/health?token=s3cret-tok").status == 401  # the query form opens the page only
        assert request(base + "/health", headers={"Authorization": "Bearer s3cret-tok"}).status == 200
        assert request(base + "/health", headers={"authorization": "bearer s3cret-tok"}).status == 200
        page = request(base + "/?token=s3cret-tok")
        assert page.status == 200 and b"<html" in page.body.lower()
        cookie = page.headers["set-cookie"]
        assert cookie.startswith("mlatr_token=s3cret-tok") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        for path in ["/health", "/audio/clip000", "/static/app.js"]:
            assert request(base + path, headers={"Cookie": "a=b; mlatr_token=s3cret-tok"}).status == 200, path
        r = request(base + "/reload", "POST", b"", {"Authorization": "Bearer s3cret-tok"})
        assert r.status == 200


def test_security_headers_on_every_answer(server):
    for path in ["/", "/health", "/static/app.js", "/audio/clip000", "/audio/nope", "/nowhere", "/search"]:
        r = request(server + path)
        assert r.headers["x-content-type-options"] == "nosniff", path
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "default-src 'self'" in csp and "'unsafe-inline'" not in csp
        assert r.headers["x-frame-options"] == "DENY"


def test_cross_site_posts_are_refused(server):
    port = port_of(server)
    body, headers = multipart("file", "q.wav", b"RIFF0000WAVE")
    for path, data, extra in [("/reload", b"", {}), ("/search/audio", body, headers)]:
        for bad in [{"Origin": "http://evil.example"}, {"Origin": f"http://evil.example:{port}"}, {"Origin": "null"},
                    {"Origin": f"http://localhost:{port}"},  # another name of this machine: another origin
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                    {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "cross-site"}]:
            r = request(server + path, "POST", data, {**extra, **bad})
            assert r.status == 403 and "cross-site" in r.json()["error"], (path, bad)
    ok = request(server + "/reload", "POST", b"", {"Origin": f"http://127.0.0.1:{port}",
                                                    "Sec-Fetch-Site": "same-origin"})
    assert ok.status == 200
    assert request(server + "/reload", "POST", b"").status == 200  # curl: no Origin, no Sec-Fetch-Site
    assert request(server + "/reload", "POST", b"", {"Sec-Fetch-Site": "none"}).status == 200
    # GETs are not state-changing and stay readable by a page of this origin only through CORS (none is sent)
    assert request(server + "/health", headers={"Origin": "http://evil.example"}).status == 200


class Broken:
    """A live index whose every read fails with an internal error."""

    path = None

    def __init__(self, exc):
        self.exc = exc

    def current(self):
        raise self.exc

    def start_watch(self, _seconds):
        pass

    def stop_watch(self):
        pass


@pytest.mark.parametrize("exc", [KeyError("secret_key_name"), ZeroDivisionError("x"),
                                 AttributeError("'NoneType' object has no attribute 'mlatr_internal'")])
def test_internal_errors_name_nothing_internal(exc):
    with running_server(create_app(Broken(exc))) as base:
        for path in ["/health", "/search?q=a", "/audio/clip000"]:
            r = request(base + path)
            assert r.status == 500, path
            text = r.body.decode()
            for leak in [type(exc).__name__, "secret_key_name", "mlatr_internal", "mlatr.", "Traceback", ".py"]:
                assert leak not in text, (path, leak)
            assert r.json()["error"] == "internal error; the server's log has the details"


def test_cli_exposure_rules():
    assert {"localhost", "127.0.0.1", "::1", "extra.name"} <= set(exposure("127.0.0.1", ["extra.name"], None, False))
    assert "localhost" in exposure("::1", [], None, False)
    with pytest.raises(MlatrError, match="--token"):
        exposure("0.0.0.0", ["search.example.org"], None, False)
    with pytest.raises(MlatrError, match="--allow-host"):
        exposure("0.0.0.0", [], "tok", False)
    assert exposure("0.0.0.0", ["search.example.org"], "tok", False) == ["search.example.org"]
    assert exposure("192.168.1.4", ["*"], None, True) == ["*"]


def slow_send(port, chunks, pause):
    """Send ``chunks`` with ``pause`` seconds between them; the seconds until the server closed the
    connection (``None``: it stayed open through all of them), and what it answered."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(pause)
    t0 = time.monotonic()
    try:
        for chunk in chunks:
            try:
                sock.sendall(chunk)
            except OSError:
                return time.monotonic() - t0, b""
            try:
                got = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return time.monotonic() - t0, b""
            if got == b"":
                return time.monotonic() - t0, got
            if b"\r\n\r\n" in got:  # an answer: keep reading what follows (the test sends the next request)
                continue
        return None, b""
    finally:
        sock.close()


def test_slow_clients_are_disconnected(live):
    with running_server(create_app(live), http=deadline_protocol(1.0, 1.5), timeout_keep_alive=5) as base:
        port = port_of(base)
        head = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode()
        # headers a byte at a time, for ever: closed at the header deadline (1 s), not held
        closed, _ = slow_send(port, [head[i:i + 1] for i in range(len(head))] + [b"a"] * 40, 0.1)
        assert closed is not None and 0.8 < closed < 3.0
        # a body trickled after complete headers: closed at the body deadline (1.5 s after the headers)
        post = f"POST /reload HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000\r\n\r\n".encode()
        closed, _ = slow_send(port, [post] + [b"x"] * 60, 0.1)
        assert closed is not None and 1.2 < closed < 4.0
        # a second request on a kept-alive connection gets its own header deadline
        first = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        closed, _ = slow_send(port, [first] + [b"G", b"E", b"T"] + [b" "] * 40, 0.1)
        assert closed is not None and closed < 3.5
        # a client that is merely a bit slow still gets its answer
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        for i in range(0, len(first), 8):
            sock.sendall(first[i:i + 8])
            time.sleep(0.05)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        sock.close()
        assert request(base + "/health").status == 200
