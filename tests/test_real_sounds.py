"""Real-sound demo pieces: hash splits, keyword relevance, the multilingual query metrics, feature cache."""

import hashlib

import numpy as np
import pytest
import torch

from mlatr.data.manifest import Clip, Manifest
from mlatr.experiments.real_sounds import (
    AudioFeatureCache,
    assign_hash_splits,
    audio_features,
    keyword_relevance,
    multilingual_query_eval,
    split_of,
)
from mlatr.models.outputs import EncoderOutput
from toydata import make_toy_manifest


def test_hash_splits_are_stable_and_follow_the_fractions():
    ids = [f"lib/sound-{i}" for i in range(2000)]
    u = int.from_bytes(hashlib.sha256(b"lib/sound-7").digest()[:8], "big") / 2**64
    assert split_of("lib/sound-7") == ("test" if u < 0.25 else "val" if u < 0.35 else "train")
    m = Manifest(clips=[Clip(id=i, audio=f"{i}.wav", captions={"eng": ["x"]}) for i in ids])
    counts = assign_hash_splits(m)
    assert counts["test"] + counts["val"] + counts["train"] == 2000
    assert abs(counts["test"] / 2000 - 0.25) < 0.03 and abs(counts["val"] / 2000 - 0.10) < 0.03
    # a clip's split does not depend on the others
    small = Manifest(clips=[Clip(id=i, audio="a.wav", captions={"eng": ["x"]}) for i in ids[::7]])
    assign_hash_splits(small)
    assert [c.split for c in small.clips] == [c.split for c in m.clips[::7]]


def test_keyword_relevance_matches_whole_words():
    queries = [{"keywords": ["dog", "bark"]}, {"keywords": ["door"]}]
    caps = ["dog bark", "doors open", "hot dog stand", "barking"]
    assert keyword_relevance(queries, caps).tolist() == [[True, False, True, False], [False, False, False, False]]


def test_multilingual_query_eval_by_hand():
    # 3 clips on the unit circle's axes; 2 groups x 2 languages
    audio = np.eye(3, dtype=np.float32)
    q = np.array([[1, 0, 0], [0.6, 0.8, 0],    # group 0: eng, fra
                  [0, 0, 1], [0.8, 0, 0.6]],   # group 1: eng, fra
                 dtype=np.float32)
    relevant = np.array([[False, True, False], [False, False, True]])
    res = multilingual_query_eval(q, ["eng", "fra", "eng", "fra"], np.array([0, 0, 1, 1]), audio, relevant,
                                  ["eng", "fra"])
    # ranks: g0 eng -> clip1 scores 0 behind clip0 (1) and tied with clip2 (0, non-relevant) -> 3;
    # g0 fra -> clip1 0.8 first -> 1; g1 eng -> clip2 first -> 1; g1 fra -> clip2 0.6 behind clip0 0.8 -> 2
    assert res["t2a"]["eng"]["R1"] == 50.0 and res["t2a"]["fra"]["R1"] == 50.0
    assert res["t2a"]["eng"]["medR"] == 2.0 and res["t2a"]["avg"]["R5"] == 100.0
    mrv = np.mean([(3 - 2) ** 2, (1 - 2) ** 2, (1 - 1.5) ** 2, (2 - 1.5) ** 2])
    assert res["consistency"]["mrv"] == pytest.approx(mrv)
    dis = np.mean([np.linalg.norm(q[0] - q[1]), np.linalg.norm(q[2] - q[3])])
    gap = np.linalg.norm((q[0] + q[2]) / 2 - (q[1] + q[3]) / 2)
    assert res["consistency"]["dis"]["fra"] == pytest.approx(dis, rel=1e-6)
    assert res["consistency"]["gap"]["fra"] == pytest.approx(gap, rel=1e-6)
    # a group without relevant clip is left out
    res = multilingual_query_eval(q, ["eng", "fra", "eng", "fra"], np.array([0, 0, 1, 1]), audio,
                                  np.array([[False, True, False], [False, False, False]]), ["eng", "fra"])
    assert res["n_queries"] == 1 and res["t2a"]["eng"]["R1"] == 0.0 and res["t2a"]["fra"]["R1"] == 100.0


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
    import soundfile as sf
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
