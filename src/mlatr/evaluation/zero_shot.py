"""Zero-shot audio classification with text prompts (SupCLAP §4.2.2, Table 2; CLAP-style).

Each class label becomes a prompt (``"This is a sound of {label}."`` or its translation), the text
encoder embeds the prompts, and a clip is assigned the classes of highest cosine similarity. Top-1 and
top-5 accuracy are reported in percent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlatr.errors import MlatrError
from mlatr.evaluation.inputs import check_embeddings, float_dtype, to_numpy

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
    t = to_numpy(targets)
    if t.ndim != 1 or t.shape[0] != a.shape[0]:
        raise MlatrError(f"targets: expected shape ({a.shape[0]},), got {tuple(t.shape)}")
    if not np.issubdtype(t.dtype, np.integer):
        raise MlatrError(f"targets: expected integer class indices, got dtype {t.dtype}")
    bad = (t < 0) | (t >= c.shape[0])
    if bad.any():
        i = int(np.argmax(bad))
        raise MlatrError(f"targets: class {int(t[i])} at clip {i} is out of range ({c.shape[0]} classes)")
    dtype = float_dtype(a, c)
    a = a.astype(dtype) / np.linalg.norm(a.astype(dtype), axis=1, keepdims=True)
    c = c.astype(dtype) / np.linalg.norm(c.astype(dtype), axis=1, keepdims=True)
    s = a @ c.T
    own = np.einsum("ij,ij->i", a, c[t])
    s[np.arange(t.size), t] = own
    rank = 1 + np.count_nonzero(s > own[:, None], axis=1)
    return {"top1": 100.0 * float(np.mean(rank <= 1)), "top5": 100.0 * float(np.mean(rank <= 5))}
