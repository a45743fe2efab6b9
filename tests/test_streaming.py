"""Streamed audio: the epoch plan keeps the old random stream, workers and the store change nothing but speed."""

import json

import numpy as np
import pytest
import soundfile as sf
import torch

from mlatr.audio.io import crop_or_pad, load_audio, probe_length
from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.batches import TrainBatches, iter_eval_audio
from mlatr.data.pipeline.epoch_plan import shard_range, usable_caption_indices
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.pipeline.source_choice import choose_cache
from mlatr.data.pipeline.store import StoreSource, prepare_store, read_index
from mlatr.data.pipeline.workers import default_workers
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.seeds import derive_seed
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_toy_manifest(tmp_path_factory.mktemp("toy"), n_train=16, n_val=6, n_test=2)


def legacy_epoch(manifest, languages, batch_size, num_samples, seed, epoch):
    """The draws of the single-process loader before streaming (order, then per clip ``j`` and, decoding the
    clip inline, the crop offset that ``crop_or_pad(mode="random")`` draws): the plan must reproduce them."""
    options = [usable_caption_indices(c, languages, False) for c in manifest]
    clips = [i for i, o in enumerate(options) if o]
    g = torch.Generator().manual_seed(derive_seed(seed, epoch, "order"))
    crop = np.random.default_rng(derive_seed(seed, epoch, "crop"))
    order = [clips[i] for i in torch.randperm(len(clips), generator=g).tolist()]
    batches = []
    for b in range(len(clips) // batch_size):
        rows = []
        for idx in order[b * batch_size:(b + 1) * batch_size]:
            j = options[idx][int(crop.integers(len(options[idx])))]
            wave = load_audio(manifest[idx].audio_path(manifest.root))
            offset = 0
            if wave.shape[0] > num_samples:
                state = crop.bit_generator.state
                segment, _ = crop_or_pad(wave, num_samples, mode="random", generator=crop)
                twin = np.random.default_rng()
                twin.bit_generator.state = state
                offset = int(twin.integers(0, wave.shape[0] - num_samples + 1))
                assert np.array_equal(segment, wave[offset:offset + num_samples])
            rows.append((idx, j, offset))
        batches.append(rows)
    return batches


def test_the_plan_draws_what_the_inline_loader_drew(manifest):
    m = Manifest.load(manifest).split("train")
    langs = ["eng", "fra", "deu"]
    batches = TrainBatches(m, langs, 4, max_seconds=0.7, seed=3, cache_audio=False)
    for epoch in (0, 1):
        want = legacy_epoch(m, langs, 4, batches.num_samples, 3, epoch)
        plan = batches.plan(epoch)
        assert [[(c.index, c.caption, c.offset) for c in b] for b in plan] == want
        assert any(c.offset > 0 for b in plan for c in b)


def test_header_lengths_are_the_decoded_lengths(tmp_path):
    for rate, n in ((44100, 44101), (32000, 16001), (22050, 7)):
        sf.write(tmp_path / f"a{rate}.flac", np.zeros(n, np.float32), rate)
        assert probe_length(tmp_path / f"a{rate}.flac") == load_audio(tmp_path / f"a{rate}.flac").shape[0]


def test_shards_partition_the_batch_and_workers_default_sanely():
    for n, world in ((8, 2), (7, 3), (2, 4)):
        parts = [shard_range(n, r, world) for r in range(world)]
        assert parts[0][0] == 0 and parts[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    assert default_workers(cpus=2, local_processes=1) == 1
    assert default_workers(cpus=64, local_processes=8) == 7
    assert default_workers(cpus=1, local_processes=1) == 0


def test_workers_and_resume_give_bit_identical_weights(manifest, tmp_path):
    """workers=0 vs workers=2 (files streamed, no cache), and a resumed workers=2 run, end equal bit for bit."""
    common = ["objective.scheme=kcl", "data.max_seconds=0.7", "data.cache_audio=false", "train.eval_every=0"]
    Trainer(tiny_config(manifest, tmp_path / "w0", *common, "data.workers=0")).fit()

    def interrupt(trainer, info):
        if info["epoch"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny_config(manifest, tmp_path / "w2", *common, "data.workers=2"), callbacks=[interrupt]).fit()
    resumed = Trainer(tiny_config(manifest, tmp_path / "w2", *common, "data.workers=1"), resume=True)
    assert resumed.epoch == 1 and resumed.step > 0  # it continues epoch 1's checkpoint, not a fresh start
    resumed.fit()
    a, b = read_checkpoint(tmp_path / "w0" / "last.pt"), read_checkpoint(tmp_path / "w2" / "last.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]


def test_eval_batches_with_workers_equal_inline(manifest):
    m = Manifest.load(manifest)
    inline = list(iter_eval_audio(AudioSource(m), 5, 0.8))
    streamed = list(iter_eval_audio(AudioSource(m), 5, 0.8, workers=2))
    assert [i for i, _, _ in inline] == [i for i, _, _ in streamed]
    assert all(torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) for a, b in zip(inline, streamed, strict=True))


def test_store_holds_the_decoded_audio_and_resumes(manifest, tmp_path, monkeypatch):
    m = Manifest.load(manifest)
    store = tmp_path / "store"
    import mlatr.data.pipeline.store as store_module

    real_add = store_module._ShardWriter.add
    calls = {"n": 0}

    def dies_after_five(self, *args):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        real_add(self, *args)

    monkeypatch.setattr(store_module._ShardWriter, "add", dies_after_five)
    with pytest.raises(KeyboardInterrupt):
        prepare_store(m, store, shard_mb=0.05)
    assert len(read_index(store)["clips"]) == 5  # the clips decoded before the interruption are kept
    monkeypatch.setattr(store_module._ShardWriter, "add", real_add)
    report = prepare_store(m, store, shard_mb=0.05)
    assert (report.already, report.stored) == (5, len(m) - 5)
    source = StoreSource(store, m)
    for i in range(len(m)):
        decoded = load_audio(m[i].audio_path(m.root))
        stored = source.load(i)
        assert stored.shape == decoded.shape
        assert np.abs(stored - decoded).max() <= max(1.0, np.abs(decoded).max()) / 32767 + 1e-7
        assert np.array_equal(source.crop(i, 4000, 1234), stored[1234:5234])
    assert source.length(3) == load_audio(m[3].audio_path(m.root)).shape[0]


def test_store_training_matches_with_workers_and_names_missing_clips(manifest, tmp_path):
    store = tmp_path / "store"
    m = Manifest.load(manifest)
    assert main(["data", "prepare", str(manifest), "-o", str(store), "--split", "train", "--no-progress",
                 "--workers", "1"]) == 0
    with pytest.raises(MlatrError, match="not in the store.*mlatr data prepare"):
        StoreSource(store, m)  # the val and test clips were not prepared
    common = ["train.eval_every=0", f"data.store={store}", "train.epochs=1"]
    Trainer(tiny_config(manifest, tmp_path / "s0", *common, "data.workers=0")).fit()
    Trainer(tiny_config(manifest, tmp_path / "s2", *common, "data.workers=2")).fit()
    a, b = read_checkpoint(tmp_path / "s0" / "last.pt"), read_checkpoint(tmp_path / "s2" / "last.pt")
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


@pytest.fixture()
def broken(tmp_path):
    """A toy data set with one missing file and one file whose header reads but whose samples are NaN."""
    path = make_toy_manifest(tmp_path / "data", n_train=10, n_val=2, n_test=0)
    (tmp_path / "data" / "audio" / "clip001.wav").unlink()
    sf.write(tmp_path / "data" / "audio" / "clip002.wav", np.full(20000, np.nan, np.float32), 16000,
             subtype="FLOAT")
    return path


@pytest.mark.parametrize("workers", [0, 2])
def test_unreadable_clips_stop_clearly_or_are_counted(broken, tmp_path, workers):
    common = ["train.eval_every=0", "train.epochs=1", "data.cache_audio=false", f"data.workers={workers}",
              "train.batch_size=4"]
    with pytest.raises(MlatrError, match="clip 'clip001'.*not found"):
        Trainer(tiny_config(broken, tmp_path / "a", *common)).fit()
    summary = Trainer(tiny_config(broken, tmp_path / "b", *common, "data.skip_bad=true")).fit()
    record = read_checkpoint(tmp_path / "b" / "last.pt")["history"][0]
    assert summary["steps"] == 2 and record["bad_audio"] == 2  # clip001 at planning, clip002 when decoded
    fixed = tmp_path / "b2"  # the NaN clip met in a worker without skip_bad: the clip's own message
    audio = tmp_path / "data" / "audio"
    (audio / "clip001.wav").write_bytes((audio / "clip000.wav").read_bytes())
    with pytest.raises(MlatrError, match="clip 'clip002'.*NaN"):
        Trainer(tiny_config(broken, fixed, *common)).fit()


def test_store_records_unreadable_clips_for_skip_bad(broken, tmp_path):
    m = Manifest.load(broken)
    with pytest.raises(MlatrError, match="clip 'clip001'.*--skip-bad"):
        prepare_store(m, tmp_path / "store")
    report = prepare_store(m, tmp_path / "store", skip_bad=True)
    assert report.bad == 2 and json.loads((tmp_path / "store" / "index.json").read_text())["bad"]["clip002"]
    common = ["train.eval_every=0", "train.epochs=1", f"data.store={tmp_path / 'store'}", "train.batch_size=4"]
    with pytest.raises(MlatrError, match="clip 'clip001'.*recorded by mlatr data prepare"):
        Trainer(tiny_config(broken, tmp_path / "a", *common)).fit()
    Trainer(tiny_config(broken, tmp_path / "b", *common, "data.skip_bad=true")).fit()
    assert read_checkpoint(tmp_path / "b" / "last.pt")["history"][0]["bad_audio"] == 2


def test_cache_auto_follows_the_budget(manifest):
    m = Manifest.load(manifest)
    a, b = AudioSource(m), AudioSource(m)
    assert choose_cache("auto", [(a, range(len(m)))], budget_gb=1.0) and a.cache
    assert not choose_cache("auto", [(b, range(len(m)))], budget_gb=1e-5) and not b.cache
    assert a.decoded_bytes == 0  # deciding read headers only


class _CacheProbe(AudioSource):
    """Decodes every clip as one sample telling whether the reading process caches."""

    def _decode(self, index):
        return np.array([1.0 if self.cache else 0.0], np.float32)


def test_workers_keep_no_cache_of_their_own(manifest):
    """A caching source is filled by workers that do not cache (each would hold a copy of all it read)."""
    m = Manifest.load(manifest)
    source = _CacheProbe(m, cache=True)
    source.fill(range(len(m)), workers=1)
    assert source.decoded_bytes and all(float(source.load(i)[0]) == 0.0 for i in range(len(m)))
