"""A run's caption and clip lengths from its manifest: the padded length of a typical step and of the worst.

:func:`length_plan` reads the training clips of a manifest (``data.train_split``; every clip when the manifest
has no such split, e.g. a test set standing in for a training set) and:

1. counts every caption's tokens in every language of ``data.languages`` with the run's text encoder's own
   :meth:`token_lengths` (special tokens and truncation included) over the tokenizer of
   :func:`~mlatr.lab.planning.tokenizers.planning_tokenizer`;
2. for a language the manifest has no caption in (an English-only test set planned for eight languages),
   estimates each caption's length from the first language it has: ``specials + ceil(r_L * pieces)``, with
   ``r_L`` the ratio of the tokenizer's piece counts on mlatr's hand-written aligned captions of the eight
   ATRI languages (``mlatr/data/queries_multilingual.json``, 32 sound descriptions per language); a language
   with captions is never estimated;
3. gives each clip the distribution of the longest caption it puts into a step: ``j`` uniform among its
   usable captions (:func:`~mlatr.data.pipeline.epoch_plan.plan_epoch`), the languages by
   :meth:`~mlatr.losses.schemes.Scheme.encoded_columns` (ML-CLAP one drawn language, CACL English and one,
   KCL all);
4. gives each clip its audio length after the crop (``min(duration, data.max_seconds)``; a clip without a
   ``duration`` counts as ``data.max_seconds``);
5. turns both into the step and epoch distributions of :mod:`mlatr.lab.planning.batch_lengths`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
import torch

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.epoch_plan import caption_row, usable_caption_indices
from mlatr.errors import MlatrError
from mlatr.lab.planning.architectures import ArchitectureOnlyText
from mlatr.lab.planning.batch_lengths import BatchLengths, at_most, batch_lengths
from mlatr.lab.planning.tokenizers import planning_tokenizer
from mlatr.losses.schemes import build_scheme
from mlatr.models.hf_text import SPECS
from mlatr.models.registry import build_text_encoder, text_encoder_takes_corpus
from mlatr.training.config import Config


@dataclass
class LengthPlan:
    """What :func:`length_plan` found: the two padded quantities, how they were counted, what was assumed."""

    tokens: BatchLengths
    audio: BatchLengths
    tokenizer: str
    clips_from: str
    languages: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def batch(self, which: str) -> tuple[int, float]:
        """``(caption tokens, audio seconds)`` of the ``typical`` or ``worst`` step (tokens rounded up)."""
        tokens = self.tokens.typical if which == "typical" else self.tokens.worst
        seconds = self.audio.typical if which == "typical" else self.audio.worst
        return int(math.ceil(tokens - 1e-9)), round(float(seconds), 2)

    def summary(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer, "clips_from": self.clips_from, "languages": self.languages,
                "caption_tokens": self.tokens.summary(), "audio_seconds": self.audio.summary(),
                "typical": dict(zip(("caption_tokens", "audio_seconds"), self.batch("typical"), strict=True)),
                "worst": dict(zip(("caption_tokens", "audio_seconds"), self.batch("worst"), strict=True)),
                "notes": self.notes}


def length_encoder(cfg: Config, clips: Manifest, tokenizer_path: str | None) -> tuple[Any, str]:
    """The run's text encoder as far as counting tokens goes (``token_lengths``), and its tokenizer's name."""
    options = dict(cfg.model.text)
    name = options.pop("name")
    if name in SPECS:
        tokenizer, described = planning_tokenizer(options, tokenizer_path)
        with torch.device("meta"):  # the tower itself is not needed, only its tokenisation
            return ArchitectureOnlyText(name, 3, tokenizer=tokenizer, **options), described
    if tokenizer_path:
        raise MlatrError(f"--tokenizer: text encoder {name!r} has its own tokenizer")
    if text_encoder_takes_corpus(name) and "tokenizer" not in options:
        options["corpus"] = [t for c in clips for lang in cfg.data.languages for t in c.captions.get(lang, []) if t]
    encoder = build_text_encoder(name, **options)
    if not hasattr(encoder, "token_lengths"):
        raise MlatrError(f"text encoder {name!r} does not count tokens: plan with --caption-tokens, not --manifest")
    return encoder, f"{name}'s own (trained on the manifest's captions)" if "corpus" in options else f"{name}'s own"


def aligned_ratios(encoder: Any, languages: list[str], pivot: str) -> dict[str, float]:
    """Piece count of each language over the pivot's on the hand-written aligned captions (module docstring);
    1.0 for a language they do not have."""
    data = json.loads(resources.files("mlatr.data").joinpath("queries_multilingual.json").read_text("utf-8"))
    rows = [q["captions"] for q in data["queries"]]
    specials = {lang: encoder.token_lengths([""], [lang])[0] for lang in languages + [pivot]}

    def pieces(lang: str) -> int:
        texts = [r[lang] for r in rows]
        return sum(n - specials[lang] for n in encoder.token_lengths(texts, [lang] * len(texts)))

    base = pieces(pivot)
    return {lang: (pieces(lang) / base if lang in data["languages"] else 1.0) for lang in languages}


def _training_clips(manifest: Manifest, split: str) -> tuple[Manifest, str]:
    if split in manifest.splits():
        return manifest.split(split), f"{manifest.path}, split {split!r}"
    return manifest, f"{manifest.path}, every clip (no {split!r} split: the manifest stands in for the training set)"


def length_plan(cfg: Config, manifest: Manifest, tokenizer_path: str | None = None,
                epoch_clips: int | None = None) -> LengthPlan:
    """Caption-token and audio-second distributions of ``cfg``'s steps on ``manifest`` (module docstring).

    ``epoch_clips``: the training set's size, used when the manifest has no training split and so stands in
    for it (a test split): its clips are then a sample the epoch's ``epoch_clips`` clips are drawn from
    (:func:`~mlatr.lab.planning.batch_lengths.batch_lengths`).
    """
    clips, clips_from = _training_clips(manifest, cfg.data.train_split)
    if cfg.data.train_split in manifest.splits() or epoch_clips == len(clips):
        epoch_clips = None
    languages = list(cfg.data.languages)
    scheme = build_scheme(cfg.objective.scheme)
    encoder, tokenizer = length_encoder(cfg, clips, tokenizer_path)
    present = [lang for lang in languages if any(c.captions.get(lang) for c in clips)]
    if not present:
        raise MlatrError(f"{manifest.path}: no caption in any of data.languages ({', '.join(languages)})")
    pivot, notes = present[0], []
    limit = getattr(encoder, "max_length", None)
    counted: dict[str, dict[str, int]] = {}
    info: dict[str, dict[str, Any]] = {}
    for lang in present:
        texts = sorted({t for c in clips for t in c.captions.get(lang, []) if t})
        counted[lang] = dict(zip(texts, encoder.token_lengths(texts, [lang] * len(texts)), strict=True))
    missing = [lang for lang in languages if lang not in present]
    ratios = aligned_ratios(encoder, missing, pivot) if missing else {}
    specials = {lang: encoder.token_lengths([""], [lang])[0] for lang in missing + [pivot]}
    for lang in missing:
        notes.append(f"{lang}: no caption in the manifest; lengths estimated from {pivot} x {ratios[lang]:.3f} "
                     f"(token ratio on mlatr's hand-written aligned captions, same tokenizer)")

    def length(row: list[str | None], k: int) -> int | None:
        lang = languages[k]
        if lang in counted:
            return counted[lang][row[k]] if row[k] else None
        source = row[languages.index(pivot)]
        if not source:
            return None
        estimate = specials[lang] + math.ceil(ratios[lang] * (counted[pivot][source] - specials[pivot]))
        return min(estimate, limit) if limit else estimate

    need_first = scheme.anchor_language is not None
    contributions: list[list[tuple[float, int]]] = []  # per clip: (probability, longest encoded caption)
    per_language: dict[str, list[int]] = {lang: [] for lang in languages}
    skipped = 0
    for clip in clips:
        options = usable_caption_indices(clip, languages, need_first)
        if not options:
            skipped += 1
            continue
        draws: list[tuple[float, int]] = []
        for j in options:
            row = caption_row(clip, j, languages)
            lengths = [length(row, k) for k in range(len(languages))]
            for k, n in enumerate(lengths):
                if n is not None:
                    per_language[languages[k]].append(n)
            for weight, columns in scheme.encoded_columns([n is not None for n in lengths]):
                draws.append((weight / len(options), max(lengths[k] for k in columns)))
        contributions.append(draws)
    if skipped:
        notes.append(f"{skipped} clip(s) without a usable caption are left out, as training leaves them out")
    for lang in languages:
        counts = np.asarray(per_language[lang])
        info[lang] = {"source": "manifest" if lang in counted else f"estimated from {pivot} x {ratios[lang]:.3f}",
                      "captions": int(counts.size)}
        if counts.size:
            info[lang].update(mean=float(counts.mean()), p95=float(np.percentile(counts, 95)), max=int(counts.max()))
    values = np.unique([n for draws in contributions for _, n in draws])
    p = np.zeros((len(contributions), len(values)))
    for c, draws in enumerate(contributions):
        for weight, n in draws:
            p[c, np.searchsorted(values, n)] += weight
    if epoch_clips is not None:
        notes.append(f"an epoch is {epoch_clips:,} clips drawn from the manifest's {len(contributions):,} "
                     f"(their lengths a sample of the training set's)")
    tokens = batch_lengths(np.cumsum(p, axis=1), values, cfg.train.batch_size, epoch_clips)

    crop = float(cfg.data.max_seconds)
    kept = [clip for clip in clips if usable_caption_indices(clip, languages, need_first)]
    seconds = np.array([min(c.duration, crop) if c.duration is not None else crop for c in kept])
    undated = sum(c.duration is None for c in kept)
    if undated:
        notes.append(f"{undated} clip(s) without a duration count as data.max_seconds ({crop:g} s)")
    audio_values = np.unique(seconds)
    audio = batch_lengths(at_most(seconds, audio_values), audio_values, cfg.train.batch_size, epoch_clips)
    return LengthPlan(tokens, audio, tokenizer, clips_from, info, notes)
