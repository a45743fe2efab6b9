import numpy as np
import pytest
import soundfile as sf
import torch

from mlatr.audio.io import (
    SAMPLE_RATE,
    collate_waveforms,
    crop_or_pad,
    load_audio,
    load_audio_centre,
    resample,
    to_mono,
)
from mlatr.errors import MlatrError


def _peak_hz(x: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / sr)[np.argmax(spectrum)])


def test_stereo_file_is_mixed_to_the_channel_mean(tmp_path):
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    left = 0.5 * np.sin(2 * np.pi * 440 * t)
    right = np.full_like(t, 0.25)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), SAMPLE_RATE, subtype="FLOAT")
    mono = load_audio(path)
    assert mono.dtype == np.float32 and mono.shape == (SAMPLE_RATE,)
    np.testing.assert_allclose(mono, (left + right) / 2, atol=1e-6)
    np.testing.assert_allclose(to_mono(np.array([[1.0, 3.0], [-2.0, 0.0]])), [2.0, -1.0])


def test_resampling_a_44k1_sine_keeps_its_frequency_and_duration(tmp_path):
    sr = 44_100
    t = np.arange(2 * sr) / sr
    path = tmp_path / "tone.flac"
    sf.write(path, 0.5 * np.sin(2 * np.pi * 1234.0 * t), sr)
    mono = load_audio(path)
    assert abs(len(mono) - 2 * SAMPLE_RATE) <= 1
    assert abs(_peak_hz(mono, SAMPLE_RATE) - 1234.0) < 1.0  # bin width 0.5 Hz
    assert abs(np.sqrt(np.mean(mono[1000:-1000] ** 2)) - 0.5 / np.sqrt(2)) < 1e-3  # level kept
    # same frequency for a raw array through resample() directly
    assert abs(_peak_hz(resample(np.sin(2 * np.pi * 3000.0 * t), sr, 16_000), 16_000) - 3000.0) < 1.0


@pytest.mark.parametrize("fmt,subtype", [("OGG", "VORBIS"), ("MP3", None)])
def test_compressed_formats_load(tmp_path, fmt, subtype):
    sr = 22_050
    t = np.arange(sr) / sr
    path = tmp_path / f"tone.{fmt.lower()}"
    sf.write(path, 0.3 * np.sin(2 * np.pi * 800 * t), sr, format=fmt, subtype=subtype)
    mono = load_audio(path)
    assert abs(len(mono) - SAMPLE_RATE) < 0.05 * SAMPLE_RATE  # mp3 adds encoder padding
    assert abs(_peak_hz(mono, SAMPLE_RATE) - 800.0) < 2.0


@pytest.mark.parametrize("content", [b"", b"RIFF\x00\x00this is not audio at all" * 10])
def test_unreadable_file_raises_an_error_naming_it(tmp_path, content):
    path = tmp_path / "broken_clip.wav"
    path.write_bytes(content)
    with pytest.raises(MlatrError, match="broken_clip.wav"):
        load_audio(path)


def test_empty_and_missing_audio_raise_errors_naming_the_file(tmp_path):
    path = tmp_path / "silent_nothing.wav"
    sf.write(path, np.zeros((0, 1), dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(MlatrError, match="silent_nothing.wav.*empty"):
        load_audio(path)
    with pytest.raises(MlatrError, match="nowhere.wav.*not found"):
        load_audio(tmp_path / "nowhere.wav")


def test_random_crop_is_reproducible_from_the_generator_and_contiguous():
    audio = np.arange(1000, dtype=np.float32)
    for make in (lambda s: np.random.default_rng(s), lambda s: torch.Generator().manual_seed(s)):
        a = [crop_or_pad(audio, 100, "random", make(7))[0] for _ in range(2)]
        np.testing.assert_array_equal(a[0], a[1])
        start = int(a[0][0])
        np.testing.assert_array_equal(a[0], audio[start:start + 100])
        g = make(0)
        starts = {int(crop_or_pad(audio, 100, "random", g)[0][0]) for _ in range(20)}
        assert len(starts) > 10 and min(starts) >= 0 and max(starts) <= 900
    with pytest.raises(ValueError, match="generator"):
        crop_or_pad(audio, 100, "random")


def test_eval_crop_is_centred_and_padding_keeps_the_true_length():
    audio = np.arange(1001, dtype=np.float32)
    seg, n = crop_or_pad(audio, 100)  # default: centre
    assert n == 100 and seg[0] == 450.0 and seg[-1] == 549.0
    seg, n = crop_or_pad(audio, 100, "start")
    assert seg[0] == 0.0
    seg, n = crop_or_pad(audio[:30], 100, "random", np.random.default_rng(0))
    assert n == 30 and seg.shape == (100,)
    np.testing.assert_array_equal(seg[:30], audio[:30])
    assert not seg[30:].any()


def test_collation_pads_and_reports_lengths():
    batch, lengths = collate_waveforms([np.ones(3), np.ones(5) * 2])
    assert batch.shape == (2, 5) and lengths.tolist() == [3, 5]
    assert batch[0].tolist() == [1, 1, 1, 0, 0]
    seg, n = crop_or_pad(np.ones(4), 6)
    batch, lengths = collate_waveforms([seg, np.ones(6)], [n, 6])
    assert lengths.tolist() == [4, 6]
    with pytest.raises(ValueError):
        collate_waveforms([np.ones(3)], [4])


@pytest.mark.parametrize("fmt,rate,channels", [("WAV", 48000, 2), ("FLAC", 44100, 1), ("OGG", 22050, 2),
                                               ("WAV", 16000, 1)])
def test_the_centre_of_a_long_file_is_read_alone_and_equals_the_whole_decode(tmp_path, fmt, rate, channels):
    rng = np.random.default_rng(rate)
    t = np.arange(int(rate * 9.3)) / rate
    data = np.stack([0.3 * np.sin(2 * np.pi * (300 + 200 * c) * t * (1 + t / 20)) + 0.05 * rng.standard_normal(t.size)
                     for c in range(channels)], axis=1).astype(np.float32)
    path = tmp_path / f"long.{fmt.lower()}"
    sf.write(path, data, rate, format=fmt)
    whole = load_audio(path, 16000)
    count = 32000  # 2 s of 9.3: read alone
    part, length = load_audio_centre(path, 16000, count)
    start = (whole.shape[0] - count) // 2
    assert length == whole.shape[0] and part.shape == (count,)
    np.testing.assert_allclose(part, whole[start:start + count], atol=2e-6)
    short, n = load_audio_centre(path, 16000, 10 * 16000)  # longer than the file: all of it
    assert n == whole.shape[0] and np.array_equal(short, whole)


def test_only_the_centre_is_decoded_and_a_truncated_header_is_refused(tmp_path):
    rate = 16000
    data = np.full(rate * 10, 0.1, np.float32)
    data[: rate] = np.nan  # damage the part the centre crop leaves out
    path = tmp_path / "nan-head.wav"
    sf.write(path, data, rate, subtype="FLOAT")
    with pytest.raises(MlatrError, match="NaN"):
        load_audio(path, rate)
    part, length = load_audio_centre(path, rate, 2 * rate)
    assert length == 10 * rate and np.allclose(part, 0.1)
    cut = tmp_path / "cut.wav"
    sf.write(cut, np.zeros(rate * 10, np.float32), rate, subtype="PCM_16")
    raw = cut.read_bytes()
    cut.write_bytes(raw[: len(raw) // 2])  # the header still declares 10 s
    with pytest.raises(MlatrError, match="truncated"):
        load_audio_centre(cut, rate, 2 * rate)
