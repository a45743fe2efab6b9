"""SupCLAP diagnostics (drift, positive similarity) and the Simple Reweight training branch."""

import copy
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from mlatr.errors import MlatrError
from mlatr.losses.schemes import Selection
from mlatr.training.diagnostics import DriftMonitor, drift_cosines, positive_similarities, text_owner
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config


def test_drift_cosines_hand_values():
    t0 = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    t1 = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])  # last row: no update
    a = torch.tensor([[1.0, 1.0], [2.0, 1.0], [1.0, 0.0]])
    cos, perp = drift_cosines(t0, t1, a)
    # row 0: dt=(0,1), pull=(0,1) -> cos 1; row 1: dt=(0,1), pull=(1,1) -> 1/sqrt2 both; row 2: zero update
    assert torch.allclose(cos, torch.tensor([1.0, 1 / math.sqrt(2), 0.0]), atol=1e-6)
    assert torch.allclose(perp, torch.tensor([0.0, 1 / math.sqrt(2), 0.0]), atol=1e-6)


class LinearTexts(nn.Module):
    """A 'dual encoder' whose text tower is t_i = W e_i (e_i one-hot per known text), with dropout."""

    def __init__(self, texts, dim):
        super().__init__()
        self.vocab = {t: i for i, t in enumerate(texts)}
        self.text_encoder = nn.Linear(len(texts), dim, bias=False)
        self.text_projection = nn.Dropout(0.5)  # must be off during the measurement

    def encode_text(self, texts, langs=None):
        x = torch.eye(len(self.vocab))[[self.vocab[t] for t in texts]]
        return SimpleNamespace(pooled=self.text_projection(self.text_encoder(x)))


def test_drift_monitor_matches_a_hand_sgd_step():
    torch.manual_seed(0)
    texts = ["a", "b", "c"]
    model = LinearTexts(texts, dim=4).train()
    # clip 0 has texts a (slot 0) and c (slot 1); clip 1 has b (slot 0) and no slot-1 text
    selection = Selection(texts=texts, langs=["eng"] * 3, index=torch.tensor([[0, 2], [1, -1]]),
                          slot_langs=[["eng", "fra"], ["eng", None]])
    audio = torch.randn(2, 4)
    trainer = SimpleNamespace(model=model, extra_logs={})
    monitor = DriftMonitor()
    monitor(trainer, {"selection": selection, "audio_emb": audio})  # first call: only keeps the weights
    assert trainer.extra_logs == {}
    w0 = model.text_encoder.weight.detach().clone()  # [4, 3]; t_i = column i of W
    # one SGD step on L = -sum_i <t_i, a_owner(i)>: W += lr * sum_i a_owner(i) e_i^T, so dt_i = lr * a_owner(i)
    lr = 0.1
    owner = [0, 1, 0]
    loss = -sum(model.text_encoder.weight[:, i] @ audio[owner[i]] for i in range(3))
    loss.backward()
    with torch.no_grad():
        model.text_encoder.weight -= lr * model.text_encoder.weight.grad
    monitor(trainer, {"selection": selection, "audio_emb": audio})
    assert model.training  # train mode restored
    cos_hand, perp_hand = [], []
    for i in range(3):
        dt = lr * audio[owner[i]].numpy()
        pull = audio[owner[i]].numpy() - w0[:, i].numpy()
        c = float(dt @ pull / (np.linalg.norm(dt) * np.linalg.norm(pull)))
        cos_hand.append(c)
        perp_hand.append(math.sqrt(max(0.0, 1 - c * c)))
    assert trainer.extra_logs["drift_cos"] == pytest.approx(np.mean(cos_hand), abs=1e-5)
    assert trainer.extra_logs["drift_perp"] == pytest.approx(np.mean(perp_hand), abs=1e-5)


def test_text_owner():
    assert text_owner(torch.tensor([[0, 2], [1, -1]]), 3).tolist() == [0, 1, 0]


def test_positive_similarities_against_a_loop():
    rng = np.random.default_rng(0)
    audio, text = rng.normal(size=(3, 5)), rng.normal(size=(6, 5))
    text_audio = np.array([0, 0, 1, 2, 2, 1])
    got = positive_similarities(audio, text, text_audio)
    want = [text[i] @ audio[j] / np.linalg.norm(text[i]) / np.linalg.norm(audio[j]) for i, j in enumerate(text_audio)]
    assert np.allclose(got, want)
    with pytest.raises(ValueError):
        positive_similarities(audio, text, text_audio[:3])


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_toy_manifest(tmp_path_factory.mktemp("toy"), n_train=16, n_val=4, n_test=4)


