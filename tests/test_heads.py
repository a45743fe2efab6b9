"""The head trainer on cached features (mlatr.training.head_training) against hand-written references."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from dense_losses import kcl_loss
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.losses import clip_loss
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.projection import IdentityHead, ProjectionHead, ResidualHead
from mlatr.seeds import derive_seed
from mlatr.training.config import ObjectiveConfig, OptimConfig
from mlatr.training.head_training import HEAD_OPTIM, HeadTraining, TextBank, caption_rows, train_heads


class Heads(nn.Module):
    def __init__(self, da=6, dt=5, d=4, text_head=ProjectionHead, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.audio_projection = ProjectionHead(da, d)
        self.text_projection = text_head(dt, d)
        self.temperature = torch.tensor(0.07)


def _data(n=10, da=6, dt=5, langs=("eng",), seed=0):
    rng = np.random.default_rng(seed)
    audio = rng.standard_normal((n, da)).astype(np.float32)
    captions = [{lang: [f"{lang} caption {i}"] for lang in langs} for i in range(n)]
    keys = [(lang, f"{lang} caption {i}") for i in range(n) for lang in langs]
    bank = TextBank(keys, rng.standard_normal((len(keys), dt)).astype(np.float32))
    return audio, captions, bank


def _settings(lr=1e-2, **kw) -> HeadTraining:
    return HeadTraining(optim=replace(HEAD_OPTIM, lr=lr), **kw)


def test_english_infonce_equals_a_plain_clip_loss_loop_with_schedule_and_clipping():
    audio, captions, bank = _data()
    model = Heads()
    ref = Heads()
    optim = OptimConfig(lr=1e-2, weight_decay=1e-4, warmup_steps=2, schedule="cosine", min_lr_ratio=0.1,
                        grad_clip=0.05)
    settings = HeadTraining(epochs=3, batch_size=4, seed=5, optim=optim)
    log = train_heads(model, audio, [caption_rows(c, ["eng"]) for c in captions], ["eng"], bank, settings,
                      progress=False)
    # reference: one caption per clip, symmetric InfoNCE, the (seed, epoch, "order") permutation in batches
    # of 4 (the last 2 clips dropped), warmup 2 steps then cosine to 0.1 over 6 steps, norm clipped to 0.05
    opt = torch.optim.AdamW(list(ref.parameters()), lr=1e-2, weight_decay=1e-4)
    text = bank.lookup([c["eng"][0] for c in captions], ["eng"] * len(captions))
    step = 0
    for epoch in range(3):
        order = torch.randperm(10, generator=torch.Generator().manual_seed(derive_seed(5, epoch, "order")))
        for start in (0, 4):
            idx = order[start:start + 4]
            factor = (step + 1) / 2 if step < 2 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (step - 2) / 4))
            for g in opt.param_groups:
                g["lr"] = 1e-2 * factor
            loss = clip_loss(ref.audio_projection(torch.from_numpy(audio)[idx]), ref.text_projection(text[idx]), 0.07)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.05)
            opt.step()
            step += 1
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6), name
    assert len(log) == 3


def test_a_killed_and_resumed_head_run_equals_the_uninterrupted_one(tmp_path):
    langs = ["eng", "fra"]
    audio, captions, bank = _data(n=12, dt=4, langs=langs)
    for c in captions[::3]:  # two source captions for some clips: the caption draw matters
        for lang in langs:
            c[lang].append(c[lang][0])
    rows = [caption_rows(c, langs) for c in captions]
    settings = HeadTraining(epochs=4, batch_size=5, seed=3, optim=replace(HEAD_OPTIM, lr=1e-2, warmup_steps=2,
                                                                          schedule="cosine", grad_clip=1.0),
                            objective=ObjectiveConfig(scheme="kcl"), identity_penalty=0.5)

    def validate(m):  # a deterministic function of the heads, not monotone in the epoch
        return float(torch.sin(1e4 * sum(p.detach().double().sum() for p in m.parameters())))

    whole = Heads(dt=4, text_head=ResidualHead)
    log = train_heads(whole, audio, rows, langs, bank, settings, validate, progress=False, out_dir=tmp_path / "a")
    best = max(log, key=lambda e: e["val"])["epoch"]
    assert best < 4 and "loss_text_identity" in log[0]  # the kept heads come from best.pt, not the last epoch

    calls = []

    def killed_in_epoch_3(m):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # after epoch 3's training, before its checkpoint
        return validate(m)

    with pytest.raises(KeyboardInterrupt):
        train_heads(Heads(dt=4, text_head=ResidualHead), audio, rows, langs, bank, settings, killed_in_epoch_3,
                    progress=False, out_dir=tmp_path / "b")
    assert read_checkpoint(tmp_path / "b" / "last.pt")["epoch"] == 2
    resumed = Heads(dt=4, text_head=ResidualHead, seed=1)  # other initial weights: all comes from the checkpoint
    again = train_heads(resumed, audio, rows, langs, bank, settings, validate, progress=False,
                        out_dir=tmp_path / "b", resume=True)
    assert again == log
    for (name, p), q in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    with pytest.raises(MlatrError, match="other head-training settings"):
        train_heads(Heads(dt=4, text_head=ResidualHead), audio, rows, langs, bank, replace(settings, seed=4),
                    progress=False, out_dir=tmp_path / "b", resume=True)


def test_kcl_over_languages_is_atri_eq9_on_the_projected_features():
    langs = ["eng", "fra", "deu"]
    audio, captions, bank = _data(n=6, langs=langs)
    captions[2]["deu"] = [None]  # a missing translation leaves the clip out of the German pair
    model = Heads()
    with torch.no_grad():
        a = model.audio_projection(torch.from_numpy(audio))
        t = torch.stack([model.text_projection(bank.lookup([c[lang][0] or f"{lang} caption 0" for c in captions],
                                                          [lang] * 6)) for lang in langs], 1)
    mask = torch.ones(6, 3, dtype=torch.bool)
    mask[2, 2] = False
    expected = float(kcl_loss(a, t, 0.07, text_mask=mask))
    settings = _settings(epochs=1, batch_size=6, objective=ObjectiveConfig(scheme="kcl"))  # one step: its loss
    log = train_heads(model, audio, [caption_rows(c, langs) for c in captions], langs, bank, settings,
                      progress=False)
    assert log[0]["loss"] == pytest.approx(expected, rel=1e-5)


def test_identity_penalty_keeps_a_residual_text_head_near_the_identity():
    audio, captions, bank = _data(n=16, dt=4)
    rows = [caption_rows(c, ["eng"]) for c in captions]
    text = bank.vectors
    drift = {}
    for weight in (0.0, 10.0):
        model = Heads(dt=4, text_head=ResidualHead)
        log = train_heads(model, audio, rows, ["eng"], bank, _settings(epochs=20, batch_size=8,
                                                                         identity_penalty=weight), progress=False)
        with torch.no_grad():
            drift[weight] = float(((model.text_projection(text) - text) ** 2).sum(1).mean())
        if weight:
            assert "loss_text_identity" in log[0]
    assert drift[10.0] < 0.1 * drift[0.0]


def test_the_best_validation_epoch_is_kept():
    audio, captions, bank = _data()
    model = Heads()
    snapshots = []
    scores = iter([1.0, 3.0, 2.0])

    def validate(m):
        snapshots.append({k: v.clone() for k, v in m.state_dict().items()})
        return next(scores)

    log = train_heads(model, audio, [caption_rows(c, ["eng"]) for c in captions], ["eng"], bank,
                      _settings(epochs=3, batch_size=4), validate, progress=False)
    assert [e["val"] for e in log] == [1.0, 3.0, 2.0]
    for k, v in model.state_dict().items():
        assert torch.equal(v, snapshots[1][k]), k


def test_caption_rows_align_translations_and_drop_empty_rows():
    caps = {"eng": ["a dog", "a cat"], "fra": ["un chien", None]}
    assert caption_rows(caps, ["eng", "fra"]) == [["a dog", "un chien"], ["a cat", None]]
    assert caption_rows(caps, ["fra"]) == [["un chien"]]


def test_text_heads_of_the_dual_encoder_rebuild_from_config():
    from mlatr.models.registry import build_audio_encoder, build_text_encoder

    audio = build_audio_encoder("small-cnn")
    text = build_text_encoder("small-transformer", corpus=["a dog barks", "a cat meows"] * 4)
    for kind, cls in (("identity", IdentityHead), ("residual", ResidualHead)):
        model = DualEncoder(audio, text, embed_dim=text.output_dim, text_head=kind)
        assert isinstance(model.text_projection, cls)
        again = DualEncoder.from_config(model.config())
        assert isinstance(again.text_projection, cls)
        x = torch.randn(3, text.output_dim)
        if kind == "residual":
            assert torch.equal(model.text_projection(x), x)  # starts at the identity
    assert "text_head" not in DualEncoder(audio, text, embed_dim=8).config()
    with pytest.raises(ValueError, match="embed_dim"):
        DualEncoder(audio, text, embed_dim=text.output_dim + 1, text_head="identity")


def test_patience_stops_after_that_many_epochs_without_a_better_score_and_keeps_the_best(tmp_path):
    audio, captions, bank = _data()
    rows = [caption_rows(c, ["eng"]) for c in captions]
    scores = iter([0.2, 0.5, 0.4, 0.5, 0.1, 0.9, 0.9])  # best at epoch 2; epochs 3 and 4 not better
    weights = []

    def validate(m):
        weights.append(m.audio_projection.net[0].weight.detach().clone())
        return next(scores)

    model = Heads()
    log = train_heads(model, audio, rows, ["eng"], bank, _settings(epochs=7, batch_size=4, patience=2), validate,
                      progress=False, out_dir=tmp_path / "run")
    assert [e["epoch"] for e in log] == [1, 2, 3, 4] and [e["val"] for e in log] == [0.2, 0.5, 0.4, 0.5]
    assert torch.equal(model.audio_projection.net[0].weight, weights[1])  # the best epoch's heads
    # a resumed run that had already stopped trains nothing more
    again = train_heads(Heads(), audio, rows, ["eng"], bank, _settings(epochs=7, batch_size=4, patience=2),
                        lambda m: 1.0, progress=False, out_dir=tmp_path / "run", resume=True)
    assert again == log
    # without patience the run keeps every epoch (the same settings as before patience existed)
    scores = iter([0.2, 0.5, 0.4, 0.5, 0.1, 0.9, 0.9])
    full = train_heads(Heads(), audio, rows, ["eng"], bank, _settings(epochs=7, batch_size=4), lambda m: next(scores),
                       progress=False, out_dir=tmp_path / "full")
    assert len(full) == 7 and "patience" not in read_checkpoint(tmp_path / "full" / "last.pt")["train_config"]
