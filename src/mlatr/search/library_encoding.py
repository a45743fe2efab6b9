"""A library's clips and captions encoded by a model into an index's tables, and what the index records of it.

:func:`encode_clips` reads the clips' audio through the one audio path (:mod:`mlatr.inference.audio`: centre
crop, windows, pooled; ATRI sec. 3.1: projected and L2-normalised, so inner product = cosine, eq. 1) by
``workers`` processes, and their manifest captions through the text tower, the segments of its long clips
(:func:`mlatr.search.segments.encode_segments`: the whole file, decoded again as a stream), and records each audio
file's state (size, mtime) before it is read: a later change shows (:meth:`mlatr.search.index.Index.stale`). With
``resume`` the clips' vectors go to a :class:`~mlatr.inference.vector_journal.VectorJournal` as they come, so the
same build started again after a kill encodes only the clips it had not done (:func:`encoding_journal`; the
writer removes it once the index is written). :func:`index_meta` is what an index records of how it was made.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from mlatr.data.manifest import Clip, Manifest
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.data.webdataset_shards import ShardIndex, ShardSource
from mlatr.errors import MlatrError
from mlatr.file_state import file_sha256, file_state
from mlatr.inference import LoadedModel
from mlatr.inference.audio import Embedded, SourceClips, Waveforms, Windowing, model_vectors
from mlatr.inference.model_identity import model_sha256
from mlatr.inference.text import encode_texts
from mlatr.inference.vector_journal import VectorJournal, journal_key
from mlatr.search.columns import CaptionColumns, ClipColumns, SegmentColumns, check_vectors
from mlatr.search.segments import Segmenting, encode_segments
from mlatr.search.storage import Tables


@dataclass(frozen=True)
class EncodeSettings:
    """How clips are read and encoded for an index (see :func:`mlatr.search.build.build_index`)."""

    sample_rate: int
    max_seconds: float
    window_seconds: float
    batch_size: int = 16
    skip_bad: bool = False
    progress: bool = False
    #: the webdataset shards the clips' audio is read from (:mod:`mlatr.data.webdataset_shards`), else their files
    shards: ShardIndex | None = None
    #: how long clips are cut into segments (:mod:`mlatr.search.segments`; ``above`` None: never). A shard member
    #: has no file to stream: it gets none
    segments: Segmenting = field(default_factory=Segmenting)
    #: processes reading and encoding the audio (1: this process)
    workers: int = 1
    #: keep the vectors in a journal as they come, so that the build started again after a kill resumes
    resume: bool = False


def clip_names(manifest: Manifest, clips: Sequence[Clip], states: Sequence[dict | None]) -> list[str]:
    """What names each clip's vector in a journal: its id, its audio and the file's state when it was read."""
    return [json.dumps([c.id, c.audio, str(manifest.root), s], sort_keys=True) for c, s in zip(clips, states,
                                                                                              strict=True)]


def encoding_journal(loaded: LoadedModel, manifest: Manifest, clips: Sequence[Clip], how: EncodeSettings
                     ) -> VectorJournal | None:
    """The journal of this encoding (``how.resume``): named by the model's weights, the audio settings and the
    clips, so the same build started again finds it."""
    if not how.resume:
        return None
    return VectorJournal.in_cache(journal_key(weights=loaded.weights_sha256(), sample_rate=how.sample_rate,
                                              max_seconds=how.max_seconds, window_seconds=how.window_seconds,
                                              runtime=loaded.audio_runtime(), root=str(manifest.root),
                                              clips=[[c.id, c.audio] for c in clips]))


def finished_encoding(loaded: LoadedModel, manifest: Manifest, clips: Sequence[Clip], how: EncodeSettings) -> None:
    """Remove the journal of an encoding whose output is now written."""
    journal = encoding_journal(loaded, manifest, clips, how)
    if journal is not None:
        journal.remove()


def encode_clips(loaded: LoadedModel, manifest: Manifest, clips: Sequence[Clip], langs: Sequence[str],
                 how: EncodeSettings, meta: dict | None = None, require_one: bool = True
                 ) -> tuple[Tables, dict[str, str]]:
    """The tables of ``clips`` (of ``manifest``) encoded by ``loaded`` with their captions in ``langs`` and the
    segments of the long ones (``meta``: the tables'), and the unreadable clips skipped (``how.skip_bad``; else the
    first one is an error). Each file's state is taken before it is read. ``require_one``: none of the clips
    readable is an error (a build that would write nothing); else empty tables and every clip skipped (a sync,
    whose other changes are still written)."""
    model = loaded.model
    if not clips:
        dim = model.embed_dim
        return Tables(ClipColumns.empty(dim), CaptionColumns.empty(dim), dict(meta or {})), {}
    sub = Manifest(clips=list(clips), root=manifest.root, path=manifest.path)
    if how.shards is None:
        states = [file_state(c.audio_path(manifest.root)) for c in clips]  # before reading: a later change shows
        hashes = [file_sha256(c.audio_path(manifest.root)) if s else None for c, s in zip(clips, states, strict=True)]
        source = AudioSource(sub, how.sample_rate, cache=False, skip_bad=how.skip_bad)
    else:  # a shard member has no file of its own to watch: no state recorded, never stale
        states = hashes = [None] * len(clips)
        source = ShardSource(sub, how.shards, how.sample_rate, skip_bad=how.skip_bad)
    audio = _audio_vectors(loaded, source, clip_names(manifest, clips, states), how,
                           encoding_journal(loaded, manifest, clips, how))
    rows = audio.rows
    skipped = dict(source.bad)
    if not rows and not require_one:
        return encode_clips(loaded, manifest, [], langs, how, meta)[0], skipped
    if not rows:
        first = next(iter(skipped.values()), "")
        raise MlatrError(f"none of the {len(clips)} new clip(s) of {manifest.path or 'the manifest'} "
                         f"could be read; nothing was written (first: {first})")
    kept = [sub[i] for i in rows]
    table = ClipColumns.of_clips(kept, manifest.root, audio.vectors, {"state": [states[i] for i in rows],
                                                                      "sha256": [hashes[i] for i in rows]})
    captions = encode_captions(loaded, kept, langs, how.batch_size)
    segments = clip_segments(loaded, table, how) if how.shards is None else SegmentColumns.empty(model.embed_dim)
    check_vectors(table, captions, "index: ", unit_captions=False, segments=segments)
    return Tables(table, captions, dict(meta or {}), segments=segments), skipped


def encode_captions(loaded: LoadedModel, clips: Sequence[Clip], langs: Sequence[str], batch_size: int
                    ) -> CaptionColumns:
    """The caption table of ``clips`` (the clip rows in that order) in ``langs``, encoded by ``loaded``'s text side."""
    arrays = Manifest(clips=list(clips), root=Path(".")).caption_arrays(list(langs))
    text = encode_texts(loaded.model, arrays["texts"], list(arrays["text_lang"]), batch_size)
    text = text.reshape(len(arrays["texts"]), loaded.model.embed_dim)  # [m, d]; none: [0, d], not [0, 0]
    return CaptionColumns.of_arrays(arrays, text)


