"""A model's calibration, as data: what turns its search and classification scores into probabilities, and
for which weights it was fitted (issues 33 and 45).

A calibration belongs to one model's weights. ``mlatr experiment calibrate`` fits it on that model's own
leave-one-library-out folds (:mod:`mlatr.lab.experiments.relevance_fit`; ``mlatr demo-real`` does it for the model
it ships) and it travels with the weights: a checkpoint's ``calibration`` entry, a model folder's
``config.json`` ``calibration`` section (:mod:`mlatr.inference.checkpoint`, :mod:`mlatr.inference.model_folder`).
It holds

- ``weights_sha256``: the SHA-256 of the weights it was fitted for
  (:func:`mlatr.inference.model_identity.weights_sha256`); a model whose weights differ does not use it;
- ``fitted``: what it was fitted on (command, commit, corpus, folds, query split);
- ``text``, ``answer``, ``sound``: the hit relevance model, the answer model and the sound-query model
  (:class:`mlatr.search.relevance.Calibration`);
- ``classify``: the zero-shot classification temperature and "none of these" level;
- ``abstention`` (optional): the "nothing relevant" rule each index fits its own threshold with
  (:mod:`mlatr.search.abstention`).

A model without a calibration of its own is *uncalibrated*: its searches rank all the same (the fused order of
the default ranking, :data:`DEFAULT_RANKING_PATH`), but no hit, answer or label carries a probability, and no
answer is called "nothing relevant" (``Results.calibrated`` is False).

``mlatr/data/default_ranking.json`` is that default ranking: the issue-33 fit (USE near-identity heads on the
1,481-clip corpus, ``weights_sha256`` null: fitted for no model that ships), used only to order an uncalibrated
model's hits; its probabilities and thresholds are never reported. This module reads and checks the JSON only
(no numpy), so every layer takes it from here.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from mlatr.errors import MlatrError

#: The format of a calibration (the issue-33 one, ``mlatr-calibration-1``, had no weights digest: read as
#: fitted for no model).
FORMAT = "mlatr-calibration-2"
FORMATS = ("mlatr-calibration-1", FORMAT)

#: The fused order of a model without a calibration of its own (module docstring).
DEFAULT_RANKING_PATH = Path(__file__).resolve().parent / "data" / "default_ranking.json"

#: What every calibration holds.
REQUIRED = ("text", "answer", "sound", "classify")


def check_calibration(d: Any, where: str) -> dict:
    """``d`` when it is a calibration (module docstring): an object of a known format with the four models and a
    weights digest (a 64-digit hex string, or null); a :class:`MlatrError` naming ``where`` and the field."""
    if not isinstance(d, dict):
        raise MlatrError(f"{where}: the calibration is not an object")
    if d.get("format", FORMATS[0]) not in FORMATS:
        raise MlatrError(f"{where}: calibration format {d.get('format')!r} is not one mlatr reads "
                         f"({', '.join(FORMATS)})")
    missing = [k for k in REQUIRED if not isinstance(d.get(k), dict)]
    if missing:
        raise MlatrError(f"{where}: the calibration lacks {', '.join(missing)}")
    digest = d.get("weights_sha256")
    if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                   and all(c in "0123456789abcdef" for c in digest)):
        raise MlatrError(f"{where}: calibration.weights_sha256 must be a SHA-256 (64 hex digits) or null")
    if not isinstance(d.get("fitted", {}), dict) or not isinstance(d.get("abstention", {}), dict):
        raise MlatrError(f"{where}: calibration.fitted and calibration.abstention must be objects")
    return d


def read_calibration(path: str | Path) -> dict:
    """The calibration in the JSON file ``path`` (checked: :func:`check_calibration`)."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MlatrError(f"{path}: cannot read the calibration: {exc}") from exc
    return check_calibration(d, str(path))


def calibration_id(d: dict) -> str:
    """A short name of one calibration's contents (the first 12 hex digits of the SHA-256 of its canonical JSON):
    what an index's "nothing relevant" record names to know it was fitted with this calibration."""
    text = json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def calibration_problem(d: dict | None, weights_sha256: str) -> str | None:
    """Why the calibration ``d`` is not one for weights ``weights_sha256`` (None: it is): absent, fitted for no
    model, or fitted for other weights."""
    if d is None:
        return "the model carries no calibration (mlatr experiment calibrate --model MODEL fits one)"
    fitted_for = d.get("weights_sha256")
    if fitted_for is None:
        return "its calibration was fitted for no model in particular"
    if fitted_for != weights_sha256:
        return (f"its calibration was fitted for other weights (sha256 {fitted_for[:12]}, these are "
                f"{weights_sha256[:12]})")
    return None


@lru_cache(maxsize=1)
def default_ranking() -> dict:
    """The default ranking (read once): the order of an uncalibrated model's hits, never its probabilities."""
    return read_calibration(DEFAULT_RANKING_PATH)
