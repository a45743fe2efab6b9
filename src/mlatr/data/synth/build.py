"""Build the synthetic multilingual benchmark: ``audio/*.wav`` + ``manifest.jsonl`` (+ ``synth.json``).

Every clip derives its own generators from ``(seed, split, index, stream)``, so a clip does not depend
on how many clips the other splits have, on the languages asked for, or on the number of captions;
building is resumable (a wav that exists with the right length is kept) and parallel (``workers``
processes render wavs; the manifest is written once at the end, through :class:`Manifest.save`). The
same arguments give byte-identical files.

The split shapes follow the papers' data (ATRI §5.1): one caption per training clip and five per
validation/test clip, as in AudioCaps, in the eight languages of ATRI (eng, fra, deu, spa, nld, cat,
jpn, zho), the non-English captions being translations of the English ones index by index.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from mlatr.data.manifest import Clip, Manifest
from mlatr.data.synth.captions import captions_for_plans, sample_plans
from mlatr.data.synth.events import SAMPLE_RATE
from mlatr.data.synth.languages import SUPPORTED
from mlatr.data.synth.noise import apply_noise
from mlatr.data.synth.render import render_scene
from mlatr.data.synth.scene import Scene, layout_scene, sample_content, vary_content
from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_json, atomic_write_with, remove_orphan_temps

SPLITS = ("train", "val", "test")
_SPLIT_CODE = {"train": 0, "val": 1, "test": 2}
_SCENE, _CAPTIONS, _AUDIO, _NOISE, _VARIANT = 0, 1, 2, 3, 4
#: Fraction of clips that are hard negatives (a variant) of an earlier clip of their split.
P_VARIANT = 0.3
FORMAT_VERSION = 1


def clip_rng(seed: int, split: str, index: int, stream: int, *extra: int) -> np.random.Generator:
    """The generator of one clip's ``stream`` (scene, captions, audio, noise + language)."""
    return np.random.default_rng([seed, _SPLIT_CODE[split], index, stream, *extra])


def clip_id(split: str, index: int) -> str:
    return f"synth-{split}-{index:05d}"


def _is_variant(seed: int, split: str, index: int, p_variant: float) -> bool:
    return index > 0 and clip_rng(seed, split, index, _VARIANT).random() < p_variant


def variant_parent(seed: int, split: str, index: int, p_variant: float = P_VARIANT) -> int | None:
    """The earlier clip of the same split whose content clip ``index`` varies, or ``None``.

    A fraction ``p_variant`` of clips are hard negatives of an earlier clip that is not itself a
    variant (:func:`~mlatr.data.synth.scene.vary_content`); the choice depends only on the two clips'
    own generators, never on the split sizes.
    """
    if not _is_variant(seed, split, index, p_variant):
        return None
    rng = clip_rng(seed, split, index, _VARIANT)
    rng.random()
    for _ in range(8):
        j = int(rng.integers(index))
        if not _is_variant(seed, split, j, p_variant):
            return j
    return None


def clip_scene(seed: int, split: str, index: int, p_variant: float = P_VARIANT) -> Scene:
    """The scene of clip ``index`` of ``split``: its own content, or a variant of an earlier clip's."""
    rng = clip_rng(seed, split, index, _SCENE)
    parent = variant_parent(seed, split, index, p_variant)
    if parent is None:
        content = sample_content(rng)
    else:
        content = vary_content(sample_content(clip_rng(seed, split, parent, _SCENE)), rng)
    return layout_scene(content, rng)


def clip_audio(seed: int, split: str, index: int, p_variant: float = P_VARIANT) -> np.ndarray:
    """The waveform of clip ``index`` of ``split`` (float32, 16 kHz)."""
    return render_scene(clip_scene(seed, split, index, p_variant), clip_rng(seed, split, index, _AUDIO))


@dataclass(frozen=True)
class _Job:
    seed: int
    split: str
    index: int
    path: str
    frames: int
    p_variant: float


def _wav_complete(path: str, frames: int) -> bool:
    try:
        info = sf.info(path)
    except (RuntimeError, OSError, sf.LibsndfileError):
        return False
    return info.frames == frames and info.samplerate == SAMPLE_RATE and info.channels == 1


def _render_job(job: _Job) -> str:
    audio = clip_audio(job.seed, job.split, job.index, job.p_variant)
    atomic_write_with(job.path, lambda fh: sf.write(fh, audio, SAMPLE_RATE, format="WAV", subtype="PCM_16"),
                      sweep=False)  # the build swept the folder once
    return job.path


def clip_record(
    seed: int, split: str, index: int, languages: Sequence[str], n_captions: int,
    noise: dict[str, float] | None = None, p_variant: float = P_VARIANT,
) -> tuple[Clip, Scene]:
    """The manifest entry of one clip (audio path relative to the benchmark folder) and its scene.

    ``extra`` holds the scene description (``scene``), the clip it is a hard negative of
    (``variant_of``, when it is one) and the kind of error of each noisy caption (``caption_noise``).
    """
    scene = clip_scene(seed, split, index, p_variant)
    plans = sample_plans(scene, clip_rng(seed, split, index, _CAPTIONS), n_captions)
    captions = captions_for_plans(plans, languages)
    extra: dict = {"scene": scene.to_json()}
    parent = variant_parent(seed, split, index, p_variant)
    if parent is not None:
        extra["variant_of"] = clip_id(split, parent)
    if noise:
        rngs = {lang: clip_rng(seed, split, index, _NOISE, zlib.crc32(lang.encode())) for lang in noise}
        captions, record = apply_noise(captions, plans, noise, rngs)
        if record:
            extra["caption_noise"] = record
    cid = clip_id(split, index)
    clip = Clip(id=cid, audio=f"audio/{cid}.wav", captions=dict(captions), split=split,
                labels=scene.labels, duration=scene.num_samples / SAMPLE_RATE, extra=extra)
    return clip, scene