def clip_segments(loaded: LoadedModel, table: ClipColumns, how: EncodeSettings) -> SegmentColumns:
    """The segments of the clips of ``table`` whose file is longer than ``how.segments.above`` (its header's
    duration), each one model window encoded alone through the one audio path (:mod:`mlatr.search.segments`)."""
    long = [(row, path) for row, path in enumerate(table["path"]) if how.segments.wants(path)]
    if not long:
        return SegmentColumns.empty(loaded.model.embed_dim)
    windowing = Windowing.of(how.window_seconds, how.batch_size, how.sample_rate)
    bar = tqdm(total=len(long), desc="segments", unit="clip", disable=not how.progress, leave=False)

    def embed(waves: list[np.ndarray]) -> np.ndarray:
        return model_vectors(loaded.model, Waveforms(waves, how.sample_rate, how.sample_rate), windowing).vectors

    try:
        return encode_segments(embed, long, how.segments, how.sample_rate, on_clip=lambda: bar.update(1))
    finally:
        bar.close()


def _audio_vectors(loaded: LoadedModel, source: AudioSource, names: list[str], how: EncodeSettings,
                   journal: VectorJournal | None) -> Embedded:
    """The clips' vectors in order: those of the journal (a killed run's), the others encoded now (and added
    to the journal as they come); ``source.bad`` holds the clips skipped, by id."""
    done, done_bad = journal.load() if journal is not None else ({}, {})
    ids = [c.id for c in source.manifest.clips]
    row_of = {name: row for row, name in enumerate(names)}
    source.bad.update({ids[row_of[n]]: why for n, why in done_bad.items() if n in row_of})
    todo = [row for row, name in enumerate(names) if name not in done and name not in done_bad]
    if journal is not None and len(todo) < len(names) and how.progress:
        print(f"mlatr: resuming: {len(names) - len(todo):,} of {len(names):,} clips were encoded by an earlier, "
              f"interrupted run", file=sys.stderr)
    name_of = dict(zip(ids, names, strict=True))

    def record(part: Embedded) -> None:
        journal.add([names[r] for r in part.rows], part.vectors, {name_of[i]: why for i, why in part.bad.items()})

    found = model_vectors(loaded.model, SourceClips(source, how.max_seconds),
                          Windowing.of(how.window_seconds, how.batch_size, how.sample_rate), workers=how.workers,
                          progress=how.progress, desc="index", rows=todo,
                          on_chunk=record if journal is not None else None)
    if journal is not None:
        journal.flush()
    vectors = {row: vec for row, vec in zip(found.rows, found.vectors, strict=True)}
    vectors.update({row_of[n]: vec for n, vec in done.items() if n in row_of})
    rows = sorted(vectors)
    dim = loaded.model.embed_dim
    return Embedded(rows, np.stack([vectors[r] for r in rows]).astype(np.float32) if rows else np.zeros((0, dim),
                                                                                                       np.float32))


