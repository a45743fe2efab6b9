"""Augmented views of the frozen features (mlatr.lab.augmented_views, issue 35): each transform equals the same
transform computed independently (numpy, from the front end's formula), the mix partner never crosses a library
or a split, the cached view resumes, and the heads' training items hold every view."""

import hashlib

import numpy as np
import pytest
import soundfile as sf
import torch

from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError
from mlatr.frozen_features import AudioFeatureCache
from mlatr.frozen_prefix import PrefixCache, prefix_features
from mlatr.lab.augmented_views import (
    GAIN_DB,
    MIX_DB,
    Augmentation,
    augment_spectrogram,
    augmented_view,
    join_blocks,
    joined_captions,
    partners,
    split_blocks,
)
from mlatr.lab.experiments.real_heads import RealSounds, training_items
from mlatr.models.aisfx import SPEC_MAX, AisfxEncoder, upper_blocks
from test_unseen_library import make_data


def _u(aug_name: str, clip_id: str, what: str) -> float:
    return int.from_bytes(hashlib.sha256(f"{aug_name}:{clip_id}:{what}".encode()).digest()[:8], "big") / 2 ** 64


def test_each_transform_equals_the_front_ends_formula_applied_by_hand():
    rng = np.random.default_rng(0)
    spec = rng.uniform(0, 0.8, (150, 96))
    spec[120:] = 0.0  # the silence past the clip's end
    other = rng.uniform(0, 0.8, (100, 96))
    aug = Augmentation(("gain", "shift", "mix"), view=1)
    got = augment_spectrogram(torch.tensor(spec, dtype=torch.float32), torch.tensor(other, dtype=torch.float32),
                              aug, "lib/a").numpy()
    power = (10.0 ** (spec.astype(np.float32).astype(np.float64) * SPEC_MAX) - 1) / 1e4
    power = np.roll(power, 1 + int(_u("gain+shift+mix-1", "lib/a", "shift") * 149), axis=0)
    mix_db = MIX_DB[0] + (MIX_DB[1] - MIX_DB[0]) * _u("gain+shift+mix-1", "lib/a", "mix")
    partner = np.zeros_like(power)
    partner[:100] = (10.0 ** (other.astype(np.float32).astype(np.float64) * SPEC_MAX) - 1) / 1e4
    gain_db = GAIN_DB[0] + (GAIN_DB[1] - GAIN_DB[0]) * _u("gain+shift+mix-1", "lib/a", "gain")
    expected = np.log10(1e4 * (power + partner * 10 ** (mix_db / 10)) * 10 ** (gain_db / 10) + 1) / SPEC_MAX
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert -12 <= gain_db <= 0 and not np.allclose(got, spec)
    # gain alone lowers every bin (at most 0 dB); silence stays silence
    quiet = augment_spectrogram(torch.tensor(spec, dtype=torch.float32), None, Augmentation(("gain",)), "x").numpy()
    assert (quiet <= spec + 1e-6).all() and (quiet[120:] == 0).all()


def test_blocks_join_and_split_back():
    spec = torch.rand(200, 96)
    blocks = spec.unfold(0, 100, 50)[:3].transpose(1, 2)[:, None]  # 3 blocks of 100 frames, hop 50
    joined = join_blocks(blocks, 50)
    assert torch.equal(joined, spec[:200]) and torch.equal(split_blocks(joined, 3, 50), blocks)


def test_augmentation_kinds_are_checked():
    assert Augmentation.parse("mix, gain").kinds == ("gain", "mix")
    for bad in ("", "gain,gain", "reverb"):
        with pytest.raises(MlatrError, match="kinds must be"):
            Augmentation.parse(bad)


def _manifest(folder):
    rng = np.random.default_rng(1)
    clips = []
    for i, (lib, split, seconds) in enumerate([("a", "train", 0.7), ("a", "train", 3.5), ("a", "test", 1.0),
                                               ("b", "train", 0.9), ("b", "train", 1.2), ("c", "train", 0.5)]):
        t = np.arange(int(seconds * 16000)) / 16000
        wave = 0.3 * np.sin(2 * np.pi * (300 + 100 * i) * t) + 0.05 * rng.standard_normal(t.shape)
        (folder / lib).mkdir(exist_ok=True)
        sf.write(folder / lib / f"c{i}.wav", wave.astype(np.float32), 16000)
        clips.append(Clip(id=f"{lib}/c{i}", audio=f"{lib}/c{i}.wav", split=split,
                          captions={"eng": [f"sound {i}", f"other {i}"], "spa": [f"sonido {i}"]}))
    return Manifest(clips=clips, root=folder)


