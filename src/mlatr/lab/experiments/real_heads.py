"""What every real-sound run shares: the clips with their frozen features, the text features, the head
options, the model of an option and one evaluation of a set of clips.

Frozen backbones (aisfx audio; USE or e5-small text) give each clip and each text a fixed vector, so a
run computes them once (:mod:`mlatr.frozen_features`, the text encoders' own caches) and trains only the
projection heads (:func:`mlatr.lab.experiments.head_recipe.train_recipe`, every command's one path). The head options
(:data:`mlatr.lab.experiments.head_options.HEAD_OPTIONS`) are
the ways of keeping the text encoder's multilingual space that issue 17 compares:

- ``both-heads``: an ML-CLAP head on each side (ATRI sec. 3.1, Linear-ReLU-Linear), trained on English
  captions: the text head is free to move English away from the other languages;
- ``audio-only``: the text side is the frozen encoder itself (``text_head="identity"``), only the audio
  head learns, into the text space, so every language keeps its place relative to English;
- ``near-identity``: a residual text head ``x + MLP(x)`` starting at the identity, with the
  ``text_identity`` penalty ``lambda ||g(t) - t||^2`` (:mod:`mlatr.training.head_training`);
- ``kcl-translations``: ML-CLAP heads trained with KCL (ATRI §4.1 eq. 9) over English and the machine
  translations the manifest holds, so every language's captions are pulled to the same clip;
- ``random``: untrained heads, the floor.

:func:`evaluate_clips` measures a set of clips three ways: the file-name captions (first English caption
of each clip as a query for its own clip, :func:`mlatr.evaluation.evaluate_embeddings`), the hand-written
multilingual queries with keyword relevance (:mod:`mlatr.evaluation.queries`, eight languages, with the
consistency metrics gap / dis / MRV of ATRI eq. 14-16), and zero-shot classification of the clips' folder
labels with SupCLAP §4.2.2's prompt in each language (:func:`mlatr.evaluation.zero_shot`); each with its
chance level.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import torch

from mlatr.audio.io import SAMPLE_RATE
from mlatr.data.manifest import Manifest
from mlatr.data.path_captions import CaptionRules
from mlatr.data.sound_names import name_caption
from mlatr.errors import MlatrError
from mlatr.evaluation import evaluate_embeddings, zero_shot, zero_shot_prompts
from mlatr.evaluation.nonsense import INDEX_SEED, nonsense_queries
from mlatr.evaluation.queries import caption_chance, keyword_relevance, multilingual_query_eval
from mlatr.frozen_features import AudioFeatureCache, audio_features
from mlatr.inference.audio import SoundFiles
from mlatr.inference.encoded_split import project
from mlatr.inference.runtime import attach_runtime, calibration_waves
from mlatr.lab.augmented_views import AugmentedView, augmented_views
from mlatr.lab.experiments.head_options import TEXT_ENCODERS, HeadOption
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.registry import build_audio_encoder, build_text_encoder
from mlatr.search.query_translation import installed_translator
from mlatr.training.head_training import TextBank, caption_rows

QUERIES_PATH = Path(str(resources.files("mlatr.data").joinpath("queries_multilingual.json")))

#: What a library's metadata can be in the text-search evaluation: its file names as the folder importer
#: reads them, or names that say nothing (a recorder's or a ripper's numbering).
METADATA = ("names", "meaningless")
MEANINGLESS_NAMES = ("ZOOM{:04d}.wav", "track_{}.ogg", "Audio {:03d}.wav", "REC{:04d}.WAV", "take_{}.flac")

#: The draws of nonsense queries: one that fitting may see, one kept for measuring, and the one each index fits
#: its own "nothing relevant" level on (mlatr.search.abstention).
NONSENSE_SEEDS = {"fit": 1, "measure": 0, "index": INDEX_SEED}


def library_of(clip_id: str) -> str:
    """The library a clip comes from: the first folder of its id (``scratch/Animal/Dog1`` -> ``scratch``)."""
    return clip_id.split("/", 1)[0]


@dataclass
class RealSounds:
    """The clips of a real-sound manifest with their frozen audio features, the queries and the labels."""

    manifest: Manifest
    features: np.ndarray  # [N, D] aisfx pooled features, manifest order
    queries: list[dict]
    languages: list[str]
    label_translations: dict[str, dict[str, str]] = field(default_factory=dict)
    audio_encoder: torch.nn.Module | None = None
    #: Augmented views of the clips the heads also train on (:mod:`mlatr.lab.augmented_views`; none by default).
    views: list[AugmentedView] = field(default_factory=list)
    #: ``(lang, query text) -> its English translation`` (:meth:`translate_queries`: the library's file names are
    #: English; empty without a translator).
    query_translations: dict[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def load(cls, manifest_path: str | Path, cache_path: str | Path, max_seconds: float = 10.0,
             progress: bool = True, audio_runtime: str = "torch") -> RealSounds:
        """The clips of a manifest with aiSFX's pooled features (cached at ``cache_path``), computed by torch or
        by an optimised runtime (``audio_runtime``: ``RUNTIME/PRECISION``, :mod:`mlatr.inference.runtime`; int8
        calibrated on 32 clips spread over the manifest), whose name then keys the cache."""
        manifest = Manifest.load(manifest_path)
        if not manifest.clips:
            raise MlatrError(f"{manifest_path}: no clips")
        audio_enc = build_audio_encoder("aisfx", frozen=True)
        key = {**audio_enc.config(), "max_seconds": max_seconds}
        if audio_runtime != "torch":
            runtime, _, precision = audio_runtime.partition("/")
            files = SoundFiles([str(c.audio_path(manifest.root)) for c in manifest.clips], SAMPLE_RATE, max_seconds,
                               skip_bad=True)
            key["runtime"] = attach_runtime(audio_enc, runtime, precision or "fp32", calibration_waves(files)).name
        cache = AudioFeatureCache(cache_path, json.dumps(key, sort_keys=True))
        feats = audio_features(audio_enc, manifest, cache, max_seconds, progress=progress)
        qdata = json.loads(QUERIES_PATH.read_text(encoding="utf-8"))
        return cls(manifest, feats, qdata["queries"], list(qdata["languages"]),
                   CaptionRules.load().label_translations, audio_enc)

    def augment(self, kinds: Sequence[str], views: int, cache_dir: str | Path, max_seconds: float = 10.0,
                progress: bool = True) -> None:
        """Add ``views`` augmented views of ``kinds`` (:func:`mlatr.lab.augmented_views.augmented_views`, cached in
        ``cache_dir``) to what the heads train on; before :func:`text_space`, which embeds their captions."""
        self.views = augmented_views(self.audio_encoder, self.manifest, cache_dir, kinds, views, max_seconds,
                                     progress)

    @property
    def libraries(self) -> list[str]:
        return [library_of(c.id) for c in self.manifest.clips]

    def caption_languages(self) -> list[str]:
        """The languages of the manifest's captions, English first."""
        langs = {lang for c in self.manifest.clips for lang, caps in c.captions.items() if any(caps)}
        return sorted(langs, key=lambda lang: (lang != "eng", lang))

    def training_languages(self, option: HeadOption) -> list[str]:
        """The caption languages ``option`` trains on: English, or every language of the captions
        (:meth:`caption_languages`) for an option that trains on translations."""
        return ["eng"] if option.caption_languages == "eng" else self.caption_languages()

    def metadata(self, i: int, kind: str) -> str:
        """Clip ``i``'s caption from what ships with its file: ``names``, its path within its library as
        ``mlatr data import --format folder`` reads it (file-name words, else its folder's); ``meaningless``,
        a numbered recorder-style name (``ZOOM0007.wav`` -> "zoom"). Empty when the name has no words."""
        if kind == "names":
            return name_caption(Path(*Path(self.manifest.clips[i].audio).parts[1:]))
        if kind == "meaningless":
            return name_caption(Path(MEANINGLESS_NAMES[i % len(MEANINGLESS_NAMES)].format(i + 1)))
        raise MlatrError(f"unknown metadata {kind!r} (choose from {', '.join(METADATA)})")

    def nonsense(self, seed: int) -> list[dict[str, str]]:
        """Nonsense queries asked of every library (:func:`mlatr.evaluation.nonsense.nonsense_queries`), the
        draw ``seed`` of :data:`NONSENSE_SEEDS`."""
        return nonsense_queries(self.languages, seed=seed)

    def translate_queries(self, translator) -> None:
        """Translate every non-English hand-written query into English with ``translator`` (a
        :class:`~mlatr.search.query_translation.QueryTranslator`) where it has the pair, as a search does
        (:mod:`mlatr.search.query_translation`); before :func:`text_space`, which embeds the translations."""
        for lang in self.languages:
            if lang == "eng":
                continue
            texts = [q["captions"][lang] for q in self.queries]
            for text, english in zip(texts, translator.translate(texts, lang, "eng"), strict=True):
                if english:
                    self.query_translations[(lang, text)] = english

    def english(self, i: int) -> list[str]:
        return [c for c in self.manifest.clips[i].captions.get("eng", []) if c]

    def label_in(self, label: str, lang: str) -> str:
        """A folder label in ``lang`` (the table's hand translation; English as it is)."""
        return label if lang == "eng" else self.label_translations.get(label, {}).get(lang, label)

    def texts(self) -> list[tuple[str, str]]:
        """Every ``(language, text)`` a run embeds: the clips' captions, the queries, the zero-shot prompts."""
        pairs = [(lang, t) for c in self.manifest.clips for lang, caps in c.captions.items() for t in caps if t]
        pairs += [(lang, t) for v in self.views for caps in v.captions for lang, ts in caps.items() for t in ts if t]
        pairs += [(lang, q["captions"][lang]) for q in self.queries for lang in self.languages]
        pairs += [("eng", english) for english in self.query_translations.values()]
        pairs += [(q["lang"], q["text"]) for seed in NONSENSE_SEEDS.values() for q in self.nonsense(seed)]
        pairs += sorted({("eng", t) for kind in METADATA for i in range(len(self.manifest))
                         if (t := self.metadata(i, kind))})
        labels = sorted({lb for c in self.manifest.clips for lb in c.labels})
        for lang in self.languages:
            pairs += list(zip([lang] * len(labels), zero_shot_prompts([self.label_in(lb, lang) for lb in labels], lang),
                              strict=True))
        return pairs


