"""Shared by the commands that load a checkpoint and encode a manifest split (encode, eval, index)."""

from __future__ import annotations


def encode_from_args(args):
    """Load ``args.checkpoint``, encode ``args.split`` of ``args.manifest``; returns an EncodedSplit."""
    from mlatr.data.manifest import Manifest
    from mlatr.encoding import encode_manifest
    from mlatr.training.checkpoint import read_checkpoint
    from mlatr.training.trainer import resolve_device

    device = resolve_device(args.device)
    state = read_checkpoint(args.checkpoint)
    from mlatr.models.dual_encoder import DualEncoder

    model = DualEncoder.from_config(state["model_config"])
    model.load_state_dict(state["model"])
    model.to(device).eval()
    data_cfg = state["train_config"]["data"]
    languages = args.languages.split(",") if args.languages else data_cfg["languages"]
    max_seconds = args.max_seconds or data_cfg["eval_max_seconds"]
    manifest = Manifest.load(args.manifest, skip_bad=args.skip_bad)
    if args.split != "all":
        manifest = manifest.split(args.split)
    return encode_manifest(model, manifest, languages, batch_size=args.batch_size, max_seconds=max_seconds,
                           sample_rate=data_cfg["sample_rate"], skip_bad=args.skip_bad, progress=True)
