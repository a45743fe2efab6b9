"""Shared by the commands that load a model and encode a manifest split (encode, eval, index build, search,
serve); the work itself is the inference layer's (:mod:`mlatr.inference`)."""

from __future__ import annotations

import json

from mlatr.commands._notices import report_skipped
from mlatr.errors import MlatrError
from mlatr.languages import parse_language_list


def load_model_from_args(args):
    """The :class:`~mlatr.inference.LoadedModel` of ``args.checkpoint`` (a checkpoint or a model folder) on
    ``args.device``."""
    from mlatr.inference import load_model  # loads torch: not paid by every command's parser

    return load_model(args.checkpoint, args.device)


def clips_from_args(args):
    """``(manifest, shards)``: ``args.split`` (``all`` = every clip) of ``args.manifest``, or of the webdataset
    shards ``args.webdataset`` (then ``shards`` is their :class:`~mlatr.data.webdataset_shards.ShardIndex`,
    else None)."""
    from mlatr.inference.library import manifest_split  # loads torch: not paid by every command's parser

    if getattr(args, "webdataset", None):
        from mlatr.data.webdataset_shards import index_shards  # loads torch: not paid by every command's parser

        shards = index_shards(args.webdataset, progress=True)
        return (shards.manifest if args.split == "all" else shards.manifest.split(args.split)), shards
    manifest = manifest_split(args.manifest, args.split, args.skip_bad)
    report_skipped(manifest.problems, "malformed manifest line(s)")
    return manifest, None


def encode_from_args(args, loaded=None, manifest=None, languages=None, shards=None):
    """Encode the clips of :func:`clips_from_args`, or the given ``manifest`` as it is (its audio in ``shards``
    when given), in ``languages`` (default ``--languages``, else the model's training languages) with the
    model (frame / token features too when its matching head scores them); returns an
    :class:`~mlatr.inference.encoding.EncodedSplit`."""
    from mlatr.inference.model_evaluation import encode_split  # loads torch: not paid by every command's parser

    loaded = loaded or load_model_from_args(args)
    given = manifest is None
    if languages is None and args.languages:
        languages = parse_language_list(args.languages, "--languages")
    if manifest is None:
        manifest, shards = clips_from_args(args)
    enc = encode_split(loaded, manifest, languages, split=args.split, batch_size=args.batch_size,
                       max_seconds=args.max_seconds, skip_bad=args.skip_bad, check_languages=given, shards=shards)
    report_skipped(enc.skipped, "clip(s) with unreadable audio")
    return enc


def model_for_index(model_path, index_path, device="cpu"):
    """The model at ``model_path`` (``--model``: the index's model, moved) for the index at ``index_path``;
    refused when its config differs from the one the index was built with (another model's space)."""
    from mlatr.inference import load_model  # loads torch: not paid by every command's parser
    from mlatr.search.index import Index  # loads torch: not paid by every command's parser

    loaded = load_model(model_path, device)
    built_with = Index.load(index_path).meta.get("model_config")
    if built_with is not None and built_with != json.loads(json.dumps(loaded.model.config())):  # as stored
        raise MlatrError(f"--model {model_path}: not the model {index_path} was built with (its config differs); "
                         "queries would land in another embedding space")
    return loaded