def text_space(name: str, data: RealSounds, cache_dir: str | Path, **options) -> tuple[torch.nn.Module, TextBank]:
    """The frozen text encoder ``name`` and the features of every text of ``data`` (cached on disk);
    ``options`` go to the encoder's factory. The hand-written queries' English translations are made first where
    Apertium has the pair (:meth:`RealSounds.translate_queries`, cached in ``cache_dir``), as a search translates
    them, so the bank embeds them and kept fold embeddings carry them (``mlatr experiment calibrate
    --translated-queries`` reads them)."""
    if name not in TEXT_ENCODERS:
        raise MlatrError(f"text encoder {name!r} is not a frozen multilingual encoder ({', '.join(TEXT_ENCODERS)})")
    translator = installed_translator(Path(cache_dir) / "query-translations.jsonl")
    if translator is not None and not data.query_translations:
        data.translate_queries(translator)
    opts = {"cache_path": str(Path(cache_dir) / f"{name}.npz"), **options}
    if name == "use-multilingual":
        opts["allow_unsupported_languages"] = True  # Catalan: embedded as is (USE has no Catalan), marked in reports
    encoder = build_text_encoder(name, **opts)
    bank = TextBank.embed(encoder, data.texts())
    encoder.save_cache()
    return encoder, bank


