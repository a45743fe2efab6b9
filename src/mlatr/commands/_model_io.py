"""Shared by the commands that load a checkpoint and encode a manifest split (encode, eval, index build)."""

from __future__ import annotations

from mlatr.data.manifest import Manifest
from mlatr.languages import parse_language_list


def load_model_from_args(args):
    """The :class:`~mlatr.training.checkpoint.LoadedModel` of ``args.checkpoint`` on ``args.device``."""
    from mlatr.training.checkpoint import load_model

    return load_model(args.checkpoint, args.device)


def encode_from_args(args, loaded=None, manifest=None, languages=None):
    """Encode ``args.split`` of ``args.manifest`` (``all`` = every clip), or the given ``manifest`` as it is,
    in ``languages`` (default ``--languages``, else the model's training languages) with the model (frame /
    token features too when its matching head scores them); returns an :class:`~mlatr.encoding.EncodedSplit`."""
    from mlatr.encoding import encode_manifest

    loaded = loaded or load_model_from_args(args)
    if languages is None:
        languages = parse_language_list(args.languages) if args.languages else loaded.data["languages"]
    max_seconds = args.max_seconds or loaded.data["eval_max_seconds"]
    if manifest is None:
        manifest = Manifest.load(args.manifest, skip_bad=args.skip_bad)
        if args.split != "all":
            manifest = manifest.split(args.split)
    return encode_manifest(loaded.model, manifest, languages, batch_size=args.batch_size, max_seconds=max_seconds,
                           sample_rate=loaded.data["sample_rate"], skip_bad=args.skip_bad, progress=True,
                           frames=loaded.head.needs_frames)
