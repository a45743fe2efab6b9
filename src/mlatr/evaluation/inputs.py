"""Checks and normalisation of the arrays an evaluation takes.

The embedding-evaluation contract (docs/architecture.md): ``audio [Na, D]``, ``text [Nt, D]``,
``text_audio [Nt]`` (index of the clip each caption describes), ``text_lang [Nt]`` (language codes),
``text_group [Nt]`` (one id shared by the translations of one source caption). numpy arrays, torch
tensors or lists are accepted. Every problem raises one :class:`~mlatr.errors.MlatrError` that names
the array and the first offending position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mlatr.errors import MlatrError
from mlatr.languages import DEFAULT_LANGUAGES


def unit_rows(x: np.ndarray, dtype: np.dtype | None = None, eps: float = 1e-12) -> np.ndarray:
    """Rows of ``x [N, D]`` scaled to unit L2 norm in ``dtype`` (default: ``x``'s); all-zero rows stay zero."""
    x = np.asarray(x).astype(dtype or np.asarray(x).dtype, copy=False)
    return x / np.maximum(np.sqrt(np.einsum("ij,ij->i", x, x)), eps)[:, None]


def to_numpy(x: Any) -> np.ndarray:
    """numpy view of a numpy array, torch tensor (any device, detached) or list."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if str(x.dtype) in ("torch.bfloat16", "torch.float16"):
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def float_dtype(*arrays: np.ndarray) -> np.dtype:
    """float64 when any input is float64, else float32 (the dtype the scores are computed in)."""
    return np.dtype(np.float64) if any(a.dtype == np.float64 for a in arrays) else np.dtype(np.float32)


def order_languages(codes: list[str], pivot: str) -> list[str]:
    """Pivot first, then the default ATRI order, then any other code alphabetically."""
    present = set(codes)
    head = [pivot] if pivot in present else []
    known = [c for c in DEFAULT_LANGUAGES if c in present and c != pivot]
    rest = sorted(present - set(head) - set(known))
    return head + known + rest


@dataclass
class CaptionTable:
    """The caption side of an evaluation, checked and indexed.

    ``lang_idx[i]`` indexes ``languages``; ``group_idx[i]`` indexes ``group_ids`` (the original ids).
    """

    text_audio: np.ndarray  # [Nt] int64
    lang_idx: np.ndarray  # [Nt] int64
    group_idx: np.ndarray  # [Nt] int64
    languages: list[str]
    group_ids: np.ndarray  # [G] original group ids
    n_audio: int
    pivot: str

    @property
    def n_text(self) -> int:
        return int(self.text_audio.shape[0])


def _check_finite(name: str, x: np.ndarray) -> None:
    if np.isfinite(np.sum(x, dtype=np.float64)):  # one pass, no mask: NaN/inf would propagate
        return
    bad = ~np.isfinite(x)
    if not bad.any():
        return
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise MlatrError(f"{name}: contains NaN or inf (first at row {row})")


def check_embeddings(name: str, x: Any) -> np.ndarray:
    """A finite, non-zero ``[N, D]`` float array, as numpy."""
    a = to_numpy(x)
    if a.ndim != 2:
        raise MlatrError(f"{name}: expected a 2-D array [N, D], got shape {tuple(a.shape)}")
    if a.shape[0] == 0:
        raise MlatrError(f"{name}: is empty (shape {tuple(a.shape)})")
    if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.complexfloating):
        raise MlatrError(f"{name}: expected real numbers, got dtype {a.dtype}")
    _check_finite(name, a)
    sq = np.einsum("ij,ij->i", a, a) if a.dtype.kind == "f" else np.einsum("ij,ij->i", a, a, dtype=np.float64)
    zero = sq == 0
    if zero.any():
        raise MlatrError(f"{name}: row {int(np.argmax(zero))} is the zero vector (cosine undefined)")
    return a


def check_caption_table(
    n_audio: int, text_audio: Any, text_lang: Any, text_group: Any, n_text: int | None, pivot: str
) -> CaptionTable:
    """Check the caption index arrays against each other and against ``n_audio`` clips."""
    ta = to_numpy(text_audio)
    tl = to_numpy(text_lang)
    tg = to_numpy(text_group)
    for name, arr in (("text_audio", ta), ("text_lang", tl), ("text_group", tg)):
        if arr.ndim != 1:
            raise MlatrError(f"{name}: expected a 1-D array [Nt], got shape {tuple(arr.shape)}")
    if n_text is None:
        n_text = ta.shape[0]
    for name, arr in (("text_audio", ta), ("text_lang", tl), ("text_group", tg)):
        if arr.shape[0] != n_text:
            raise MlatrError(f"{name}: has {arr.shape[0]} entries but there are {n_text} captions")
    if n_text == 0:
        raise MlatrError("text: there are no captions to evaluate")
    if not np.issubdtype(ta.dtype, np.integer):
        if np.issubdtype(ta.dtype, np.floating) and np.all(np.isfinite(ta)) and np.all(ta == np.round(ta)):
            ta = ta.astype(np.int64)
        else:
            raise MlatrError(f"text_audio: expected integer clip indices, got dtype {ta.dtype}")
    ta = ta.astype(np.int64)
    out = (ta < 0) | (ta >= n_audio)
    if out.any():
        i = int(np.argmax(out))
        raise MlatrError(
            f"text_audio: index {int(ta[i])} at caption {i} is out of range (there are {n_audio} audio clips)"
        )
    codes = [str(c) for c in tl.tolist()]
    for i, c in enumerate(codes):
        if not c.strip():
            raise MlatrError(f"text_lang: empty language code at caption {i}")
    languages = order_languages(sorted(set(codes)), pivot)
    if len(languages) > 1 and pivot not in languages:
        raise MlatrError(
            f"text_lang: the pivot language {pivot!r} has no captions (languages present: "
            f"{', '.join(languages)}); pass --pivot / pivot= with one of them"
        )
    pos = {c: k for k, c in enumerate(languages)}
    lang_idx = np.fromiter((pos[c] for c in codes), dtype=np.int64, count=n_text)
    if tg.dtype.kind == "f":
        raise MlatrError(f"text_group: expected integer or string group ids, got dtype {tg.dtype}")
    group_ids, group_idx = np.unique(tg, return_inverse=True)
    group_idx = group_idx.astype(np.int64).reshape(-1)
    _check_groups(group_idx, lang_idx, ta, group_ids, languages)
    return CaptionTable(ta, lang_idx, group_idx, languages, group_ids, int(n_audio), pivot)


def _python_scalar(value: Any) -> Any:
    """A numpy scalar as the Python value (for messages)."""
    return value.item() if hasattr(value, "item") else value


def _check_groups(group_idx, lang_idx, text_audio, group_ids, languages) -> None:
    n_lang = len(languages)
    key = group_idx * n_lang + lang_idx
    order = np.argsort(key, kind="stable")
    ks = key[order]
    dup = np.nonzero(ks[1:] == ks[:-1])[0]
    if dup.size:
        a, b = int(order[dup[0]]), int(order[dup[0] + 1])
        raise MlatrError(
            f"text_group: group {_python_scalar(group_ids[group_idx[a]])!r} has two captions in language "
            f"{languages[lang_idx[a]]!r} (captions {min(a, b)} and {max(a, b)}); a group holds one "
            "caption per language (the translations of one source caption)"
        )
    order = np.argsort(group_idx, kind="stable")
    g, clip = group_idx[order], text_audio[order]
    bad = np.nonzero((g[1:] == g[:-1]) & (clip[1:] != clip[:-1]))[0]
    if bad.size:
        a, b = int(order[bad[0]]), int(order[bad[0] + 1])
        raise MlatrError(
            f"text_group: group {_python_scalar(group_ids[group_idx[a]])!r} spans two clips (caption {a} -> clip "
            f"{int(text_audio[a])}, caption {b} -> clip {int(text_audio[b])}); translations of one "
            "caption describe the same clip"
        )
