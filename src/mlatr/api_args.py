"""The Python API's arguments, checked where they enter: one helper per kind of argument.

``mlatr.load``, :class:`~mlatr.inference.LoadedModel`'s methods, :class:`~mlatr.search.Index`'s ``build`` /
``load`` / ``search_*`` and ``mlatr.evaluate`` check each argument here before any work: its type (a wrong one
is :class:`ArgumentTypeError`, a ``TypeError``), its range, shape, dtype and finiteness (:class:`ArgumentError`,
a ``ValueError``); both are :class:`~mlatr.errors.MlatrError` and name the argument (``batch_size: expected an
integer >= 1, got -1``). Before: ``batch_size=-1`` returned a ``(0, 0)`` array, a stereo array became thousands
of 2-sample clips, int16 samples were read unscaled, ``None`` / bytes / ``lang=3`` gave bare ``TypeError`` s
or silent coercion.

Audio given as arrays (:func:`waveform`), the documented rule:

* a 1-D array ``[frames]`` is one mono clip;
* a 2-D array ``[frames, channels]`` (what ``soundfile.read`` returns for a multi-channel file) with at most
  :data:`MAX_CHANNELS` channels is one clip, its channels averaged to mono (as the file reader mixes a file);
  any other 2-D array (``[channels, frames]``, a stack of clips) is refused: transpose it, or give a list of
  1-D arrays, one per clip;
* integer PCM is scaled as the file reader scales it: ``int16 / 2**15``, ``int32 / 2**31``, ``int8 / 2**7``,
  ``uint8`` as ``(x - 128) / 2**7``; floats are taken as they are; other dtypes are refused;
* the samples must be finite, and ``sample_rate`` is required (an array does not say its rate).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

from mlatr.errors import MlatrError
from mlatr.languages import normalize_all

#: Most channels an array may have to be read as ``[frames, channels]``.
MAX_CHANNELS = 8
#: Integer sample types and the divisor (and offset) that maps them to [-1, 1], as ``soundfile`` reads PCM.
PCM_SCALE: dict[np.dtype, tuple[float, float]] = {
    np.dtype(np.int8): (2.0 ** 7, 0.0), np.dtype(np.int16): (2.0 ** 15, 0.0), np.dtype(np.int32): (2.0 ** 31, 0.0),
    np.dtype(np.uint8): (2.0 ** 7, 128.0)}


class ArgumentError(MlatrError):
    """An argument of the Python API with a value out of its range, shape or dtype (a ``ValueError``)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the Python API of the wrong type (a ``TypeError`` and a ``ValueError``)."""


def _kind(value: Any) -> str:
    return type(value).__name__


def integer(name: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` as an ``int`` in ``[low, high]``; a bool, a float or anything else is refused."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ArgumentTypeError(f"{name}: expected an integer, got {_kind(value)} {value!r:.40}")
    if value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"in {low}..{high}"
        raise ArgumentError(f"{name}: expected an integer {span}, got {value}")
    return int(value)


def _check_real(name: str, value: Any) -> None:
    """Refuse anything but a real number (``bool`` included, though Python counts it as one)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ArgumentTypeError(f"{name}: expected a number, got {_kind(value)} {value!r:.40}")


def positive_number(name: str, value: Any, allow_none: bool = True) -> float | None:
    """``value`` as a finite ``float`` > 0 (``None`` passes when ``allow_none``)."""
    if value is None and allow_none:
        return None
    _check_real(name, value)
    if not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"{name}: expected a finite number > 0, got {value}")
    return float(value)


def probability(name: str, value: Any, allow_none: bool = True) -> float | None:
    """``value`` as a ``float`` in [0, 1] (``None`` passes when ``allow_none``)."""
    if value is None and allow_none:
        return None
    _check_real(name, value)
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise ArgumentError(f"{name}: expected a probability in [0, 1], got {value}")
    return float(value)


def flag(name: str, value: Any) -> bool:
    """``value`` when it is a bool."""
    if not isinstance(value, bool | np.bool_):
        raise ArgumentTypeError(f"{name}: expected True or False, got {_kind(value)} {value!r:.40}")
    return bool(value)


def text(name: str, value: Any, empty: bool = False) -> str:
    """``value`` when it is a string, non-blank (unless ``empty``) and encodable as UTF-8 (no unpaired
    surrogate such as ``'\\ud800'``, which a tokenizer cannot read)."""
    if not isinstance(value, str):
        hint = " (decode bytes first: value.decode('utf-8'))" if isinstance(value, bytes | bytearray) else ""
        raise ArgumentTypeError(f"{name}: expected a string, got {_kind(value)} {value!r:.40}{hint}")
    if not empty and not value.strip():
        raise ArgumentError(f"{name}: empty text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgumentError(f"{name}: character {exc.start} is an unpaired surrogate {value[exc.start]!r}, not "
                            "text (decode the source with errors='replace')") from None
    return value


