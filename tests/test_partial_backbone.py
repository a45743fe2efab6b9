"""Training aiSFX's upper blocks over the cached outputs of its frozen lower blocks (issue 35).

The cache (mlatr.frozen_prefix) must change nothing but the cost: a run over cached stage-3 maps equals its
uncached twin (the whole encoder forward from the waveforms every step), gradient for gradient, and resumes
bit-exactly after a kill.
"""

import json

import numpy as np
import pytest
import soundfile as sf
import torch
from torch import nn

from mlatr.audio.io import load_audio
from mlatr.data.manifest import Clip, Manifest
from mlatr.errors import MlatrError
from mlatr.frozen_features import AudioFeatureCache
from mlatr.frozen_prefix import PrefixCache, Waveforms, prefix_features
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.models.aisfx import AisfxEncoder, AisfxTail, upper_blocks
from mlatr.models.projection import ProjectionHead
from mlatr.training.head_training import HeadTraining, TextBank, caption_rows, train_heads

SECONDS = (0.6, 3.6, 1.0, 4.8, 0.8, 2.0)  # 1, 2 or 3 blocks of ~2.3 s each (hop ~1.16 s)


class Model(nn.Module):
    def __init__(self, train_last_blocks=1, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.audio_encoder = AisfxEncoder(pretrained=False, frozen=False, train_last_blocks=train_last_blocks)
        self.audio_projection = ProjectionHead(512, 8)
        self.text_projection = ProjectionHead(5, 8)
        self.temperature = torch.tensor(0.07)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    clips = []
    for i, s in enumerate(SECONDS):
        t = np.arange(int(s * 16000)) / 16000
        wave = 0.3 * np.sin(2 * np.pi * (200 + 150 * i) * t) + 0.05 * rng.standard_normal(t.shape)
        sf.write(folder / f"c{i}.wav", wave.astype(np.float32), 16000)
        clips.append(Clip(id=f"lib/c{i}", audio=f"c{i}.wav", captions={"eng": [f"caption {i}"]}))
    manifest = Manifest(clips=clips, root=folder)
    keys = [("eng", f"caption {i}") for i in range(len(SECONDS))]
    bank = TextBank(keys, rng.standard_normal((len(keys), 5)).astype(np.float32))
    waves = [load_audio(folder / c.audio, 16000) for c in clips]
    return manifest, bank, waves


def _settings(**kw):
    return HeadTraining.at(1e-2, epochs=3, batch_size=3, seed=2, **kw)


def _key(enc):
    return json.dumps(enc.config(), sort_keys=True)


def test_stage_blocks_then_the_upper_blocks_equal_the_whole_forward(library):
    _, _, waves = library
    enc = AisfxEncoder(pretrained=False, frozen=True).eval()
    wave = torch.zeros(2, 60000)
    wave[0, :len(waves[1])] = torch.from_numpy(waves[1])
    wave[1, :len(waves[2])] = torch.from_numpy(waves[2])
    lengths = torch.tensor([len(waves[1]), len(waves[2])])
    with torch.no_grad():
        whole = enc(wave, lengths)
        for stage in range(5):
            x, counts = enc.stage_blocks(wave, lengths, stage)
            assert counts.tolist() == [2, 1] and x.shape[0] == 3
            torch.testing.assert_close(upper_blocks(enc.cnn, x, counts, stage).pooled, whole.pooled, rtol=1e-5,
                                       atol=1e-6)


def test_train_last_blocks_freezes_the_lower_blocks_and_keeps_batch_norm_statistics():
    enc = AisfxEncoder(pretrained=False, frozen=False, train_last_blocks=1)
    enc.train()
    assert not enc.cnn.training and enc.first_trained_stage == 3
    assert {n.split(".")[0] for n, p in enc.cnn.named_parameters() if p.requires_grad} == {"conv_block4"}
    assert enc.config()["train_last_blocks"] == 1
    assert AisfxEncoder(pretrained=False, frozen=True).first_trained_stage == 4
    assert AisfxEncoder(pretrained=False, frozen=False).first_trained_stage == 0
    with pytest.raises(MlatrError, match="train_last_blocks must be in"):
        AisfxEncoder(pretrained=False, frozen=False, train_last_blocks=5)


def test_cached_lower_blocks_give_the_gradients_of_the_full_forward(library, tmp_path):
    manifest, bank, waves = library
    cached, whole = Model(), Model()
    cache = PrefixCache(tmp_path / "prefix", _key(cached.audio_encoder), stage=3)
    blocks = prefix_features(cached.audio_encoder, manifest, cache, 10.0, batch_size=4, progress=False)
    rows = [0, 3, 5]
    text = bank.lookup([f"caption {i}" for i in rows], ["eng"] * 3)
    for model, (x, lengths), tail in ((cached, blocks.batch(rows), AisfxTail(cached.audio_encoder, 3)),
                                      (whole, Waveforms(waves).batch(rows), whole.audio_encoder)):
        audio = model.audio_projection(tail(x, lengths).pooled)
        loss = nn.functional.cross_entropy(audio @ model.text_projection(text).T, torch.arange(3))
        loss.backward()
    grads = {n: p.grad for n, p in cached.named_parameters() if p.grad is not None}
    assert any(n.startswith("audio_encoder.cnn.conv_block4") for n in grads)
    assert not any(n.startswith("audio_encoder.cnn.conv_block3") for n in grads)
    for name, p in whole.named_parameters():
        assert (p.grad is None) == (name not in grads), name
        if p.grad is not None:
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6)


