"""mlatr serve against hostile requests and hostile names: encoded paths out of the library, unicode controls,
counts out of range, malformed multipart and bodies, sounds that declare hours, markup in names and captions.
Each answer is the API's JSON error (or a right answer), the server answers the next client, and no answer shows
where the server keeps its files."""

import json
import os
import socket
import struct
import tempfile
import urllib.parse
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from clitools import manifest_lines, run_cli  # noqa: E402
from mlatr.commands.serve import TOKEN_PATTERN, check_token  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402
from mlatr.serve.api_errors import hide_paths  # noqa: E402
from mlatr.serve.app import Limits, create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from mlatr.serve.slow_clients import deadline_protocol  # noqa: E402
from servetools import build_toy_index, request, running_server, upload  # noqa: E402

UPLOAD_LIMIT = 200_000
MARKUP_CAPTION = '<img src=x onerror="alert(1)"> a low tone </script><script>alert(2)</script>'
MARKUP_ID = "tones/<b onmouseover=alert(3)>bold</b>"
CONTROLS_CAPTION = "\u202eenot wol a \x1b]0;pwned\x07"


@pytest.fixture(scope="module")
def library(served_toy, tmp_path_factory):
    """The toy index plus two clips whose id and captions hold markup and controls (an index folder)."""
    manifest, ckpt, _ = served_toy
    root = tmp_path_factory.mktemp("hostile-names")
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    rows[0] = dict(rows[0], id=MARKUP_ID, captions={"eng": [MARKUP_CAPTION]})
    rows[1] = dict(rows[1], id="controls", captions={"eng": [CONTROLS_CAPTION]})
    rows = [dict(r, audio=str(manifest.parent / r["audio"])) for r in rows]
    m = manifest_lines(root / "m.jsonl", rows)
    return build_toy_index(m, ckpt, root / "lib.idx", langs="eng")


@pytest.fixture(scope="module")
def server(library):
    live = LiveIndex(library)
    live.reload()
    with running_server(create_app(live, Limits(max_upload_bytes=UPLOAD_LIMIT)), http=deadline_protocol()) as base:
        yield base


def _alive(base: str) -> None:
    """The server still answers another client."""
    assert request(base + "/health").json()["clips"] == 20


def _raw(base: str, data: bytes, timeout: float = 30) -> tuple[bytes, dict, bytes]:
    """(status line, headers, body) of a request sent as bytes on a connection of its own (read up to the end of
    the answer: its Content-Length, or the server closing the connection)."""
    sock = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=timeout)
    try:
        sock.sendall(data)
    except OSError:  # the server answered and closed before reading all of it
        pass
    answer = b""
    while True:
        head, sep, body = answer.partition(b"\r\n\r\n")
        length = next((int(v) for k, _, v in (x.partition(b":") for x in head.split(b"\r\n")[1:])
                       if k.strip().lower() == b"content-length"), None) if sep else None
        if length is not None and len(body) >= length:
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    sock.close()
    lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}
    return lines[0], headers, body


GETS = [  # (path, status, a fragment of the JSON error or of the answer)
    ("/audio/..%2f..%2fetc%2fpasswd", 404, "no clip '../../etc/passwd'"),
    ("/audio/%2e%2e/%2e%2e/etc/passwd", 404, "no clip"),
    ("/audio/%252e%252e%252fetc%252fpasswd", 404, "no clip"),
    ("/audio/..%5c..%5cetc%5cpasswd", 404, "no clip"),
    ("/audio/%2Fetc%2Fpasswd", 404, "no clip"),
    ("/static/..%2f..%2f__init__.py", 404, "Not Found"),
    ("/static/%2e%2e/app.py", 404, "Not Found"),
    ("/clips/waveform/..%2f..%2fetc%2fpasswd", 404, "no clip"),
    ("/clips/similar/%00", 404, "no clip"),
    ("/search?q=%00", 200, '"query":"\\u0000"'),
    ("/search?q=%ED%A0%80", 200, '"query":"'),  # not UTF-8: replaced, never an error of the server
    ("/search?q=%E2%80%AEtone%1B%5B2J", 200, '"query":"\u202etone\\u001b[2J"'),
    ("/search?q=a&lang=%00", 400, "unknown language code"),
    ("/search?q=a&lang=" + "x" * 20, 422, "at most 16 characters"),
    ("/search?q=a&k=0", 422, "k: Input should be greater than or equal to 1"),
    ("/search?q=a&k=-1", 422, "k: Input should be greater than or equal to 1"),
    ("/search?q=a&k=abc", 422, "k: Input should be a valid integer"),
    ("/search?q=a&k=1e3", 422, "k: Input should be a valid integer"),
    ("/search?q=a&k=" + "9" * 40, 422, "k: Input should be less than or equal to 100"),
    ("/search?q=a&k=101", 422, "k: Input should be less than or equal to 100"),
    ("/search?q=a&min_relevance=nan", 422, "min_relevance"),
    ("/search?q=a&min_relevance=inf", 422, "min_relevance"),
    ("/search?q=a&min_relevance=-0.1", 422, "min_relevance"),
    ("/search?q=a&rank=", 422, "rank"),
    ("/search?q=a&rank=bm25", 422, "rank"),
    ("/search?q=" + "a" * 1001, 422, "at most 1000 characters"),
    ("/search?q=%20%20", 400, "empty text query"),
    ("/clips/similar/controls?k=0", 422, "k"),
    ("/clips/similar/controls?k=100000", 422, "k"),
    ("/clips/similar/controls?k=abc", 422, "k"),
    ("/clips/waveform/controls?bins=1000000", 422, "bins"),
    ("/clips/waveform/controls?bins=-1", 422, "bins"),
    ("/nothing/<script>alert(1)</script>", 404, "Not Found"),
]