def index_meta(loaded: LoadedModel, manifest: Manifest, sample_rate: int, max_seconds: float,
               caption_languages: Sequence[str], window_seconds: float | None = None,
               sha: str | None = None, segments: Segmenting | None = None) -> dict[str, Any]:
    """What an index records of how it was made: the checkpoint (absolute path, the SHA-256 of its file:
    ``sha`` when already computed, and of its weights: :mod:`mlatr.inference.model_identity`, which says
    whether a model given for the index is the one that made it), the model's config, the audio settings (and the
    optimised runtime that ran the audio encoder, if one did), the caption languages, how long clips were segmented
    (:mod:`mlatr.search.segments`) and the manifest."""
    checkpoint = Path(loaded.path).resolve()
    meta: dict[str, Any] = {"checkpoint": {"path": str(checkpoint), "sha256": sha or model_sha256(checkpoint),
                                           "weights_sha256": loaded.weights_sha256()},
                            "model_config": loaded.model.config(), "sample_rate": sample_rate,
                            "max_seconds": max_seconds}
    if window_seconds is not None:
        meta["window_seconds"] = window_seconds
    if segments is not None and segments.meta() is not None:
        meta["segments"] = segments.meta()
    if loaded.audio_runtime() != "torch":  # an optimised runtime's vectors (mlatr.inference.runtime)
        meta["audio_runtime"] = loaded.audio_runtime()
    meta["caption_languages"] = list(caption_languages)
    meta["manifest"] = str(Path(manifest.path).resolve()) if manifest.path else None
    return meta


def build_settings(loaded: LoadedModel, max_seconds: float | None, window_seconds: float | None,
                   sample_rate: int | None) -> tuple[int, float, float]:
    """``(sample_rate, max_seconds, window_seconds)`` of an index build: the given ones, else the model's
    (``sample_rate``, ``eval_max_seconds``); windows never longer than the crop."""
    sample_rate = int(sample_rate or loaded.data["sample_rate"])
    max_seconds = float(max_seconds or loaded.data["eval_max_seconds"])
    return sample_rate, max_seconds, min(float(window_seconds or loaded.data["eval_max_seconds"]), max_seconds)