def test_a_cached_partial_backbone_run_equals_its_uncached_twin_and_resumes_bit_exactly(library, tmp_path):
    manifest, bank, waves = library
    rows = [caption_rows(c.captions, ["eng"]) for c in manifest.clips]
    cached = Model()
    pooled = AudioFeatureCache(tmp_path / "pooled.npz", _key(cached.audio_encoder))
    blocks = prefix_features(cached.audio_encoder, manifest, PrefixCache(tmp_path / "p", _key(cached.audio_encoder), 3),
                             10.0, batch_size=4, progress=False, pooled=pooled)
    assert len(pooled.vectors) == len(SECONDS) and pooled.path.is_file()

    def validate(m):  # a deterministic function of the trained weights, not monotone in the epoch
        return float(torch.sin(1e4 * m.audio_encoder.cnn.conv_block4.conv2.weight.detach().double().sum()))

    log = train_heads(cached, blocks, rows, ["eng"], bank, _settings(), validate, progress=False,
                      audio_tail=AisfxTail(cached.audio_encoder, 3), out_dir=tmp_path / "a")
    twin = Model()
    twin_log = train_heads(twin, Waveforms(waves), rows, ["eng"], bank, _settings(), progress=False,
                           audio_tail=twin.audio_encoder)
    last = read_checkpoint(tmp_path / "a" / "last.pt")["model"]
    cached.load_state_dict(last, strict=False)  # the twin kept its last epoch (no validation)
    assert [e["loss"] for e in log] == pytest.approx([e["loss"] for e in twin_log], rel=1e-5)
    for (name, p), q in zip(cached.state_dict().items(), twin.state_dict().values(), strict=True):
        # the lower blocks ran in other batches (ulp-level differences), which Adam's normalised step turns into
        # differences of at most ~1e-4 on a few weights after 6 steps at lr 1e-2 (a changed update would be ~1e-2)
        torch.testing.assert_close(p, q, rtol=0, atol=1e-4, msg=name)
    assert any(k.startswith("audio_encoder.cnn.conv_block4.conv2") for k in last)
    assert not any(k.startswith("audio_encoder.cnn.conv_block3") for k in last)

    def killed_in_epoch_2(m, calls=[]):  # noqa: B006  (counts the calls of this run)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return validate(m)

    with pytest.raises(KeyboardInterrupt):
        killed = Model()
        train_heads(killed, blocks, rows, ["eng"], bank, _settings(), killed_in_epoch_2, progress=False,
                    audio_tail=AisfxTail(killed.audio_encoder, 3), out_dir=tmp_path / "b")
    assert read_checkpoint(tmp_path / "b" / "last.pt")["epoch"] == 1
    resumed = Model(seed=7)  # other initial weights: the trained ones come from the checkpoint
    again = train_heads(resumed, blocks, rows, ["eng"], bank, _settings(), validate, progress=False,
                        audio_tail=AisfxTail(resumed.audio_encoder, 3), out_dir=tmp_path / "b", resume=True)
    assert again == log and read_checkpoint(tmp_path / "b" / "last.pt")["epoch"] == 3
    for name, value in read_checkpoint(tmp_path / "b" / "best.pt")["model"].items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    for name, value in read_checkpoint(tmp_path / "b" / "last.pt")["model"].items():
        assert torch.equal(value, last[name]), name


def test_the_prefix_cache_resumes_and_refuses_another_encoder(library, tmp_path):
    manifest, _, _ = library
    enc = AisfxEncoder(pretrained=False, frozen=True)
    cache = PrefixCache(tmp_path / "p", _key(enc), stage=2, dtype="float16")
    first = Manifest(clips=manifest.clips[:3], root=manifest.root)
    prefix_features(enc, first, cache, 10.0, batch_size=2, progress=False)
    again = PrefixCache(tmp_path / "p", _key(enc), stage=2, dtype="float16")
    assert len(again.clips) == 3
    view = prefix_features(enc, manifest, again, 10.0, batch_size=2, progress=False)
    assert len(again.chunk_names) == 2 and len(view) == len(SECONDS)  # only the 3 new clips were computed
    x, counts = view.batch([1, 0])
    assert x.dtype == torch.float32 and x.shape[1:] == (128, 25, 24) and counts.tolist()[1] == 1
    with torch.no_grad():
        direct, _ = enc.stage_blocks(torch.from_numpy(load_audio(manifest.root / "c1.wav", 16000))[None], None, 2)
    torch.testing.assert_close(x[:counts[0]], direct, rtol=2e-3, atol=2e-3)  # float16 storage
    with pytest.raises(MlatrError, match="remove the folder"):
        PrefixCache(tmp_path / "p", _key(enc), stage=3, dtype="float16")


def test_gain_is_no_augmentation_for_aisfx(library):
    """aiSFX peak-normalises every clip first, so a gain change (an augmentation option of issue 35) gives the
    very same features: it cannot teach the heads anything."""
    _, _, waves = library
    enc = AisfxEncoder(pretrained=False, frozen=True).eval()
    wave = torch.from_numpy(waves[3])[None]
    with torch.no_grad():
        torch.testing.assert_close(enc(0.1 * wave).pooled, enc(wave).pooled, rtol=1e-5, atol=1e-6)
