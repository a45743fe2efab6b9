"""The calibration shipped with mlatr, as data: ``mlatr/data/calibration.json`` (issue 33).

``mlatr experiment calibrate --write`` fits it on libraries never trained on
(:mod:`mlatr.experiments.relevance_fit`). It holds the text-query and sound-query relevance models
(read by :class:`mlatr.search.relevance.Calibration`) and the zero-shot classification temperature
(read by :class:`mlatr.inference.loaded_model.LoadedModel.classify`). This module only reads the file
(json, no numpy), so both layers take it from here without one importing the other.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from mlatr.errors import MlatrError

#: The fitted models shipped with mlatr (``mlatr experiment calibrate --write`` writes it).
CALIBRATION_PATH = Path(__file__).resolve().parent / "data" / "calibration.json"


def read_calibration(path: str | Path = CALIBRATION_PATH) -> dict:
    """The calibration file's contents (``text``, ``answer``, ``sound``, ``classify``, ``fitted``)."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MlatrError(f"{path}: cannot read the relevance calibration: {exc}") from exc
    missing = [k for k in ("text", "answer", "sound", "classify") if k not in d]
    if missing:
        raise MlatrError(f"{path}: the relevance calibration lacks {', '.join(missing)}")
    return d


@lru_cache(maxsize=1)
def shipped_calibration() -> dict:
    """The shipped calibration (read once)."""
    return read_calibration(CALIBRATION_PATH)
