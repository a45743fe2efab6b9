"""An EpochLoop subclass states the loop's state through the constructor and supplies the abstract methods: one
that leaves a method or a required value out, or never calls EpochLoop.__init__, fails when it is constructed,
naming what is missing; a complete one constructs with no epoch run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from mlatr.errors import MlatrError
from mlatr.training.config import ObjectiveConfig
from mlatr.training.epoch_loop import EpochLoop
from mlatr.training.objective import build_objective


def _state(**change):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = {"model": model, "objective": build_objective(ObjectiveConfig(), 4), "run_step": None,
             "optimizer": optimizer, "scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0),
             "languages": ["eng"], "epochs": 2, "seed": 0}
    state.update(change)
    return {k: v for k, v in state.items() if v is not ...}


class Complete(EpochLoop):
    def __init__(self, **change):
        super().__init__(**_state(**change))

    def epoch_batches(self, epoch):
        return [], 0

    def epoch_record(self, epoch, stats):
        return {"epoch": epoch + 1, "loss": stats.loss}

    def run_config(self):
        return {}

    def check_resume(self, state, path: Path) -> None:
        pass


def test_a_complete_subclass_constructs_with_no_epoch_run():
    loop = Complete(out=None, keep_best=True)
    assert (loop.epoch, loop.step, loop.history, loop.best) == (0, 0, [], {"score": None, "epoch": None})
    assert loop.dist.world_size == 1 and loop.device == torch.device("cpu") and loop.keep_best
    assert not loop.validates_ever()
    with pytest.raises(MlatrError, match="validates no epoch"):
        loop.validation()


@pytest.mark.parametrize("method", ["epoch_batches", "epoch_record", "run_config", "check_resume"])
def test_a_subclass_missing_a_method_a_run_supplies_fails_at_construction(method):
    incomplete = type("Incomplete", (EpochLoop,), {
        name: Complete.__dict__[name] for name in ("__init__", "epoch_batches", "epoch_record", "run_config",
                                                   "check_resume") if name != method})
    with pytest.raises(TypeError, match=f"Incomplete.*{method}"):
        incomplete()


@pytest.mark.parametrize("value", ["model", "objective", "run_step", "optimizer", "scheduler", "languages",
                                   "epochs", "seed"])
def test_a_subclass_missing_a_required_value_fails_at_construction(value):
    with pytest.raises(TypeError, match=f"'{value}'"):
        Complete(**{value: ...})


def test_a_subclass_that_never_calls_the_loop_constructor_fails_at_construction():
    class Forgetful(Complete):
        def __init__(self):
            self.model = nn.Linear(3, 2)  # the old way: attributes set by hand, the loop's own state never made

    with pytest.raises(TypeError, match=r"Forgetful.__init__ must call EpochLoop.__init__"):
        Forgetful()


def test_a_run_that_validates_supplies_the_three_validation_methods_together():
    class HalfValidating(Complete):
        def validates_after(self, epoch):
            return True

    with pytest.raises(TypeError, match="missing: validates_ever, validation"):
        HalfValidating()

    class Validating(HalfValidating):
        def validates_ever(self):
            return True

        def validation(self):
            return 1.0, {}

    assert Validating().validates_ever()


@pytest.mark.parametrize(("change", "message"), [({"epochs": 0}, "epochs and accumulate must be >= 1"),
                                                  ({"accumulate": 0}, "epochs and accumulate must be >= 1"),
                                                  ({"progress": "steps"}, "progress must be")])
def test_wrong_loop_values_are_refused(change, message):
    with pytest.raises(MlatrError, match=message):
        Complete(**change)
