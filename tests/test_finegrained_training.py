"""Training, checkpointing and evaluation with a fine-grained matching head (LGMM) and CMSC."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import head_of, read_checkpoint
from mlatr.losses.cmsc import cmsc_loss_terms
from mlatr.matching import LGMMHead, build_matching_head
from mlatr.models.outputs import EncoderOutput
from mlatr.training.objective import build_objective
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config

LGMM = "objective.matching={name: lgmm, tau_w: 0.5, lam: 5.0}"


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_toy_manifest(tmp_path_factory.mktemp("toy"), n_train=16, n_val=6, n_test=6)


@pytest.fixture(scope="module")
def lgmm_run(manifest, tmp_path_factory):
    out = tmp_path_factory.mktemp("lgmm") / "run"
    cfg = tiny_config(manifest, out, LGMM, "objective.cmsc={beta: 0.3}", epochs=1)
    trainer = Trainer(cfg)
    summary = trainer.fit()
    return out, trainer, summary


def test_lgmm_cmsc_trains_one_epoch_and_logs_terms(lgmm_run):
    out, trainer, summary = lgmm_run
    assert summary["steps"] == 2
    import json

    steps = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    step = [r for r in steps if r["type"] == "step"][0]
    assert {"loss_interc", "loss_jnt", "loss_intrac"} <= set(step)
    assert math.isclose(step["loss"], step["loss_interc"] + step["loss_jnt"] + step["loss_intrac"], rel_tol=1e-6)
    assert all(math.isfinite(p.detach().sum().item()) for p in trainer.model.parameters())


def test_matching_objective_equals_cmsc_on_the_head_scores(manifest, tmp_path):
    """The objective on one batch = cmsc_loss_terms over LGMMHead scores computed by hand (eq. 6-11)."""
    cfg = tiny_config(manifest, tmp_path / "x", LGMM, "objective.cmsc={jnt: false}", epochs=1)
    trainer = Trainer(cfg)
    batch = next(iter(trainer.batches.epoch(0)))
    sel = trainer.objective.scheme.select(batch.rows, cfg.data.languages, torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = trainer.model.encode_audio(batch.waveform, batch.lengths)
        t = trainer.model.encode_text(sel.texts, sel.langs)
        out = trainer.objective(a, t, sel, 0.07)
        idx = sel.index[:, 0]
        head = LGMMHead(0.5, 5.0)
        A = EncoderOutput(a.pooled, a.frames, a.mask)
        T = EncoderOutput(t.pooled[idx], t.frames[idx], t.mask[idx])
        want = cmsc_loss_terms(head(A, T), head(T, A), head(A, A), head(T, T), tau=0.07, use_jnt=False)
    assert torch.allclose(out.total, want["total"], atol=1e-5)
    assert set(out.terms) == {"interc", "intrac"}
    for name in out.terms:
        assert torch.allclose(out.terms[name], want[name], atol=1e-5)


def test_objective_scores_block_wise_with_the_unchunked_loss_and_gradients(monkeypatch):
    """Training scores the batch in blocks (cache-sized on CPU); loss and gradients equal the
    unchunked head's. A tiny block target forces many blocks on this small batch."""
    import mlatr.matching.chunked as chunked
    from mlatr.losses.schemes import Selection
    from mlatr.training.config import CMSCConfig, MatchingConfig, ObjectiveConfig

    gen = torch.Generator().manual_seed(5)
    audio = torch.randn(6, 7, 8, generator=gen)
    text = torch.randn(6, 5, 8, generator=gen)
    am, tm = torch.rand(6, 7, generator=gen) > 0.3, torch.rand(6, 5, generator=gen) > 0.3
    am[:, 0] = tm[:, 0] = True
    objective = build_objective(ObjectiveConfig(scheme="mlclap", matching=MatchingConfig(), cmsc=CMSCConfig()), 6)
    selection = Selection([f"t{i}" for i in range(6)], ["eng"] * 6, torch.arange(6)[:, None], [["eng"]] * 6)
    blocks = []
    real = chunked.chunked_scores

    def counting(*args, **kwargs):
        kwargs["on_block"] = lambda done, total: blocks.append(total)
        return real(*args, **kwargs)

    monkeypatch.setattr(chunked, "CPU_BLOCK_TARGET_MB", 0.01)
    monkeypatch.setattr("mlatr.training.objective.chunked_scores", counting)
    grads = []
    for blockwise in (True, False):
        a, t = audio.clone().requires_grad_(True), text.clone().requires_grad_(True)
        A, T = EncoderOutput(a.mean(1), a, am), EncoderOutput(t.mean(1), t, tm)
        if blockwise:
            total = objective(A, T, selection, 0.07).total
        else:
            head = objective.head
            total = cmsc_loss_terms(head(A, T), head(T, A), head(A, A), head(T, T), tau=0.07)["total"]
        total.backward()
        grads.append((total.detach(), a.grad, t.grad))
    assert blocks and max(blocks) > 4
    for got, want in zip(grads[0], grads[1], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_checkpoint_keeps_the_head(lgmm_run):
    out, _, _ = lgmm_run
    state = read_checkpoint(out / "best.pt")
    assert state["matching_head"] == {"name": "lgmm", "tau_w": 0.5, "lam": 5.0}
    head = head_of(state)
    assert isinstance(head, LGMMHead) and (head.tau_w, head.lam) == (0.5, 5.0)
    # older checkpoints: from the training config, else cosine
    state.pop("matching_head")
    assert head_of(state).config() == {"name": "lgmm", "tau_w": 0.5, "lam": 5.0}
    state["train_config"]["objective"]["matching"] = None
    assert head_of(state).name == "cosine"


def test_eval_with_the_head_equals_evaluate_scores_on_its_matrices(lgmm_run, manifest, tmp_path):
    import argparse
    import json

    from mlatr.commands import eval_model
    from mlatr.data.manifest import Manifest
    from mlatr.evaluation import evaluate_scores
    from mlatr.inference.checkpoint import load_model
    from mlatr.inference.encoded_split import encode_manifest

    out, _, _ = lgmm_run
    parser = argparse.ArgumentParser()
    eval_model.add_arguments(parser)
    args = parser.parse_args(["--model", str(out / "best.pt"), "--manifest", str(manifest),
                              "--json", str(tmp_path / "m.json"), "--max-seconds", "1.0"])
    assert eval_model.run(args) == 0
    got = json.loads((tmp_path / "m.json").read_text())
    assert got["matching_head"] == {"name": "lgmm", "tau_w": 0.5, "lam": 5.0}
    # independently: encode with frames, score with the head directly (no chunking), evaluate
    loaded = load_model(out / "best.pt")
    assert loaded.head.config() == {"name": "lgmm", "tau_w": 0.5, "lam": 5.0}
    model = loaded.model
    enc = encode_manifest(model, Manifest.load(manifest).split("test"), ["eng", "fra", "deu"], max_seconds=1.0,
                          frames=True)
    head = build_matching_head("lgmm", tau_w=0.5, lam=5.0)
    with torch.no_grad():
        t2a = head(enc.text_side(), enc.audio_side()).numpy()
        a2t = head(enc.audio_side(), enc.text_side()).numpy()
    want = evaluate_scores(t2a, enc.text_audio, enc.text_lang, enc.text_group, text=enc.text, a2t_scores=a2t)
    for task in ("t2a", "a2t"):
        for lang, metrics in want[task].items():
            for key, value in metrics.items():
                assert math.isclose(got[task][lang][key], value, abs_tol=1e-6), (task, lang, key)
    # LGMM is asymmetric: the a2t matrix is not t2a.T
    assert not np.allclose(a2t, t2a.T, atol=1e-4)
    # zero-shot (the toy clips carry one label each) ranks the prompts with the head, clip frames as query
    from mlatr.evaluation import zero_shot_prompts

    test = Manifest.load(manifest).split("test")
    classes = sorted({c.labels[0] for c in test})
    targets = np.asarray([classes.index(test[i].labels[0]) for i in enc.clip_rows])
    with torch.no_grad():
        prompts = model.encode_text(zero_shot_prompts(classes, "eng"), ["eng"] * len(classes))
        scores = head(enc.audio_side(), EncoderOutput(prompts.pooled, prompts.frames, prompts.mask)).numpy()
    own = scores[np.arange(len(targets)), targets]
    ranks = 1 + (scores > own[:, None]).sum(axis=1)
    assert got["zero_shot"]["scored_with"] == "lgmm" and len(classes) >= 2
    assert got["zero_shot"]["eng"]["top1"] == pytest.approx(100.0 * np.mean(ranks == 1))
    assert got["zero_shot"]["eng"]["top5"] == pytest.approx(100.0 * np.mean(ranks <= 5))


@pytest.mark.parametrize("extra,match", [
    (("objective.base=siglip",), "infonce"),
    (("objective.scheme=cacl", "objective.cmsc={}"), "cacl"),
    (("objective.matching={name: nope}",), "nope"),
    (("objective.cmsc={interc: false, jnt: false, intrac: false}",), "every term"),
])
def test_unsupported_combinations_are_refused(manifest, tmp_path, extra, match):
    with pytest.raises(MlatrError, match=match):
        cfg = tiny_config(manifest, tmp_path / "x", LGMM, *extra, epochs=1)
        build_objective(cfg.objective, 8, cfg.data.languages)  # the scheme's needs


def test_kcl_groups_by_language(manifest, tmp_path):
    """KCL with a head: one InterC group per language, weighted by its clips."""
    cfg = tiny_config(manifest, tmp_path / "x", "objective.scheme=kcl", "objective.matching={name: max-mean}", epochs=1)
    trainer = Trainer(cfg)
    batch = next(iter(trainer.batches.epoch(0)))
    obj = build_objective(cfg.objective, cfg.train.batch_size)
    sel = obj.scheme.select(batch.rows, cfg.data.languages, torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = trainer.model.encode_audio(batch.waveform, batch.lengths)
        t = trainer.model.encode_text(sel.texts, sel.langs)
        loss = obj(a, t, sel, 0.1).total
        head = build_matching_head("max-mean")
        total, n_all = 0.0, 0
        for k in range(sel.index.shape[1]):
            rows = (sel.index[:, k] >= 0).nonzero().squeeze(1)
            A = EncoderOutput(a.pooled[rows], a.frames[rows], a.mask[rows])
            ti = sel.index[rows, k]
            T = EncoderOutput(t.pooled[ti], t.frames[ti], t.mask[ti])
            s_at, s_ta = head(A, T), head(T, A)
            n = rows.numel()
            ce = -(torch.log_softmax(s_at / 0.1, 1).diagonal().sum()
                   + torch.log_softmax(s_ta / 0.1, 1).diagonal().sum())
            total += float(ce)  # = n * interc (eq. 6 divides by n)
            n_all += n
    assert math.isclose(float(loss), total / n_all, rel_tol=1e-5)
