"""What a run's data must give before any work starts: every language, enough clips, audio that exists.

A training run that cannot train refuses here, before the model is built or any audio is read, instead
of exiting 0 after zero steps (issue 24, "training that silently does nothing"):

- every language of ``data.languages`` has at least one caption in the training split (and in the
  validation split when the run validates): otherwise KCL / ML-CLAP would train without it, unnoticed;
- the clips that can train (a caption in ``data.languages``, in the anchor language when the scheme has
  one, and an audio file that exists) are at least ``train.batch_size``: the epoch's last, smaller batch is
  dropped (contrastive losses need negatives, :class:`~mlatr.data.pipeline.batches.TrainBatches`), so a
  batch larger than the split would never fill and no step would run;
- the audio files of the manifest exist (files only: a store or shards carry their own audio). A missing
  file stops the run naming its line; with ``data.skip_bad`` missing files are skipped and counted, but a
  split with every file missing is refused either way.

Whether the remainder of an epoch is dropped is said by the trainer's docs, not warned about: with random
order every clip still trains over the epochs.

The data a run trains on is recorded in its checkpoints (:func:`data_fingerprint`: per split, a digest of
each clip's manifest line) so that ``--resume`` after a changed manifest says what changed
(:func:`fingerprint_difference`) instead of continuing on other data without a word.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from mlatr.data.manifest import Clip, Manifest
from mlatr.data.pipeline.epoch_plan import usable_caption_indices
from mlatr.errors import InputError, MlatrError
from mlatr.inference.model_evaluation import check_languages_present


def missing_audio(manifest: Manifest) -> list[Clip]:
    """The clips of ``manifest`` whose audio file does not exist (or is not a file) now."""
    return [c for c in manifest if not c.audio_path(manifest.root).is_file()]


def check_split_audio(manifest: Manifest, split: str, skip_bad: bool) -> set[str]:
    """Refuse a split whose audio files are all missing, or any missing file without ``skip_bad``; return
    the ids of the missing clips (skipped under ``skip_bad``)."""
    missing = missing_audio(manifest)
    if not missing:
        return set()
    first = missing[0]
    where = manifest.path or "the manifest"
    if len(missing) == len(manifest):
        raise MlatrError(f"none of the {len(manifest)} audio files of split {split!r} of {where} exists "
                         f"(first: {first.audio_path(manifest.root)}); check the manifest's folder or its "
                         f"audio paths")
    if not skip_bad:
        raise InputError(f"clip {first.id!r}: audio file {first.audio_path(manifest.root)} not found "
                         f"({len(missing)} of the {len(manifest)} clips of split {split!r} are missing; "
                         f"data.skip_bad=true skips them)",
                         str(where), first.line, "audio")
    return {c.id for c in missing}


def check_training_data(train: Manifest, val: Manifest | None, languages: Sequence[str], batch_size: int,
                        need_first_language: bool, check_files: bool, skip_bad: bool,
                        splits: tuple[str, str] = ("train", "val")) -> int:
    """Refuse training data that could not train (see the module docstring); return the number of clips
    that can train.

    Args:
        train: the training split's clips; ``val``: the validation split's, or None when the run does not
            validate.
        languages: ``data.languages``; ``batch_size``: ``train.batch_size`` (the global batch).
        need_first_language: the scheme has an anchor language (the first of ``languages``).
        check_files: the audio comes from the manifest's files (not a store or shards).
        skip_bad: ``data.skip_bad``: missing files are skipped (and counted) instead of refused.
        splits: the names of the two splits, for messages.

    Raises:
        MlatrError / InputError: naming the language and split, the numbers, or the missing file.
    """
    check_languages_present(train, languages, splits[0], explicit=True, flag="data.languages: ")
    if val is not None:
        check_languages_present(val, languages, splits[1], explicit=True, flag="data.languages: ")
    missing = check_split_audio(train, splits[0], skip_bad) if check_files else set()
    if check_files and val is not None:
        check_split_audio(val, splits[1], skip_bad)
    with_caption = [c for c in train if usable_caption_indices(c, languages, need_first_language)]
    usable = [c for c in with_caption if c.id not in missing]
    if len(usable) < batch_size:
        need = f"a caption in {languages[0]}" if need_first_language else f"a caption in {', '.join(languages)}"
        lost = [f"{len(train) - len(with_caption)} without {need}"] if len(with_caption) < len(train) else []
        if missing:
            lost.append(f"{len(missing)} with a missing audio file")
        detail = f" ({'; '.join(lost)})" if lost else ""
        where = train.path or "the shards"
        head = (f"train.batch_size={batch_size} but split {splits[0]!r} of {where} has {len(usable)} clip(s) "
                f"that can train, of {len(train)}{detail}")
        if len(usable) < 2:
            raise MlatrError(f"{head}: a contrastive batch needs at least 2 clips, so no step could run")
        raise MlatrError(f"{head}: the epoch's last, smaller batch is dropped, so no batch would fill and no "
                         f"step would run; set train.batch_size to at most {len(usable)} or add clips")
    return len(usable)


def data_fingerprint(splits: dict[str, Manifest | None]) -> dict[str, dict]:
    """``{split: {"clips": n, "sha256": digest of the split, "digests": {id: 12 hex digits}}}`` of the clips
    a run reads (its training and validation splits; None: not read), from each clip's manifest line."""
    out = {}
    for name, manifest in splits.items():
        if manifest is None:
            continue
        digests = {c.id: hashlib.sha256(json.dumps(c.to_json(), sort_keys=True, ensure_ascii=False).encode())
                   .hexdigest()[:12] for c in manifest}
        whole = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
        out[name] = {"clips": len(manifest), "sha256": whole, "digests": digests}
    return out


def fingerprint_difference(recorded: dict[str, dict], now: dict[str, dict]) -> str | None:
    """What differs between two :func:`data_fingerprint` s, in words (counts, and the first clips added,
    removed or changed per split); None when they agree."""
    parts = []
    for name in sorted(set(recorded) | set(now)):
        old, new = recorded.get(name), now.get(name)
        if old is None or new is None:
            parts.append(f"split {name!r} {'is new' if old is None else 'is no longer read'}")
            continue
        if old.get("sha256") == new.get("sha256"):
            continue
        a, b = old.get("digests", {}), new.get("digests", {})
        added = [i for i in b if i not in a]
        removed = [i for i in a if i not in b]
        changed = [i for i in b if i in a and a[i] != b[i]]
        said = [f"{len(x)} {what} ({', '.join(repr(i) for i in x[:3])}{', ...' if len(x) > 3 else ''})"
                for x, what in ((added, "added"), (removed, "removed"), (changed, "changed")) if x]
        parts.append(f"split {name!r}: {old.get('clips')} -> {new.get('clips')} clips, " + "; ".join(said))
    return "; ".join(parts) or None
