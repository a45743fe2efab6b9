"""Hostile round 3, the rest of the list: a huge sidecar caption, --json on a caption-less index, a malformed
HTTP request, a worker that keeps dying, a file name that is not UTF-8, a newline in a file name, U+202E in ids.
(Deeply nested shard JSON and the export pattern: tests/test_shard_members.py.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from clitools import assert_user_error, manifest_lines, run_cli, write_tone
from mlatr.data.importers.folder import MAX_SIDECAR_BYTES
from mlatr.data.manifest import MAX_CAPTION_CHARS
from mlatr.search.evidence import Evidence
from mlatr.search.search import CaptionHit, Hit
from mlatr.serve.slow_clients import deadline_protocol
from mlatr.serve.workers import MAX_BACKOFF, restart_delay
from servetools import running_server


def test_a_huge_sidecar_caption_is_a_bad_row_read_from_its_size(tmp_path, capsys):
    """Was: a 66 MB sidecar caption aborted index build (SIGABRT at 5.6 GB) and left an empty index folder."""
    lib = tmp_path / "lib"
    write_tone(lib / "rain.wav", 0.3)
    write_tone(lib / "dog.wav", 0.3)
    (lib / "rain.txt").write_bytes(b"rain " * (MAX_SIDECAR_BYTES // 5 + 10))
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--strict")
    assert_user_error(r, "rain.txt", "a caption file of", "at most 1,048,576")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--skip-bad")
    assert r.code == 0 and "skipped 1 bad row" in r.out


def test_a_caption_longer_than_any_is_refused_by_the_manifest(tmp_path, capsys):
    write_tone(tmp_path / "a.wav", 0.3)
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": "a", "audio": "a.wav",
                                                "captions": {"eng": ["x" * (MAX_CAPTION_CHARS + 1)]}}])
    r = run_cli(capsys, "data", "validate", m)
    assert r.code == 1 and "m.jsonl:1: captions.eng[0]: a caption of 100,001 characters (at most 100,000)" in r.out
    assert_user_error(run_cli(capsys, "data", "stats", m), "captions.eng[0]", "characters (at most 100,000)")


def test_a_failed_index_build_leaves_no_empty_folder(served_toy, tmp_path, capsys):
    manifest, ckpt, _ = served_toy
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": "gone", "audio": str(tmp_path / "gone.wav")}])
    out = tmp_path / "lib.idx"
    r = run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", out, "--no-progress")
    assert r.code == 2 and not out.exists()


def test_json_of_a_captions_ranking_on_an_index_without_captions(served_toy, tmp_path, capsys):
    """Was: --json --rank captions printed -Infinity scores (not JSON)."""
    manifest, ckpt, _ = served_toy
    rows = [json.loads(line) for line in manifest.read_text().splitlines()][:4]
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": r["id"], "audio": str(manifest.parent / r["audio"])}
                                               for r in rows])
    idx = tmp_path / "bare.idx.npz"
    assert run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", idx,
                   "--no-progress").code == 0
    r = run_cli(capsys, "search", idx, "a low tone", "--rank", "captions", "--json")
    assert_user_error(r, "holds none", "audio or hybrid")
    r = run_cli(capsys, "search", idx, "a low tone", "--rank", "hybrid", "--json")
    assert r.code == 0
    out = json.loads(r.out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert out["results"] and all(np.isfinite(h["score"]) for h in out["results"])


def test_hit_json_holds_no_infinity():
    hit = Hit(rank=1, score=float("-inf"), id="a", path="/a.wav", captions=[],
              evidence=[Evidence("caption", np.nan, 1, "t", "eng")])
    assert hit.to_dict()["score"] is None and hit.to_dict()["evidence"][0]["score"] is None
    assert CaptionHit(1, float("nan"), "t", "eng", "a", "/a").to_dict()["score"] is None
    json.dumps(hit.to_dict(), allow_nan=False)


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


WORKERS = textwrap.dedent("""
    import os, sys, time
    from mlatr.commands.serve import bind_socket
    from mlatr.serve import workers

    def target(options, sock, i, ready):
        ready.put(i)
        if i == 1:  # loads, then dies again and again
            time.sleep(0.1)
            os._exit(3)
        while True:
            time.sleep(1)

    if __name__ == "__main__":
        sys.exit(workers.supervise(target, {}, bind_socket("127.0.0.1", 0), 2, lambda: print("serving", flush=True)))
""")


def test_a_worker_that_keeps_dying_does_not_stop_the_healthy_one(tmp_path):
    """Was: with --workers 2, one worker killed three times in 30 s stopped the whole server."""
    script = tmp_path / "supervise.py"
    script.write_text(WORKERS)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(9)
        assert proc.poll() is None, proc.communicate()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "starting it again in 2 s (the other workers keep serving)" in err
    assert "stopping" not in err and "worker 0" not in err


def test_restart_delays_double_up_to_the_cap():
    assert [restart_delay(n) for n in (1, 2, 3, 4, 5)] == [0.0, 0.0, 2.0, 4.0, 8.0]
    assert restart_delay(40) == MAX_BACKOFF


def test_a_file_name_that_is_not_utf8_is_a_bad_row_naming_its_bytes(tmp_path, capsys):
    lib = tmp_path / "lib"
    write_tone(lib / "ok.wav", 0.3)
    write_tone(lib / "x.wav", 0.3)
    os.rename(lib / "x.wav", os.fsencode(lib) + b"/caf\xe9.wav")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--strict")
    assert_user_error(r, "caf\\udce9.wav: path: the file name is not valid UTF-8", "caf\\xe9.wav", "rename")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--skip-bad")
    assert r.code == 0 and "wrote 1 clips" in r.out


def test_a_newline_in_a_file_name_cannot_forge_a_notice_line(tmp_path, capsys):
    """Was: the --skip-bad notice printed the name as it is, so its second line read as a notice of its own."""
    lib = tmp_path / "lib"
    write_tone(lib / "ok.wav", 0.3)
    (lib / "evil\n  mlatr: all clips verified.wav").write_bytes(b"not audio")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--skip-bad")
    assert r.code == 0
    notice = r.err[r.err.index("mlatr: skipped"):].splitlines()
    assert len(notice) == 2 and "evil\\n  mlatr: all clips verified.wav" in notice[1]


def test_a_right_to_left_override_in_ids_is_shown_escaped(served_toy, tmp_path, capsys):
    """Was: index build's list of changed / deleted clips printed ids as they are (U+202E reverses the line)."""
    manifest, ckpt, _ = served_toy
    audio = tmp_path / "a.wav"
    write_tone(audio, 0.5)
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": "evil\u202egnp.exe", "audio": str(audio)},
                                               {"id": "fine", "audio": str(manifest.parent / "audio/clip000.wav")}])
    idx = tmp_path / "lib.idx"
    assert run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", idx,
                   "--no-progress").code == 0
    write_tone(audio, 0.7)  # changed since indexed
    r = run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", idx, "--add", "--no-progress")
    assert r.code == 0, r.err
    assert "evil\\u202egnp.exe" in r.out and "\u202e" not in r.out + r.err
