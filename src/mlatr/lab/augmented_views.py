"""Audio augmentation for heads that train on frozen features: extra views of every clip, computed once.

The real-sound recipe trains only projection heads on features a frozen aiSFX computed once per clip
(:mod:`mlatr.frozen_features`); an augmentation drawn anew in every epoch would cost a forward pass of the CNN
per clip and epoch. Here an *augmented view* gives every clip one altered version, computed once and cached
like the clip's own features, which the heads then train on beside the originals (issue 35, item 3: gain,
time shift, mixing two clips with their captions joined).

The transforms act on aiSFX's spectrogram blocks (stage 0, cached by :mod:`mlatr.frozen_prefix`), exactly on
the front end's encoding ``S = log10(1e4 P + 1) / SPEC_MAX`` of the peak-normalised clip's mel power ``P``
(:class:`mlatr.models.aisfx.AisfxFrontEnd`), in this order:

- **shift**: the clip's spectrogram (its blocks put back together, :func:`join_blocks`) rotated in time by
  ``r`` frames, ``r`` uniform in ``1 .. T - 1`` (the sound starts later; what passes the end comes round);
- **mix**: plus the mel power of a partner clip of the same library and split, at a relative level drawn in
  ``MIX_DB``, the partner's spectrogram cut or zero-padded to the clip's length. The partner comes from the
  clip's own library so that a held-out library (leave-one-library-out folds hold libraries whole) never lends
  its sound to a training clip, and from its own split so that no test sound enters training. The view's
  caption joins the two clips' first captions per language (:data:`JOIN`: "dog barking and rain"); a clip with
  no partner keeps its own sound and caption;
- **gain**: the power scaled by a level drawn in ``GAIN_DB`` (at most 0 dB: the front end peak-normalises,
  so the clip is at full scale already; a gain on the waveform would be undone by that normalisation).

Each draw comes from a hash of the view (its kinds and number), the clip id and the draw's name
(:meth:`Augmentation.draw`), so a view is the same in every run and stable when clips are added. The pooled
vectors of a view are kept in an :class:`~mlatr.frozen_features.AudioFeatureCache` whose key names the
augmentation, each clip under ``(id[+partner id], size, mtime_ns)``; a killed computation resumes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.frozen_features import SAVE_EVERY, AudioFeatureCache
from mlatr.frozen_prefix import BlockFeatures, PrefixCache, prefix_features
from mlatr.models.aisfx import BLOCK_FRAMES, SPEC_MAX, upper_blocks

KINDS = ("gain", "shift", "mix")
#: Level of the augmented clip (gain) and of the partner against the clip (mix), dB, drawn uniformly.
GAIN_DB = (-12.0, 0.0)
MIX_DB = (-6.0, 0.0)
#: How two captions are joined in each language (", " where a language is not listed).
JOIN = {"eng": " and ", "fra": " et ", "deu": " und ", "spa": " y ", "nld": " en ", "cat": " i ", "jpn": "と",
        "zho": "和"}
FORMAT = "mlatr-augmented-view-1"


@dataclass(frozen=True)
class Augmentation:
    """Which transforms a view applies (a subset of :data:`KINDS`, applied in the module's order) and its number
    (views ``0, 1, ...`` of the same kinds draw differently)."""

    kinds: tuple[str, ...]
    view: int = 0

    def __post_init__(self):
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds or len(set(self.kinds)) != len(self.kinds):
            raise MlatrError(f"augmentation: kinds must be distinct ones of {', '.join(KINDS)}, got "
                             f"{','.join(self.kinds) or 'none'}")
        if self.view < 0:
            raise MlatrError(f"augmentation: view must be >= 0, got {self.view}")

    @classmethod
    def parse(cls, text: str, view: int = 0) -> Augmentation:
        """``"gain,shift,mix"`` -> the augmentation with these kinds (in :data:`KINDS` order)."""
        kinds = [k.strip() for k in text.split(",") if k.strip()]
        cls(tuple(kinds), view)  # checks them
        return cls(tuple(k for k in KINDS if k in kinds), view)

    @property
    def name(self) -> str:
        return f"{'+'.join(self.kinds)}-{self.view}"

    def draw(self, clip_id: str, what: str) -> float:
        """A number in [0, 1) fixed by the view, the clip and what is drawn."""
        digest = hashlib.sha256(f"{self.name}:{clip_id}:{what}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64


@dataclass
class AugmentedView:
    """One augmented version of every clip of a manifest: ``features [N, D]`` (pooled, frozen encoder),
    ``captions[i]`` (the clip's own, or the joined ones of a mix), ``partners[i]`` (the row mixed in, or None)."""

    augmentation: Augmentation
    features: np.ndarray
    captions: list[dict[str, list[str | None]]]
    partners: list[int | None]


def to_power(spec: torch.Tensor) -> torch.Tensor:
    """The mel power behind aiSFX's encoded spectrogram: the inverse of ``log10(1e4 P + 1) / SPEC_MAX``."""
    return (torch.pow(10.0, spec.double() * SPEC_MAX) - 1.0) / 1e4


def to_spectrogram(power: torch.Tensor) -> torch.Tensor:
    """aiSFX's encoding of a mel power (:class:`mlatr.models.aisfx.AisfxFrontEnd`)."""
    return (torch.log10(power.clamp(min=0.0) * 1e4 + 1.0) / SPEC_MAX).float()


def join_blocks(blocks: torch.Tensor, hop: int) -> torch.Tensor:
    """A clip's stage-0 blocks ``[n, 1, 100, 96]`` -> its spectrogram ``[(n - 1) * hop + 100, 96]``."""
    n = blocks.shape[0]
    spec = blocks.new_zeros((n - 1) * hop + BLOCK_FRAMES, blocks.shape[-1])
    for j in range(n):
        spec[j * hop:j * hop + BLOCK_FRAMES] = blocks[j, 0]
    return spec


def split_blocks(spec: torch.Tensor, n: int, hop: int) -> torch.Tensor:
    """:func:`join_blocks` undone: ``[T, 96]`` -> ``[n, 1, 100, 96]``."""
    return spec.unfold(0, BLOCK_FRAMES, hop)[:n].transpose(1, 2)[:, None].contiguous()


def augment_spectrogram(spec: torch.Tensor, partner: torch.Tensor | None, aug: Augmentation,
                        clip_id: str) -> torch.Tensor:
    """The view ``aug`` of one clip's spectrogram ``[T, 96]`` (``partner``: the mix partner's, or None)."""
    power = to_power(spec)
    frames = power.shape[0]
    if "shift" in aug.kinds and frames > 1:
        power = torch.roll(power, 1 + int(aug.draw(clip_id, "shift") * (frames - 1)), dims=0)
    if "mix" in aug.kinds and partner is not None:
        other = to_power(partner)[:frames]
        other = torch.cat([other, other.new_zeros(frames - other.shape[0], other.shape[1])])
        power = power + other * 10.0 ** (_level(aug, clip_id, "mix", MIX_DB) / 10.0)
    if "gain" in aug.kinds:
        power = power * 10.0 ** (_level(aug, clip_id, "gain", GAIN_DB) / 10.0)
    return to_spectrogram(power)


def _level(aug: Augmentation, clip_id: str, what: str, bounds: tuple[float, float]) -> float:
    return bounds[0] + (bounds[1] - bounds[0]) * aug.draw(clip_id, what)


def partners(manifest: Manifest, aug: Augmentation) -> list[int | None]:
    """Each clip's mix partner: a clip of the same library (the id's first folder) and split, drawn by hash;
    None when the view does not mix or the clip has no such clip."""
    if "mix" not in aug.kinds:
        return [None] * len(manifest.clips)
    groups: dict[tuple[str, str | None], list[int]] = {}
    for i, c in enumerate(manifest.clips):
        groups.setdefault((c.id.split("/", 1)[0], c.split), []).append(i)
    out: list[int | None] = []
    for i, c in enumerate(manifest.clips):
        others = [j for j in groups[(c.id.split("/", 1)[0], c.split)] if j != i]
        out.append(others[int(aug.draw(c.id, "partner") * len(others))] if others else None)
    return out


def joined_captions(a: dict[str, list[str | None]], b: dict[str, list[str | None]]) -> dict[str, list[str | None]]:
    """Per language of ``a``, its first caption and ``b``'s first caption in that language joined
    (:data:`JOIN`); ``a``'s alone where ``b`` has none."""
    out = {}
    for lang, caps in a.items():
        first = next((t for t in caps if t), None)
        other = next((t for t in b.get(lang, []) if t), None)
        if first:
            out[lang] = [f"{first}{JOIN.get(lang, ', ')}{other}" if other else first]
    return out


@torch.no_grad()
def augmented_view(encoder, manifest: Manifest, blocks: BlockFeatures, aug: Augmentation, cache: AudioFeatureCache,
                   batch_size: int = 64, progress: bool = True) -> AugmentedView:
    """The view ``aug`` of every clip of ``manifest``: its stage-0 ``blocks`` transformed
    (:func:`augment_spectrogram`) and taken through the frozen aiSFX CNN of ``encoder`` to a pooled vector,
    computing only the clips ``cache`` does not hold (saved every :data:`SAVE_EVERY` clips)."""
    if blocks.stage != 0:
        raise MlatrError(f"augmented views start from the stage-0 spectrogram blocks, not stage {blocks.stage}")
    clips = manifest.clips
    mates = partners(manifest, aug)
    keys = []
    for i, c in enumerate(clips):
        cid, size, mtime = AudioFeatureCache.file_key(c.id, c.audio_path(manifest.root))
        keys.append((cid if mates[i] is None else f"{cid}+{clips[mates[i]].id}", size, mtime))
    todo = [i for i, k in enumerate(keys) if k not in cache.vectors]
    encoder.eval()
    hop = encoder.block_hop

    def spectrogram(i: int) -> torch.Tensor:
        return join_blocks(torch.from_numpy(np.array(blocks.blocks(i), np.float32)), hop)

    bar = tqdm(total=len(todo), desc=f"augmented view {aug.name}", unit="clip", disable=not progress or not todo)
    for start in range(0, len(todo), SAVE_EVERY):
        rows = todo[start:start + SAVE_EVERY]
        parts = [split_blocks(augment_spectrogram(spectrogram(i), None if mates[i] is None else spectrogram(mates[i]),
                                                  aug, clips[i].id), blocks.locations[i][2], hop) for i in rows]
        for first in range(0, len(rows), batch_size):
            chunk = parts[first:first + batch_size]
            counts = torch.tensor([p.shape[0] for p in chunk])
            pooled = upper_blocks(encoder.cnn, torch.cat(chunk), counts, 0).pooled.numpy()
            for i, vec in zip(rows[first:first + batch_size], pooled, strict=True):
                cache.vectors[keys[i]] = vec
        cache.save()
        bar.update(len(rows))
    bar.close()
    captions = [c.captions if mates[i] is None else joined_captions(c.captions, clips[mates[i]].captions)
                for i, c in enumerate(clips)]
    return AugmentedView(aug, np.stack([cache.vectors[k] for k in keys]).astype(np.float32), captions, mates)


def augmented_views(encoder, manifest: Manifest, cache_dir: str | Path, kinds: Sequence[str], views: int = 1,
                    max_seconds: float = 10.0, progress: bool = True) -> list[AugmentedView]:
    """``views`` augmented views of ``kinds`` of every clip, cached in ``cache_dir``: the stage-0 blocks in
    ``prefix-0/`` (shared with the learning curve's runs that train the whole CNN), each view's vectors in
    ``augment-<kinds>-<view>.npz``."""
    key = json.dumps({**encoder.config(), "max_seconds": max_seconds}, sort_keys=True)
    cache_dir = Path(cache_dir)
    blocks = prefix_features(encoder, manifest, PrefixCache(cache_dir / "prefix-0", key, 0), max_seconds,
                             progress=progress)
    out = []
    for v in range(views):
        aug = Augmentation.parse(",".join(kinds), v)
        cache = AudioFeatureCache(cache_dir / f"augment-{aug.name}.npz",
                                  json.dumps({"format": FORMAT, "encoder": key, "view": aug.name}, sort_keys=True))
        out.append(augmented_view(encoder, manifest, blocks, aug, cache, progress=progress))
    return out
