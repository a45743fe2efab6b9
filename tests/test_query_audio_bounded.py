"""A query sound is decoded by what the query uses: the header bounds its length before
decoding, and only the index's centre window is decoded, whatever the file's length."""

import tracemalloc

import numpy as np
import pytest
import soundfile as sf

from mlatr.audio.bounded import load_query_audio
from mlatr.audio.io import crop_or_pad, load_audio
from mlatr.errors import MlatrError


def silent_flac(path, minutes, rate=16_000):
    with sf.SoundFile(path, "w", samplerate=rate, channels=1, format="FLAC") as f:
        block = np.zeros(rate * 60, np.float32)
        for _ in range(minutes):
            f.write(block)
    return path


def test_sixty_minute_silent_flac_decodes_only_the_window(tmp_path):
    path = silent_flac(tmp_path / "hour.flac", 60)
    assert path.stat().st_size < 2 * 2**20  # small on disk, 230 MB of float32 decoded
    tracemalloc.start()
    wave = load_query_audio(path, 10.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert wave.shape == (160_000,) and wave.dtype == np.float32 and not wave.any()
    assert peak < 16 * 2**20, peak  # a whole-file decode would peak above 230 MB
    with pytest.raises(MlatrError, match="declares 3,600 s .* at most 600 s"):
        load_query_audio(path, 10.0, max_declared_seconds=600)


@pytest.mark.parametrize("seconds,channels", [(3.0, 1), (25.0, 1), (25.0, 2), (10.02, 1)])
def test_same_samples_as_the_whole_file_decode_at_the_model_rate(tmp_path, seconds, channels):
    rng = np.random.default_rng(int(seconds * 100) + channels)
    audio = rng.uniform(-0.5, 0.5, (int(seconds * 16_000), channels)).astype(np.float32)
    path = tmp_path / "q.wav"
    sf.write(path, audio, 16_000, subtype="FLOAT")
    whole = load_audio(path)
    if whole.shape[0] > 160_000:
        whole, _ = crop_or_pad(whole, 160_000, mode="center")
    np.testing.assert_array_equal(load_query_audio(path, 10.0), whole)


def test_resampled_window_matches_the_whole_file_decode(tmp_path):
    rate = 44_100
    t = np.arange(40 * rate) / rate
    audio = (0.5 * np.sin(2 * np.pi * 3.0 * t)).astype(np.float32)  # slow: a one-sample shift stays small
    path = tmp_path / "q.flac"
    sf.write(path, audio, rate)
    whole, _ = crop_or_pad(load_audio(path), 160_000, mode="center")
    got = load_query_audio(path, 10.0)
    assert got.shape == whole.shape
    np.testing.assert_allclose(got, whole, atol=2e-3)


@pytest.mark.parametrize("content", [b"", b"not audio at all", b"RIFF\x00\x00\x00\x00WAVEfmt "])
def test_unreadable_files_are_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(MlatrError, match="bad.wav"):
        load_query_audio(path, 10.0)


def test_nan_samples_are_refused(tmp_path):
    audio = np.zeros(16_000 * 30, np.float32)
    audio[16_000 * 15] = np.nan  # inside the centre window
    sf.write(tmp_path / "nan.wav", audio, 16_000, subtype="FLOAT")
    with pytest.raises(MlatrError, match="NaN"):
        load_query_audio(tmp_path / "nan.wav", 10.0)


def test_server_takes_a_sixty_minute_flac_upload_by_its_window(served_toy, tmp_path):
    pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra: pip install 'mlatr[serve]'")
    from mlatr.serve.app import create_app
    from mlatr.serve.live_index import LiveIndex
    from servetools import running_server, upload

    path = silent_flac(tmp_path / "hour.flac", 60)
    live = LiveIndex(served_toy[2])
    index = live.reload().index
    with running_server(create_app(live)) as base:
        r = upload(base + "/search/audio?k=3", "hour.flac", path.read_bytes())
        assert r.status == 200, r.body
        clips = index.search_audio(path, 3)
        assert [x["id"] for x in r.json()["results"]] == [h.id for h in clips]