@pytest.mark.parametrize("path,status,fragment", GETS)
def test_hostile_get_gets_the_json_answer(server, path, status, fragment):
    r = request(server + path)
    assert r.status == status, (r.status, r.body[:300])
    assert r.headers["content-type"] == "application/json" and r.headers["x-content-type-options"] == "nosniff"
    body = r.json()
    assert fragment in (r.body.decode() if status == 200 else body["error"]), body
    if status != 200:
        assert body["status"] == status
    _alive(server)


def _wav(data_size: int, n_bytes: int, rate: int = 16000) -> bytes:
    """A 16-bit mono WAV whose header declares ``data_size`` bytes and which holds ``n_bytes``."""
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, rate, rate * 2, 2, 16)
    riff = 0xFFFFFFFF if data_size == 0xFFFFFFFF else 36 + data_size
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + fmt + b"data" + struct.pack("<I", data_size)
            + b"\x01\x00" * (n_bytes // 2))


POSTS = [  # (content type, body, status, fragment)
    ("multipart/form-data; boundary=xyz", b"garbage", 400, "multipart"),
    ("multipart/form-data", b"abc", 400, "boundary"),
    ("multipart/form-data; boundary=xyz",
     b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\nabc', 422, "file"),
    ("application/json", b'{"file": "a.wav"}', 422, "file"),
    ("application/octet-stream", b"", 422, "file"),
    (None, ("other", "q.wav", b"RIFF"), 422, "file: Field required"),
    (None, ("file", "../../../etc/passwd", b"\x00" * 1000), 415, "'../../../etc/passwd' is not a sound file"),
    (None, ("file", "empty.wav", b""), 400, "is empty"),
    (None, ("file", "ten-hours.wav", _wav(10 * 3600 * 32000, 32000)), 400, "declares 36,000 s of audio"),
    (None, ("file", "zero-rate.wav", _wav(32000, 32000, rate=0)), 415, "not a sound file"),
    (None, ("file", "\u202ename\x1b.wav", b"RIFF"), 415, "not a sound file"),
]


@pytest.mark.parametrize("content_type,body,status,fragment", POSTS)
def test_malformed_uploads_get_the_json_error(server, content_type, body, status, fragment):
    before = set(os.listdir(tempfile.gettempdir()))
    if content_type is None:
        r = upload(server + "/search/audio?k=3", body[1], body[2], field=body[0])
    else:
        r = request(server + "/search/audio?k=3", "POST", body, {"Content-Type": content_type})
    assert r.status == status and fragment in r.json()["error"], (r.status, r.body[:300])
    # the upload's temporary file is gone, and nothing was written by its name
    assert not [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("mlatr-upload-")]
    assert not os.path.exists("/etc/passwd.wav")
    _alive(server)


def test_a_wav_of_unknown_length_is_read_up_to_its_end(server):
    r = upload(server + "/search/audio?k=3", "stream.wav", _wav(0xFFFFFFFF, 32000))
    assert r.status == 200 and len(r.json()["results"]) == 3


RAW = [  # (request bytes, status, fragment of the JSON error)
    (b"POST /search/audio HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999\r\n"
     b"Content-Type: multipart/form-data; boundary=x\r\n\r\nabc", 413, "upload too large"),
    (b"POST /search/audio HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Type: multipart/form-data; boundary=x\r\n\r\nzzz\r\n", 400, "malformed HTTP request"),
    (b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nabcde", 400,
     "malformed HTTP request"),
    (b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n", 400, "malformed HTTP request"),
    (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n", 400, "malformed HTTP request"),
    (b"GET /search?q=" + b"a" * 70000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 422, "at most 1000 characters"),
]


@pytest.mark.parametrize("data,status,fragment", RAW)
def test_malformed_and_huge_bodies_get_the_json_error(server, data, status, fragment):
    line, headers, body = _raw(server, data)
    assert line.startswith(b"HTTP/1.1 %d" % status), line
    assert headers[b"content-type"] == b"application/json" and b"frame-ancestors 'none'" in headers[
        b"content-security-policy"]
    assert fragment in json.loads(body)["error"]
    _alive(server)


def test_a_chunked_upload_is_stopped_at_the_limit(server):
    """A body sent without a length is counted as it arrives: 413 at the first byte over the limit."""
    body = (b'--x\r\nContent-Disposition: form-data; name="file"; filename="big.wav"\r\n'
            b"Content-Type: audio/wav\r\n\r\n" + b"\0" * (UPLOAD_LIMIT + 100_000) + b"\r\n--x--\r\n")
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 65536]), body[i:i + 65536])
                      for i in range(0, len(body), 65536))
    line, _, answer = _raw(server, b"POST /search/audio HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                                   b"Content-Type: multipart/form-data; boundary=x\r\n\r\n" + chunks + b"0\r\n\r\n")
    assert line.startswith(b"HTTP/1.1 413") and "upload too large" in json.loads(answer)["error"], (line, answer)
    _alive(server)


def test_markup_and_controls_in_names_come_back_as_text(server):
    r = request(server + "/search?" + urllib.parse.urlencode({"q": "a low tone", "k": 20}))
    results = r.json()["results"]
    by_id = {x["id"]: x for x in results}
    assert by_id[MARKUP_ID]["caption"] == MARKUP_CAPTION and by_id["controls"]["caption"] == CONTROLS_CAPTION
    assert by_id[MARKUP_ID]["audio_url"] == "/audio/" + urllib.parse.quote(MARKUP_ID, safe="")
    assert r.headers["content-type"] == "application/json" and r.headers["x-content-type-options"] == "nosniff"
    audio = request(server + by_id[MARKUP_ID]["audio_url"])
    assert audio.status == 200 and audio.body[:4] == b"RIFF"
    similar = request(server + "/clips/similar/" + urllib.parse.quote(MARKUP_ID, safe="") + "?k=3")
    assert similar.status == 200


def test_the_page_writes_results_as_text_never_as_markup():
    """The page builds every result with createElement / textContent (the Selenium test renders it); none of the
    ways a string becomes markup is in its script, so a caption like ``<img onerror=...>`` stays text."""
    script = (Path(__file__).parents[1] / "src" / "mlatr" / "serve" / "static" / "app.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "setAttribute(\"on", "javascript:"):
        assert sink not in script, sink
    assert "textContent" in script


def test_errors_name_the_servers_files_by_their_last_parts(served_toy, tmp_path):
    manifest, ckpt, _ = served_toy
    path = build_toy_index(manifest, ckpt, tmp_path / "deep" / "er" / "lib.idx", first=8)
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        (path / "index.json").write_text('{"format": "mlatr-index-2", "dim": "16"}')
        r = request(base + "/reload", "POST")
        assert r.status == 500 and "…/lib.idx/index.json" in r.json()["error"], r.json()
        health = request(base + "/health").json()
        for said in (r.body.decode(), json.dumps(health)):
            assert str(tmp_path) not in said and "/tmp" not in said
        assert health["reload_error"].startswith("…/lib.idx/index.json") and health["clips"] == 8
    gone = LiveIndex(tmp_path / "nowhere" / "x.idx")
    with pytest.raises(MlatrError):  # as mlatr serve does at start-up: it then answers 503 until the file is there
        gone.reload()
    with running_server(create_app(gone)) as base:
        r = request(base + "/search?q=a")
        assert r.status == 503 and "…/nowhere/x.idx: file not found" in r.json()["error"]
        assert str(tmp_path) not in r.body.decode()


@pytest.mark.parametrize("message,shown", [
    ("/srv/data/lib.idx/index.json: dim: expected", "…/lib.idx/index.json: dim: expected"),
    ("clip 'c': /a/b/c/d.wav: cannot read ('/a/b/c/d.wav')", "clip 'c': …/c/d.wav: cannot read ('…/c/d.wav')"),
    ("milvus://host:19530/coll: refused", "milvus://host:19530/coll: refused"),
    ("http://example.org/a/b/c fails", "http://example.org/a/b/c fails"),
    ("lang: unknown language code 'x'", "lang: unknown language code 'x'"),
])
def test_hide_paths(message, shown):
    assert hide_paths(message) == shown


@pytest.mark.parametrize("token", ["a b", "tok;Path=/", "line\r\nX-Injected: 1", "caf\u00e9", "x" * 4097, '"q"'])
def test_a_token_no_client_could_send_is_refused_at_start(token, capsys, library):
    with pytest.raises(MlatrError, match="--token / \\$MLATR_TOKEN: use at most 4,096 ASCII"):
        check_token(token)
    r = run_cli(capsys, "serve", library, "--token", token, "--port", "0")
    assert r.code == 2 and token not in r.err and "--token" in r.err


def test_good_tokens_and_the_default_bind():
    for token in ("abc", "Zx_-.~+/=9", "k" * 4096):
        check_token(token)
        assert TOKEN_PATTERN.fullmatch(token)
    from mlatr.cli import build_parser

    args = build_parser().parse_args(["serve", "lib.idx"])
    assert args.host == "127.0.0.1" and args.allow_root == [] and not args.no_auth
