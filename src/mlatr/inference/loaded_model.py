"""A trained model in use: :class:`LoadedModel` and its Python API (``mlatr.load(...)`` returns one).

Every method runs under ``torch.no_grad()`` in eval mode and returns numpy; the audio side goes through
:mod:`mlatr.inference.audio` (the one audio path: files or waveforms of any length, windows, batches), the
text side through :func:`mlatr.inference.encoded_split.encode_texts`. The same file gives the same vector here,
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

from mlatr import api_args
from mlatr.calibration_file import calibration_problem
from mlatr.data.manifest import Manifest, Skip
from mlatr.data.webdataset_shards import is_shard_spec
from mlatr.errors import MlatrError
from mlatr.evaluation.zero_shot import label_text, zero_shot_prompts
from mlatr.inference.audio import (
    WHOLE_CLIP,
    Clips,
    Embedded,
    SoundFiles,
    SourceClips,
    Waveforms,
    Windowing,
    check_readable,
    model_vectors,
)
from mlatr.inference.encoded_split import pad_frames
from mlatr.inference.library import LibrarySource, open_library
from mlatr.inference.model_identity import model_sha256, weights_sha256
from mlatr.inference.runtime import RuntimeChoice, attach_runtime
from mlatr.inference.text import encode_texts
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
    ``classes`` in the order given, the best class of each clip (:attr:`labels`) and the clips' ``ids`` (a
    library's ids, relative to its root; a file's path as given; ``audio[i]`` for a waveform).

    :attr:`probabilities` are ``softmax(scores / temperature)`` over the classes, the temperature fitted for the
    model on libraries it never trained on (negative log-likelihood of their folder labels, cross-fitted:
    :mod:`mlatr.lab.experiments.relevance_fit`; part of the model's calibration, :mod:`mlatr.calibration_file`), so a
    clip's best probability says how often such a label is right; :attr:`none_of_these` marks the clips whose
    best label is below ``min_probability`` (more likely wrong than right). A model without a calibration gives
    ``temperature`` None: no probabilities (None), nothing marked, :attr:`calibrated` False. ``skipped``: the
    inputs left out under ``skip_bad`` (files that could not be read), each with its reason."""

    classes: list[str]
    scores: np.ndarray  # [N, C] float32
    temperature: float | None = 1.0
    min_probability: float = 0.5
    ids: list[str] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)

    @property
    def calibrated(self) -> bool:
        """Whether the scores have a fitted temperature (the model's calibration), hence probabilities."""
        return self.temperature is not None

    def __repr__(self) -> str:
        return f"Classification({len(self.scores)} clips x {len(self.classes)} classes: {self.classes[:5]}" + (
            " ...)" if len(self.classes) > 5 else ")")

    @property
    def probabilities(self) -> np.ndarray | None:
        """``[N, C]`` the probability of each class for each clip (rows sum to 1); None when not calibrated."""
        if self.temperature is None:
            return None
        logits = np.asarray(self.scores, np.float64) / self.temperature
        e = np.exp(logits - logits.max(axis=1, keepdims=True, initial=-np.inf))
        return e / e.sum(axis=1, keepdims=True)

    @property
    def none_of_these(self) -> np.ndarray | None:
        """``[N]`` bool: the clip's best label has a probability below ``min_probability``; None when not
        calibrated."""
        probabilities = self.probabilities
        return None if probabilities is None else probabilities.max(axis=1, initial=0.0) < self.min_probability

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
class LibraryEmbeddings:
    """A library's clips embedded (:meth:`LoadedModel.embed_library`): ``ids`` (relative to the library's root),
    ``paths`` (absolute, or ``SHARD#MEMBER``), ``embeddings [n, d]`` (unit norm) and, with ``skip_bad``, the clips
    ``skipped`` (``{id: why}``) and every input left out with its file (``skips``: those clips, and the files
    refused while the library was listed, e.g. a FIFO or a name that is not UTF-8)."""

    ids: list[str]
    paths: list[str]
    embeddings: np.ndarray
    skipped: dict[str, str] = field(default_factory=dict)
    skips: list[Skip] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return (f"LibraryEmbeddings({len(self.ids):,} clips, dim {self.embeddings.shape[1]}"
                + (f", {len(self.skipped)} skipped)" if self.skipped else ")"))


