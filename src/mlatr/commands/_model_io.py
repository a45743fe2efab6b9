"""Shared by the commands that load a checkpoint and encode a manifest split (encode, eval)."""

from __future__ import annotations


def load_model_from_args(args):
    """The checkpoint's model on ``args.device``, in eval mode, with its training config attached."""
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.training.checkpoint import read_checkpoint
    from mlatr.training.trainer import resolve_device

    state = read_checkpoint(args.checkpoint)
    model = DualEncoder.from_config(state["model_config"])
    model.load_state_dict(state["model"])
    model.train_config = state["train_config"]
    from mlatr.training.matching_objective import head_from_checkpoint

    model.matching_head = head_from_checkpoint(state)  # the head it ranks with (cosine unless trained with one)
    return model.to(resolve_device(args.device)).eval()


def encode_from_args(args, model=None, frames: bool = False, manifest=None, languages=None):
    """Encode ``args.split`` of ``args.manifest`` (``all`` = every clip), or the given ``manifest`` as it is,
    in ``languages`` (default ``--languages``, else the model's training languages); returns an EncodedSplit
    (with frame/token features when ``frames``, for a fine-grained matching head)."""
    from mlatr.data.manifest import Manifest
    from mlatr.encoding import encode_manifest

    model = model or load_model_from_args(args)
    data_cfg = model.train_config["data"]
    if languages is None:
        languages = args.languages.split(",") if args.languages else data_cfg["languages"]
    max_seconds = args.max_seconds or data_cfg["eval_max_seconds"]
    if manifest is None:
        manifest = Manifest.load(args.manifest, skip_bad=args.skip_bad)
        if args.split != "all":
            manifest = manifest.split(args.split)
    return encode_manifest(model, manifest, languages, batch_size=args.batch_size, max_seconds=max_seconds,
                           sample_rate=data_cfg["sample_rate"], skip_bad=args.skip_bad, progress=True,
                           frames=frames)
