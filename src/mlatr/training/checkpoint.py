"""Checkpoints of training runs: the format and loading live in :mod:`mlatr.inference.checkpoint` (a model is
used without training); this module names them for the training code and for code written against it."""

from mlatr.inference.checkpoint import (
    FINE_TUNING_OPTIONS,
    FORMAT,
    head_of,
    load_model,
    read_checkpoint,
    save_checkpoint,
    with_fine_tuning,
)
from mlatr.inference.loaded_model import DEFAULT_DATA, LoadedModel

__all__ = ["DEFAULT_DATA", "FINE_TUNING_OPTIONS", "FORMAT", "LoadedModel", "head_of", "load_model",
           "read_checkpoint", "save_checkpoint", "with_fine_tuning"]
