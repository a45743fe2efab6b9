"""What ``mlatr eval`` computes, as a Python call: ``mlatr.evaluate(model, "manifest.jsonl", split="test")``.

A manifest split is encoded (:func:`encode_split`), ranked with the model's own matching head
(:func:`mlatr.evaluation.with_head.evaluate_with_head_with_ranks`: recall, mAP@10, consistency, ATRI Tables
1-3), and, when clips carry exactly one label each (ESC-50, UrbanSound8K imports), classified zero-shot with
the prompt "This is a sound of {label}." in each prompt language (SupCLAP sec. 4.2.2); clips with several
labels are left out of it and counted. The command adds printing, files and plots.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mlatr import api_args
from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.workers import default_workers
from mlatr.data.webdataset_shards import ShardIndex, ShardSource
from mlatr.errors import MlatrError
from mlatr.evaluation.caveats import evaluation_caveats
from mlatr.evaluation.evaluate import Evaluation
from mlatr.evaluation.with_head import HEAD_MEMORY_BUDGET_MB, evaluate_with_head_with_ranks, zero_shot_with_head
from mlatr.evaluation.zero_shot import zero_shot_prompts
from mlatr.inference.encoded_split import EncodedSplit, encode_manifest, pad_frames
from mlatr.inference.library import manifest_split
from mlatr.inference.loaded_model import LoadedModel
from mlatr.inference.text import encode_texts
from mlatr.languages import normalize, normalize_all
from mlatr.models.outputs import EncoderOutput


@dataclass
class ModelEvaluation:
    """An evaluation's metrics (the JSON ``mlatr eval --json`` writes), its ranks (for the plots), the
    encoded split and the clips that were asked for (before unreadable ones were skipped)."""

    metrics: dict[str, Any]
    evaluation: Evaluation
    encoded: EncodedSplit
    clips: Manifest
    skipped_lines: list = field(default_factory=list)


def check_languages_present(manifest: Manifest, languages: Sequence[str], split: str, explicit: bool,
                            flag: str | None = None) -> None:
    """Refuse languages with no caption in the clips to encode: every one given explicitly, at least one of
    the model's otherwise. ``flag`` names where the languages came from (default ``--languages: `` or
    ``the model's languages: ``)."""
    present = manifest.languages()
    missing = [lang for lang in languages if lang not in present]
    if (explicit and missing) or len(missing) == len(languages):
        name = manifest.path or "the shards"
        where = f"split {split!r} of {name}" if split != "all" else str(name)
        flag = flag or ("--languages: " if explicit else "the model's languages: ")
        raise MlatrError(f"{flag}no caption in {', '.join(missing)} in {where} "
                         f"(its captions are in: {', '.join(present) or 'no language'})")


def encode_split(loaded: LoadedModel, manifest: Manifest, languages: Sequence[str] | None = None, *,
                 split: str = "all", batch_size: int = 64, max_seconds: float | None = None, skip_bad: bool = False,
                 workers: int | None = None, progress: bool = True, check_languages: bool = True,
                 shards: ShardIndex | None = None) -> EncodedSplit:
    """Every clip and caption of ``manifest`` (``split`` only names it in messages) in ``languages`` (default:
    the model's training languages) encoded by ``loaded``, centre-cropped to ``max_seconds`` (default the
    model's evaluation crop), with frame / token features when its head scores them. ``shards``: the webdataset
    shards the clips were read from (their audio is read there)."""
    explicit = languages is not None
    languages = normalize_all(languages, "languages") if explicit else list(loaded.data["languages"])
    if check_languages:
        check_languages_present(manifest, languages, split, explicit)
    source = None if shards is None else ShardSource(manifest, shards, loaded.data["sample_rate"], skip_bad=skip_bad)
    enc = encode_manifest(loaded.model, manifest, languages, batch_size=batch_size,
                          max_seconds=max_seconds or loaded.data["eval_max_seconds"],
                          sample_rate=loaded.data["sample_rate"], skip_bad=skip_bad, progress=progress,
                          frames=loaded.head.needs_frames,
                          workers=default_workers() if workers is None else workers, source=source)
    if not enc.clip_ids:
        raise MlatrError(f"none of the {len(manifest)} clip(s) to encode could be read "
                         f"(first: {next(iter(enc.skipped.values()), '')})")
    return enc