def test_reweight_and_drift_train_through_the_config(manifest, tmp_path):
    cfg = tiny_config(manifest, tmp_path / "run", "objective.scheme=kcl", "objective.reweight=true",
                      "train.diagnostics=[drift]")
    trainer = Trainer(cfg)
    start = copy.deepcopy(trainer.objective.reweight.log_weight.detach())
    trainer.fit()
    steps = [json.loads(x) for x in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["type"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert "drift_cos" not in steps[0]  # no "before" weights at the first step
    for r in steps[1:]:
        assert -1.0 <= r["drift_cos"] <= 1.0 and 0.0 <= r["drift_perp"] <= 1.0
        assert r["drift_cos"] ** 2 <= 1.0
    assert all("reweight_w" in r for r in steps)
    assert steps[-1]["reweight_w"] != pytest.approx(float(start.exp()))  # the weight on P+ is learnt


def test_config_errors(manifest, tmp_path):
    with pytest.raises(MlatrError, match="reweight"):
        tiny_config(manifest, tmp_path, "objective.reweight=true", "objective.base=siglip")
    with pytest.raises(MlatrError, match="diagnostics"):
        Trainer(tiny_config(manifest, tmp_path / "x", "train.diagnostics=[nope]"))


def _rw_reference(a, t, tau, c):
    """Independent Simple Reweight: logits cos/tau with c added to the positives, mean CE both ways."""
    a = torch.nn.functional.normalize(a, dim=1)
    t = torch.nn.functional.normalize(t, dim=1)
    logits = t @ a.T / tau + c * torch.eye(len(a))
    lab = torch.arange(len(a))
    return (torch.nn.functional.cross_entropy(logits, lab) + torch.nn.functional.cross_entropy(logits.T, lab)) / 2


def test_reweight_objective_scores_only_audio_text_pairs():
    from mlatr.losses import infonce_pair
    from mlatr.models.outputs import EncoderOutput
    from mlatr.training.config import ObjectiveConfig
    from mlatr.training.objective import build_objective

    g = torch.Generator().manual_seed(1)
    a, t = torch.randn(5, 8, generator=g), torch.randn(5, 2, 8, generator=g)
    index = torch.arange(10).reshape(5, 2)  # clip i's captions are flat texts 2i, 2i + 1
    sel = Selection([""] * 10, ["eng"] * 10, index, [["eng", "fra"]] * 5)
    for scheme in ("mlclap", "cacl"):
        obj = build_objective(ObjectiveConfig(scheme=scheme, reweight=True), 5)
        with torch.no_grad():
            obj.reweight.log_weight.fill_(0.7)
        selection = sel if scheme == "cacl" else Selection([""] * 5, ["eng"] * 5, index[:, :1] // 2, [["eng"]] * 5)
        flat = t.reshape(10, 8) if scheme == "cacl" else t[:, 0]
        out = obj(EncoderOutput(a), EncoderOutput(flat), selection, 0.1)
        loss, logs = out.total, out.log_values()
        if scheme == "mlclap":
            want = _rw_reference(a, t[:, 0], 0.1, 0.7)
        else:  # ATRI eq. 12: three pairs of 2N terms; the English-other pair stays plain InfoNCE
            tt = infonce_pair(t[:, 0], t[:, 1], 0.1).total
            want = (10 * _rw_reference(a, t[:, 0], 0.1, 0.7) + 10 * _rw_reference(a, t[:, 1], 0.1, 0.7) + tt) / 30
        assert float(loss.detach()) == pytest.approx(float(want), rel=1e-5)
        assert logs["reweight_w"] == pytest.approx(math.exp(0.7), rel=1e-6)


def test_drift_monitor_leaves_training_unchanged(manifest, tmp_path):
    plain = Trainer(tiny_config(manifest, tmp_path / "plain", "train.epochs=1"))
    plain.fit()
    watched = Trainer(tiny_config(manifest, tmp_path / "watched", "train.epochs=1", "train.diagnostics=[drift]"))
    watched.fit()
    a, b = plain.model.state_dict(), watched.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # eval-mode, no-grad measurement: same RNG, same weights