def build_model(data: RealSounds, text_encoder, option: HeadOption, embed_dim: int, seed: int) -> DualEncoder:
    """A DualEncoder over the frozen backbones with ``option``'s text head, initialised from ``seed``."""
    torch.manual_seed(seed)
    dim = embed_dim if option.text_head == "mlp" else text_encoder.output_dim
    return DualEncoder(data.audio_encoder, text_encoder, embed_dim=dim, text_head=option.text_head)


def training_items(data: RealSounds, train_rows: Sequence[int], languages: Sequence[str]
                   ) -> tuple[np.ndarray, list[list[list[str | None]]], list[int]]:
    """What the heads train on from the clips ``train_rows``: each clip with its caption rows
    (:func:`~mlatr.training.head_training.caption_rows` in ``languages``; a clip with none left out), then the same
    clips in each augmented view (``data.views``) with the view's captions. ``(features [M, D], caption rows,
    the clip row each item comes from)``."""
    sources = [(data.features, [c.captions for c in data.manifest.clips])]
    sources += [(v.features, v.captions) for v in data.views]
    parts, rows, origin = [], [], []
    for vectors, captions in sources:
        kept = [(i, r) for i in train_rows if (r := caption_rows(captions[i], languages))]
        parts.append(vectors[[i for i, _ in kept]])
        rows += [r for _, r in kept]
        origin += [i for i, _ in kept]
    return np.concatenate(parts), rows, origin


