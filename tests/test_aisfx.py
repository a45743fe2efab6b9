"""aiSFX encoder: mlatr's re-implementation against the aisfx 0.1.2 package's own embeddings.

The fixture ``tests/fixtures/aisfx_reference.npz`` holds the package's block embeddings of the clips of
``tests/fixtures/make_aisfx_fixture.py`` (its librosa front end + its CrossNet, see the README there).
Tests that need the checkpoint skip when the aisfx wheel is not installed (``pip install --no-deps
aisfx==0.1.2``).
"""

from __future__ import annotations

import importlib.util
import math
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.models import aisfx as A
from mlatr.models.registry import audio_encoder_names, build_audio_encoder

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = np.load(FIXTURES / "aisfx_reference.npz")


def _fixture_clips():
    spec = importlib.util.spec_from_file_location("make_aisfx_fixture", FIXTURES / "make_aisfx_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make_clips()


CLIPS = _fixture_clips()


def _checkpoint() -> Path:
    try:
        return A.find_aisfx_checkpoint()
    except MlatrError:
        pytest.skip("aisfx checkpoint not installed (pip install --no-deps aisfx==0.1.2)")


@pytest.fixture(scope="module")
def state():
    return A.load_aisfx_state_dict(_checkpoint())


def _encoder(state, sample_rate: int, **kw) -> A.AisfxEncoder:
    enc = A.AisfxEncoder(sample_rate=sample_rate, pretrained=False, **kw)
    enc.cnn.load_state_dict(state)
    return enc.eval()


def test_registered():
    assert "aisfx" in audio_encoder_names()


def test_block_counts_match_the_package_blocking_rule():
    # aisfx preprocessing.blocking: ceil((F - 100) / 50 + 1), minus one for a partial block, at least 1
    frames = [1, 22, 50, 99, 100, 149, 150, 173, 199, 200, 1000]
    expected = []
    for f in frames:
        n = math.ceil((f - 100) / 50 + 1) - (1 if (f - 100) % 50 != 0 else 0)
        expected.append(max(n, 1))
    assert A.block_counts(torch.tensor(frames)).tolist() == expected
    assert expected[:6] == [1, 1, 1, 1, 1, 1] and expected[6:] == [2, 2, 2, 3, 19]


def test_mel_filterbank_rows_are_unit_sum_htk_triangles():
    fb = A.htk_mel_filterbank()
    assert fb.shape == (96, 1025)
    np.testing.assert_allclose(fb.sum(axis=1), 1.0, rtol=1e-5)
    # the first triangle peaks at the second HTK edge: 700 (10^(mel_max / 97 / 2595) - 1) Hz
    mel_max = 2595 * np.log10(1 + 22050 / 700)
    peak_hz = 700 * (10 ** (mel_max / 97 / 2595) - 1)
    assert abs(np.argmax(fb[0]) * 44100 / 2048 - peak_hz) <= 44100 / 2048


def test_spectrogram_equals_the_package_front_end(state):
    enc = _encoder(state, 44100)
    sr, y = CLIPS["chirp_2p5s_44k"]
    with torch.no_grad():
        spec, frames = enc.spectrogram(torch.from_numpy(y)[None], torch.tensor([len(y)]))
    head = REFERENCE["spec_chirp_2p5s_44k_head"]
    assert int(frames[0]) == 1 + len(y) // 1024 == 108
    np.testing.assert_allclose(spec[0, : len(head)].numpy(), head, atol=1e-4)


@pytest.mark.parametrize("name", ["tones_4s_44k", "chirp_2p5s_44k", "clicks_0p5s_44k", "mix_3s_16k"])
def test_block_embeddings_equal_the_package(state, name):
    sr, y = CLIPS[name]
    enc = _encoder(state, sr)
    with torch.no_grad():
        out = enc(torch.from_numpy(y)[None])
    ref = REFERENCE[f"emb_{name}"]
    got = out.frames[0][out.mask[0]].numpy()
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(out.pooled[0].numpy(), ref.mean(axis=0), atol=2e-4, rtol=1e-4)


def test_padded_batch_equals_one_clip_at_a_time(state):
    enc = _encoder(state, 44100)
    names = ["tones_4s_44k", "chirp_2p5s_44k", "clicks_0p5s_44k"]
    ys = [torch.from_numpy(CLIPS[n][1]) for n in names]
    batch = torch.zeros(len(ys), max(len(y) for y in ys))
    for i, y in enumerate(ys):
        batch[i, : len(y)] = y
    batch[1, len(ys[1]):] = 0.9  # garbage past a clip's end must not leak in
    with torch.no_grad():
        out = enc(batch, torch.tensor([len(y) for y in ys]))
    assert out.mask.tolist() == [[True, True], [True, False], [True, False]]
    for i, n in enumerate(names):
        ref = REFERENCE[f"emb_{n}"]
        np.testing.assert_allclose(out.frames[i][out.mask[i]].numpy(), ref, atol=2e-4, rtol=1e-4)
    assert torch.all(out.frames[1, 1] == 0)


def test_short_clips_are_padded_to_one_block(state):
    enc = _encoder(state, 16000)
    wave = torch.sin(torch.arange(3200) * 2 * math.pi * 500 / 16000)[None]  # 0.2 s
    with torch.no_grad():
        out = enc(wave)
        spec, frames = enc.spectrogram(wave, torch.tensor([3200]))
        padded = torch.zeros(1, 100, 96)
        padded[:, : int(frames[0])] = spec[:, : int(frames[0])]
        expected = enc.cnn(padded)
        tiny = enc(torch.full((2, 1), 0.5))  # one sample
    assert out.pooled.shape == (1, 512) and out.mask.tolist() == [[True]]
    torch.testing.assert_close(out.pooled, expected, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(tiny.pooled).all() and tiny.pooled.shape == (2, 512)


def test_resampler_keeps_a_tone():
    kernel, width, orig, new = A.sinc_resample_kernel(16000, 44100)
    assert (orig, new) == (160, 441)
    t16 = torch.arange(16000, dtype=torch.float64) / 16000
    y = A.resample_waveform(torch.sin(2 * math.pi * 1000 * t16)[None], kernel.double(), width, orig, new)[0]
    assert y.shape[0] == 44100
    t44 = torch.arange(44100, dtype=torch.float64) / 44100
    interior = slice(2000, -2000)
    torch.testing.assert_close(y[interior], torch.sin(2 * math.pi * 1000 * t44)[interior], atol=1e-3, rtol=0)
    down, w2, o2, n2 = A.sinc_resample_kernel(44100, 16000)
    back = A.resample_waveform(y[None], down.double(), w2, o2, n2)[0]
    torch.testing.assert_close(back[1000:-1000], torch.sin(2 * math.pi * 1000 * t16)[1000:-1000],
                               atol=2e-3, rtol=0)


def test_missing_checkpoint_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(MlatrError, match=r"pip install --no-deps aisfx==0\.1\.2"):
        build_audio_encoder("aisfx", checkpoint=str(tmp_path / "nope.pth"))
    monkeypatch.setattr(A.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MlatrError, match="no checkpoint found.*aisfx==0.1.2"):
        build_audio_encoder("aisfx")


class _Evil:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/mlatr-aisfx-evil-marker"),))


def test_checkpoint_is_loaded_safely(tmp_path):
    marker = Path("/tmp/mlatr-aisfx-evil-marker")
    marker.unlink(missing_ok=True)
    bad = tmp_path / "evil.pth"
    bad.write_bytes(pickle.dumps(({"embedding_net.x": _Evil()}, {}), protocol=2))
    with pytest.raises(MlatrError, match="not a loadable aisfx checkpoint"):
        A.load_aisfx_state_dict(bad)
    assert not marker.exists()
    other = tmp_path / "other.pth"
    torch.save({"layer.weight": torch.zeros(2)}, other)
    with pytest.raises(MlatrError, match="no 'embedding_net.' weights"):
        A.load_aisfx_state_dict(other)


def test_frozen_and_fine_tuned_modes(state):
    frozen = _encoder(state, 16000)
    frozen.train()
    assert not frozen.cnn.training and not any(p.requires_grad for p in frozen.parameters())
    tuned = _encoder(state, 16000, frozen=False)
    tuned.train()
    assert tuned.cnn.training
    out = tuned(torch.randn(2, 8000, generator=torch.Generator().manual_seed(0)))
    out.pooled.sum().backward()
    assert tuned.cnn.conv_block1.conv1.weight.grad.abs().sum() > 0


def test_built_from_registry_and_config_round_trip(state):
    path = _checkpoint()
    enc = build_audio_encoder("aisfx", checkpoint=str(path))
    cfg = enc.config()
    assert cfg == {"name": "aisfx", "sample_rate": 16000, "checkpoint": str(path), "frozen": True,
                   "pretrained": True, "block_hop": 50}
    again = build_audio_encoder(**cfg)
    wave = torch.from_numpy(CLIPS["mix_3s_16k"][1])[None]
    with torch.no_grad():
        torch.testing.assert_close(enc(wave).pooled, again(wave).pooled)
        pooled = enc(wave).pooled[0].numpy()
    np.testing.assert_allclose(pooled, REFERENCE["emb_mix_3s_16k"].mean(0), atol=2e-4)


def test_the_meta_device_shape_check_stays_cheap():
    """``weights_problem`` builds the model on the meta device before loading it; a constant buffer made there
    (the STFT window, the resampling kernel) runs PyTorch's Python decompositions, which import
    ``torch._dynamo`` and sympy (about a CPU second of every model load). Checked in a fresh process."""
    code = ("import sys\n"
            "from mlatr.inference.stored_model import weights_problem\n"
            "cfg = {'audio_encoder': {'name': 'aisfx', 'sample_rate': 16000, 'pretrained': False},\n"
            "       'text_encoder': {'name': 'small-transformer'}, 'embed_dim': 8}\n"
            "weights_problem(cfg, {})\n"
            "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
