"""Shared by the commands that load a model (``--model``, one spelling everywhere) and encode a manifest split
(encode, eval, index build, search, serve); the work itself is the inference layer's (:mod:`mlatr.inference`)."""

from __future__ import annotations

import os

from mlatr.commands._arg_types import positive_int
from mlatr.commands._notices import report_skipped
from mlatr.languages import parse_language_list
from mlatr.model_registry import MODEL_ENV, PROJECT_FILE, SHIPPED_NAME, resolve_model


def add_model_option(parser, what: str = "the model", default_note: str | None = None) -> None:
    """``--model MODEL`` (a checkpoint file, a model folder or a registered name; :mod:`mlatr.model_registry`);
    its old spelling ``--checkpoint`` is still read (:data:`mlatr.commands._deprecated.MODEL_OLD_SPELLINGS`)."""
    note = default_note or (f"default: ${MODEL_ENV}, else model = ... in the nearest {PROJECT_FILE}, else the "
                            f"model shipped with mlatr, {SHIPPED_NAME}")
    parser.add_argument("--model", metavar="MODEL", default=None,
                        help=f"{what}: a checkpoint file (mlatr train), a model folder (mlatr export) or a name "
                             f"registered by mlatr export --name ({note})")


def add_encoding_options(parser) -> None:
    """``--workers N`` (processes reading and encoding the audio; default: every core this process may use, shared
    among the processes torchrun started on this machine), ``--runtime`` and ``--precision`` (what runs the
    audio encoder: :mod:`mlatr.inference.runtime`)."""
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="processes reading and encoding the audio, each on its share of the cores (default: "
                             "one per core this process may use; 1: this process)")
    parser.add_argument("--runtime", default="auto", metavar="{auto,torch,onnxruntime,openvino}",
                        help="what runs the audio encoder's CNN: torch, or an optimised CPU runtime (pip install "
                             "'mlatr[fast]') exported once and checked equal to torch; auto: openvino, else "
                             "onnxruntime, else torch (default auto)")
    parser.add_argument("--precision", default="fp32", metavar="{fp32,bf16,int8}",
                        help="fp32 (equal to torch, default); bf16 (openvino, on CPUs with AMX or AVX-512 BF16) and "
                             "int8 (calibrated on 32 clips spread over the library) are faster and lose a little: see "
                             "docs/measured-figures.md")


def workers_from_args(args) -> int:
    """``--workers``, else the cores this process may use shared among torchrun's processes on this machine."""
    from mlatr.inference.worker_pool import usable_cores  # loads torch: not paid by every command's parser

    if args.workers is not None:
        return args.workers
    return max(1, usable_cores() // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)))


def runtime_from_args(args, model, library=None) -> str:
    """Attach ``--runtime`` / ``--precision`` to ``model``'s audio encoder (int8 calibrated on clips spread over
    ``library``: a :class:`~mlatr.inference.library.Library`, or what :func:`~mlatr.inference.library.open_library`
    takes); the name of what runs it."""
    # load torch: not paid by every command's parser
    from mlatr.inference.audio import SourceClips
    from mlatr.inference.library import Library, open_library
    from mlatr.inference.runtime import calibration_waves

    waves = None
    if args.precision == "int8" and library is not None:
        if not isinstance(library, Library):
            library = open_library(library, getattr(args, "split", "all"), skip_bad=True)
        clips = SourceClips(library.source(model.sample_rate, skip_bad=True), float(model.data["eval_max_seconds"]))
        waves = calibration_waves(clips)
    return model.use_runtime(args.runtime, args.precision, waves).name


def model_path_from_args(args):
    """The path of the model ``--model`` names, else the default model (:func:`mlatr.model_registry.resolve_model`)."""
    return resolve_model(args.model).path


def load_model_from_args(args):
    """The :class:`~mlatr.inference.LoadedModel` ``--model`` names (else the default model) on ``args.device``."""
    from mlatr.inference import load_model  # loads torch: not paid by every command's parser

    return load_model(model_path_from_args(args), args.device)


def add_model_for_index_options(parser) -> None:
    """``--model`` (the index's model, moved or exported) and ``--allow-other-model`` (search, serve)."""
    add_model_option(parser, "the index's model, instead of the one the index recorded (it must have the weights "
                             "the index was built with)",
                     f"default: the index's own; when that is gone, ${MODEL_ENV}, the nearest {PROJECT_FILE} or "
                     f"the shipped {SHIPPED_NAME}")
    parser.add_argument("--allow-other-model", action="store_true",
                        help="use --model even when its weights are not the ones the index was built with "
                             "(another seed or epoch: its queries land in another embedding space)")


def model_for_index(args):
    """The model ``--model`` names (None without it: the index's own, or the default when that is gone);
    :meth:`mlatr.search.Index.load` checks it against the index (its weights' SHA-256), refusing another
    model unless ``--allow-other-model``."""
    from mlatr.inference import load_model  # loads torch: not paid by every command's parser

    return load_model(resolve_model(args.model).path) if args.model else None


def clips_from_args(args, skip_bad: bool | None = None, report: bool = True):
    """``(manifest, shards)``: ``args.split`` (``all`` = every clip) of ``args.manifest``, or of the webdataset
    shards ``args.webdataset`` (then ``shards`` is their :class:`~mlatr.data.webdataset_shards.ShardIndex`,
    else None); ``skip_bad``: skip bad lines and samples (default ``args.skip_bad``); ``report``: print what was
    skipped (else the caller reports it)."""
    from mlatr.inference.library import manifest_split  # loads torch: not paid by every command's parser

    skip_bad = args.skip_bad if skip_bad is None else skip_bad

    if getattr(args, "webdataset", None):
        from mlatr.data.webdataset_shards import index_shards  # loads torch: not paid by every command's parser

        shards = index_shards(args.webdataset, progress=True, skip_bad=skip_bad)
        if report:
            report_skipped(shards.manifest.problems, "bad shard sample(s)")
        return (shards.manifest if args.split == "all" else shards.manifest.split(args.split)), shards
    manifest = manifest_split(args.manifest, args.split, skip_bad)
    if report:
        report_skipped(manifest.problems, "malformed manifest line(s)")
    return manifest, None


def encode_from_args(args, loaded=None, manifest=None, languages=None, shards=None):
    """Encode the clips of :func:`clips_from_args`, or the given ``manifest`` as it is (its audio in ``shards``
    when given), in ``languages`` (default ``--languages``, else the model's training languages) with the
    model (frame / token features too when its matching head scores them); returns an
    :class:`~mlatr.inference.encoded_split.EncodedSplit`."""
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