def _embed(model, audio_feats: np.ndarray, text_feats: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    return project(model, audio_feats, text_feats.numpy())


def caption_retrieval(model, data: RealSounds, bank: TextBank, rows: Sequence[int]) -> dict:
    """t2a / a2t recall (percent) of the clips' first English caption against their own clip, with chance."""
    rows = [i for i in rows if data.english(i)]
    texts = [data.english(i)[0] for i in rows]
    a, t = _embed(model, data.features[rows], bank.lookup(texts, ["eng"] * len(texts)))
    idx = np.arange(len(rows))
    res = evaluate_embeddings(a, t, idx, np.asarray(["eng"] * len(rows)), idx)
    return {"t2a": res["t2a"]["avg"], "a2t": res["a2t"]["avg"], "chance": caption_chance(idx, len(rows)),
            "n_clips": len(rows)}


def query_retrieval(model, data: RealSounds, bank: TextBank, rows: Sequence[int]) -> dict:
    """The hand-written multilingual queries over the clips ``rows`` (keyword relevance on all their English
    captions): t2a and a2t per language, chance, gap / dis / MRV (:func:`multilingual_query_eval`)."""
    langs = data.languages
    q_text = [q["captions"][lang] for q in data.queries for lang in langs]
    q_lang = [lang for _ in data.queries for lang in langs]
    q_group = np.repeat(np.arange(len(data.queries)), len(langs))
    relevant = keyword_relevance(data.queries, [" ".join(data.english(i)) for i in rows])
    a, q = _embed(model, data.features[list(rows)], bank.lookup(q_text, q_lang))
    return multilingual_query_eval(q, q_lang, q_group, a, relevant, langs)


def zero_shot_labels(model, data: RealSounds, bank: TextBank, rows: Sequence[int]) -> dict | None:
    """Zero-shot classification of the clips' folder labels in every language (SupCLAP §4.2.2's prompt,
    labels translated by hand); None when the clips have fewer than two labels."""
    labelled = [i for i in rows if data.manifest.clips[i].labels]
    classes = sorted({data.manifest.clips[i].labels[0] for i in labelled})
    if len(classes) < 2:
        return None
    targets = np.asarray([classes.index(data.manifest.clips[i].labels[0]) for i in labelled])
    out = {}
    for lang in data.languages:
        prompts = zero_shot_prompts([data.label_in(c, lang) for c in classes], lang)
        a, c = _embed(model, data.features[labelled], bank.lookup(prompts, [lang] * len(prompts)))
        out[lang] = zero_shot(a, c, targets)
    out["avg"] = {k: float(np.mean([out[lang][k] for lang in data.languages])) for k in ("top1", "top5")}
    n = len(classes)
    return {**out, "chance": {"top1": 100.0 / n, "top5": 100.0 * min(5, n) / n}, "classes": classes,
            "n_clips": len(labelled)}


def evaluate_clips(model, data: RealSounds, bank: TextBank, rows: Sequence[int]) -> dict:
    """All three views of the clips ``rows`` (module docstring)."""
    model.eval()
    return {"captions": caption_retrieval(model, data, bank, rows), "queries": query_retrieval(model, data, bank, rows),
            "zero_shot": zero_shot_labels(model, data, bank, rows)}
