"""aiSFX's CNN run by an optimised CPU runtime gives torch's vectors (issue 48 item 2).

ONNX Runtime and OpenVINO (``pip install 'mlatr[fast]'``) run the CNN exported once to ONNX into the cache
folder; fp32 must equal torch within cosine 0.9999 on the clips of ``audio_path_record`` (16 / 48 kHz, mono and
stereo, WAV / FLAC / OGG / MP3, windowed), in this process and in worker processes; int8 and bf16 are opt-in.
Without the packages a runtime asked for is a clear error and ``auto`` keeps torch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from audio_path_record import aisfx_model, make_clips, toy_model
from clitools import assert_user_error, run_cli
from mlatr.audio.io import load_audio
from mlatr.errors import MlatrError
from mlatr.inference import load_model
from mlatr.inference import runtime as runtime_module

pytestmark = pytest.mark.skipif(importlib.util.find_spec("aisfx") is None, reason="aisfx wheel not installed")
INSTALLED = [r for r in ("onnxruntime", "openvino") if importlib.util.find_spec(r) is not None]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("runtime")
    clips = [str(p) for p in make_clips(root / "clips")]
    return root, clips, aisfx_model(root / "aisfx.pt")


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("MLATR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "runtime-cache"))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("runtime", INSTALLED)
def test_fp32_runtime_gives_torch_vectors_in_one_and_two_processes(runtime, setup):
    root, clips, ckpt = setup
    model = load_model(ckpt)
    torch_vectors = model.embed_audio(clips, window_seconds=1.0, batch_size=3)
    choice = model.use_runtime(runtime, "fp32")
    assert choice.name == f"{runtime}/fp32" and model.audio_runtime() == f"{runtime}/fp32"
    assert choice.cosine >= 0.9999
    one = model.embed_audio(clips, window_seconds=1.0, batch_size=3)
    two = model.embed_audio(clips, window_seconds=1.0, batch_size=3, workers=2)
    assert _cosines(one, torch_vectors).min() >= 0.9999
    assert _cosines(two, torch_vectors).min() >= 0.9999
    assert _cosines(one, two).min() >= 0.99999  # the same runtime in a worker: the same numbers
    model.use_runtime("torch")
    assert _cosines(model.embed_audio(clips, window_seconds=1.0, batch_size=3), torch_vectors).min() > 0.999999


@pytest.mark.skipif(not INSTALLED, reason="no optimised runtime installed (pip install 'mlatr[fast]')")
def test_the_export_is_made_once_and_int8_is_opt_in(setup):
    root, clips, ckpt = setup
    model = load_model(ckpt)
    first = model.use_runtime(INSTALLED[0], "fp32")
    onnx = Path(first.folder) / "model.onnx"
    made = onnx.stat().st_mtime_ns
    assert model.use_runtime("auto").runtime in INSTALLED and onnx.stat().st_mtime_ns == made
    torch_vectors = load_model(ckpt).embed_audio(clips)
    int8 = model.use_runtime(INSTALLED[0], "int8", [load_audio(p) for p in clips[:4]])
    assert int8.name == f"{INSTALLED[0]}/int8" and runtime_module.MIN_COSINE["int8"] <= int8.cosine < 0.99999
    cos = _cosines(model.embed_audio(clips), torch_vectors)
    assert 0.99 < cos.min() < 0.99999  # close, not equal: quantised


def test_a_runtime_not_installed_is_named_and_auto_keeps_torch(setup, monkeypatch):
    root, clips, ckpt = setup
    monkeypatch.setattr(runtime_module, "installed", lambda r: r == "torch")
    model = load_model(ckpt)
    with pytest.raises(MlatrError, match=r"pip install 'mlatr\[fast\]'"):
        model.use_runtime("openvino")
    assert model.use_runtime("auto").name == "torch"
    with pytest.raises(MlatrError, match="needs an optimised runtime"):
        model.use_runtime("auto", "int8")
    with pytest.raises(MlatrError, match="--precision must be one of"):
        model.use_runtime("torch", "fp8")


def test_an_encoder_without_a_runtime_part_keeps_torch(tmp_path):
    model = load_model(toy_model(tmp_path / "toy.pt"))
    assert model.use_runtime("auto").name == "torch"
    if INSTALLED:
        with pytest.raises(MlatrError, match="no part an optimised runtime runs"):
            model.use_runtime(INSTALLED[0])


@pytest.mark.skipif(not INSTALLED, reason="no optimised runtime installed (pip install 'mlatr[fast]')")
def test_cli_runtimes_give_the_same_vectors(setup, capsys):
    root, clips, ckpt = setup
    out = {}
    for runtime in ["torch", *INSTALLED]:
        r = run_cli(capsys, "embed", *clips, "--model", ckpt, "-o", root / f"{runtime}.npz", "--runtime", runtime,
                    "--no-progress", "--workers", "2")
        assert r.code == 0, r.err
        with np.load(root / f"{runtime}.npz") as z:
            out[runtime] = z["embeddings"]
    for runtime in INSTALLED:
        assert _cosines(out[runtime], out["torch"]).min() >= 0.9999
    assert_user_error(run_cli(capsys, "embed", *clips, "--model", ckpt, "-o", root / "x.npz", "--runtime", "tvm"),
                      "--runtime must be one of")
