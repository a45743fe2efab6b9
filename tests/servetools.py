"""Helpers of the server tests: a toy index, a uvicorn server in a thread on 127.0.0.1, a tiny HTTP client."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def build_toy_index(manifest_path: Path, checkpoint: Path, out: Path, first: int | None = None,
                    add: bool = False, langs: str = "eng,fra") -> Path:
    """``mlatr index build`` (``--add`` with ``add``) over the manifest's first ``first`` clips."""
    from mlatr.cli import main
    from mlatr.data.manifest import Manifest

    if first is not None:
        manifest = Manifest.load(manifest_path)
        sub = Manifest(clips=manifest.clips[:first], root=manifest.root)
        manifest_path = manifest_path.with_name(f"first{first}.jsonl")
        sub.save(manifest_path)
    argv = ["index", "build", "--model", str(checkpoint), "--manifest", str(manifest_path), "-o", str(out),
            "--caption-langs", langs, "--no-progress"]
    assert main(argv + (["--add"] if add else [])) == 0
    return out


@contextmanager
def running_server(app, timeout: float = 30.0, **config):
    """Serve ``app`` on 127.0.0.1 (a free port) in a thread; yields the base URL; always shuts it down.
    ``config``: more ``uvicorn.Config`` options."""
    import uvicorn

    from mlatr.commands.serve import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        """The body as strict JSON (NaN / Infinity refused)."""
        def refuse(name):
            raise ValueError(f"not strict JSON: {name}")

        return json.loads(self.body, parse_constant=refuse)


def request(url: str, method: str = "GET", data: bytes | None = None, headers: dict | None = None,
            timeout: float = 30.0) -> Reply:
    """One HTTP request; an error status is returned, not raised."""
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as err:
        return Reply(err.code, {k.lower(): v for k, v in err.headers.items()}, err.read())


def multipart(field: str, filename: str, content: bytes, content_type: str = "application/octet-stream"):
    """``(body, headers)`` of a multipart/form-data upload of one file."""
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: {content_type}\r\n\r\n").encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def upload(url: str, filename: str, content: bytes, field: str = "file") -> Reply:
    body, headers = multipart(field, filename, content)
    return request(url, "POST", body, headers)


def untrained_checkpoint(path: Path, text_encoder) -> Path:
    """A checkpoint of a DualEncoder with a tiny small-cnn audio encoder and ``text_encoder`` (no training:
    enough to index, serve and check what the server does with the encoder's languages)."""
    import torch

    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder

    torch.manual_seed(0)
    audio = build_audio_encoder("small-cnn", channels=[8, 16], dim=32, num_heads=2, ff_dim=64)
    model = DualEncoder(audio, text_encoder, embed_dim=16)
    save_checkpoint(path, {"model_config": model.config(), "model": model.state_dict(), "train_config": {}})
    return path
