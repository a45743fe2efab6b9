"""A trained model in use: :class:`LoadedModel` and its Python API (``mlatr.load(...)`` returns one).

Every method runs under ``torch.no_grad()`` in eval mode and returns numpy; the audio side goes through
:mod:`mlatr.inference.audio` (the one audio path: files or waveforms of any length, windows, batches), the
text side through :func:`mlatr.inference.encoding.encode_texts`. The same file gives the same vector here,
in ``mlatr encode``, in an index and in a sound query.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from mlatr.audio.io import crop_or_pad
from mlatr.errors import MlatrError
from mlatr.evaluation.zero_shot import label_text, zero_shot_prompts
from mlatr.inference.audio import WHOLE_CLIP, embed_clips, encode_source, file_source, waveform_clips
from mlatr.inference.encoding import encode_texts, pad_frames
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.matching import MatchingHead, chunked_scores
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.outputs import EncoderOutput
from mlatr.models.protocols import query_languages

#: Data settings a model falls back to when it carries none (e.g. an imported one).
DEFAULT_DATA = {"sample_rate": 16000, "eval_max_seconds": 10.0, "languages": list(DEFAULT_LANGUAGES)}

#: Working-memory budget (MiB) of a frame-scoring head's block-wise scores in :meth:`LoadedModel.classify`.
HEAD_MEMORY_MB = 1024.0

AudioInput = str | os.PathLike | np.ndarray


@dataclass
class Classification:
    """Zero-shot predictions: ``scores [clips, classes]`` (the model's head, audio as the query), the
    ``classes`` in the order given and the best class of each clip (:attr:`labels`)."""

    classes: list[str]
    scores: np.ndarray  # [N, C] float32

    @property
    def labels(self) -> list[str]:
        """The best-scoring class of each clip."""
        return [self.classes[int(i)] for i in self.scores.argmax(axis=1)] if len(self.scores) else []

    def top(self, k: int = 5) -> list[list[tuple[str, float]]]:
        """The ``k`` best ``(class, score)`` of each clip, best first."""
        order = np.argsort(-self.scores, axis=1, kind="stable")[:, :k]
        return [[(self.classes[int(c)], float(row[c])) for c in cols] for row, cols in zip(self.scores, order,
                                                                                             strict=True)]

    def __iter__(self) -> Iterator[tuple[str, float]]:
        """``(label, score)`` of each clip."""
        return ((lb, float(s)) for lb, s in zip(self.labels, self.scores.max(axis=1, initial=-np.inf), strict=True))

    def __len__(self) -> int:
        return len(self.scores)


def prompts_for(labels: Sequence[str], lang: str, template: str | None = None) -> list[str]:
    """One text per class label: the SupCLAP prompt of ``lang`` (sec. 4.2.2, "This is a sound of {label}."
    in that language: :func:`~mlatr.evaluation.zero_shot.zero_shot_prompts`), or ``template`` with ``{label}``."""
    if template is None:
        return zero_shot_prompts(list(labels), lang)
    if "{label}" not in template:
        raise MlatrError(f"the prompt template {template!r} has no {{label}}")
    return [template.format(label=label_text(lb)) for lb in labels]


@dataclass
class LoadedModel:
    """A trained model ready to use: the dual encoder (eval mode), the head it ranks with and its settings.

    Attributes:
        model: the :class:`~mlatr.models.dual_encoder.DualEncoder`, in eval mode, on ``device``.
        head: the :class:`~mlatr.matching.MatchingHead` retrieval ranks with (pooled cosine unless the model
            was trained with a fine-grained head; evaluation, zero-shot and search use it).
        train_config: the training config tree the model carries (``{}`` when none).
        path: the checkpoint file or model folder.
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

    @property
    def sample_rate(self) -> int:
        return int(self.data["sample_rate"])

    # ---- text --------------------------------------------------------------------------------------
    def text_languages(self, n: int, lang: str | Sequence[str] | None) -> list[str] | None:
        """ISO 639-3 language of each of ``n`` texts (one code for all, or one per text); ``None`` is
        allowed only when the text encoder does not read the language (:meth:`QueryLanguages.code
        <mlatr.models.protocols.QueryLanguages.code>`)."""
        accepted = query_languages(self.model.text_encoder)
        if lang is None or isinstance(lang, str):
            code = accepted.code(lang)
            return None if code is None else [code] * n
        langs = [accepted.code(code) for code in lang]
        if len(langs) != n:
            raise MlatrError(f"lang: {len(langs)} languages for {n} texts (give one, or one per text)")
        return langs

    @torch.no_grad()
    def embed_text(self, texts: str | Sequence[str], lang: str | Sequence[str] | None = None, *,
                   batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Unit-norm embeddings ``[n, d]`` (float32) of ``texts`` in ``lang`` (ISO 639-1/3, one for all or one
        per text; ``None`` where the text encoder does not read it)."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise MlatrError(f"text {i}: empty text (or not a string: {t!r})")
        return self.embed_checked(texts, self.text_languages(len(texts), lang), batch_size, progress)

    def embed_checked(self, texts: Sequence[str], langs: Sequence[str] | None, batch_size: int = 64,
                      progress: bool = False) -> np.ndarray:
        """:meth:`embed_text` of texts and languages already checked where they entered (not empty; ISO 639-3
        codes the encoder takes, one per text, or ``None`` where it reads none): ``[n, d]``."""
        if not texts:
            return np.zeros((0, self.embed_dim), np.float32)
        return encode_texts(self.model, list(texts), None if langs is None else list(langs), batch_size, progress)

    # ---- audio -------------------------------------------------------------------------------------
    def embed_audio(self, audio: AudioInput | Sequence[AudioInput], *, sample_rate: int | None = None,
                    batch_size: int = 16, max_seconds: float | None = None, window_seconds: float | None = None,
                    workers: int = 0, progress: bool = False) -> np.ndarray:
        """Unit-norm embeddings ``[n, d]`` (float32) of sound files (paths) or 1-D waveforms (with their
        ``sample_rate``; default the model's), any length.

        A clip is centre-cropped to ``max_seconds`` (default: not cropped) and encoded in windows of
        ``window_seconds`` (default: the model's evaluation crop ``eval_max_seconds``; a longer clip gets the
        length-weighted mean of its windows), ``batch_size`` windows per encoder call; ``workers`` processes
        decode files ahead. A file that cannot be read is an error naming it.
        """
        keys, emb = self.embed_audio_rows(audio, sample_rate=sample_rate, batch_size=batch_size,
                                          max_seconds=max_seconds, window_seconds=window_seconds, workers=workers,
                                          progress=progress)
        return emb

    def embed_audio_rows(self, audio: AudioInput | Sequence[AudioInput], *, sample_rate: int | None = None,
                         batch_size: int = 16, max_seconds: float | None = None,
                         window_seconds: float | None = None, workers: int = 0, progress: bool = False,
                         skipped: dict[str, str] | None = None) -> tuple[list[int], np.ndarray]:
        """:meth:`embed_audio` with the rows it kept: ``(indices into audio, [kept, d])``. With ``skipped`` (a
        dict), files that cannot be read are left out and recorded there (``{path: message}``)."""
        items = [audio] if isinstance(audio, (str, os.PathLike)) or (
            isinstance(audio, np.ndarray) and audio.ndim == 1) else list(audio)
        if not items:
            return [], np.zeros((0, self.embed_dim), np.float32)
        rate = self.sample_rate
        crop = float(max_seconds) if max_seconds else WHOLE_CLIP
        window = float(window_seconds or self.data["eval_max_seconds"])
        was_training = self.model.training
        self.model.eval()
        try:
            if all(isinstance(a, (str, os.PathLike)) for a in items):
                source = file_source(items, rate, skip_bad=skipped is not None)
                rows, emb = encode_source(self.model.encode_audio, source, batch_size, crop, self.device,
                                          window_seconds=window, progress=progress, workers=workers)
                if skipped is not None:
                    skipped.update(source.bad)
                return rows, emb
            if any(isinstance(a, (str, os.PathLike)) for a in items):
                raise MlatrError("embed_audio: give file paths or waveforms, not both in one call")
            count = int(round(crop * rate))
            waves = ((i, crop_or_pad(w, count)[0] if w.shape[0] > count else w)  # centre crop, as files
                     for i, w in waveform_clips(items, sample_rate or rate, rate))
            with tqdm(total=len(items), desc="audio", unit="clip", disable=not progress, leave=False) as bar:
                return embed_clips(self.model.encode_audio, waves, int(round(window * rate)), batch_size,
                                   self.device, bar)
        finally:
            self.model.train(was_training)

    # ---- scores ------------------------------------------------------------------------------------
    def similarity(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Scores ``[len(a), len(b)]`` of embeddings from :meth:`embed_text` / :meth:`embed_audio` (``a`` is
        the query side) by the model's matching head: the cosine (inner product of the unit vectors, ATRI
        eq. 1). A model whose head scores frames (LGMM, sec. 2.1 of the fine-grained paper) cannot score
        pooled vectors: use :meth:`classify`, ``mlatr.evaluate`` or ``mlatr eval``."""
        if self.head.needs_frames:
            raise MlatrError(f"this model ranks with the {self.head.name} head, which scores frames and tokens, "
                             "not pooled embeddings: use model.classify or mlatr.evaluate")
        a_t = torch.as_tensor(np.asarray(a, np.float32))
        b_t = torch.as_tensor(np.asarray(b, np.float32))
        if a_t.ndim != 2 or b_t.ndim != 2 or a_t.shape[1] != b_t.shape[1]:
            raise MlatrError(f"similarity: expected [n, d] and [m, d] embeddings, got {tuple(a_t.shape)} and "
                             f"{tuple(b_t.shape)}")
        with torch.no_grad():
            return self.head.scores(EncoderOutput(a_t), EncoderOutput(b_t)).float().numpy()  # [n, m]

    @torch.no_grad()
    def classify(self, audio: AudioInput | Sequence[AudioInput], labels: str | Sequence[str], lang: str = "eng", *,
                 template: str | None = None, sample_rate: int | None = None, batch_size: int = 16,
                 max_seconds: float | None = None) -> Classification:
        """Zero-shot classification (SupCLAP sec. 4.2.2): each clip against one prompt per label (labels in
        ``lang``; ``template`` with ``{label}`` replaces the paper's prompt), scored by the model's head with
        the audio as the query. ``labels`` may be one comma-separated string."""
        classes = [s.strip() for s in labels.split(",")] if isinstance(labels, str) else [str(s) for s in labels]
        if not classes or any(not c for c in classes):
            raise MlatrError("labels: give at least one non-empty label")
        langs = self.text_languages(len(classes), lang)
        if langs is None:
            raise MlatrError("lang: the prompts are written in a language: give one")
        lang = langs[0]
        prompts = prompts_for(classes, lang, template)
        if not self.head.needs_frames:
            a = self.embed_audio(audio, sample_rate=sample_rate, batch_size=batch_size, max_seconds=max_seconds)
            return Classification(classes, self.similarity(a, self.embed_checked(prompts, langs, batch_size)))
        return Classification(classes, self._frame_scores(audio, prompts, lang, batch_size, max_seconds))

    def _frame_scores(self, audio, prompts: list[str], lang: str, batch_size: int, max_seconds: float | None
                      ) -> np.ndarray:
        """Head scores ``[clips, prompts]`` of a frame-scoring head: each file centre-cropped to ``max_seconds``
        (default the model's evaluation crop) and encoded whole, its frames kept."""
        items = [audio] if isinstance(audio, (str, os.PathLike)) else list(audio)
        if not all(isinstance(a, (str, os.PathLike)) for a in items):
            raise MlatrError(f"the {self.head.name} head classifies sound files (paths), not waveforms")
        crop = float(max_seconds or self.data["eval_max_seconds"])
        sink: list = []
        _, pooled = encode_source(self.model.encode_audio, file_source(items, self.sample_rate), batch_size, crop,
                                  self.device, frames_sink=sink)
        text_sink: list = []
        text = encode_texts(self.model, prompts, [lang] * len(prompts), batch_size, frames_sink=text_sink)
        clips = EncoderOutput(torch.from_numpy(pooled), *pad_frames(sink))
        classes = EncoderOutput(torch.from_numpy(text), *pad_frames(text_sink))
        return chunked_scores(self.head, clips, classes, HEAD_MEMORY_MB).float().numpy()
