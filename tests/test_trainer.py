"""End-to-end training on a tiny on-disk data set: every scheme trains, resume is bit-exact."""

import json

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_toy_manifest(tmp_path_factory.mktemp("toy"), n_train=16, n_val=6, n_test=6)


@pytest.mark.parametrize("scheme,base", [("mlclap", "infonce"), ("kcl", "siglip"), ("cacl", "infonce")])
def test_each_scheme_trains_and_logs(manifest, tmp_path, scheme, base):
    cfg = tiny_config(manifest, tmp_path / "run", f"objective.scheme={scheme}", f"objective.base={base}")
    summary = Trainer(cfg).fit()
    assert summary["epochs"] == 2 and summary["steps"] == 4  # 16 clips / batch 8 = 2 steps per epoch
    # texts per epoch: ML-CLAP 1 per clip, KCL K=3 per clip, CACL 2 per clip
    assert summary["texts_encoded"] == 2 * 16 * {"mlclap": 1, "kcl": 3, "cacl": 2}[scheme]
    lines = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    epochs = [r for r in lines if r["type"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2]
    assert all(set(r["val"]) == {"t2a", "a2t", "mrv"} for r in epochs)
    best = read_checkpoint(tmp_path / "run" / "best.pt")
    assert best["epoch"] == summary["best_epoch"]
    if base == "siglip":
        assert "bias" in best["objective"]


def test_resume_is_bit_exact(manifest, tmp_path):
    full = Trainer(tiny_config(manifest, tmp_path / "full", "objective.scheme=mlclap")).fit()

    def interrupt(trainer, info):  # dies at the first step of epoch 2, after epoch 1's checkpoint
        if info["epoch"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Trainer(tiny_config(manifest, tmp_path / "part", "objective.scheme=mlclap"), callbacks=[interrupt]).fit()
    assert read_checkpoint(tmp_path / "part" / "last.pt")["epoch"] == 1
    resumed = Trainer(tiny_config(manifest, tmp_path / "part", "objective.scheme=mlclap"), resume=True).fit()
    a = read_checkpoint(tmp_path / "full" / "last.pt")
    b = read_checkpoint(tmp_path / "part" / "last.pt")
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert resumed["steps"] == full["steps"] == b["step"]
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]


def test_existing_run_needs_resume_flag(manifest, tmp_path):
    cfg = tiny_config(manifest, tmp_path / "run", "train.epochs=1")
    Trainer(cfg).fit()
    with pytest.raises(MlatrError, match="--resume"):
        Trainer(tiny_config(manifest, tmp_path / "run", "train.epochs=1"))


def test_resume_refuses_another_config(manifest, tmp_path):
    Trainer(tiny_config(manifest, tmp_path / "run", "train.epochs=1")).fit()
    with pytest.raises(MlatrError, match="another configuration"):
        Trainer(tiny_config(manifest, tmp_path / "run", "train.epochs=1", "optim.lr=0.5"), resume=True)


@pytest.mark.parametrize("scheme", ["mlclap", "cacl"])
def test_svr_composes_with_schemes(manifest, tmp_path, scheme):
    cfg = tiny_config(manifest, tmp_path / "run", f"objective.scheme={scheme}", "train.epochs=1",
                 "objective.svr={radius: dynamic, bidirectional: true}")
    summary = Trainer(cfg).fit()
    assert summary["svr"] is True
    steps = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    step = next(r for r in steps if r["type"] == "step")
    assert step["svr_radius"] > 0 and "svr_constraint" in step
    assert any(k.startswith("svr.radius_model") for k in read_checkpoint(tmp_path / "run" / "last.pt")["objective"])


def test_eval_every_validates_on_schedule_and_after_the_last_epoch(manifest, tmp_path):
    summary = Trainer(tiny_config(manifest, tmp_path / "run", "train.epochs=3", "train.eval_every=2")).fit()
    epochs = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    validated = [r["epoch"] for r in epochs if r["type"] == "epoch" and "val" in r]
    assert validated == [2, 3]                      # epoch 2 by the schedule, epoch 3 because it is the last
    assert summary["best_epoch"] in (2, 3)
    assert read_checkpoint(tmp_path / "run" / "best.pt")["epoch"] == summary["best_epoch"]
