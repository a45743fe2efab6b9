"""The openai backend against a chat-completions server the test runs on 127.0.0.1: batching, 429 then
success, malformed replies, timeouts, rate limiting, and a resumed run that sends nothing for cached
captions (ATRI §5.1's translation step)."""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.translation import OpenAIBackend, TranslationCache, Translator, translate_manifest
from mlatr.translation.openai_backend import MalformedReply, parse_numbered_lines

LINE = re.compile(r"^(\d+)\. (.*)$")


def fake_translation(text: str, target: str) -> str:
    return f"<{target}> {text[::-1]}"


class ChatServer:
    """Answers POST /v1/chat/completions by translating each numbered line with :func:`fake_translation`.

    ``script`` holds one action per request, consumed in order (then "ok"): "ok", ("status", code, headers),
    ("sleep", seconds) before answering ok, ("drop-line",) answering one line short, ("garbage-for", text)
    answering a non-numbered line for a request holding ``text``. ``requests`` records every request's
    captions and arrival time.
    """

    def __init__(self):
        self.script: list = []
        self.rules: list = []  # (predicate on captions, action), checked on every request
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                system, user = body["messages"][0]["content"], body["messages"][1]["content"]
                target = re.search(r" to (\w+)\. ", system).group(1)
                caps = [LINE.match(line).group(2) for line in user.splitlines()]
                server.requests.append({"captions": caps, "time": time.monotonic(), "model": body["model"],
                                        "auth": self.headers.get("Authorization"), "target": target})
                action = server.script.pop(0) if server.script else "ok"
                for predicate, rule in server.rules:
                    if predicate(caps):
                        action = rule
                if isinstance(action, tuple) and action[0] == "status":
                    self.send_response(action[1])
                    for k, v in action[2].items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(b'{"error": "busy"}')
                    return
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                lines = [f"{i}. {fake_translation(c, target)}" for i, c in enumerate(caps, 1)]
                if action == ("drop-line",):
                    lines = lines[:-1]
                if action == ("garbage",):
                    lines = ["Sure! Here are the translations:"]
                reply = {"choices": [{"message": {"role": "assistant", "content": "\n".join(lines)}}]}
                data = json.dumps(reply).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads, self.httpd.block_on_close = True, False  # a sleeping handler never blocks teardown
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


def _manifest(tmp_path, n=5):
    rows = [{"id": f"c{i}", "audio": f"a{i}.wav", "split": "test",
             "captions": {"eng": [f"a dog barks {i}", f"rain falls {i}"], "fra": [f"un chien aboie {i}"]}}
            for i in range(n)]
    rows[1]["captions"]["eng"][1] = "a dog barks 0"  # a repeated text is sent once
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _backend(server, **kw):
    opts = {"batch_size": 4, "backoff": 0.0, "retries": 2, "timeout": 5.0, **kw}
    return OpenAIBackend(server.url, "test-model", **opts)


def _sent(server):
    return [c for r in server.requests for c in r["captions"]]


def test_parse_numbered_lines():
    assert parse_numbered_lines("1. un\n\n2.  deux \n", 2) == ["un", "deux"]
    assert parse_numbered_lines("1) un\n2: deux", 2) == ["un", "deux"]
    for bad in ("1. un", "1. un\n3. trois", "un\ndeux", "2. deux\n1. un"):
        with pytest.raises(MalformedReply):
            parse_numbered_lines(bad, 2)


def test_batches_translate_every_caption_in_order(server, tmp_path):
    manifest = Manifest.load(_manifest(tmp_path))
    out, summary = translate_manifest(manifest, ["deu", "spa"], Translator(_backend(server)), progress=False)
    # 9 distinct English captions per target language, 4 per request -> 3 requests each
    assert [len(r["captions"]) for r in server.requests] == [4, 4, 1, 4, 4, 1]
    assert {r["target"] for r in server.requests} == {"German", "Spanish"}
    assert all(r["model"] == "test-model" and r["auth"] is None for r in server.requests)
    for clip in out.clips:
        for lang in ("deu", "spa"):
            assert clip.captions[lang] == [fake_translation(t, {"deu": "German", "spa": "Spanish"}[lang])
                                           for t in clip.captions["eng"]]
        assert clip.captions["fra"] == manifest[out.clips.index(clip)].captions["fra"]  # untouched
    assert (summary.translated, summary.cached, summary.failed) == (20, 0, 0)


def test_429_then_success_is_retried_after_retry_after(server, tmp_path):
    server.script = [("status", 429, {"Retry-After": "0.2"}), ("status", 503, {})]
    backend = _backend(server, batch_size=10)
    t0 = time.monotonic()
    got = Translator(backend).translate(["a dog barks", "rain falls"], "eng", "fra")
    assert time.monotonic() - t0 >= 0.2  # the server's Retry-After was honoured
    assert [o.translation for o in got.values()] == [fake_translation(t, "French") for t in got]
    assert len(server.requests) == 3 and backend.requests == 3