def evaluate_model(loaded: LoadedModel, manifest: str | os.PathLike | Manifest, split: str = "test", *,
                   languages: Sequence[str] | None = None, pivot: str = "eng",
                   zero_shot_languages: Sequence[str] = ("eng",), batch_size: int = 64,
                   max_seconds: float | None = None, skip_bad: bool = False,
                   head_memory_mb: float = HEAD_MEMORY_BUDGET_MB, workers: int | None = None,
                   progress: bool = True, shards: ShardIndex | None = None) -> ModelEvaluation:
    """Evaluate ``loaded`` on split ``split`` (``all``: every clip) of ``manifest`` (a file or a
    :class:`Manifest`, taken whole; ``shards``: the webdataset shards it was read from); see the module
    docstring."""
    api_args.instance("model", loaded, LoadedModel, "mlatr.load(PATH)")
    split = api_args.text("split", split)
    batch_size = api_args.integer("batch_size", batch_size)
    max_seconds = api_args.positive_number("max_seconds", max_seconds)
    head_memory_mb = api_args.positive_number("head_memory_mb", head_memory_mb, allow_none=False)
    workers = None if workers is None else api_args.integer("workers", workers, low=0)
    skip_bad, progress = api_args.flag("skip_bad", skip_bad), api_args.flag("progress", progress)
    languages = None if languages is None else api_args.language_codes("languages", languages)
    pivot = normalize(api_args.text("pivot", pivot), "pivot")
    zero_shot_languages = api_args.language_codes("zero_shot_languages", zero_shot_languages)
    if isinstance(manifest, Manifest):
        clips = manifest if split == "all" else manifest.split(split)
    else:
        clips = manifest_split(manifest, split, skip_bad)
    enc = encode_split(loaded, clips, languages, split=split, batch_size=batch_size, max_seconds=max_seconds,
                       skip_bad=skip_bad, workers=workers, progress=progress, shards=shards)
    head = loaded.head
    # The model's own head ranks (pooled cosine unless trained with a fine-grained one; T2A [Nt, Na] and
    # A2T [Na, Nt] scored separately for an asymmetric head).
    evaluation = evaluate_with_head_with_ranks(head, enc, pivot=pivot, head_memory_mb=head_memory_mb,
                                               progress=progress)
    metrics = evaluation.metrics
    caveats = evaluation_caveats(len(enc.clip_ids), enc.text_lang, enc.text_group, pivot)
    if caveats:
        metrics["warnings"] = caveats
    if head.name != "cosine":
        metrics["matching_head"] = head.config()
    kept = [clips[i] for i in enc.clip_rows]
    single = [i for i, c in enumerate(kept) if c.labels and len(c.labels) == 1]
    if single:
        classes = sorted({kept[i].labels[0] for i in single})
        targets = np.asarray([classes.index(kept[i].labels[0]) for i in single])
        metrics["zero_shot"] = {"classes": len(classes), "clips": len(single),
                                "skipped_multi_label": sum(1 for c in kept if c.labels and len(c.labels) > 1),
                                "scored_with": head.name}
        for lang in zero_shot_languages:
            prompts = zero_shot_prompts(classes, lang)
            metrics["zero_shot"][lang] = zero_shot_with_model(loaded, enc, single, prompts, lang, targets,
                                                              batch_size, head_memory_mb)
    return ModelEvaluation(metrics, evaluation, enc, clips, list(clips.problems))


def evaluate(model: LoadedModel, manifest: str | os.PathLike | Manifest, split: str = "test",
             **options: Any) -> dict[str, Any]:
    """The metrics ``mlatr eval`` prints, as a dict (``mlatr.evaluate``); options as :func:`evaluate_model`."""
    return evaluate_model(model, manifest, split, **options).metrics


def zero_shot_with_model(loaded, enc, rows: list[int], prompts: list[str], lang: str, targets,
                         batch_size: int = 64, memory_budget_mb: float = HEAD_MEMORY_BUDGET_MB) -> dict[str, float]:
    """Zero-shot classification (SupCLAP §4.2.2) of the clips ``rows`` of an encoded split against the class
    ``prompts`` in ``lang``, encoded and ranked by a :class:`~mlatr.inference.LoadedModel` with its
    own head."""
    sink: list | None = [] if loaded.head.needs_frames else None
    pooled = encode_texts(loaded.model, prompts, [lang] * len(prompts), batch_size, frames_sink=sink)
    classes = EncoderOutput(torch.from_numpy(pooled), *(pad_frames(sink) if sink is not None else (None, None)))
    clips = enc.audio_side().rows(torch.as_tensor(rows, dtype=torch.long))
    return zero_shot_with_head(loaded.head, clips, classes, targets, memory_budget_mb)
