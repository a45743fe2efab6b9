"""Checkpoints: one file with the model's config and weights plus the state to resume training.

Layout (a dict saved with ``torch.save``, loaded with ``weights_only=True``)::

    {"format": "mlatr-checkpoint-1", "model_config": {...}, "model": state_dict,
     "matching_head": {"name": ...}, "train_config": {...}, "objective": state_dict,
     "epoch": int, "step": int, "optimizer": ..., "scheduler": ..., "best": {...}, "history": [...]}

Only ``model_config``, ``model``, ``matching_head`` and the ``data`` part of ``train_config`` are needed
to use a model; the rest resumes training. :func:`load_model` is the one way a checkpoint becomes a
usable model (evaluation, encoding, search, initialisation): a :class:`LoadedModel` that knows the head
it ranks with and the data settings it was trained with. Files are written atomically, so an
interrupted save never corrupts the previous one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mlatr.errors import MlatrError
from mlatr.file_kinds import unreadable
from mlatr.io_utils import atomic_write_with
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.matching import MatchingHead, build_matching_head_from_config
from mlatr.models.dual_encoder import DualEncoder
from mlatr.training.objective import matching_head
from mlatr.training.resources import resolve_device

FORMAT = "mlatr-checkpoint-1"

#: Data settings a model falls back to when its checkpoint carries none (e.g. an imported one).
DEFAULT_DATA = {"sample_rate": 16000, "eval_max_seconds": 10.0, "languages": list(DEFAULT_LANGUAGES)}


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    state = {"format": FORMAT, **state}
    atomic_write_with(path, lambda fh: torch.save(state, fh))


def read_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise MlatrError(f"checkpoint not found: {p}")
    try:
        state = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises RuntimeError / UnpicklingError / EOFError / BadZipFile ...
        raise unreadable(p, "an mlatr checkpoint (written by mlatr train)", exc, ("torch",)) from exc
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise MlatrError(f"{p}: a PyTorch file but not an mlatr checkpoint (expected format {FORMAT}, "
                         "written by mlatr train)")
    return state


def head_of(state: dict[str, Any]) -> MatchingHead:
    """The matching head a checkpoint's model ranks with: ``state["matching_head"]`` (written by the
    trainer), else the training config's ``objective.matching`` (older checkpoints), else pooled cosine."""
    stored = state.get("matching_head")
    if stored:
        return build_matching_head_from_config(dict(stored))
    return matching_head(((state.get("train_config") or {}).get("objective") or {}).get("matching"))


@dataclass
class LoadedModel:
    """A trained model ready to use: the dual encoder (eval mode), the head it ranks with and its settings.

    Attributes:
        model: the :class:`~mlatr.models.dual_encoder.DualEncoder`, in eval mode, on ``device``.
        head: the :class:`~mlatr.matching.MatchingHead` retrieval ranks with (pooled cosine unless the model
            was trained with a fine-grained head; evaluation, zero-shot and search use it).
        train_config: the training config tree the checkpoint carries (``{}`` when none).
        path: the checkpoint file.
    """

    model: DualEncoder
    head: MatchingHead
    train_config: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    @property
    def data(self) -> dict[str, Any]:
        """The data settings the model was trained with (``sample_rate``, ``eval_max_seconds``,
        ``languages``, ...), completed by :data:`DEFAULT_DATA`."""
        return {**DEFAULT_DATA, **(self.train_config.get("data") or {})}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def embed_dim(self) -> int:
        return self.model.embed_dim


#: Options of a pretrained encoder that say how a run trains it, not what it is.
FINE_TUNING_OPTIONS = ("freeze", "train_last_blocks", "train_last_layers", "train_last_stages",
                       "gradient_checkpointing")


def with_fine_tuning(model_config: dict[str, Any], fine_tuning: dict[str, dict[str, Any]],
                     path: str | os.PathLike) -> dict[str, Any]:
    """``model_config`` with each encoder's fine-tuning options taken from ``fine_tuning[side]`` where given."""
    config = dict(model_config)
    for side, options in fine_tuning.items():
        encoder = dict(config[f"{side}_encoder"])
        for key in FINE_TUNING_OPTIONS:
            if key not in options:
                continue
            if key not in encoder:
                raise MlatrError(f"config: model.{side}.{key}: the {encoder['name']!r} {side} encoder of "
                                 f"model.init_checkpoint {path} has no such option")
            encoder[key] = options[key]
        config[f"{side}_encoder"] = encoder
    return config


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu",
               fine_tuning: dict[str, dict[str, Any]] | None = None) -> LoadedModel:
    """The :class:`LoadedModel` saved in checkpoint ``path`` (weights on ``device``, ``"auto"`` = CUDA when
    available; eval mode).

    ``fine_tuning`` (``{"audio": options, "text": options}``, a run's ``model.audio`` / ``model.text``)
    replaces the checkpoint's :data:`FINE_TUNING_OPTIONS` by the ones these options give, so a run started
    from ``model.init_checkpoint`` freezes what its own config says; an option the checkpoint's encoder
    does not take is refused, naming the key.
    """
    state = read_checkpoint(path)
    model = DualEncoder.from_config(with_fine_tuning(state["model_config"], fine_tuning or {}, path))
    model.load_state_dict(state["model"])
    return LoadedModel(model=model.to(resolve_device(device)).eval(), head=head_of(state),
                       train_config=dict(state.get("train_config") or {}), path=Path(path))
