"""The padded caption and clip lengths of a run's steps (mlatr.lab.planning.batch_lengths / caption_lengths), checked
against enumeration and against brute-force draws of the trainer's own sampler on a small manifest."""

import itertools
import json

import numpy as np
import pytest
import torch

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.epoch_plan import caption_row, plan_epoch, usable_caption_indices
from mlatr.lab.planning.batch_lengths import at_most, batch_lengths, mean_subset_product
from mlatr.lab.planning.caption_lengths import length_encoder, length_plan
from mlatr.losses.schemes import build_scheme
from mlatr.training.config import load_config

WORDS = "dog cat rain car bird wind door bell water engine".split()


def test_mean_subset_product_equals_the_enumeration():
    p = np.random.default_rng(0).random((7, 4))
    for k in range(8):  # both recurrences: k <= N / 2 (chosen rows) and k > N / 2 (excluded rows)
        brute = np.mean([np.prod(p[list(s)], axis=0) for s in itertools.combinations(range(7), k)], axis=0)
        assert np.allclose(mean_subset_product(p, k), brute, rtol=0, atol=1e-14)


def test_a_sample_standing_in_for_a_training_set_draws_independent_clips():
    """epoch_clips: the step's maximum is the mixture's CDF to the power B, the epoch's to steps * B."""
    lengths = np.array([3, 5, 9, 9])
    values = np.unique(lengths)
    out = batch_lengths(at_most(lengths, values), values, batch_size=2, epoch_clips=10)
    mixture = np.array([0.25, 0.5, 1.0])
    assert np.allclose(out.step_cdf, mixture ** 2) and np.allclose(out.epoch_cdf, mixture ** 10)
    assert out.steps == 5 and out.worst == pytest.approx(3 * 0.25**10 + 5 * (0.5**10 - 0.25**10) + 9 * (1 - 0.5**10))


def _manifest(tmp_path):
    """11 clips, 1-3 captions each, some translations missing, four clip lengths."""
    rng = np.random.default_rng(1)
    rows = []
    for i in range(11):
        n = int(rng.integers(1, 4))
        caps = {"eng": [" ".join(rng.choice(WORDS, int(rng.integers(1, 9)))) for _ in range(n)]}
        caps["fra"] = [" ".join(rng.choice(WORDS, int(rng.integers(1, 12)))) for _ in range(n - (i % 3 == 0))]
        if i % 4:
            caps["deu"] = [" ".join(rng.choice(WORDS, int(rng.integers(1, 7)))) for _ in range(n)]
        rows.append({"id": f"c{i}", "audio": f"c{i}.wav", "split": "train", "captions": caps,
                     "duration": float(rng.choice([2.0, 3.5, 6.0, 9.0]))})
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return Manifest.load(path)


@pytest.mark.parametrize("scheme", ["mlclap", "cacl", "kcl"])
def test_worst_and_typical_batch_match_brute_force_draws_of_the_sampler(tmp_path, scheme):
    """The trainer's own epoch plan (clip order, caption j) and the scheme's own selection, drawn for 3000
    epochs; each step's padded caption length is the longest of what select() encodes, as the encoder
    tokenises it. The computed step distribution and expected epoch maximum must match the draws."""
    manifest = _manifest(tmp_path)
    cfg = load_config(None, ["model.text={name: small-transformer, dim: 16, num_layers: 1, num_heads: 2, ff_dim: 32}",
                             "data.languages=[eng,fra,deu]", "train.batch_size=3", "data.max_seconds=5.0",
                             f"objective.scheme={scheme}"])
    plan = length_plan(cfg, manifest)
    encoder, _ = length_encoder(cfg, manifest.split("train"), None)
    languages = list(cfg.data.languages)
    chosen = build_scheme(scheme)
    clips = manifest.split("train").clips
    need_first = chosen.anchor_language is not None
    usable = [i for i, c in enumerate(clips) if usable_caption_indices(c, languages, need_first)]
    options = {i: usable_caption_indices(clips[i], languages, need_first) for i in usable}
    step_tokens, step_seconds, epoch_tokens, epoch_seconds = [], [], [], []
    for epoch in range(3000):
        batches = plan_epoch(usable, options, None, 3, 0, seed=7, epoch=epoch)
        maxima = []
        for b, batch in enumerate(batches):
            rows = [caption_row(clips[p.index], p.caption, languages) for p in batch]
            selection = chosen.select(rows, languages, torch.Generator().manual_seed(epoch * 100 + b))
            tokens = max(encoder.token_lengths(selection.texts, selection.langs))
            seconds = max(min(clips[p.index].duration, 5.0) for p in batch)
            maxima.append((tokens, seconds))
        step_tokens += [t for t, _ in maxima]
        step_seconds += [s for _, s in maxima]
        epoch_tokens.append(max(t for t, _ in maxima))
        epoch_seconds.append(max(s for _, s in maxima))
    pairs = ((plan.tokens, step_tokens, epoch_tokens), (plan.audio, step_seconds, epoch_seconds))
    for computed, drawn, epochs in pairs:
        empirical = np.array([np.mean(np.asarray(drawn) <= v) for v in computed.values])
        assert np.abs(empirical - computed.step_cdf).max() < 0.03
        se = np.std(epochs) / np.sqrt(len(epochs))
        assert abs(np.mean(epochs) - computed.worst) < 4 * se + 1e-9
    assert plan.tokens.steps == len(usable) // 3 and plan.tokens.clips == len(usable)


def test_a_language_missing_from_the_manifest_is_estimated_and_said(tmp_path):
    manifest = _manifest(tmp_path)
    cfg = load_config(None, ["model.text={name: small-transformer, dim: 16, num_layers: 1, num_heads: 2, ff_dim: 32}",
                             "data.languages=[eng,fra,jpn]", "train.batch_size=3", "objective.scheme=kcl"])
    plan = length_plan(cfg, manifest)
    assert plan.languages["jpn"]["source"].startswith("estimated from eng x")
    assert plan.languages["fra"]["source"] == "manifest"
    assert any(note.startswith("jpn: no caption in the manifest") for note in plan.notes)