def is_library_item(item: Any) -> bool:
    """Whether an ``audio`` item names a library rather than one file: a folder, a manifest, webdataset shards."""
    if isinstance(item, Manifest):
        return True
    if not isinstance(item, str | os.PathLike):
        return False
    text = os.fspath(item)
    return Path(text).is_dir() or text.lower().endswith(".jsonl") or is_shard_spec(text)


def names_library(audio: Any) -> bool:
    """Whether the API's ``audio`` names a library (:mod:`mlatr.inference.library`) rather than files or arrays."""
    return is_library_item(audio) or (isinstance(audio, list | tuple) and any(map(is_library_item, audio)))


def has_waveforms(audio: Any) -> bool:
    """Whether the API's ``audio`` holds an array (a waveform), rather than only paths."""
    return isinstance(audio, np.ndarray) or (isinstance(audio, list | tuple) and
                                             any(isinstance(a, np.ndarray) for a in audio))


def audio_items(audio: Any) -> list[str | np.ndarray]:
    """``audio`` of the API as a list of clips: a path (``str`` / ``os.PathLike``) or an array is one clip
    (:func:`mlatr.api_args.waveform`), a list or tuple holds several, each ``audio[i]``."""
    if isinstance(audio, str | os.PathLike) or isinstance(audio, np.ndarray):
        audio = [audio]
    elif isinstance(audio, bytes | bytearray | dict) or not isinstance(audio, Sequence):
        raise api_args.ArgumentTypeError(f"audio: expected a path, a numpy array or a list of them, got "
                                         f"{type(audio).__name__}")
    out: list[str | np.ndarray] = []
    for i, item in enumerate(audio):
        if isinstance(item, np.ndarray):
            out.append(api_args.waveform(f"audio[{i}]", item))
        elif isinstance(item, str | os.PathLike):
            out.append(api_args.path(f"audio[{i}]", item))
        else:
            raise api_args.ArgumentTypeError(f"audio[{i}]: expected a path or a numpy array, got "
                                             f"{type(item).__name__} {item!r:.40}")
    return out


def check_finite_embeddings(emb: np.ndarray, rows: Sequence[int], items: Sequence[str | np.ndarray]) -> None:
    """Refuse a non-finite (NaN, infinite) embedding, naming the clip it belongs to: a model fed samples far
    beyond [-1, 1] (a file reads within it) can overflow its front end."""
    bad = np.flatnonzero(~np.isfinite(emb).all(axis=1)) if emb.size else []
    if len(bad):
        i = int(rows[int(bad[0])])
        what = repr(items[i]) if isinstance(items[i], str) else (
            f"a waveform whose samples reach {float(np.abs(items[i]).max()):.3g}")
        raise MlatrError(f"audio[{i}] ({what}): the model gave a non-finite embedding (NaN or infinity) for "
                         f"{len(bad)} clip(s), the first this one; audio is read within [-1, 1]: scale the samples")


