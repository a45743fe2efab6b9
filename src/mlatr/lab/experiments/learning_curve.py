"""The learning curve of sound-only retrieval on libraries never trained on (issue 35).

Which limits the real-sound model on an unseen library: the data, the frozen backbone or the recipe? Every
point of the curve runs the leave-one-library-out protocol of :mod:`mlatr.lab.experiments.unseen_library`
(each library held out in turn; the hand-written queries in eight languages, keyword relevance, sound-only
ranking: :func:`mlatr.lab.experiments.real_heads.query_retrieval`) with the near-identity heads and

- a fraction of each fold's training clips (:func:`fraction_rows`: a clip is kept when a hash of the seed
  and its id falls below the fraction, so 25 % is inside 50 % inside 100 %; the validation clips stay), and
- how much of the model trains (``train_blocks``): 0 = the heads alone on the frozen backbone's pooled
  features; 1 = aiSFX's last conv block too, over the cached outputs of the three below it
  (:mod:`mlatr.frozen_prefix`); 4 = the whole aiSFX CNN over cached spectrogram blocks. Batch norm keeps
  its pretrained statistics (``train_last_blocks``); the backbone's blocks learn at ``tail_lr``.

The inputs a curve needs are frozen (:class:`FrozenInputs`: the clips' stage-``s`` block maps or pooled
features, the text features of every caption and query); they can be written to a folder
(:func:`export_bundle`: the manifest, the text features, the stage-0 spectrogram blocks in float16 and the
CNN's weights) and read back on a machine with neither the audio nor the text encoder
(:meth:`FrozenInputs.from_bundle`), e.g. one with a GPU.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from mlatr.data.manifest import Manifest
from mlatr.data.path_captions import CaptionRules
from mlatr.errors import MlatrError
from mlatr.frozen_prefix import BlockFeatures, PrefixCache, prefix_features
from mlatr.io_utils import atomic_write_json, atomic_write_with
from mlatr.lab.experiments.head_options import HeadOption
from mlatr.lab.experiments.head_recipe import (
    HeadRecipe,
    batch_groups,
    best_epoch,
    train_recipe,
    training_languages,
)
from mlatr.lab.experiments.real_heads import (
    QUERIES_PATH,
    RealSounds,
    build_model,
    caption_retrieval,
    query_retrieval,
    training_items,
)
from mlatr.lab.experiments.text_search_eval import fold_embeddings, save_fold_embeddings
from mlatr.lab.experiments.unseen_library import IN_LIBRARY, ORIGINAL_LIBRARIES, folds, single_target, sound_only
from mlatr.models.aisfx import BLOCK_FRAMES, STAGES, AisfxEncoder, AisfxTail
from mlatr.models.dual_encoder import DualEncoder
from mlatr.plotting import pyplot
from mlatr.training.head_training import TextBank, train_heads

#: How much of aiSFX trains: 0 = the heads alone, 1 = its last conv block, 4 = the whole CNN.
TRAIN_BLOCKS = (0, 1, 4)
FRACTIONS = (0.25, 0.5, 1.0)
HEADS = "near-identity"


def fraction_rows(rows: Sequence[int], ids: Sequence[str], fraction: float, seed: int) -> list[int]:
    """The rows whose clip id hashes (with ``seed``) below ``fraction``: nested in ``fraction``, stable when
    clips are added."""
    if fraction >= 1.0:
        return list(rows)

    def u(i: int) -> float:
        digest = hashlib.sha256(f"{seed}:{ids[i]}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64

    return [i for i in rows if u(i) < fraction]


class CachedText(nn.Module):
    """The text side of a model whose text features all come from a :class:`TextBank` (no encoder here)."""

    def __init__(self, name: str, dim: int):
        super().__init__()
        self.name, self.output_dim = name, int(dim)

    def config(self) -> dict:
        return {"name": self.name}

    def forward(self, texts, langs=None):
        raise MlatrError(f"text encoder {self.name!r} is not here: its features come from a text bank")


@dataclass
class FrozenInputs:
    """What the curve trains on: the clips (pooled features of the frozen backbone in ``data.features``),
    the text features, and the stage-``s`` block maps of each clip for the runs that train blocks."""

    data: RealSounds
    bank: TextBank
    text_name: str
    blocks: dict[int, BlockFeatures]
    cnn_state: dict[str, torch.Tensor]

    @classmethod
    def from_manifest(cls, manifest_path: str | Path, cache_dir: str | Path, text: str = "use-multilingual",
                      stages: Sequence[int] = (), max_seconds: float = 10.0, progress: bool = True,
                      dtype: str = "float32", augment: Sequence[str] = (), augment_views: int = 1,
                      audio_runtime: str = "torch") -> FrozenInputs:
        """The inputs of a manifest's clips, cached in ``cache_dir`` (pooled aiSFX features, the text encoder's
        embeddings, ``prefix-<stage>/`` for each stage of ``stages``; ``augment``: ``augment_views`` augmented
        views of these kinds, :meth:`RealSounds.augment`; ``audio_runtime``: what computes the pooled features,
        :meth:`RealSounds.load`)."""
        from mlatr.lab.experiments.real_heads import text_space  # builds the text encoder: only when there is one

        cache_dir = Path(cache_dir)
        features = "aisfx.npz" if audio_runtime == "torch" else f"aisfx-{audio_runtime.replace('/', '-')}.npz"
        data = RealSounds.load(manifest_path, cache_dir / features, max_seconds, progress, audio_runtime)
        if augment:
            data.augment(augment, augment_views, cache_dir, max_seconds, progress)
        _, bank = text_space(text, data, cache_dir)
        enc = data.audio_encoder
        blocks = {s: prefix_features(enc, data.manifest, PrefixCache(cache_dir / f"prefix-{s}", _encoder_key(enc), s,
                                                                      dtype), max_seconds, progress=progress)
                  for s in stages}
        return cls(data, bank, text, blocks, {k: v.clone() for k, v in enc.cnn.state_dict().items()})

    @classmethod
    def from_bundle(cls, folder: str | Path, device: str | torch.device = "cpu") -> FrozenInputs:
        """Read :func:`export_bundle`'s folder (either format); the pooled features and the other stages' maps are
        computed from its stage-0 blocks with the frozen CNN on ``device``."""
        folder = Path(folder)
        meta = json.loads((folder / "bundle.json").read_text(encoding="utf-8"))
        manifest = Manifest.load(folder / "manifest.jsonl")
        if (folder / "texts.npz").is_file():
            with np.load(folder / "texts.npz", allow_pickle=False) as z:
                bank = TextBank([tuple(k) for k in json.loads(str(z["keys"]))], z["vectors"].astype(np.float32))
        elif (folder / COMPACT_TEXTS).is_file():
            with np.load(folder / COMPACT_TEXTS, allow_pickle=False) as z:
                vectors = z["q"].astype(np.float32) * z["scale"][:, None]
                bank = TextBank([tuple(k) for k in json.loads(str(z["keys"]))], vectors)
        else:
            raise MlatrError(f"{folder}: no text features (texts.npz or {COMPACT_TEXTS}): not a learning-curve bundle")
        enc = AisfxEncoder(pretrained=False, frozen=True)
        state = torch.load(folder / "cnn.pt", map_location="cpu", weights_only=True)
        enc.cnn.load_state_dict(state)
        if (folder / COMPACT_FRAMES).is_file():
            stage0 = _blocks_from_frames(folder / COMPACT_FRAMES, enc.block_hop)
        else:
            with np.load(folder / "blocks-0.npz", allow_pickle=False) as z:
                counts = z["counts"].tolist()
                stage0 = BlockFeatures([z["blocks"]], _locations(counts), 0)
        qdata = json.loads(QUERIES_PATH.read_text(encoding="utf-8"))
        pooled = stage_features(enc, stage0, device)
        enc.cpu()
        data = RealSounds(manifest, pooled, qdata["queries"], list(qdata["languages"]),
                          CaptionRules.load().label_translations, enc)
        return cls(data, bank, meta["text"], {0: stage0}, state)

    def stage(self, s: int, device: str | torch.device = "cpu") -> BlockFeatures:
        """The stage-``s`` block maps (from a lower cached stage through the frozen CNN when not cached)."""
        if s not in self.blocks:
            low = max(k for k in self.blocks if k < s)
            enc = AisfxEncoder(pretrained=False, frozen=True)
            enc.cnn.load_state_dict(self.cnn_state)
            self.blocks[s] = map_stage(enc, self.blocks[low], s, device)
        return self.blocks[s]


def _encoder_key(enc) -> str:
    return json.dumps({**enc.config(), "max_seconds": 10.0}, sort_keys=True)


@torch.no_grad()
def map_stage(enc: AisfxEncoder, blocks: BlockFeatures, stage: int, device, batch: int = 256) -> BlockFeatures:
    """``blocks`` taken to ``stage`` by the frozen CNN, in memory (float32)."""
    enc.to(device).eval()
    out, locations = [], []
    for first in range(0, len(blocks), batch):
        x, counts = blocks.batch(range(first, min(first + batch, len(blocks))))
        out.append(enc.cnn.run_blocks(x.to(device), blocks.stage, stage).cpu().numpy())
        locations += counts.tolist()
    return BlockFeatures([np.concatenate(out)], _locations(locations), stage)


@torch.no_grad()
def stage_features(enc: AisfxEncoder, blocks: BlockFeatures, device, rows: Sequence[int] | None = None,
                   batch: int = 64) -> np.ndarray:
    """Pooled ``[N, 512]`` vectors of the clips ``rows`` (default all) from their block maps with the encoder's
    CNN as it is (frozen or trained), on ``device``."""
    rows = list(range(len(blocks))) if rows is None else list(rows)
    enc.to(device)
    tail = AisfxTail(enc, blocks.stage)
    was = tail.cnn.training
    tail.cnn.eval()
    out = []
    for first in range(0, len(rows), batch):
        x, counts = blocks.batch(rows[first:first + batch])
        out.append(tail(x.to(device), counts.to(device)).pooled.float().cpu().numpy())
    tail.cnn.train(was)
    return np.concatenate(out) if out else np.zeros((0, 512), np.float32)


#: The files of a compact bundle (:func:`export_bundle` with ``compact=True``).
COMPACT_FRAMES, COMPACT_TEXTS = "frames-0.npz", "texts-q8.npz"


def export_bundle(inputs: FrozenInputs, out: str | Path, compact: bool = False) -> Path:
    """Write the folder :meth:`FrozenInputs.from_bundle` reads: ``manifest.jsonl``, ``texts.npz`` (the text
    features of the captions and queries, float16), ``blocks-0.npz`` (the stage-0 blocks of every clip,
    float16, compressed), ``cnn.pt`` (aiSFX's weights), ``bundle.json``.

    ``compact``: a bundle about a fifth of that size (what a device machine's 64 MiB working tree holds for the
    8,267-clip corpus): ``frames-0.npz``, each clip's spectrogram frames once (its overlapping stage-0 blocks
    unrolled, :func:`_clip_frames`) in 8 bits (the corpus's peak over 255 levels: at most half a level off),
    and ``texts-q8.npz``, each text vector in 8 bits with its own scale (its largest magnitude over 127)."""
    out = Path(out)
    if 0 not in inputs.blocks:
        raise MlatrError("a bundle holds the stage-0 blocks: compute them first (stages=(0,))")
    out.mkdir(parents=True, exist_ok=True)
    for name in ("texts.npz", "blocks-0.npz", COMPACT_FRAMES, COMPACT_TEXTS):  # another format's files of this folder
        (out / name).unlink(missing_ok=True)
    data = inputs.data
    data.manifest.save(out / "manifest.jsonl")
    texts = sorted({(lang, t) for c in data.manifest.clips for lang, caps in c.captions.items() for t in caps if t}
                   | {(lang, q["captions"][lang]) for q in data.queries for lang in data.languages})
    keys = np.asarray(json.dumps([list(k) for k in texts]))
    vectors = inputs.bank.lookup([t for _, t in texts], [lang for lang, _ in texts]).numpy()
    src = inputs.blocks[0]
    parts = [src.blocks(i) for i in range(len(src))]
    counts = np.asarray([p.shape[0] for p in parts])
    if compact:
        scale = np.maximum(np.abs(vectors).max(axis=1), 1e-12) / 127
        q = np.round(vectors / scale[:, None]).astype(np.int8)
        atomic_write_with(out / COMPACT_TEXTS, lambda fh: np.savez_compressed(
            fh, keys=keys, q=q, scale=scale.astype(np.float32)))
        hop = data.audio_encoder.block_hop
        frames = np.concatenate([_clip_frames(p, hop) for p in parts])
        peak = max(float(frames.max()), 1e-12)
        atomic_write_with(out / COMPACT_FRAMES, lambda fh: np.savez_compressed(
            fh, frames=np.round(frames / peak * 255).astype(np.uint8), counts=counts, peak=np.float32(peak)))
    else:
        atomic_write_with(out / "texts.npz", lambda fh: np.savez_compressed(
            fh, keys=keys, vectors=vectors.astype(np.float16)))
        atomic_write_with(out / "blocks-0.npz", lambda fh: np.savez_compressed(
            fh, blocks=np.concatenate(parts).astype(np.float16), counts=counts))
    atomic_write_with(out / "cnn.pt", lambda fh: torch.save(inputs.cnn_state, fh))
    atomic_write_json(out / "bundle.json", {"encoder": _encoder_key(data.audio_encoder), "text": inputs.text_name,
                                            **({"compact": True} if compact else {})})
    return out


def _clip_frames(blocks: np.ndarray, hop: int) -> np.ndarray:
    """A clip's spectrogram frames ``[(n - 1) * hop + T, F]`` from its ``n`` stage-0 blocks ``[n, 1, T, F]`` (block
    ``k`` = frames ``k * hop .. k * hop + T - 1``, the zero padding past the clip's end included)."""
    x = blocks[:, 0]
    return np.concatenate([x[0], *(b[x.shape[1] - hop:] for b in x[1:])])


def _blocks_from_frames(path: Path, hop: int) -> BlockFeatures:
    """The stage-0 blocks (float32) of a compact bundle's ``frames-0.npz`` (the inverse of :func:`_clip_frames`)."""
    with np.load(path, allow_pickle=False) as z:
        frames, counts, peak = z["frames"], z["counts"].tolist(), float(z["peak"])
    size = BLOCK_FRAMES
    out, first = [], 0
    for n in counts:
        clip = frames[first:first + (n - 1) * hop + size]
        out.append(np.stack([clip[k * hop:k * hop + size] for k in range(n)])[:, None])
        first += (n - 1) * hop + size
    blocks = np.concatenate(out).astype(np.float32) * np.float32(peak / 255)
    return BlockFeatures([blocks], _locations(counts), 0)


def _locations(counts: Sequence[int]) -> list[tuple[int, int, int]]:
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    return [(0, int(a), int(c)) for a, c in zip(starts, counts, strict=True)]


def run_learning_curve(inputs: FrozenInputs, out: str | Path, train_blocks: Sequence[int] = TRAIN_BLOCKS,
                       fractions: Sequence[float] = FRACTIONS, seeds: Sequence[int] = (0,), epochs: int = 60,
                       tail_epochs: int | None = None, tail_lr: float = 1e-4, libraries: Sequence[str] | None = None,
                       device: str | torch.device = "cpu", progress: bool = True, heads: str = HEADS,
                       ensemble: int = 1, added_groups: int | None = None, batch_size: int = 64,
                       hard_negatives: int | None = None, val_libraries: float | None = None, workers: int = 1,
                       *, in_library: bool = False, tail_patience: int | None = None,
                       library_batches: bool = False, keep_embeddings: bool = False) -> dict:
    """Every point ``(train_blocks, fraction, seed)`` over every held-out library; ``OUT/results.json`` after
    each fold (a rerun with the same settings resumes), ``OUT/learning-curve.png`` at the end.
    ``hard_negatives``: batches of whole clusters of similar captions, clusters of about that many clips
    (:mod:`mlatr.training.hard_batches`). ``heads``: the head option; ``ensemble``: heads trained per fold, their
    unit embeddings averaged (:func:`~mlatr.lab.experiments.head_recipe.train_recipe`; heads-only points).
    ``val_libraries``: the epoch chosen on that fraction of the training libraries held out whole
    (:func:`~mlatr.lab.experiments.unseen_library.folds`) instead of their hash-``val`` clips. ``workers``: processes
    that train folds side by side (:func:`_run_folds`; the results equal one process's).

    A run that trains blocks (``train_blocks`` > 0) trains them with one head pair (seed ``seed``, ``tail_epochs``,
    stopped after ``tail_patience`` epochs without a better validation score); with ``ensemble`` > 1 that pair's
    figures are kept as the fold's ``"joint"`` record and the ensemble's head pairs then train, heads only, on the
    trained blocks' features (:func:`_train_blocks`), the recipe of a heads-only point on another backbone.
    Every fold record holds the queries (``"queries"``) and the single-target task (``"captions"``: each held-out
    clip's first English caption against all held-out clips,
    :func:`~mlatr.lab.experiments.real_heads.caption_retrieval`).
    ``in_library``: also the in-library split (train / val / test by each clip's hash, every library in all three:
    the split ``mlatr demo-real`` reports), as the fold ``in-library``, summarized apart.
    ``library_batches``: each batch holds the clips of one library (several small ones together), so that a clip's
    negatives come from its own library, as on a held-out one
    (:func:`~mlatr.lab.experiments.head_recipe.library_groups`).
    ``OUT/results.json`` also keeps each fold's wall time (``"seconds"``, by point and fold).
    ``keep_embeddings``: each heads-only fold of the point at fraction 1 also writes what its
    model makes of its held-out libraries, ``OUT/embeddings/FOLD.npz``
    (:func:`~mlatr.lab.experiments.text_search_eval.fold_embeddings`: what ``mlatr experiment calibrate`` fits the
    relevance of this recipe on) and its heads' weights, ``OUT/embeddings/FOLD.heads.pt`` (float16: what embeds
    further texts with the fold's model, :func:`fold_model`); a recorded fold without them is trained again."""
    recipe = HeadRecipe(heads, ensemble, epochs=epochs, batch_size=batch_size, hard_negatives=hard_negatives,
                        library_batches=library_batches)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = inputs.data
    fold_rows = {f: r for f, r in folds(data, libraries, added_groups, val_libraries).items()
                 if f != IN_LIBRARY or in_library}
    settings = {"epochs": epochs, "tail_epochs": tail_epochs or epochs, "tail_lr": tail_lr, "heads": heads,
                "clips": len(data.manifest), "text": inputs.text_name, "ensemble": ensemble,
                "added_groups": added_groups, "batch_size": batch_size, "hard_negatives": hard_negatives,
                **({"val_libraries": val_libraries} if val_libraries else {}),  # absent: older results resume
                **({"tail_patience": tail_patience} if tail_patience else {}),
                **({"library_batches": True} if library_batches else {}),
                **({"augment": [v.augmentation.name for v in data.views]} if data.views else {})}
    path = out / "results.json"
    results = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if results.get("settings") != settings:
        results = {"settings": settings, "points": {}}
    keep = out / "embeddings" if keep_embeddings else None
    todo = [(b, fr, s, f) for b in train_blocks for fr in fractions for s in seeds for f in fold_rows
            if f not in results["points"].get(_point(b, fr, s), {}).get("folds", {})
            or (keep is not None and _keeps(b, fr) and not (keep / f"{f}.npz").is_file())]
    job = _FoldJob(inputs, fold_rows, recipe, tail_epochs, tail_lr, device, out, tail_patience, keep)
    order = {f: k for k, f in enumerate(fold_rows)}
    bar = tqdm(total=len(todo), desc="learning curve", unit="fold", disable=not progress or not todo)
    for (b, fr, s, f), (fold, seconds) in _run_folds(job, todo, workers):
        point = results["points"].setdefault(_point(b, fr, s), {"train_blocks": b, "fraction": fr, "seed": s,
                                                                 "folds": {}})
        point["folds"][f] = fold  # kept in fold order, whichever worker finished first
        results.setdefault("seconds", {}).setdefault(_point(b, fr, s), {})[f] = round(seconds, 1)
        point["folds"] = dict(sorted(point["folds"].items(), key=lambda kv: order.get(kv[0], len(order))))
        point["summary"] = summarize_point(point["folds"])
        atomic_write_json(path, results)
        shutil.rmtree(out / "heads" / _point(b, fr, s) / f, ignore_errors=True)
        bar.set_postfix_str(f"blocks {b} fraction {fr} seed {s} {f}")
        bar.update(1)
    bar.close()
    shutil.rmtree(out / "heads", ignore_errors=True)
    plot_learning_curve({"": results}, out / "learning-curve.png")
    return results


@dataclass
class _FoldJob:
    """What training and evaluating one held-out fold of a point needs (sent once to each worker process)."""

    inputs: FrozenInputs
    fold_rows: dict[str, dict[str, list[int]]]
    recipe: HeadRecipe
    tail_epochs: int | None
    tail_lr: float
    device: str | torch.device
    out: Path
    tail_patience: int | None = None
    keep: Path | None = None

    def __call__(self, task: tuple[int, float, int, str]) -> tuple[tuple[int, float, int, str], tuple[dict, float]]:
        """``task`` = (trained blocks, fraction, seed, fold) -> (task, (the fold's record, its wall seconds))."""
        started = time.perf_counter()
        b, fr, s, f = task
        data, rows = self.inputs.data, self.fold_rows[f]
        train = fraction_rows(rows["train"], [c.id for c in data.manifest.clips], fr, s)
        checkpoints = self.out / "heads" / _point(b, fr, s) / f
        record: dict = {}
        feats = data.features
        if b:  # the blocks train with one head pair
            model = build_model(data, _text_side(self.inputs), self.recipe.option, self.recipe.embed_dim, s)
            feats, log = _train_blocks(self.inputs, model, train, rows["val"], b, s, self.tail_epochs,
                                       self.tail_lr, self.device, checkpoints / "joint", self.recipe,
                                       self.tail_patience)
            best = best_epoch(log)
            record["tail_val"] = [e.get("val") for e in log]  # the validation score of each epoch the blocks trained
            if self.recipe.ensemble > 1:
                record["joint"] = {**self._evaluate(model, feats, rows["test"]), "best_epoch": best}
        if not b or self.recipe.ensemble > 1:  # the heads alone (on the trained blocks' features): one pair or more
            trained = train_recipe(self.recipe, replace(data, features=feats), _text_side(self.inputs),
                                   self.inputs.bank, train, rows["val"], s, checkpoints, device=self.device)
            model, best = trained.model, [best_epoch(log) for log in trained.logs]
            best = best if len(best) > 1 else best[0]
        record = {**self._evaluate(model, feats, rows["test"]), "train_clips": len(train), "best_epoch": best,
                  **record}
        if self.keep is not None and _keeps(b, fr):
            self.keep.mkdir(parents=True, exist_ok=True)
            heads = {k: v.detach().half().clone() for k, v in model.state_dict().items() if k.startswith(HEAD_KEYS)}
            atomic_write_with(self.keep / f"{f}.heads.pt", lambda fh: torch.save(heads, fh))
            save_fold_embeddings(self.keep / f"{f}.npz", fold_embeddings(model, data, self.inputs.bank, rows["test"]))
        return task, (record, time.perf_counter() - started)

    def _evaluate(self, model, feats: np.ndarray, test: list[int]) -> dict:
        """The held-out clips' queries and single-target task with ``model`` over the clip features ``feats``."""
        model.cpu()
        data = replace(self.inputs.data, features=feats)
        return {"queries": query_retrieval(model, data, self.inputs.bank, test),
                "captions": caption_retrieval(model, data, self.inputs.bank, test)}


#: The parameters of a model's projection heads (what a heads-only fold trains; the backbones are frozen).
HEAD_KEYS = ("audio_projection.", "text_projection.")


def _keeps(blocks: int, fraction: float) -> bool:
    """Whether a point's folds keep their embeddings: the heads-only ones on every training clip (the recipe
    ``mlatr demo-real`` ships)."""
    return blocks == 0 and fraction >= 1.0


def fold_model(inputs: FrozenInputs, heads_path: str | Path, option: HeadOption, ensemble: int) -> DualEncoder:
    """The model of a kept fold (``FOLD.heads.pt``, :func:`run_learning_curve` with ``keep_embeddings``): ``ensemble``
    head pairs of ``option`` over the inputs' frozen text side, with the stored weights (float16, widened)."""
    members = [build_model(inputs.data, _text_side(inputs), option, 256, 0) for _ in range(ensemble)]
    model = DualEncoder.ensemble_of(members)
    stored = torch.load(heads_path, map_location="cpu", weights_only=True)
    missing = [k for k in model.state_dict() if k.startswith(HEAD_KEYS) and k not in stored]
    if missing:
        raise MlatrError(f"{heads_path}: not the heads of {ensemble} {option.name} pair(s) ({missing[0]} missing)")
    model.load_state_dict({k: v.float() for k, v in stored.items()}, strict=False)
    return model.eval()


#: The fold job of a worker process (set once by :func:`_start_worker`).
_WORKER_JOB: _FoldJob | None = None


def _start_worker(job: _FoldJob) -> None:
    global _WORKER_JOB
    _WORKER_JOB = job


def _worker_fold(task):
    return _WORKER_JOB(task)


def _run_folds(job: _FoldJob, todo: list, workers: int) -> Iterator[tuple[tuple[int, float, int, str], dict]]:
    """Each task's fold record as it is done: in this process, or, with ``workers`` > 1, in that many spawned
    processes at once (the heads train on one thread each, :func:`~mlatr.training.head_training.train_heads`, so two
    processes use two cores; a fold's result does not depend on the process that trains it)."""
    if workers <= 1 or len(todo) <= 1:
        yield from map(job, todo)
        return
    if torch.device(job.device).type != "cpu":
        raise MlatrError("fold workers train on the CPU: use --workers 1 with a GPU device")
    with multiprocessing.get_context("spawn").Pool(min(workers, len(todo)), _start_worker, (job,)) as pool:
        yield from pool.imap_unordered(_worker_fold, todo)


def _point(blocks: int, fraction: float, seed: int) -> str:
    return f"blocks{blocks}/fraction{fraction:g}/seed{seed}"


def _text_side(inputs: FrozenInputs) -> nn.Module:
    return CachedText(inputs.text_name, inputs.bank.vectors.shape[1])


def _train_blocks(inputs: FrozenInputs, model, train: list[int], val: list[int], blocks: int, seed: int,
                  epochs: int | None, tail_lr: float, device, checkpoints: Path, recipe: HeadRecipe,
                  patience: int | None = None) -> tuple[np.ndarray, list[dict]]:
    """Train one fold's model with aiSFX's last ``blocks`` conv blocks (heads as ``recipe`` says; ``epochs``: the
    recipe's when None; stopped after ``patience`` epochs without a better validation score); returns every clip's
    pooled features as the trained model gives them and the run's log (an entry per epoch)."""
    data, bank = inputs.data, inputs.bank
    if data.views:
        raise MlatrError("augmented views train the heads only (--train-blocks 0)")
    languages = training_languages(data, recipe.option)
    _, rows, train = training_items(data, train, languages)
    if epochs is not None:
        recipe = replace(recipe, epochs=epochs)
    settings = recipe.settings(seed, tail_lr=tail_lr, patience=patience)
    start = STAGES - blocks
    enc = AisfxEncoder(pretrained=False, frozen=False, train_last_blocks=blocks)
    enc.cnn.load_state_dict(inputs.cnn_state)
    model.audio_encoder = enc
    model.to(device)
    stage = inputs.stage(start, device)
    feats = data.features.copy()

    def validate(m):
        feats[val] = stage_features(enc, stage, device, val)
        return caption_retrieval(m, replace(data, features=feats), bank, val)["t2a"]["R10"]

    log = train_heads(model, stage.subset(train), rows, languages, bank, settings, validate, progress=False,
                      out_dir=checkpoints, resume=True, audio_tail=AisfxTail(enc, start), device=device,
                      batch_groups=batch_groups(recipe, data, bank, rows, train, languages, seed))
    return stage_features(enc, stage, device), log


def summarize_point(fold_results: dict[str, dict]) -> dict:
    """Sound-only query recall (:func:`~mlatr.lab.experiments.unseen_library.sound_only`) and the single-target task
    (``"captions"``, :func:`~mlatr.lab.experiments.unseen_library.single_target`) over every held-out library, with
    the 12 original libraries and the added ones apart (``groups``); the in-library split apart
    (``"in_library"``, when it ran)."""
    unseen = {f: r for f, r in fold_results.items() if f != IN_LIBRARY}
    clips = float(np.mean([r["train_clips"] for r in unseen.values()])) if unseen else float("nan")

    def summary(part: dict[str, dict]) -> dict:
        return {**sound_only(part), "captions": single_target(part)} if part else {"libraries": 0}

    groups = {name: summary({f: r for f, r in unseen.items() if (f in ORIGINAL_LIBRARIES) == original})
              for name, original in (("original", True), ("added", False))}
    out = {**summary(unseen), "train_clips": clips, "groups": groups}
    if IN_LIBRARY in fold_results:
        out["in_library"] = {**summary({IN_LIBRARY: fold_results[IN_LIBRARY]}),
                             "train_clips": fold_results[IN_LIBRARY]["train_clips"]}
    return out


def complete_points(results_paths: Sequence[tuple[str, str | Path]], group: str | None = None) -> dict[str, dict]:
    """``{label: {"points": ...}}`` of several runs' ``results.json`` (``(label, path)`` pairs; one label may
    gather several files), each point summarized (:func:`summarize_point`) and kept only when it has as many
    held-out folds (of ``group``) as the most complete point of its file: a point still running is left out."""
    curves: dict[str, dict] = {}
    for n, (label, path) in enumerate(results_paths):
        try:
            points = json.loads(Path(path).read_text(encoding="utf-8"))["points"]
        except (OSError, ValueError, KeyError) as exc:
            raise MlatrError(f"{path}: not a learning-curve results.json ({exc})") from None
        for p in points.values():
            p["summary"] = summarize_point(p["folds"])

        def folds(p):
            return (p["summary"]["groups"][group] if group else p["summary"]).get("libraries", 0)

        most = max((folds(p) for p in points.values()), default=0)
        kept = curves.setdefault(label, {"points": {}})["points"]
        kept.update({f"{n}:{k}": p for k, p in points.items() if most and folds(p) == most})
    return curves


def plot_learning_curve(curves: dict[str, dict], path: str | Path, group: str | None = None,
                        goals: dict[str, float] | None = None) -> Path:
    """Query t2a R@10 and R@1 (seed mean, bars: min-max over seeds) against the training clips (log scale), one
    line per curve (``{label: results}``, e.g. one per corpus) and number of trained blocks. ``group``: the
    figures of the ``original`` or ``added`` held-out libraries only (default: all of them). ``goals``: a
    dashed line at ``{"R10": ..., "R1": ...}``."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    names = {0: "heads only", 1: "+ last conv block", 4: "+ whole aiSFX CNN"}
    lines: dict[str, dict[float, list[dict]]] = {}
    for label, results in curves.items():
        for p in results["points"].values():
            s = p.get("summary")
            if s and group:
                s = {**s["groups"][group], "train_clips": s["train_clips"]}
            if s and s.get("libraries"):
                name = names.get(p["train_blocks"], f"+ {p['train_blocks']} blocks")
                lines.setdefault(f"{label}: {name}" if label else name, {}).setdefault(p["fraction"], []).append(s)
    for ax, metric in zip(axes, ("R10", "R1"), strict=True):
        for name, by_fraction in lines.items():
            fr = sorted(by_fraction)
            x = [np.mean([s["train_clips"] for s in by_fraction[f]]) for f in fr]
            vals = [[s["t2a"]["avg"][metric] for s in by_fraction[f]] for f in fr]
            y = [np.mean(v) for v in vals]
            err = [[m - min(v) for m, v in zip(y, vals, strict=True)],
                   [max(v) - m for m, v in zip(y, vals, strict=True)]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=name)
        if goals and metric in goals:
            ax.axhline(goals[metric], color="black", linestyle="--", linewidth=1, label="goal")
        ax.set_xscale("log")
        xs = [s["train_clips"] for by_fraction in lines.values() for v in by_fraction.values() for s in v]
        ticks = [t for t in (125, 250, 500, 1000, 2000, 4000, 8000, 16000, 32000) if min(xs) / 2 <= t <= max(xs) * 2]
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])  # plain numbers, not 3x10^2
        ax.xaxis.set_minor_formatter("")
        ax.set_xlabel("training clips per fold (mean over folds)")
        ax.set_ylabel(f"query text-to-audio {metric[0]}@{metric[1:]} (%)")
        ax.set_title(f"unseen libraries{f' ({group})' if group else ''}, sound only: {metric[0]}@{metric[1:]}")
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0].get_legend_handles_labels()
    rows = -(-len(labels) // 3)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.02 + 0.04 * rows, 1, 1))  # the legend below both panels
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


#: The fold figures :func:`paired_differences` compares: name -> (record part, path into it).
PAIRED_METRICS = {"R10": ("queries", ("t2a", "avg", "R10")), "R1": ("queries", ("t2a", "avg", "R1")),
                  "a2t R1": ("queries", ("a2t", "avg", "R1")), "MRV": ("queries", ("consistency", "mrv")),
                  "single R1": ("captions", ("t2a", "R1")), "single R10": ("captions", ("t2a", "R10"))}


def fold_figures(fold: dict, record: str | None = None) -> dict[str, float]:
    """A fold record's :data:`PAIRED_METRICS` (``record``: a sub-record such as ``"joint"``); a metric the record
    lacks (a fold without a relevant clip, an older record without the single-target task) is NaN."""
    fold = fold[record] if record else fold
    out = {}
    for name, (part, path) in PAIRED_METRICS.items():
        value = fold.get(part)
        if part == "queries" and value is not None and not value.get("n_queries"):
            value = None
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        out[name] = float("nan") if value is None else float(value)
    return out


def _fold_group(fold: str) -> str:
    return IN_LIBRARY if fold == IN_LIBRARY else "original" if fold in ORIGINAL_LIBRARIES else "added"


def paired_differences(base: dict, option: dict, group: str = "original", base_blocks: int | None = None,
                       option_blocks: int | None = None, option_record: str | None = None) -> dict:
    """Fold-paired differences ``option - base`` of two learning-curve results (their ``results.json``): for each
    seed (and fraction) both ran, over the folds of ``group`` (``original``, ``added``, ``in-library`` or ``all``)
    both hold, each :data:`PAIRED_METRICS` figure of both arms per fold, the seed's means, the mean difference,
    its standard error over the folds and the folds the option won (higher; lower for MRV); then the differences'
    mean and range over the seeds. ``*_blocks``: the trained blocks of the points compared, when a results file
    holds several; ``option_record``: compare that sub-record of the option's folds (``"joint"``: the head pair
    that trained with the blocks)."""
    def points(results: dict, blocks: int | None) -> dict[tuple[float, int], dict]:
        chosen: dict[tuple[float, int], dict] = {}
        for p in results["points"].values():
            if blocks is not None and p["train_blocks"] != blocks:
                continue
            key = (p["fraction"], p["seed"])
            if key in chosen:
                raise MlatrError(f"two points of seed {p['seed']} and fraction {p['fraction']} (trained blocks "
                                 f"{chosen[key]['train_blocks']} and {p['train_blocks']}): choose the blocks")
            chosen[key] = p
        return chosen

    a, b = points(base, base_blocks), points(option, option_blocks)
    seeds = []
    for key in sorted(set(a) & set(b)):
        folds_ = [f for f in a[key]["folds"] if f in b[key]["folds"] and (group == "all" and f != IN_LIBRARY
                                                                           or _fold_group(f) == group)]
        if not folds_:
            continue
        rows = [{"fold": f, "base": fold_figures(a[key]["folds"][f]),
                 "option": fold_figures(b[key]["folds"][f], option_record)} for f in folds_]
        per_metric = {}
        for m in PAIRED_METRICS:
            pairs = [(r["base"][m], r["option"][m]) for r in rows if r["base"][m] == r["base"][m]
                     and r["option"][m] == r["option"][m]]
            if not pairs:
                continue
            d = np.asarray([o - x for x, o in pairs])
            better = -d if m == "MRV" else d
            se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
            per_metric[m] = {"base": float(np.mean([x for x, _ in pairs])),
                             "option": float(np.mean([o for _, o in pairs])), "diff": float(d.mean()), "se": se,
                             "won": int((better > 0).sum()), "lost": int((better < 0).sum()), "folds": len(d)}
        lowest = {}
        for arm, fold_of, record in (("base", a[key]["folds"], None), ("option", b[key]["folds"], option_record)):
            qs = [(fold_of[f][record] if record else fold_of[f])["queries"] for f in folds_]
            by_lang = sound_only({str(k): {"queries": q} for k, q in enumerate(qs)}).get("t2a", {})
            langs = {lang: v["R10"] for lang, v in by_lang.items() if lang != "avg"}
            if langs:
                lowest[arm] = min(langs.items(), key=lambda kv: kv[1])
        seeds.append({"fraction": key[0], "seed": key[1], "folds": rows, "metrics": per_metric, "lowest": lowest})
    overall = {}
    for m in PAIRED_METRICS:
        diffs = [s["metrics"][m]["diff"] for s in seeds if m in s["metrics"]]
        if diffs:
            overall[m] = {"mean": float(np.mean(diffs)), "min": float(min(diffs)), "max": float(max(diffs)),
                          "seeds": len(diffs),
                          "base": float(np.mean([s["metrics"][m]["base"] for s in seeds if m in s["metrics"]])),
                          "option": float(np.mean([s["metrics"][m]["option"] for s in seeds if m in s["metrics"]]))}
    lows = [s["lowest"] for s in seeds if len(s["lowest"]) == 2]
    if lows:
        overall["lowest language R10"] = {arm: float(np.mean([x[arm][1] for x in lows])) for arm in ("base", "option")}
    return {"group": group, "seeds": seeds, "overall": overall}


def paired_report(paired: dict, base_label: str = "base", option_label: str = "option") -> str:
    """Markdown of :func:`paired_differences`: one row per fold and seed (both arms' figures), one per seed (means,
    the difference with its standard error and folds won), the seed means."""
    names = list(PAIRED_METRICS)

    def f(x: float, digits: int = 1) -> str:
        return "-" if x != x else f"{x:.{digits}f}"

    lines = [f"Paired: {option_label} - {base_label}, held-out folds of group {paired['group']}; each cell "
             f"{base_label} / {option_label} (difference).", "",
             "| seed | fold | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for s in paired["seeds"]:
        for r in s["folds"]:
            cells = [f"{f(r['base'][m])} / {f(r['option'][m])} ({r['option'][m] - r['base'][m]:+.1f})"
                     if r["base"][m] == r["base"][m] and r["option"][m] == r["option"][m] else "-" for m in names]
            lines.append(f"| {s['seed']} | {r['fold']} | " + " | ".join(cells) + " |")
        cells = [f"{f(v['base'])} / {f(v['option'])} (**{v['diff']:+.1f}**, se {f(v['se'])}, won {v['won']} "
                 f"of {v['folds']})" if (v := s["metrics"].get(m)) else "-" for m in names]
        low = "; ".join(f"{arm} {lang} {f(v)}" for arm, (lang, v) in s["lowest"].items())
        lines.append(f"| {s['seed']} | **mean** | " + " | ".join(cells) + " |")
        if low:
            lines.append(f"| {s['seed']} | lowest language R10 | {low} |" + " |" * (len(names) - 1))
    cells = [f"{f(v['base'])} / {f(v['option'])} (**{v['mean']:+.1f}**, seeds {v['min']:+.1f} .. {v['max']:+.1f})"
             if (v := paired["overall"].get(m)) else "-" for m in names]
    lines.append("| all | **seed mean** | " + " | ".join(cells) + " |")
    if low := paired["overall"].get("lowest language R10"):
        lines.append(f"| all | lowest language R10 (seed mean) | {base_label} {f(low['base'])}; {option_label} "
                     f"{f(low['option'])} |" + " |" * (len(names) - 1))
    return "\n".join(lines) + "\n"
