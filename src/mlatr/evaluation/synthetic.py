"""Random-but-structured multilingual embeddings, for the evaluation demo and benchmarks.

Not a model: a generative sketch of what a trained dual encoder produces, so that every metric of the
report has something to show. Clips are points in a low-dimensional latent space (so that neighbours
compete), embedded into ``dim`` dimensions by a random orthonormal map:

- clip centre ``c_j``; audio embedding ``c_j + sigma_audio * noise``;
- each source caption ``s = c_j + sigma_caption * noise`` (what the caption says about the clip);
- its translation into language L: ``s + shift_L + sigma_L * noise``, where ``shift_L`` is a fixed
  offset per language (a modality/language gap, ATRI eq. 14) and ``sigma_L`` grows for languages that
  are "harder" (Japanese and Chinese noisiest, as in ATRI Table 1);
- a fraction of translations is dropped (missing translations), never the pivot's.
"""

from __future__ import annotations

import numpy as np

from mlatr.languages import DEFAULT_LANGUAGES

#: Translation noise per language (relative to the clip spread); unknown languages get 0.6.
DEFAULT_LANGUAGE_NOISE: dict[str, float] = {
    "eng": 0.30, "fra": 0.40, "deu": 0.40, "spa": 0.38, "nld": 0.42, "cat": 0.48, "jpn": 0.60, "zho": 0.70,
}


def structured_embeddings(
    n_clips: int = 200,
    captions_per_clip: int = 5,
    languages: tuple[str, ...] | list[str] = DEFAULT_LANGUAGES,
    dim: int = 64,
    latent_dim: int = 12,
    sigma_audio: float = 0.45,
    sigma_caption: float = 0.45,
    language_noise: dict[str, float] | None = None,
    language_shift: float = 0.25,
    missing_fraction: float = 0.03,
    pivot: str = "eng",
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """The five arrays of the evaluation contract: ``audio [Na, dim]``, ``text [Nt, dim]`` (float32),
    ``text_audio``, ``text_lang`` (str), ``text_group`` (int: clip * captions_per_clip + caption)."""
    rng = np.random.default_rng(seed)
    noise = {**DEFAULT_LANGUAGE_NOISE, **(language_noise or {})}
    basis, _ = np.linalg.qr(rng.normal(size=(dim, latent_dim)))  # [dim, k] orthonormal columns
    scale = 1.0 / np.sqrt(latent_dim)
    centres = rng.normal(size=(n_clips, latent_dim)) * scale
    audio = centres + sigma_audio * scale * rng.normal(size=centres.shape)
    sources = np.repeat(centres, captions_per_clip, axis=0)
    sources = sources + sigma_caption * scale * rng.normal(size=sources.shape)
    n_src = sources.shape[0]
    texts, text_audio, text_lang, text_group = [], [], [], []
    for lang in languages:
        shift = 0.0 if lang == pivot else language_shift * scale * rng.normal(size=latent_dim)
        t = sources + shift + noise.get(lang, 0.6) * scale * rng.normal(size=sources.shape)
        keep = np.ones(n_src, dtype=bool) if lang == pivot else rng.random(n_src) >= missing_fraction
        texts.append(t[keep])
        text_audio.append(np.arange(n_src)[keep] // captions_per_clip)
        text_lang.append(np.full(int(keep.sum()), lang))
        text_group.append(np.arange(n_src)[keep])
    iso = 0.02 * scale  # a little energy outside the latent subspace
    text = np.concatenate(texts) @ basis.T
    text = text + iso * rng.normal(size=text.shape)
    audio = audio @ basis.T + iso * rng.normal(size=(n_clips, dim))
    return {
        "audio": audio.astype(np.float32),
        "text": text.astype(np.float32),
        "text_audio": np.concatenate(text_audio).astype(np.int64),
        "text_lang": np.concatenate(text_lang).astype("<U8"),
        "text_group": np.concatenate(text_group).astype(np.int64),
    }