def texts(name: str, value: Any) -> list[str]:
    """One string or a sequence of them (not bytes, not a dict), each checked by :func:`text` as ``NAME[i]``."""
    if isinstance(value, str):
        return [text(name, value)]
    if isinstance(value, bytes | bytearray | dict) or not isinstance(value, Sequence | np.ndarray):
        raise ArgumentTypeError(f"{name}: expected a string or a list of strings, got {_kind(value)} {value!r:.40}")
    return [text(f"{name}[{i}]", v) for i, v in enumerate(value)]


def language_codes(name: str, value: Any) -> list[str]:
    """One language code or a list of them (ISO 639-1/3, :func:`mlatr.languages.normalize_all`), each a string."""
    return normalize_all(texts(name, value), name)


def instance(name: str, value: Any, kind: type, what: str) -> Any:
    """``value`` when it is a ``kind`` (``what`` says how to make one: ``"mlatr.load(PATH)"``)."""
    if not isinstance(value, kind):
        raise ArgumentTypeError(f"{name}: expected a {kind.__name__} ({what}), got {_kind(value)}")
    return value


def choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{name}: expected one of {', '.join(choices)}, got {_kind(value)} {value!r:.40}")
    if value not in choices:
        raise ArgumentError(f"{name}: expected one of {', '.join(choices)}, got {value!r:.40}")
    return value


def path(name: str, value: Any) -> str:
    """``value`` as a path string: a ``str`` or ``os.PathLike`` (not bytes), non-empty, without NUL."""
    if isinstance(value, bytes | bytearray) or not isinstance(value, str | os.PathLike):
        raise ArgumentTypeError(f"{name}: expected a path (str or pathlib.Path), got {_kind(value)} {value!r:.40}")
    out = os.fspath(value)
    if not isinstance(out, str) or not out or "\0" in out:
        raise ArgumentError(f"{name}: expected a file name, got {out!r:.40}")
    return text(name, out)


def paths(name: str, value: Any) -> str | list[str]:
    """One path (returned as :func:`path` returns it) or a list / tuple of them, each checked as ``NAME[i]``."""
    if isinstance(value, list | tuple):
        return [path(f"{name}[{i}]", v) for i, v in enumerate(value)]
    return path(name, value)


def embeddings(name: str, value: Any, dim: int) -> np.ndarray:
    """``value`` as float32 ``[n, dim]`` (a 1-D vector of ``dim`` is one row): numeric, finite, of the model's
    dimension."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{name}: expected an array of embeddings, got {_kind(value)} ({exc})") from None
    if array.dtype.kind not in "fiu" or array.dtype == np.bool_:
        raise ArgumentTypeError(f"{name}: expected numbers, got an array of {array.dtype}")
    if array.ndim == 1:
        array = array[None]
    if array.ndim != 2 or array.shape[1] != dim:
        raise ArgumentError(f"{name}: expected [n, {dim}] embeddings (the model's dimension), got shape "
                            f"{tuple(array.shape)}")
    array = array.astype(np.float32)
    if not np.isfinite(array).all():
        rows = np.flatnonzero(~np.isfinite(array).all(axis=1))
        raise ArgumentError(f"{name}: row {int(rows[0])} holds NaN or infinity ({len(rows)} row(s) in all)")
    return array


def waveform(name: str, value: Any) -> np.ndarray:
    """One clip given as an array, mono float32 by the rule of the module docstring (channels averaged,
    integer PCM scaled), finite and non-empty."""
    array = np.asarray(value)
    if array.dtype in PCM_SCALE:
        scale, offset = PCM_SCALE[array.dtype]
        array = (array.astype(np.float64) - offset) / scale
    elif array.dtype.kind != "f":
        raise ArgumentTypeError(f"{name}: samples of dtype {array.dtype} (give float, or int8 / int16 / int32 / "
                                "uint8 PCM)")
    if array.ndim == 2:
        frames, channels = array.shape
        if not 1 <= channels <= MAX_CHANNELS or frames < channels:
            raise ArgumentError(f"{name}: a 2-D array of shape {tuple(array.shape)} is not [frames, channels] with at "
                                f"most {MAX_CHANNELS} channels (soundfile's layout): transpose a [channels, frames] "
                                "array, or give one 1-D array per clip")
        array = array.mean(axis=1)
    elif array.ndim != 1:
        raise ArgumentError(f"{name}: expected a 1-D waveform or a [frames, channels] array, got shape "
                            f"{tuple(array.shape)}")
    if array.shape[0] == 0:
        raise ArgumentError(f"{name}: an empty waveform")
    array = array.astype(np.float32)
    if not np.isfinite(array).all():
        raise ArgumentError(f"{name}: the waveform holds NaN or infinite samples")
    return array
