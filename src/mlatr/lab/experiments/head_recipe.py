"""One path from a head option to trained heads, for every real-sound command (issue 49).

``mlatr demo-real``, ``mlatr experiment unseen-library`` and ``mlatr experiment learning-curve`` describe how
their projection heads train as a :class:`HeadRecipe` (the head option of
:data:`~mlatr.lab.experiments.head_options.HEAD_OPTIONS`, the ensemble size, epochs, batch size, learning rate,
how batches are drawn), checked once when it is made, and get the trained model from :func:`train_recipe`:
``ensemble`` head pairs built and trained apart from the seeds
:func:`~mlatr.lab.experiments.head_options.member_seeds`, each on the frozen features of the training clips (and their
augmented views) with the option's objective (ML-CLAP InfoNCE, or KCL over the caption languages, ATRI §4.1 eq. 9)
and text-identity penalty (:func:`~mlatr.training.head_training.train_heads`), the epoch of the best validation
t2a R@10 of the validation clips' file-name captions kept; the pairs' unit embeddings averaged
(:meth:`~mlatr.models.dual_encoder.DualEncoder.ensemble_of`). The learning curve's runs that also train aiSFX's
last blocks take their settings, languages and batch groups from the same recipe (:meth:`HeadRecipe.settings`,
:func:`training_languages`, :func:`batch_groups`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mlatr.errors import MlatrError
from mlatr.lab.experiments.head_options import HeadOption, head_option, member_seeds
from mlatr.lab.experiments.real_heads import RealSounds, build_model, caption_retrieval, library_of, training_items
from mlatr.models.dual_encoder import DualEncoder
from mlatr.stored_config import MAX_ENSEMBLE
from mlatr.training.config import ObjectiveConfig
from mlatr.training.hard_batches import caption_clusters
from mlatr.training.head_training import HeadTraining, TextBank, train_heads


@dataclass(frozen=True)
class HeadRecipe:
    """How a command's heads train: the head option ``heads`` (``untrained``: the option ``random`` is allowed,
    which trains nothing), ``ensemble`` pairs, the settings of each pair's run, and its batches: whole clusters of
    about ``hard_negatives`` clips of similar captions, or ``library_batches`` (each batch one library's clips)."""

    heads: str
    ensemble: int = 1
    epochs: int = 60
    batch_size: int = 64
    lr: float = 1e-3
    embed_dim: int = 256
    hard_negatives: int | None = None
    library_batches: bool = False
    untrained: bool = False

    def __post_init__(self):
        head_option(self.heads, trained=not self.untrained)
        if not 1 <= self.ensemble <= MAX_ENSEMBLE:
            raise MlatrError(f"--ensemble must be in 1..{MAX_ENSEMBLE}, got {self.ensemble}")
        if self.library_batches and self.hard_negatives:
            raise MlatrError("library batches and hard negatives both choose the batches: give one of them")

    @property
    def option(self) -> HeadOption:
        return head_option(self.heads, trained=not self.untrained)

    def settings(self, seed: int, tail_lr: float | None = None, patience: int | None = None) -> HeadTraining:
        """One pair's run settings: the option's objective and identity penalty; ``tail_lr``: the learning rate of
        trained backbone blocks; ``patience``: stop after that many epochs without a better validation score."""
        option = self.option
        return HeadTraining.at(self.lr, epochs=self.epochs, batch_size=self.batch_size, seed=seed,
                               objective=ObjectiveConfig(scheme=option.scheme),
                               identity_penalty=option.identity_penalty, tail_lr=tail_lr, patience=patience)


@dataclass
class TrainedHeads:
    """What :func:`train_recipe` gives: the model (the pairs averaged, or the one pair), each pair's seed and its
    epoch log (empty for an untrained option)."""

    model: DualEncoder
    seeds: list[int]
    logs: list[list[dict]]


def train_recipe(recipe: HeadRecipe, data: RealSounds, text_encoder, bank: TextBank, train_rows: Sequence[int],
                 val_rows: Sequence[int], seed: int, checkpoints: str | Path | None = None, progress: bool = False,
                 device: str | torch.device = "cpu") -> TrainedHeads:
    """The recipe's heads over the frozen audio features ``data.features`` and the text encoder ``text_encoder``
    (its features in ``bank``), trained on the clips ``train_rows`` (module docstring), the epoch chosen on
    ``val_rows`` (none: the last epoch). ``checkpoints``: each pair's ``last.pt`` / ``best.pt`` in
    ``checkpoints/K``, resumed from when there; ``device``: where the pairs train."""
    models, seeds, logs = [], member_seeds(seed, recipe.ensemble), []
    for k, member_seed in enumerate(seeds):
        model = build_model(data, text_encoder, recipe.option, recipe.embed_dim, member_seed)
        logs.append(_train_pair(recipe, model, data, bank, train_rows, val_rows, member_seed,
                                None if checkpoints is None else Path(checkpoints) / str(k), progress, device))
        models.append(model)
    return TrainedHeads(DualEncoder.ensemble_of(models), seeds, logs)


def _train_pair(recipe: HeadRecipe, model, data: RealSounds, bank: TextBank, train_rows: Sequence[int],
                val_rows: Sequence[int], seed: int, checkpoints: Path | None, progress: bool, device) -> list[dict]:
    """Train one pair's heads (seed ``seed``); its epoch log."""
    if not recipe.option.trained:
        return []
    languages = training_languages(data, recipe.option)
    feats, rows, origin = training_items(data, train_rows, languages)
    validate = None
    if len(val_rows):
        def validate(m):
            return caption_retrieval(m, data, bank, val_rows)["t2a"]["R10"]
    model.to(device)  # the heads (a GPU run trains an ensemble's pairs there too)
    return train_heads(model, feats, rows, languages, bank, recipe.settings(seed), validate, progress,
                       out_dir=checkpoints, resume=checkpoints is not None,
                       batch_groups=batch_groups(recipe, data, bank, rows, origin, languages, seed), device=device)


def training_languages(data: RealSounds, option: HeadOption) -> list[str]:
    """The caption languages ``option`` trains on (:meth:`RealSounds.training_languages`); an option that trains
    over translations needs captions in two languages or more."""
    languages = data.training_languages(option)
    if option.scheme != "mlclap" and len(languages) < 2:
        raise MlatrError(f"head option {option.name!r} trains on translations, but the manifest's captions are "
                         "English only: translate them first (mlatr data translate)")
    return languages


def batch_groups(recipe: HeadRecipe, data: RealSounds, bank: TextBank, rows: list[list[list[str | None]]],
                 origin: Sequence[int], languages: Sequence[str], seed: int) -> list[int] | None:
    """The group of each training item whose batches hold whole groups (:mod:`mlatr.training.hard_batches`): the
    cluster of its caption (``hard_negatives``, k-means seeded with ``seed``), its library (``library_batches``),
    or None (batches drawn at random). ``rows`` and ``origin``: the items of
    :func:`~mlatr.lab.experiments.real_heads.training_items`."""
    if recipe.hard_negatives:
        firsts = [_first_text(r, languages) for r in rows]
        vectors = bank.lookup([t for t, _ in firsts], [lang for _, lang in firsts]).numpy()
        return caption_clusters(vectors, max(1, len(origin) // recipe.hard_negatives), seed).tolist()
    if recipe.library_batches:
        return library_groups([data.manifest.clips[i].id for i in origin])
    return None


def best_epoch(log: list[dict]) -> int | None:
    """The epoch of a run's log with the best validation score (None: no epoch was validated)."""
    scored = [e for e in log if "val" in e]
    return max(scored, key=lambda e: e["val"])["epoch"] if scored else None


def library_groups(clip_ids: Sequence[str]) -> list[int]:
    """The group of each training item for batches of one library (:func:`~mlatr.training.hard_batches.group_batches`):
    the index of its library (:func:`~mlatr.lab.experiments.real_heads.library_of`) in order of first appearance."""
    order: dict[str, int] = {}
    return [order.setdefault(library_of(i), len(order)) for i in clip_ids]


def _first_text(rows: list[list[str | None]], languages: Sequence[str]) -> tuple[str, str]:
    """The text an item is clustered by (hard negatives): its first English caption, else its first text."""
    if "eng" in languages:
        e = languages.index("eng")
        text = next((r[e] for r in rows if r[e]), None)
        if text:
            return text, "eng"
    return rows[0][0], languages[0]
