"""Gradient caching gives the plain step's loss and gradients (model, temperature, loss-side parameters)."""

import json

import pytest
import torch

from mlatr.training.config import load_config
from mlatr.training.grad_cache import chunk_schedule
from mlatr.training.objective import build_objective
from mlatr.training.step import StepRunner, step_inputs
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config

#: The tiny model without dropout: chunked and whole forwards then compute the same function.
NO_DROPOUT = [
    "model.audio={name: small-cnn, channels: [8, 16], dim: 32, num_heads: 2, ff_dim: 64, dropout: 0.0}",
    "model.text={name: small-transformer, dim: 32, num_layers: 1, num_heads: 2, ff_dim: 64, vocab_size: 300, "
    "dropout: 0.0}",
    "model.learnable_temperature=true",
]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return make_toy_manifest(tmp_path_factory.mktemp("toy"), n_train=16, n_val=4, n_test=0)


@pytest.fixture(scope="module")
def trainer(manifest, tmp_path_factory):
    """One tiny model for every case (each case brings its own objective)."""
    return Trainer(tiny_config(manifest, tmp_path_factory.mktemp("run") / "run", *NO_DROPOUT, "train.eval_every=0"))


def one_step(trainer, objective, chunk, autocast=None):
    """Loss and every parameter's gradient after one step of the trainer's first batch."""
    batch = next(iter(trainer.batches.epoch(0)))
    inputs = step_inputs(batch, trainer.batches, objective.scheme, trainer.cfg.data.languages,
                         torch.Generator().manual_seed(5), trainer.dist)
    runner = StepRunner(trainer.model, trainer.net, objective, trainer.dist, trainer.device,
                        autocast or trainer._autocast, chunk)
    params = list(trainer.model.named_parameters()) + [("objective." + n, p) for n, p in objective.named_parameters()]
    for _, p in params:
        p.grad = None
    result = runner(inputs, 1, True, "test")
    return result.loss, {n: p.grad.clone() for n, p in params if p.grad is not None}


def objective_of(*overrides):
    return build_objective(load_config(None, list(overrides)).objective, 8)


#: (overrides, chunk): several chunks on both sides, or the audio in one chunk and KCL's 24 captions in 3.
CASES = {
    "mlclap": (["objective.scheme=mlclap"], 3),
    "kcl-siglip": (["objective.scheme=kcl", "objective.base=siglip"], 8),
    "cacl": (["objective.scheme=cacl"], 3),
    "kcl-svr": (["objective.scheme=kcl", "objective.svr={radius: dynamic}"], 5),
    "mlclap-lgmm-cmsc": (["objective.scheme=mlclap", "objective.matching={name: lgmm}", "objective.cmsc={beta: 0.3}"],
                         3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cached_step_equals_the_plain_step(trainer, case):
    overrides, chunk = CASES[case]
    objective = objective_of(*overrides)
    loss, grads = one_step(trainer, objective, None)
    cached_loss, cached = one_step(trainer, objective, chunk)
    assert cached_loss == pytest.approx(loss, rel=1e-5)
    assert grads.keys() == cached.keys()
    assert "log_temperature" in grads  # the temperature gets its gradient from the loss on cached embeddings
    if "svr" in case:
        assert any(k.startswith("objective.svr.radius_model") for k in grads)
    if "siglip" in case:
        assert "objective.bias" in grads
    for name in grads:
        torch.testing.assert_close(cached[name], grads[name], rtol=2e-4, atol=2e-6, msg=name)


def test_cached_step_under_bf16_autocast(trainer):
    """AMP: embeddings cached in bf16, the loss in float32, the replay's gradients cast back. bf16 rounds
    differently per chunk, so both bf16 steps are compared with the float32 step: the cached one may not
    stray further from it than the plain bf16 step does."""
    objective = objective_of("objective.scheme=kcl")

    def bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    loss, exact = one_step(trainer, objective, None)
    plain_loss, plain = one_step(trainer, objective, None, bf16)
    cached_loss, cached = one_step(trainer, objective, 4, bf16)
    assert cached_loss == pytest.approx(loss, rel=2e-2) and plain_loss == pytest.approx(loss, rel=2e-2)

    def error(grads):
        return float(torch.cat([(grads[k] - exact[k]).flatten() for k in exact]).norm())

    reference = float(torch.cat([g.flatten() for g in exact.values()]).norm())
    assert error(cached) < max(2 * error(plain), 0.02 * reference)


def test_training_with_grad_cache_logs_the_plain_losses(manifest, tmp_path):
    """Through the trainer: the first step's loss (before any update) is the plain run's, and the run ends.
    Later steps are not compared: Adam turns the rounding noise of gradients that are zero in exact
    arithmetic (attention key biases) into full-size updates."""
    common = [*NO_DROPOUT, "objective.scheme=kcl", "train.eval_every=0", "train.epochs=1"]
    losses = {}
    for name, extra in (("plain", []), ("cached", ["optim.grad_cache_chunk=5"])):
        trainer = Trainer(tiny_config(manifest, tmp_path / name, *common, *extra))
        assert trainer.run_step.chunk == (5 if extra else None)  # the setting reaches the step
        trainer.fit()
        lines = [json.loads(x) for x in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        losses[name] = [r["loss"] for r in lines if r["type"] == "step"]
    assert len(losses["cached"]) == len(losses["plain"]) == 2
    assert losses["cached"][0] == pytest.approx(losses["plain"][0], rel=1e-5)


def test_chunk_schedule_ends_with_both_sides():
    for n_audio, n_text, chunk in ((8, 24, 8), (8, 8, 3), (5, 40, 7), (24, 192, 24)):
        schedule = chunk_schedule(n_audio, n_text, chunk)
        assert schedule[-1][0] is not None and schedule[-1][1] is not None
        audio = [s for s, _ in schedule if s is not None]
        text = [t for _, t in schedule if t is not None]
        assert sum(s.stop - s.start for s in audio) == n_audio and sum(t.stop - t.start for t in text) == n_text