def _check(
    languages: Sequence[str], noise: dict[str, float], sizes: Iterable[int], k: int, k_eval: int,
    p_variant: float,
) -> None:
    unknown = [lang for lang in languages if lang not in SUPPORTED]
    if unknown:
        raise MlatrError(f"synthetic benchmark: no grammar for {', '.join(unknown)} "
                         f"(supported: {', '.join(SUPPORTED)})")
    if "eng" not in languages:
        raise MlatrError("synthetic benchmark: languages must include eng (the manifest's alignment anchor)")
    for lang, p in noise.items():
        if lang not in languages:
            raise MlatrError(f"synthetic benchmark: noise for {lang}, which is not among the languages")
        if not 0.0 <= p <= 1.0:
            raise MlatrError(f"synthetic benchmark: noise rate for {lang} must be in [0, 1], got {p}")
    if any(n < 0 for n in sizes):
        raise MlatrError("synthetic benchmark: split sizes must be >= 0")
    if not 0.0 <= p_variant <= 1.0:
        raise MlatrError(f"synthetic benchmark: hard_negatives must be in [0, 1], got {p_variant}")
    if k < 1 or k_eval < 1:
        raise MlatrError("synthetic benchmark: captions per clip must be >= 1")


def build_synthetic_benchmark(
    out_dir: str | os.PathLike,
    n_train: int = 800,
    n_val: int = 100,
    n_test: int = 100,
    seed: int = 0,
    languages: Sequence[str] = SUPPORTED,
    captions_train: int = 1,
    captions_eval: int = 5,
    noise: dict[str, float] | None = None,
    noise_splits: Sequence[str] = ("train",),
    hard_negatives: float = P_VARIANT,
    workers: int = 1,
    progress: bool = True,
) -> Manifest:
    """Write the benchmark into ``out_dir`` and return its manifest (also saved as ``manifest.jsonl``).

    ``captions_train`` captions per train clip (AudioCaps-like: 1), ``captions_eval`` per val/test clip
    (5, like AudioCaps/Clotho evaluation). ``noise`` maps languages to the probability that a caption
    is corrupted like a translation error (:mod:`.noise`), applied to the splits in ``noise_splits``
    (default: train only, so that evaluation references stay clean). Wavs already present with the
    right length are kept, so an interrupted build resumes. ``hard_negatives`` is the fraction of
    clips that vary an earlier clip of their split (same kinds, other attributes or order).
    """

    languages = list(dict.fromkeys(languages))
    noise = {k: float(v) for k, v in (noise or {}).items() if v}
    _check(languages, noise, (n_train, n_val, n_test), captions_train, captions_eval, hard_negatives)
    out = Path(out_dir)
    (out / "audio").mkdir(parents=True, exist_ok=True)

    sizes = {"train": n_train, "val": n_val, "test": n_test}
    clips: list[Clip] = []
    jobs: list[_Job] = []
    bar = tqdm(total=sum(sizes.values()), desc="scenes and captions", unit="clip", disable=not progress)
    for split in SPLITS:
        k = captions_train if split == "train" else captions_eval
        split_noise = noise if split in noise_splits else None
        for i in range(sizes[split]):
            clip, scene = clip_record(seed, split, i, languages, k, split_noise, hard_negatives)
            clips.append(clip)
            path = str(out / clip.audio)
            if not _wav_complete(path, scene.num_samples):
                jobs.append(_Job(seed, split, i, path, scene.num_samples, hard_negatives))
            bar.update()
    bar.close()

    remove_orphan_temps(out / "audio", [Path(job.path).name for job in jobs])  # left by a killed build
    bar = tqdm(total=len(jobs), desc="rendering audio", unit="clip", disable=not progress)
    if workers > 1 and len(jobs) > 1:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for _ in pool.imap_unordered(_render_job, jobs, chunksize=8):
                bar.update()
    else:
        for job in jobs:
            _render_job(job)
            bar.update()
    bar.close()

    manifest = Manifest(clips=clips, root=out.resolve(), path=out / "manifest.jsonl")
    manifest.save(out / "manifest.jsonl")
    atomic_write_json(out / "synth.json", {
        "format_version": FORMAT_VERSION, "seed": seed, "sizes": sizes, "languages": languages,
        "captions_train": captions_train, "captions_eval": captions_eval, "noise": noise,
        "noise_splits": list(noise_splits), "hard_negatives": hard_negatives, "sample_rate": SAMPLE_RATE,
    })
    return manifest


def describe(manifest: Manifest) -> str:
    """A short summary: clips, captions and seconds of audio per split."""
    lines = []
    for split, n in manifest.splits().items():
        sub = manifest.split(split)
        caps = sum(len(c.captions.get("eng", [])) for c in sub)
        secs = sum(c.duration or 0 for c in sub)
        lines.append(f"{split}: {n} clips, {caps} captions per language, {secs / 60:.1f} min of audio")
    return "\n".join(lines) + "\n" + json.dumps({"languages": manifest.languages()}, ensure_ascii=False)