@dataclass
class LoadedModel:
    """A trained model ready to use: the dual encoder (eval mode), the head it ranks with and its settings.

    Attributes:
        model: the :class:`~mlatr.models.dual_encoder.DualEncoder`, in eval mode, on ``device``.
        head: the :class:`~mlatr.matching.MatchingHead` retrieval ranks with (pooled cosine unless the model
            was trained with a fine-grained head; evaluation, zero-shot and search use it).
        train_config: the training config tree the model carries (``{}`` when none).
        path: the checkpoint file or model folder.
        calibration: the model's own calibration (:mod:`mlatr.calibration_file`: relevance models, "nothing
            relevant" rule, classification temperature), fitted for these weights; None: uncalibrated
            (:attr:`calibration_note` says why), so no search or classification carries a probability.
    """

    model: DualEncoder
    head: MatchingHead
    train_config: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    calibration: dict | None = field(default=None, repr=False)
    calibration_note: str | None = field(default="the model carries no calibration", repr=False)
    _digests: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    _runtime: RuntimeChoice | None = field(default=None, repr=False, compare=False)

    def use_calibration(self, calibration: dict | None) -> None:
        """Take ``calibration`` (a checked :mod:`mlatr.calibration_file` dict, or None) as the model's own when it
        was fitted for these weights; otherwise the model is uncalibrated and :attr:`calibration_note` says why
        (another model's calibration is never used)."""
        problem = calibration_problem(calibration, self.weights_sha256()) if calibration is not None else \
            calibration_problem(None, "")
        self.calibration, self.calibration_note = (None, problem) if problem else (calibration, None)

    def __repr__(self) -> str:
        """One line: ``LoadedModel(encoder=aisfx+use-multilingual, dim=256, languages=[eng, fra], head=cosine,
        path=...)``, not the torch module tree (``model`` holds it)."""
        config = self.model.config()
        names = "+".join(str((config.get(side) or {}).get("name", "?")) for side in ("audio_encoder", "text_encoder"))
        langs = ", ".join(self.data.get("languages") or [])
        return (f"LoadedModel(encoder={names}, dim={self.embed_dim}, languages=[{langs}], head={self.head.name}, "
                f"path={self.path})")

    def use_runtime(self, runtime: str = "auto", precision: str = "fp32",
                    calibration: Sequence[np.ndarray] | None = None) -> RuntimeChoice:
        """Run the audio encoder's heavy part by an optimised CPU runtime (:mod:`mlatr.inference.runtime`:
        ``auto``, ``torch``, ``onnxruntime``, ``openvino``; ``precision`` ``fp32``, ``bf16``, ``int8``), exported once
        and checked against torch; ``calibration``: mono waveforms at the model's rate for int8 (and the check).
        The model on a GPU keeps torch. Returns what was chosen (:meth:`audio_runtime` names it)."""
        if self.device.type != "cpu":
            self._runtime = RuntimeChoice("torch", "fp32", note=f"the model is on {self.device}")
        else:
            self._runtime = attach_runtime(self.model.audio_encoder, runtime, precision, calibration, self.sample_rate)
        return self._runtime

    def audio_runtime(self) -> str:
        """What runs the audio encoder: ``torch``, or ``RUNTIME/PRECISION`` (:meth:`use_runtime`)."""
        return self._runtime.name if self._runtime is not None else "torch"

    def weights_sha256(self) -> str:
        """SHA-256 of the model's weights (:func:`~mlatr.inference.model_identity.weights_sha256`), computed once:
        what an index records to know its model by."""
        if "weights" not in self._digests:
            self._digests["weights"] = weights_sha256(self.model.state_dict())
        return self._digests["weights"]

    def file_sha256(self) -> str | None:
        """SHA-256 of the file (or model folder) the model was loaded from, computed once; None without one."""
        if "file" not in self._digests and self.path is not None:
            self._digests["file"] = model_sha256(self.path)
        return self._digests.get("file")

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
            code = accepted.code(None if lang is None else api_args.text("lang", lang))
            return None if code is None else [code] * n
        langs = [accepted.code(code) for code in api_args.texts("lang", lang)]
        if len(langs) != n:
            raise MlatrError(f"lang: {len(langs)} languages for {n} texts (give one, or one per text)")
        return langs

    @torch.no_grad()
    def embed_text(self, texts: str | Sequence[str], lang: str | Sequence[str] | None = None, *,
                   batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Unit-norm embeddings ``[n, d]`` (float32) of ``texts`` in ``lang`` (ISO 639-1/3, one for all or one
        per text; ``None`` where the text encoder does not read it)."""
        texts = api_args.texts("texts", texts)
        batch_size = api_args.integer("batch_size", batch_size)
        progress = api_args.flag("progress", progress)
        return self.embed_checked(texts, self.text_languages(len(texts), lang), batch_size, progress)

    def embed_checked(self, texts: Sequence[str], langs: Sequence[str] | None, batch_size: int = 64,
                      progress: bool = False) -> np.ndarray:
        """:meth:`embed_text` of texts and languages already checked where they entered (not empty; ISO 639-3
        codes the encoder takes, one per text, or ``None`` where it reads none): ``[n, d]``."""
        if not texts:
            return np.zeros((0, self.embed_dim), np.float32)
        return encode_texts(self.model, list(texts), None if langs is None else list(langs), batch_size, progress)

    # ---- audio -------------------------------------------------------------------------------------
    def audio_vectors(self, clips: Clips, *, window_seconds: float, batch_size: int = 16, workers: int = 1,
                      hop_seconds: float | None = None, progress: bool = False, desc: str = "audio",
                      frames: bool = False, windows: bool = False, rows: Sequence[int] | None = None,
                      on_chunk=None) -> Embedded:
        """The vectors of ``clips`` (:mod:`mlatr.inference.audio`, the one audio path) in windows of
        ``window_seconds`` (every ``hop_seconds``, else equal consecutive windows), ``batch_size`` windows per
        encoder call, by ``workers`` processes sharing this process's cores (1: this process)."""
        how = Windowing.of(window_seconds, batch_size, self.sample_rate, hop_seconds)
        return model_vectors(self.model, clips, how, workers=workers, rows=rows, progress=progress, desc=desc,
                             frames=frames, windows=windows, on_chunk=on_chunk)

    def embed_audio(self, audio: AudioInput | Sequence[AudioInput], *, sample_rate: int | None = None,
                    batch_size: int = 16, max_seconds: float | None = None, window_seconds: float | None = None,
                    workers: int = 1, progress: bool = False) -> np.ndarray:
        """Unit-norm embeddings ``[n, d]`` (float32) of sound files (paths) or waveforms (numpy arrays, with their
        ``sample_rate``, which arrays require), any length. An array is one clip: ``[frames]``, or ``[frames,
        channels]`` (soundfile's layout, at most 8 channels) averaged to mono; integer PCM is scaled as the file
        reader scales it (:mod:`mlatr.api_args`); give several clips as a list.

        A clip is centre-cropped to ``max_seconds`` (default: not cropped) and encoded in windows of
        ``window_seconds`` (default: the model's evaluation crop ``eval_max_seconds``; a longer clip gets the
        length-weighted mean of its windows), ``batch_size`` windows per encoder call; ``workers`` processes
        read and encode the files, sharing this process's cores (default 1: this process). A file that cannot be
        read, an argument out of its range (:mod:`mlatr.api_args`) or a clip the model gives a non-finite
        embedding (NaN) is an error naming it.
        """
        keys, emb = self.embed_audio_rows(audio, sample_rate=sample_rate, batch_size=batch_size,
                                          max_seconds=max_seconds, window_seconds=window_seconds, workers=workers,
                                          progress=progress)
        return emb

    def embed_audio_rows(self, audio: AudioInput | Sequence[AudioInput], *, sample_rate: int | None = None,
                         batch_size: int = 16, max_seconds: float | None = None,
                         window_seconds: float | None = None, workers: int = 1, progress: bool = False,
                         skipped: dict[str, str] | None = None) -> tuple[list[int], np.ndarray]:
        """:meth:`embed_audio` with the rows it kept: ``(indices into audio, [kept, d])``. With ``skipped`` (a
        dict), files that cannot be read are left out and recorded there (``{path: message}``)."""
        if names_library(audio):
            found = self.embed_library(audio, batch_size=batch_size, max_seconds=max_seconds,
                                       window_seconds=window_seconds, workers=workers, progress=progress,
                                       skip_bad=skipped is not None)
            if skipped is not None:
                skipped.update(found.skipped)
            return list(range(len(found))), found.embeddings
        items = audio_items(audio)
        batch_size = api_args.integer("batch_size", batch_size)
        crop = api_args.positive_number("max_seconds", max_seconds) or WHOLE_CLIP
        window = api_args.positive_number("window_seconds", window_seconds) or float(self.data["eval_max_seconds"])
        workers = max(1, api_args.integer("workers", workers, low=0))
        progress = api_args.flag("progress", progress)
        arrays = [i for i, a in enumerate(items) if isinstance(a, np.ndarray)]
        if arrays and len(arrays) != len(items):
            raise api_args.ArgumentError("audio: give file paths or waveforms, not both in one call")
        if arrays or sample_rate is not None:
            if sample_rate is None:
                raise api_args.ArgumentError("sample_rate: required with waveforms (an array does not say its rate; "
                                             f"the model reads {self.sample_rate} Hz)")
            sample_rate = api_args.integer("sample_rate", sample_rate, 1, 768_000)
        if not items:
            return [], np.zeros((0, self.embed_dim), np.float32)
        if arrays:
            clips: Clips = Waveforms(items, sample_rate, self.sample_rate, crop)
        else:
            clips = SoundFiles(items, self.sample_rate, crop, skip_bad=skipped is not None)
        found = self.audio_vectors(clips, window_seconds=window, batch_size=batch_size, workers=workers,
                                   progress=progress)
        if skipped is not None:
            skipped.update(found.bad)
        check_finite_embeddings(found.vectors, found.rows, items)
        return found.rows, found.vectors

    def embed_library(self, source: LibrarySource, *, split: str = "all", batch_size: int = 16,
                      max_seconds: float | None = None, window_seconds: float | None = None, workers: int = 1,
                      progress: bool = False, skip_bad: bool = False) -> LibraryEmbeddings:
        """Every clip of a library (a folder of sounds, a manifest, sound files, webdataset shards, or a list of
        these: :mod:`mlatr.inference.library`, what ``mlatr embed`` takes) embedded as :meth:`embed_audio`
        embeds a file, with the library's ids; ``skip_bad``: unreadable clips are left out and listed."""
        batch_size = api_args.integer("batch_size", batch_size)
        crop = api_args.positive_number("max_seconds", max_seconds) or WHOLE_CLIP
        window = api_args.positive_number("window_seconds", window_seconds) or float(self.data["eval_max_seconds"])
        workers = max(1, api_args.integer("workers", workers, low=0))
        progress, skip_bad = api_args.flag("progress", progress), api_args.flag("skip_bad", skip_bad)
        if not isinstance(source, Manifest):
            source = api_args.paths("source", source)
        library = open_library(source, api_args.text("split", split), skip_bad=skip_bad, progress=progress)
        found = self.audio_vectors(SourceClips(library.source(self.sample_rate, skip_bad=skip_bad), crop),
                                   window_seconds=window, batch_size=batch_size, workers=workers, progress=progress)
        check_readable(found, len(library.manifest), "clip(s)")
        ids = [library.manifest[i].id for i in found.rows]
        check_finite_embeddings(found.vectors, list(range(len(found.rows))), ids)
        return LibraryEmbeddings(ids, [library.path(i) for i in found.rows], found.vectors, found.bad,
                                 library.skips(found.bad))

    # ---- scores ------------------------------------------------------------------------------------
    def similarity(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Scores ``[len(a), len(b)]`` of embeddings from :meth:`embed_text` / :meth:`embed_audio` (``a`` is
        the query side) by the model's matching head: the cosine (inner product of the unit vectors, ATRI
        eq. 1). A model whose head scores frames (LGMM, sec. 2.1 of the fine-grained paper) cannot score
        pooled vectors: use :meth:`classify`, ``mlatr.evaluate`` or ``mlatr eval``."""
        if self.head.needs_frames:
            raise MlatrError(f"this model ranks with the {self.head.name} head, which scores frames and tokens, "
                             "not pooled embeddings: use model.classify or mlatr.evaluate")
        a_t = torch.from_numpy(api_args.embeddings("a", a, self.embed_dim))  # [n, d]
        b_t = torch.from_numpy(api_args.embeddings("b", b, self.embed_dim))  # [m, d]
        with torch.no_grad():
            return self.head.scores(EncoderOutput(a_t), EncoderOutput(b_t)).float().numpy()  # [n, m]

    @torch.no_grad()
    def classify(self, audio: AudioInput | Sequence[AudioInput], labels: str | Sequence[str], lang: str = "eng", *,
                 template: str | None = None, sample_rate: int | None = None, batch_size: int = 16,
                 max_seconds: float | None = None, split: str = "all", skip_bad: bool = False,
                 workers: int = 1) -> Classification:
        """Zero-shot classification (SupCLAP sec. 4.2.2): each clip against one prompt per label (labels in
        ``lang``; ``template`` with ``{label}`` replaces the paper's prompt), scored by the model's head with
        the audio as the query. ``labels`` may be one comma-separated string. ``audio``: sound files, waveforms
        (with ``sample_rate``) or a library (a folder, a manifest with its ``split``, webdataset shards:
        :mod:`mlatr.inference.library`); the result's ``ids`` name the clips as the library does. ``skip_bad``: a
        library's or a file list's unreadable files are left out (the result's ``skipped``), not an error;
        ``workers`` processes read and encode the audio (1: this process)."""
        skip_bad = api_args.flag("skip_bad", skip_bad)
        if isinstance(labels, str):
            labels = [s.strip() for s in labels.split(",")]
        classes = [c.strip() for c in api_args.texts("labels", labels)]
        if not classes:
            raise api_args.ArgumentError("labels: give at least one label")
        langs = self.text_languages(len(classes), lang)
        if langs is None:
            raise api_args.ArgumentError("lang: the prompts are written in a language: give one")
        lang = langs[0]
        if template is not None:
            template = api_args.text("template", template)
        prompts = prompts_for(classes, lang, template)
        fitted = (self.calibration or {}).get("classify")
        cal = {"temperature": float(fitted["temperature"]) if fitted else None,
               "min_probability": float(fitted["min_probability"]) if fitted else 0.5}
        if self.head.needs_frames:
            scores, ids, skipped = self._frame_scores(audio, prompts, lang, batch_size, max_seconds, split, skip_bad,
                                                      workers)
            return Classification(classes, scores, ids=ids, skipped=skipped, **cal)
        skipped: list[Skip] = []
        if names_library(audio) or not has_waveforms(audio):  # files: a library's, with its ids, as mlatr classify
            found = self.embed_library(audio, split=split, batch_size=batch_size, max_seconds=max_seconds,
                                       skip_bad=skip_bad, workers=workers)
            a, ids, skipped = found.embeddings, found.ids, found.skips
        else:
            a = self.embed_audio(audio, sample_rate=sample_rate, batch_size=batch_size, max_seconds=max_seconds,
                                 workers=workers)
            ids = item_ids(audio_items(audio))
        return Classification(classes, self.similarity(a, self.embed_checked(prompts, langs, batch_size)), ids=ids,
                              skipped=skipped, **cal)

    def _frame_scores(self, audio, prompts: list[str], lang: str, batch_size: int, max_seconds: float | None,
                      split: str = "all", skip_bad: bool = False,
                      workers: int = 1) -> tuple[np.ndarray, list[str], list[Skip]]:
        """Head scores ``[clips, prompts]`` of a frame-scoring head, the clips' ids and the inputs skipped: each
        file (or a library's clip) centre-cropped to ``max_seconds`` (default the model's evaluation crop) and
        encoded whole, its frames kept."""
        crop = float(max_seconds or self.data["eval_max_seconds"])
        library = None
        if names_library(audio) or not has_waveforms(audio):
            library = open_library(api_args.paths("audio", audio) if not isinstance(audio, Manifest) else audio,
                                   api_args.text("split", split), skip_bad=skip_bad)
            clips: Clips = SourceClips(library.source(self.sample_rate, skip_bad=skip_bad), crop)
            ids = library.ids
        else:
            items = audio_items(audio)
            if not all(isinstance(a, str) for a in items):
                raise api_args.ArgumentError(f"audio: the {self.head.name} head classifies sound files (paths), not "
                                             "waveforms")
            clips, ids = SoundFiles(items, self.sample_rate, crop), item_ids(items)
        found = self.audio_vectors(clips, window_seconds=crop, batch_size=batch_size, frames=True,
                                   workers=max(1, api_args.integer("workers", workers, low=0)))
        text_sink: list = []
        text = encode_texts(self.model, prompts, [lang] * len(prompts), batch_size, frames_sink=text_sink)
        clips = EncoderOutput(torch.from_numpy(found.vectors), *pad_frames(found.frames))
        classes = EncoderOutput(torch.from_numpy(text), *pad_frames(text_sink))
        scores = chunked_scores(self.head, clips, classes, HEAD_MEMORY_MB).float().numpy()
        return scores, [ids[i] for i in found.rows], library.skips(found.bad) if library is not None else []


def item_ids(items: Sequence[str | np.ndarray]) -> list[str]:
    """The ids of the API's audio items: a file's path as given, ``audio[i]`` for a waveform."""
    return [item if isinstance(item, str) else f"audio[{i}]" for i, item in enumerate(items)]
