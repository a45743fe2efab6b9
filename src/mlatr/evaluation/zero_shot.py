"""Zero-shot audio classification with text prompts (SupCLAP §4.2.2, Table 2; CLAP-style).

Each class label becomes a prompt (``"This is a sound of {label}."`` or its translation), the text
encoder embeds the prompts, and a clip is assigned the classes of highest similarity: the cosine of the
pooled embeddings (:func:`zero_shot`), or any clip x class score matrix (:func:`zero_shot_from_scores`),
e.g. a fine-grained model's own matching head (:func:`mlatr.evaluation.with_head.zero_shot_with_head`).
Top-1 and top-5 accuracy are reported in percent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlatr.errors import MlatrError
from mlatr.evaluation.inputs import check_embeddings, float_dtype, to_numpy, unit_rows

#: The prompt template per language (ISO 639-3). ``{label}`` is replaced by the class name, which
#: should itself be in that language (give translated labels for non-English prompts).
PROMPT_TEMPLATES: dict[str, str] = {
    "eng": "This is a sound of {label}.",
    "fra": "C'est un son de {label}.",
    "deu": "Das ist ein Geräusch von {label}.",
    "spa": "Este es un sonido de {label}.",
    "nld": "Dit is een geluid van {label}.",
    "cat": "Aquest és un so de {label}.",
    "jpn": "これは{label}の音です。",
    "zho": "这是{label}的声音。",
}


def label_text(label: str) -> str:
    """Dataset class names as words: ``"car_horn"`` -> ``"car horn"``, ``"Dog-Bark"`` kept as is."""
    return " ".join(str(label).replace("_", " ").split())


def zero_shot_prompts(labels: list[str], lang: str = "eng") -> list[str]:
    """One prompt per label in language ``lang`` (SupCLAP §4.2.2: "This is a sound of {classlabel}")."""
    if lang not in PROMPT_TEMPLATES:
        raise MlatrError(
            f"zero-shot prompts: no template for language {lang!r} (have: {', '.join(PROMPT_TEMPLATES)})"
        )
    template = PROMPT_TEMPLATES[lang]
    return [template.format(label=label_text(lb)) for lb in labels]


def zero_shot(audio_emb: Any, class_text_emb: Any, targets: Any) -> dict[str, float]:
    """Top-1 / top-5 zero-shot accuracy in percent.

    ``audio_emb [N, D]`` clip embeddings, ``class_text_emb [C, D]`` one embedding per class (the
    prompt's), ``targets [N]`` class index of each clip. Cosine similarity; a clip is correct at k when
    its class ranks within k, the rank being ``1 + number of classes with a strictly greater score``
    (ties optimistic, as in retrieval). With fewer than 5 classes top-5 is top-C.
    """
    a = check_embeddings("audio_emb", audio_emb)
    c = check_embeddings("class_text_emb", class_text_emb)
    if a.shape[1] != c.shape[1]:
        raise MlatrError(f"audio_emb, class_text_emb: embedding sizes differ ({a.shape[1]} vs {c.shape[1]})")
    t = _check_targets(targets, a.shape[0], c.shape[0])
    dtype = float_dtype(a, c)
    a, c = unit_rows(a, dtype), unit_rows(c, dtype)
    s = a @ c.T
    # the true class's score from the same dot product as a single pair, so that a tie is a tie
    s[np.arange(t.size), t] = np.einsum("ij,ij->i", a, c[t])
    return _accuracy(s, t)


def zero_shot_from_scores(scores: Any, targets: Any) -> dict[str, float]:
    """Top-1 / top-5 zero-shot accuracy in percent from a score matrix ``scores [N, C]`` (row = clip,
    column = class prompt, higher = more similar) and ``targets [N]``; ranks as in :func:`zero_shot`."""
    s = to_numpy(scores)
    if s.ndim != 2 or s.shape[1] == 0:
        raise MlatrError(f"scores: expected a [clips, classes] matrix, got shape {tuple(s.shape)}")
    if not np.isfinite(s).all():
        raise MlatrError("scores: contains NaN or infinite values")
    return _accuracy(s, _check_targets(targets, s.shape[0], s.shape[1]))


def _check_targets(targets: Any, n_clips: int, n_classes: int) -> np.ndarray:
    t = to_numpy(targets)
    if t.ndim != 1 or t.shape[0] != n_clips:
        raise MlatrError(f"targets: expected shape ({n_clips},), got {tuple(t.shape)}")
    if not np.issubdtype(t.dtype, np.integer):
        raise MlatrError(f"targets: expected integer class indices, got dtype {t.dtype}")
    bad = (t < 0) | (t >= n_classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise MlatrError(f"targets: class {int(t[i])} at clip {i} is out of range ({n_classes} classes)")
    return t


def _accuracy(scores: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """Rank of the true class = 1 + number of classes scoring strictly higher (ties optimistic)."""
    own = scores[np.arange(targets.size), targets]
    rank = 1 + np.count_nonzero(scores > own[:, None], axis=1)
    return {"top1": 100.0 * float(np.mean(rank <= 1)), "top5": 100.0 * float(np.mean(rank <= 5))}
