"""Sentence encoders that compare an English caption with its round trip (ATRI Appendix A).

ATRI embeds the original English caption and its back-translation with RoBERTa-large and reports the mean
cosine. Three choices, all offline:

* a local Hugging Face folder (``--encoder weights/roberta-large``): ``AutoModel`` + ``AutoTokenizer``
  with ``local_files_only``, the sentence vector is the mean of the last hidden states over the real
  tokens (the usual pooling for RoBERTa sentence embeddings; ATRI does not say which pooling it used);
* ``e5-small`` and ``use`` (``use-multilingual``): the encoders that ship inside pip wheels
  (:mod:`mlatr.models.frozen_text`), so the check runs with no download at all.

Cosine similarity does not depend on the vectors' lengths, so normalisation does not matter here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from mlatr.errors import MlatrError
from mlatr.translation.hf_local import load_local

PACKAGED = {"e5-small": "e5-small", "use": "use-multilingual", "use-multilingual": "use-multilingual"}


class SentenceEncoder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``[N, D]`` float32 sentence vectors of English texts."""


class PackagedEncoder:
    """One of the frozen encoders shipped in pip wheels (``e5-small``, ``use-multilingual``)."""

    def __init__(self, name: str):
        # mlatr.models loads torch: the translation package stays free of it
        from mlatr.models.registry import build_text_encoder

        self.name = name
        self.encoder = build_text_encoder(name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.encoder.embed_numpy(list(texts), ["eng"] * len(texts))


class HFMeanPoolEncoder:
    """A local ``transformers`` encoder folder (e.g. RoBERTa-large), mean-pooled over real tokens."""

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int = 32, max_length: int = 128):
        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            raise MlatrError(f"sentence encoder {folder}: no config.json there. Give e5-small, use, or a local "
                             f"Hugging Face folder (ATRI used RoBERTa-large: on a machine with internet access, "
                             f"huggingface-cli download FacebookAI/roberta-large --local-dir {folder})")
        self.tokenizer, self.model = load_local(folder, "AutoModel", "sentence encoder")
        self.model = self.model.to(device)
        self.name, self.device = folder.name, device
        self.batch_size, self.max_length = int(batch_size), int(max_length)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import torch  # torch only for a Hugging Face encoder: the translation package stays free of it

        out: list[np.ndarray] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start:start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.no_grad():
                states = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"][..., None].to(states.dtype)
            out.append(((states * mask).sum(1) / mask.sum(1).clamp(min=1.0)).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


def build_sentence_encoder(spec: str, device: str = "cpu") -> SentenceEncoder:
    """``e5-small`` / ``use`` / ``use-multilingual``, or the path of a local Hugging Face folder."""
    if spec in PACKAGED:
        return PackagedEncoder(PACKAGED[spec])
    if Path(spec).expanduser().is_dir():
        return HFMeanPoolEncoder(spec, device=device)
    raise MlatrError(f"--encoder {spec!r}: give e5-small, use, or a local Hugging Face model folder "
                     f"(e.g. RoBERTa-large, as ATRI Appendix A)")


def pair_cosines(encoder: SentenceEncoder, left: Sequence[str], right: Sequence[str], progress: bool = False,
                 chunk: int = 256) -> np.ndarray:
    """Cosine of ``left[i]`` and ``right[i]`` for every i; each distinct text is embedded once (in chunks of
    ``chunk`` texts, with a progress bar when ``progress``)."""
    texts = list(dict.fromkeys([*left, *right]))
    row = {t: i for i, t in enumerate(texts)}
    parts = []
    with tqdm(total=len(texts), unit="text", desc=f"embed ({encoder.name})", disable=not progress) as bar:
        for start in range(0, len(texts), chunk):
            parts.append(np.asarray(encoder.embed(texts[start:start + chunk]), dtype=np.float64))
            bar.update(len(parts[-1]))
    vectors = np.concatenate(parts) if parts else np.zeros((0, 1))
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    a = vectors[[row[t] for t in left]]
    b = vectors[[row[t] for t in right]]
    return np.einsum("nd,nd->n", a, b)
