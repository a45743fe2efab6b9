import time

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._notices import report_skipped
from mlatr.commands._paths import model_inputs, refuse_output_over_input
from mlatr.data.manifest import Manifest
from mlatr.languages import parse_language_list

HELP = """Build (or extend with --add) a search index of a manifest's clips with a trained model.

Encodes every clip's audio (and every caption, for sound-to-caption search) with the checkpoint's
model and writes one .npz atomically: unit-norm embeddings, clip ids, absolute audio paths, captions,
and the checkpoint's path and SHA-256. With --add and an existing INDEX only clips whose id is not
in it yet are encoded; an index built with another checkpoint is refused. A clip longer than
--window-seconds is encoded as windows (memory stays bounded with a long --max-seconds). An unreadable
or truncated clip stops the build (nothing is written) unless --skip-bad, which skips and counts it.

Examples:
  mlatr index build --checkpoint runs/real/model.pt --manifest data/real-sounds/manifest.jsonl -o sounds.idx.npz
  mlatr index build --checkpoint runs/real/model.pt --manifest more.jsonl -o sounds.idx.npz --add
"""


def add_arguments(parser):
    parser.add_argument("--checkpoint", required=True, help="a checkpoint written by mlatr train / demo-real")
    parser.add_argument("--manifest", required=True, help="JSONL manifest of the clips to index")
    parser.add_argument("-o", "--output", required=True, metavar="INDEX", help="index file to write (.npz)")
    parser.add_argument("--add", action="store_true", help="keep INDEX's entries and encode only new clips")
    parser.add_argument("--split", default="all", help="index only this split (default: all clips)")
    parser.add_argument("--caption-langs", default=None,
                        help="comma-separated caption languages to index (default: the manifest's)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre crop (default: the checkpoint's data.eval_max_seconds, else 10)")
    parser.add_argument("--window-seconds", type=positive_float, default=None,
                        help="a clip longer than this is encoded as windows whose embeddings are averaged, "
                             "--batch-size windows at a time (default: the checkpoint's data.eval_max_seconds)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip clips whose audio is unreadable or truncated, and count them (default: stop "
                             "at the first one)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from mlatr.commands._model_io import load_model_from_args
    from mlatr.search.index import build_index

    refuse_output_over_input([("-o", args.output)], model_inputs(args))
    model = load_model_from_args(args)
    manifest = Manifest.load(args.manifest)
    if args.split != "all":
        manifest = manifest.split(args.split)
    langs = parse_language_list(args.caption_langs, "--caption-langs") if args.caption_langs else None
    t0 = time.perf_counter()
    report = build_index(model, manifest, args.output, add=args.add, caption_languages=langs,
                         batch_size=args.batch_size, max_seconds=args.max_seconds,
                         window_seconds=args.window_seconds, skip_bad=args.skip_bad,
                         progress=not args.no_progress)
    dt = time.perf_counter() - t0
    rate = f" ({report.added / dt:.1f} clips/s)" if report.added else ""
    print(f"wrote {args.output}: {len(report.index)} clips ({report.added} encoded{rate}, {report.kept} kept), "
          f"{len(report.index.caption_text)} captions, dim {report.index.dim}"
          + (f"; skipped {len(report.skipped)} unreadable clips" if report.skipped else ""))
    report_skipped(report.skipped, "unreadable clip(s)")
    return 0