def test_a_view_is_the_cnn_over_the_transformed_blocks_and_resumes(tmp_path):
    manifest = _manifest(tmp_path)
    torch.manual_seed(0)
    enc = AisfxEncoder(pretrained=False, frozen=True).eval()
    blocks = prefix_features(enc, manifest, PrefixCache(tmp_path / "prefix-0", "k", 0), 10.0, progress=False)
    aug = Augmentation(("shift", "mix"))
    mates = partners(manifest, aug)
    # a partner from the same library and split only: the lone test clip of "a" and the lone clip of "c" have none
    assert mates[0] == 1 and mates[1] == 0 and mates[2] is None and mates[3] == 4 and mates[4] == 3
    assert mates[5] is None
    view = augmented_view(enc, manifest, blocks, aug, AudioFeatureCache(tmp_path / "v.npz", "view"), progress=False)
    for i in (1, 2):  # a 3-block clip mixed with a 1-block one; a clip with no partner (shifted only)
        spec = join_blocks(torch.from_numpy(blocks.blocks(i).copy()), 50)
        mate = None if mates[i] is None else join_blocks(torch.from_numpy(blocks.blocks(mates[i]).copy()), 50)
        x = split_blocks(augment_spectrogram(spec, mate, aug, manifest.clips[i].id), blocks.blocks(i).shape[0], 50)
        with torch.no_grad():
            expected = upper_blocks(enc.cnn, x, torch.tensor([x.shape[0]]), 0).pooled[0].numpy()
        np.testing.assert_allclose(view.features[i], expected, rtol=1e-5, atol=1e-6)
    assert view.captions[1] == {"eng": ["sound 1 and sound 0"], "spa": ["sonido 1 y sonido 0"]}
    assert view.captions[2] == manifest.clips[2].captions
    assert joined_captions({"eng": [None, "x"]}, {"fra": ["y"]}) == {"eng": ["x"]}
    # the cache resumes: a second call computes nothing and gives the same vectors
    calls = []
    again = augmented_view(_Counting(enc, calls), manifest, blocks, aug, AudioFeatureCache(tmp_path / "v.npz", "view"),
                           progress=False)
    assert calls == [] and np.array_equal(again.features, view.features)


class _Counting:
    """An encoder whose CNN records each call (none expected when the view is cached)."""

    def __init__(self, enc, calls):
        self.block_hop, self.calls = enc.block_hop, calls
        self.cnn = _Recorder(enc.cnn, calls)

    def eval(self):
        return self


class _Recorder:
    def __init__(self, cnn, calls):
        self.cnn, self.calls = cnn, calls

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.cnn, name)


def test_training_items_hold_the_clips_then_each_view():
    data = make_data(n_libraries=2)
    rows = [0, 2, 3]
    feats, caps, origin = training_items(data, rows, ["eng"])
    assert origin == rows and np.array_equal(feats, data.features[rows])
    view = type("View", (), {"features": data.features + 1.0,
                             "captions": [{"eng": ["joined"]} for _ in data.manifest.clips]})()
    data.views = [view]
    feats, caps, origin = training_items(data, rows, ["eng"])
    assert origin == rows + rows and np.array_equal(feats[3:], data.features[rows] + 1.0)
    assert caps[3:] == [[["joined"]]] * 3


def test_real_sounds_adds_views_whose_captions_the_text_bank_embeds(tmp_path):
    manifest = _manifest(tmp_path)
    torch.manual_seed(0)
    enc = AisfxEncoder(pretrained=False, frozen=True).eval()
    data = RealSounds(manifest, np.zeros((6, 512), np.float32), [], ["eng", "spa"], {}, enc)
    data.augment(["mix"], 2, tmp_path / "cache", progress=False)
    assert [v.augmentation.name for v in data.views] == ["mix-0", "mix-1"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["augment-mix-0.npz", "augment-mix-1.npz",
                                                                     "prefix-0"]
    assert ("eng", "sound 0 and sound 1") in data.texts() and ("spa", "sonido 3 y sonido 4") in data.texts()
