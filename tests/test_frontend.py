import math

import numpy as np
import pytest
import scipy.signal
import torch

from mlatr.audio.frontend import LogMel, hz_to_mel, mel_filterbank, mel_to_hz, power_to_db

SR = 16_000


def _triangle_by_hand(n_mels: int, n_fft: int, sr: int, f_max: float) -> np.ndarray:
    """Scalar loops over the HTK formula; no vectorised code shared with the module."""
    mel_max = 2595.0 * math.log10(1.0 + f_max / 700.0)
    edges = [700.0 * (10 ** (mel_max * i / (n_mels + 1) / 2595.0) - 1.0) for i in range(n_mels + 2)]
    fb = np.zeros((n_fft // 2 + 1, n_mels))
    for k in range(n_fft // 2 + 1):
        f = k * sr / n_fft
        for m in range(n_mels):
            lo, c, hi = edges[m], edges[m + 1], edges[m + 2]
            if lo < f <= c:
                fb[k, m] = (f - lo) / (c - lo)
            elif c < f < hi:
                fb[k, m] = (hi - f) / (hi - c)
    return fb


def test_mel_scale_is_htk_and_invertible():
    assert float(hz_to_mel(700.0)) == pytest.approx(2595.0 * math.log10(2.0))
    assert float(hz_to_mel(1000.0)) == pytest.approx(999.99, abs=0.01)  # the HTK anchor: 1 kHz ~ 1000 mel
    np.testing.assert_allclose(mel_to_hz(hz_to_mel([0.0, 440.0, 8000.0])), [0.0, 440.0, 8000.0])


def test_filterbank_matches_a_hand_computed_triangle():
    fb = mel_filterbank(64, 512, SR, 0.0, 8000.0).numpy()
    assert fb.shape == (257, 64)
    np.testing.assert_allclose(fb, _triangle_by_hand(64, 512, SR, 8000.0), atol=1e-6)
    # one value worked out by hand: filter 31 has edges at mel 30, 31, 32 x (2840.023/65)
    step = 2595.0 * math.log10(1.0 + 8000.0 / 700.0) / 65
    lo, c = 700 * (10 ** (31 * step / 2595) - 1), 700 * (10 ** (32 * step / 2595) - 1)
    k = math.ceil(lo / 31.25)  # first bin on the rising edge
    assert fb[k, 31] == pytest.approx((k * 31.25 - lo) / (c - lo), abs=1e-6)
    assert (fb.max(axis=0) > 0.3).all()  # no empty filter at 64 bins / 512-point FFT
    assert fb.max() <= 1.0 and fb.min() >= 0.0


@pytest.mark.parametrize("freq", [250.0, 1000.0, 3000.0, 6500.0])
def test_log_mel_of_a_sine_peaks_at_the_bin_of_its_frequency(freq):
    t = torch.arange(SR) / SR
    logmel, mask = LogMel()(torch.sin(2 * math.pi * freq * t)[None])
    assert logmel.shape == (1, 64, 1 + SR // 160) and mask.all()
    step = hz_to_mel(8000.0) / 65
    centres = mel_to_hz(step * np.arange(1, 65))
    expected = int(np.argmin(np.abs(centres - freq)))
    assert int(logmel[0, :, 5:-5].mean(dim=1).argmax()) == expected


def test_log_mel_matches_an_independent_numpy_stft():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4000).astype(np.float32)
    logmel, _ = LogMel(top_db=None)(torch.from_numpy(x)[None])
    padded = np.pad(x.astype(np.float64), 256)
    window = scipy.signal.get_window("hann", 512)  # periodic Hann
    fb = _triangle_by_hand(64, 512, SR, 8000.0)
    for frame in (0, 7, 24):
        power = np.abs(np.fft.rfft(padded[frame * 160: frame * 160 + 512] * window)) ** 2
        expected = 10 * np.log10(np.maximum(power @ fb, 1e-10))
        np.testing.assert_allclose(logmel[0, :, frame].numpy(), expected, atol=2e-3)


def test_power_to_db_clamps_top_db_per_example_over_valid_frames():
    power = torch.tensor([[[1.0, 1e-3, 1e-20]], [[1e-2, 1e-4, 1e4]]])  # [B=2, M=1, F=3]
    np.testing.assert_allclose(power_to_db(power, top_db=None)[0, 0].numpy(), [0.0, -30.0, -100.0],
                               atol=1e-4)  # 1e-20 hits amin = 1e-10
    db = power_to_db(power, top_db=20.0)
    np.testing.assert_allclose(db[0, 0].numpy(), [0.0, -20.0, -20.0], atol=1e-4)
    np.testing.assert_allclose(db[1, 0].numpy(), [20.0, 20.0, 40.0], atol=1e-4)
    mask = torch.tensor([[True, True, True], [True, True, False]])  # example 1: frame 2 is padding
    db = power_to_db(power, mask, top_db=15.0)
    np.testing.assert_allclose(db[1, 0].numpy(), [-20.0, -35.0, -35.0], atol=1e-4)


def test_frame_mask_and_padding_do_not_change_valid_frames():
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal(5000).astype(np.float32))
    front = LogMel()
    alone, mask_alone = front(x[None], torch.tensor([5000]))
    batch = torch.zeros(2, 9000)
    batch[0, :5000] = x
    batch[1] = torch.from_numpy(rng.standard_normal(9000).astype(np.float32))
    both, mask = front(batch, torch.tensor([5000, 9000]))
    assert mask.shape == (2, 1 + 9000 // 160)
    assert mask[0].sum() == 1 + 5000 // 160 == mask_alone.sum() and mask[1].all()
    torch.testing.assert_close(both[0, :, : 1 + 5000 // 160], alone[0], rtol=0, atol=1e-4)


def test_front_end_follows_the_module_dtype_and_buffers():
    front = LogMel()
    names = {n for n, _ in front.named_buffers()}
    assert {"window", "filterbank"} <= names and not front.state_dict()  # rebuilt from config, not saved
    out, _ = front(torch.zeros(2, 1600, dtype=torch.float64))
    assert out.dtype == torch.float32 and out.device == front.filterbank.device


def test_front_end_stays_float32_under_autocast():
    x = torch.randn(2, 8000)
    front = LogMel()
    plain, _ = front(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed, _ = front(x)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, plain, rtol=0, atol=0)
