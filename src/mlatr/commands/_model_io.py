"""Shared by the commands that load a checkpoint and encode a manifest split (encode, eval, index build)."""

from __future__ import annotations

from mlatr.commands._notices import report_skipped
from mlatr.data.loader import default_workers
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.languages import parse_language_list


def load_model_from_args(args):
    """The :class:`~mlatr.training.checkpoint.LoadedModel` of ``args.checkpoint`` on ``args.device``."""
    from mlatr.training.checkpoint import load_model

    return load_model(args.checkpoint, args.device)


def languages_from_args(args, loaded) -> list[str]:
    """``--languages``, else the model's training languages."""
    return parse_language_list(args.languages, "--languages") if args.languages else loaded.data["languages"]


def clips_from_args(args, languages):
    """``(manifest, shards)``: ``args.split`` (``all`` = every clip) of ``args.manifest``, or of the webdataset
    shards ``args.webdataset`` (then ``shards`` is their :class:`~mlatr.data.webdataset_shards.ShardIndex`,
    else None); languages without captions there are refused."""
    shards = None
    if getattr(args, "webdataset", None):
        from mlatr.data.webdataset_shards import index_shards

        shards = index_shards(args.webdataset, progress=True)
        manifest = shards.manifest
    else:
        manifest = Manifest.load(args.manifest, skip_bad=args.skip_bad)
    if args.split != "all":
        manifest = manifest.split(args.split)
    check_languages_present(manifest, languages, args.split, explicit=bool(args.languages))
    report_skipped(manifest.problems, "malformed manifest line(s)")
    return manifest, shards


def encode_from_args(args, loaded=None, manifest=None, languages=None, shards=None):
    """Encode the clips of :func:`clips_from_args`, or the given ``manifest`` as it is (its audio in ``shards``
    when given), in ``languages`` (default :func:`languages_from_args`) with the model (frame / token features
    too when its matching head scores them); returns an :class:`~mlatr.encoding.EncodedSplit`."""
    from mlatr.encoding import encode_manifest

    loaded = loaded or load_model_from_args(args)
    if languages is None:
        languages = languages_from_args(args, loaded)
    max_seconds = args.max_seconds or loaded.data["eval_max_seconds"]
    if manifest is None:
        manifest, shards = clips_from_args(args, languages)
    source = None
    if shards is not None:
        from mlatr.data.webdataset_shards import ShardSource

        source = ShardSource(manifest, shards, loaded.data["sample_rate"], skip_bad=args.skip_bad)
    enc = encode_manifest(loaded.model, manifest, languages, batch_size=args.batch_size, max_seconds=max_seconds,
                          sample_rate=loaded.data["sample_rate"], skip_bad=args.skip_bad, progress=True,
                          frames=loaded.head.needs_frames, workers=default_workers(), source=source)
    report_skipped(enc.skipped, "clip(s) with unreadable audio")
    if not enc.clip_ids:
        raise MlatrError(f"none of the {len(manifest)} clip(s) to encode could be read "
                         f"(first: {next(iter(enc.skipped.values()), '')})")
    return enc


def check_languages_present(manifest: Manifest, languages, split: str, explicit: bool) -> None:
    """Refuse languages with no caption in the clips to encode: every one given with ``--languages``
    (``explicit``), at least one of the model's otherwise."""
    present = manifest.languages()
    missing = [lang for lang in languages if lang not in present]
    if (explicit and missing) or len(missing) == len(languages):
        name = manifest.path or "the shards"
        where = f"split {split!r} of {name}" if split != "all" else str(name)
        flag = "--languages: " if explicit else "the model's languages: "
        raise MlatrError(f"{flag}no caption in {', '.join(missing)} in {where} "
                         f"(its captions are in: {', '.join(present) or 'no language'})")
