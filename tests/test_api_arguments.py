"""Hostile round 3, the Python API's input contract (:mod:`mlatr.api_args`): every public function checks its
arguments where they enter and raises a ValueError / TypeError subclass of MlatrError naming the argument;
arrays follow one documented rule (mono, [frames, channels] averaged, integer PCM scaled as files are read,
sample_rate required); a non-finite embedding is an error naming the clip."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

import mlatr
from mlatr import model_registry
from mlatr.api_args import ArgumentError, ArgumentTypeError
from mlatr.errors import MlatrError


@pytest.fixture(scope="module")
def model(served_toy):
    return mlatr.load(served_toy[1], device="cpu")


def _tone(seconds=0.5, sr=16000, f0=440.0):
    t = np.arange(int(sr * seconds)) / sr
    return (0.3 * np.sin(2 * np.pi * f0 * t)).astype(np.float32)


def _raises(kind, name, call, *args, **kwargs):
    with pytest.raises(kind, match=f"^{name}") as info:
        call(*args, **kwargs)
    assert isinstance(info.value, MlatrError)
    return info.value


@pytest.mark.parametrize("kwargs, kind, name", [
    ({"batch_size": -1}, ArgumentError, "batch_size"), ({"batch_size": 0}, ArgumentError, "batch_size"),
    ({"batch_size": 2.5}, ArgumentTypeError, "batch_size"), ({"batch_size": True}, ArgumentTypeError, "batch_size"),
    ({"max_seconds": -1.0}, ArgumentError, "max_seconds"),
    ({"max_seconds": float("nan")}, ArgumentError, "max_seconds"),
    ({"window_seconds": "10"}, ArgumentTypeError, "window_seconds"), ({"workers": -2}, ArgumentError, "workers"),
])
def test_embed_audio_numbers_are_checked(model, served_toy, kwargs, kind, name):
    """Was: batch_size=-1 returned a (0, 0) array."""
    files = [str(served_toy[0].parent / "audio" / "clip000.wav")]
    _raises(kind, name, model.embed_audio, files, **kwargs)


def test_a_stereo_array_is_one_clip_averaged_to_mono(model):
    """Was: a (frames, 2) array from soundfile.read became `frames` clips of 2 samples (2,000 frames: 108 s)."""
    left, right = _tone(f0=300.0), _tone(f0=900.0)
    stereo = np.stack([left, right], axis=1)  # [frames, 2], soundfile's layout
    emb = model.embed_audio(stereo, sample_rate=16000)
    assert emb.shape == (1, model.embed_dim)
    np.testing.assert_allclose(emb, model.embed_audio([(left + right) / 2], sample_rate=16000), atol=1e-6)
    assert model.embed_audio([stereo, left], sample_rate=16000).shape == (2, model.embed_dim)
    err = _raises(ArgumentError, r"audio\[0\]", model.embed_audio, stereo.T, sample_rate=16000)
    assert "transpose" in str(err)


def test_integer_pcm_is_scaled_as_the_file_reader_scales_it(model, tmp_path):
    """Was: int16 samples were taken as they are (32767 for full scale)."""
    path = tmp_path / "tone.wav"
    sf.write(path, _tone(), 16000, subtype="PCM_16")
    pcm, sr = sf.read(path, dtype="int16")
    by_file = model.embed_audio([str(path)])
    np.testing.assert_allclose(model.embed_audio(pcm, sample_rate=sr), by_file, atol=1e-6)
    pcm32, _ = sf.read(path, dtype="int32")
    np.testing.assert_allclose(model.embed_audio(pcm32, sample_rate=sr), by_file, atol=1e-6)
    u8 = (np.round(_tone() * 127) + 128).astype(np.uint8)
    np.testing.assert_allclose(model.embed_audio(u8, sample_rate=sr),
                               model.embed_audio((u8.astype(np.float32) - 128) / 128, sample_rate=sr), atol=1e-6)
    _raises(ArgumentTypeError, r"audio\[0\]", model.embed_audio, np.zeros(100, np.int64), sample_rate=sr)
    _raises(ArgumentTypeError, r"audio\[0\]", model.embed_audio, np.zeros(100, bool), sample_rate=sr)


def test_an_array_needs_its_sample_rate(model):
    """Was: an array without sample_rate was read as 16 kHz."""
    err = _raises(ArgumentError, "sample_rate", model.embed_audio, [_tone()])
    assert "required" in str(err)
    _raises(ArgumentError, "sample_rate", model.embed_audio, [_tone()], sample_rate=0)


def test_a_loud_waveform_giving_nan_is_an_error_naming_the_clip(model):
    """Was: a loud but finite waveform gave NaN embeddings, silently."""
    loud = np.full(8000, 3e38, np.float32)
    with pytest.raises(MlatrError, match=r"audio\[1\] \(a waveform whose samples reach 3e\+38\): the model gave a "
                                         r"non-finite embedding"):
        model.embed_audio([_tone(), loud], sample_rate=16000)


@pytest.mark.parametrize("texts, kind", [
    (None, ArgumentTypeError), (3, ArgumentTypeError), (b"a dog", ArgumentTypeError), ([b"a dog"], ArgumentTypeError),
    (["a dog", None], ArgumentTypeError), (["a \ud800 dog"], ArgumentError), ([""], ArgumentError),
    ({"a": 1}, ArgumentTypeError),
])
def test_embed_text_refuses_what_is_no_text(model, texts, kind):
    _raises(kind, "texts", model.embed_text, texts, "eng")


@pytest.mark.parametrize("lang, kind", [(3, ArgumentTypeError), (["eng", 3], ArgumentTypeError),
                                        ("klingon", MlatrError), (b"eng", ArgumentTypeError)])
def test_a_language_that_is_no_code_is_refused(model, lang, kind):
    _raises(kind, "lang", model.embed_text, ["a dog", "un chien"], lang)


def test_a_bogus_device_is_refused_naming_it(served_toy, tmp_path, monkeypatch):
    _raises(ArgumentError, "device", mlatr.load, served_toy[1], device="bogus")
    _raises(ArgumentTypeError, "device", mlatr.load, served_toy[1], device=3)
    _raises(ArgumentTypeError, "path", mlatr.load, 3)
    monkeypatch.delenv("MLATR_MODEL", raising=False)
    monkeypatch.setattr(model_registry, "SHIPPED_MODEL", tmp_path / "no-shipped-model")
    monkeypatch.chdir(tmp_path)  # no mlatr.toml here or above
    with pytest.raises(MlatrError, match=r"no model given.*\$MLATR_MODEL"):
        mlatr.load(None)


def test_similarity_checks_shapes_and_values(model):
    a = model.embed_text(["a dog"], "eng")
    assert model.similarity(a[0], a).shape == (1, 1)  # one vector is one row
    _raises(ArgumentError, "b", model.similarity, a, np.ones((2, model.embed_dim + 1), np.float32))
    _raises(ArgumentError, "a", model.similarity, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    _raises(ArgumentError, "a", model.similarity, np.full((1, model.embed_dim), np.nan), a)
    _raises(ArgumentTypeError, "b", model.similarity, a, [["x"] * model.embed_dim])


@pytest.mark.parametrize("labels, kind", [(None, ArgumentTypeError), ([None], ArgumentTypeError),
                                          ([3, "dog"], ArgumentTypeError), ([], ArgumentError), ("", ArgumentError)])
def test_classify_refuses_labels_that_are_no_text(model, served_toy, labels, kind):
    files = [str(served_toy[0].parent / "audio" / "clip000.wav")]
    _raises(kind, "labels", model.classify, files, labels)


def test_index_search_and_build_and_evaluate_check_their_arguments(model, served_toy, tmp_path):
    manifest, ckpt, path = served_toy
    index = mlatr.Index.load(path)
    _raises(ArgumentTypeError, "query", index.search_text, None)
    _raises(ArgumentTypeError, "lang", index.search_text, "a tone", 3)
    _raises(ArgumentError, "k", index.search_text, "a tone", "eng", k=0)
    _raises(ArgumentTypeError, "k", index.search_text, "a tone", "eng", k="5")
    _raises(ArgumentError, "min_relevance", index.search_text, "a tone", "eng", min_relevance=1.5)
    _raises(ArgumentTypeError, "min_relevance", index.search_text, "a tone", "eng", min_relevance="0.5")
    _raises(ArgumentTypeError, "min_relevance", index.search_audio, index.paths[0], min_relevance=True)
    _raises(ArgumentTypeError, "path", mlatr.Index.load, 3)
    _raises(ArgumentTypeError, "model", mlatr.Index.load, path, model="model.pt")
    _raises(ArgumentError, "batch_size", mlatr.Index.build, model, manifest.parent / "audio", batch_size=0)
    _raises(ArgumentTypeError, "model", mlatr.Index.build, str(ckpt), manifest.parent / "audio")
    _raises(ArgumentTypeError, "batch_size", mlatr.evaluate, model, manifest, batch_size="64")
    _raises(ArgumentTypeError, "split", mlatr.evaluate, model, manifest, split=None)