def test_retries_exhausted_leave_the_captions_missing(server, tmp_path):
    server.script = [("status", 500, {})] * 10
    manifest = Manifest.load(_manifest(tmp_path, n=2))
    out, summary = translate_manifest(manifest, ["deu"], Translator(_backend(server, retries=1)), progress=False)
    assert len(server.requests) == 2  # one try + one retry for the single batch
    assert summary.failed == 4 and summary.translated == 0
    assert all(c.captions["deu"] == [None, None] for c in out.clips)
    assert "HTTP 500" in summary.failures[0].reason


def test_malformed_reply_falls_back_to_one_caption_per_request(server, tmp_path):
    server.script = [("drop-line",)]
    server.rules = [(lambda caps: caps == ["a dog barks 1"], ("garbage",))]
    manifest = Manifest.load(_manifest(tmp_path, n=2))
    out, summary = translate_manifest(manifest, ["deu"], Translator(_backend(server)), progress=False)
    # request 1: the batch of 3 distinct captions, one line short -> each caption alone
    assert [r["captions"] for r in server.requests] == [
        ["a dog barks 0", "rain falls 0", "a dog barks 1"], ["a dog barks 0"], ["rain falls 0"], ["a dog barks 1"]]
    assert out[1].captions["deu"] == [None, fake_translation("a dog barks 0", "German")]  # never the source text
    assert (summary.translated, summary.failed) == (3, 1)
    assert summary.failures[0].clip_id == "c1" and summary.failures[0].index == 0


def test_timeout_is_retried(server, tmp_path):
    server.script = [("sleep", 1.5)]
    backend = _backend(server, timeout=0.4, batch_size=10)
    got = Translator(backend).translate(["birds sing"], "eng", "nld")
    assert got["birds sing"].translation == fake_translation("birds sing", "Dutch")
    assert len(server.requests) == 2


def test_timeout_every_time_fails_the_batch(server):
    server.script = [("sleep", 1.0)] * 3
    got = Translator(_backend(server, timeout=0.3, retries=1)).translate(["birds sing"], "eng", "nld")
    assert got["birds sing"].translation is None and "no answer within 0.3 s" in got["birds sing"].reason


def test_rate_limit_spaces_requests(server):
    backend = _backend(server, batch_size=1, max_requests_per_minute=600)  # >= 0.1 s apart
    Translator(backend).translate(["a", "b", "c"], "eng", "fra")
    times = [r["time"] for r in server.requests]
    assert len(times) == 3 and min(b - a for a, b in zip(times, times[1:], strict=False)) >= 0.09


def test_fatal_status_stops_the_run(server):
    server.script = [("status", 401, {})]
    with pytest.raises(MlatrError, match="HTTP 401"):
        Translator(_backend(server)).translate(["a"], "eng", "fra")


def test_api_key_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-test")
    Translator(OpenAIBackend(server.url, "m", api_key_env="MY_KEY")).translate(["a"], "eng", "fra")
    assert server.requests[0]["auth"] == "Bearer sk-test"
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(MlatrError, match="MY_KEY"):
        OpenAIBackend("https://api.example.com/v1", "m", api_key_env="MY_KEY")


def test_resumed_run_sends_nothing_for_cached_captions(server, tmp_path):
    manifest_path = _manifest(tmp_path)
    out_path, cache_path = tmp_path / "out" / "out.jsonl", tmp_path / "cache.jsonl"
    args = ["data", "translate", str(manifest_path), "--to", "deu", "--backend", "openai", "--base-url", server.url,
            "--model", "test-model", "--batch-size", "4", "--retries", "0", "--backoff", "0", "--cache",
            str(cache_path), "-o", str(out_path), "--no-progress"]
    # first run: the server fails after two batches (every later request is a 500): 8 of 9 texts cached
    server.script = ["ok", "ok"] + [("status", 500, {})] * 5
    assert main(args) == 1
    first = Manifest.load(out_path)
    assert first[0].audio == "../a0.wav"  # relative audio paths follow the manifest into its new folder
    assert [c.captions["deu"][1] for c in first][3:] == [fake_translation("rain falls 3", "German"), None]
    assert sum(c is None for clip in first for c in clip.captions["deu"]) == 1
    cached = [json.loads(line) for line in cache_path.read_text(encoding="utf-8").splitlines()]
    assert len(cached) == 8 and {c["backend"] for c in cached} == {"openai"}
    assert {c["model"] for c in cached} == {"test-model"}
    # a crash cut the last cache line short: it is skipped, and the next append starts on a new line
    with open(cache_path, "a", encoding="utf-8") as fh:
        fh.write('{"text": "half a li')
    server.requests.clear()
    server.script.clear()  # the server is back
    assert main(args) == 0
    assert _sent(server) == ["rain falls 4"]  # only what the cache lacked
    second = Manifest.load(out_path)
    assert all(c == fake_translation(e, "German") for clip in second
               for e, c in zip(clip.captions["eng"], clip.captions["deu"], strict=True))
    cache = TranslationCache(cache_path)
    assert len(cache) == 9 and cache.skipped_lines == 1
    # a third run sends nothing at all
    server.requests.clear()
    assert main(args) == 0 and server.requests == []
