"""The frozen-backbone feature cache (mlatr.frozen_features)."""

import numpy as np
import pytest
import soundfile as sf
import torch

from mlatr.data.manifest import Manifest
from mlatr.frozen_features import AudioFeatureCache, audio_features
from mlatr.models.outputs import EncoderOutput
from toydata import make_toy_manifest


class CountingEncoder(torch.nn.Module):
    """Stands in for frozen aisfx: pooled = [mean, rms] of each waveform; counts clips encoded."""

    def __init__(self):
        super().__init__()
        self.clips = 0

    def forward(self, wave, lens):
        self.clips += wave.shape[0]
        mask = torch.arange(wave.shape[1])[None] < lens[:, None]
        mean = (wave * mask).sum(1) / lens
        rms = ((wave ** 2 * mask).sum(1) / lens).sqrt()
        return EncoderOutput(pooled=torch.stack([mean, rms], 1))


def test_feature_cache_computes_each_clip_once(tmp_path):
    manifest = Manifest.load(make_toy_manifest(tmp_path / "toy", n_train=6, n_val=2, n_test=2))
    enc = CountingEncoder()
    cache = AudioFeatureCache(tmp_path / "cache.npz", "counting")
    feats = audio_features(enc, manifest, cache, max_seconds=5.0, batch_size=4, progress=False)
    assert enc.clips == 10 and feats.shape == (10, 2)
    wave, _ = sf.read(manifest.clips[3].audio_path(manifest.root), dtype="float32")
    assert feats[3, 1] == pytest.approx(float(np.sqrt(np.mean(wave.astype(np.float64) ** 2))), rel=1e-4)
    again = AudioFeatureCache(tmp_path / "cache.npz", "counting")
    enc2 = CountingEncoder()
    assert np.array_equal(audio_features(enc2, manifest, again, 5.0, progress=False), feats) and enc2.clips == 0
    # a changed file and another encoder config are recomputed
    path = manifest.clips[0].audio_path(manifest.root)
    sf.write(path, np.zeros(8000, np.float32), 16000)
    audio_features(enc2, manifest, AudioFeatureCache(tmp_path / "cache.npz", "counting"), 5.0, progress=False)
    assert enc2.clips == 1
    enc3 = CountingEncoder()
    audio_features(enc3, manifest, AudioFeatureCache(tmp_path / "cache.npz", "other"), 5.0, progress=False)
    assert enc3.clips == 10
