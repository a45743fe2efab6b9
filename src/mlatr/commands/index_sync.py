import time

from mlatr.commands._arg_types import positive_int
from mlatr.commands._model_io import add_model_option
from mlatr.commands._notices import some_ids
from mlatr.commands._skipping import add_skip_options, finish_skips, report_path, skip_bad
from mlatr.terminal_text import shown

HELP = """Keep an index in sync with a folder: add new files, remove deleted ones, follow renames and moves.

Compares DIR as it is now with INDEX (built from DIR by mlatr index build, or made now if it does not exist):
a file not indexed yet is encoded, unless its bytes (SHA-256, recorded at build) are those of an indexed file
that is gone (a rename or a move to another folder: its row is written again under the new name, its audio
embedding and segments reused, only its captions, which its name and folders make, encoded again) or of an
indexed file still there (a copy: reused the same way); a file whose content changed under the same name is
encoded again (one merely touched keeps its embedding); a file whose sidecar or tags now say otherwise has its
captions encoded again; an indexed file that is gone is removed. Prints what changed. The write takes the
index's writer lock (a concurrent build or sync waits for it, and both keep their rows). mlatr serve
--watch-folder DIR does this periodically while serving.
A bad file (unreadable, truncated, not audio, a FIFO, a name that is not UTF-8) is skipped, counted on stderr
and listed with its reason in INDEX.skipped.jsonl beside the index (--skip-report FILE elsewhere); the exit
status is then 3 (0 with --skip-bad); --strict stops at the first, writing nothing.

Examples:
  mlatr index sync ~/Sounds sounds.idx
  mlatr index sync ~/Sounds sounds.idx --model runs/demo-real/model.pt --no-loudness
"""


def add_arguments(parser):
    parser.add_argument("folder", metavar="DIR", help="the folder of sounds the index follows")
    parser.add_argument("index", metavar="INDEX", help="index written by mlatr index build (made when missing)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    add_skip_options(parser, "file")
    parser.add_argument("--no-loudness", action="store_true",
                        help="skip measuring loudness, true peak and silence of the files encoded")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_option(parser, "the index's model (the file it was built with, or a copy of it)",
                     "default: the index's own; for a new index, the default model")


def run(args) -> int:
    # these load torch: not paid by every command's parser
    from mlatr.inference import load_model
    from mlatr.model_registry import resolve_model
    from mlatr.search.index import Index
    from mlatr.search.storage_choice import open_storage
    from mlatr.search.sync import sync_folder, sync_summary

    storage = open_storage(args.index)
    skips_to = report_path(args, None if storage.local_file is None else str(storage.local_file))
    if args.model or not storage.exists():
        model = load_model(resolve_model(args.model).path)
    else:
        model = Index.load(args.index).model()
    t0 = time.perf_counter()
    report = sync_folder(model, args.folder, args.index, batch_size=args.batch_size,
                         skip_bad=skip_bad(args, [args.folder]),
                         progress=not args.no_progress, loudness=not args.no_loudness)
    print(f"synced {shown(args.index)} with {shown(args.folder)} in {time.perf_counter() - t0:.1f} s: "
          f"{sync_summary(report)}; {len(report.index)} clips")
    for what, ids in (("added", report.added), ("encoded again (content changed)", report.changed),
                      ("touched (same bytes)", report.touched), ("recaptioned", report.recaptioned),
                      ("deleted (file gone)", report.deleted)):
        if ids:
            print(f"  {what}: {some_ids(ids)}")
    for old, new in list(report.moved.items())[:20]:
        print(f"  moved: {shown(old)} -> {shown(new)}")
    for new, source in list(report.copied.items())[:20]:
        print(f"  copy: {shown(new)} (the audio of {shown(source)})")
    return finish_skips(args, report.skips, skips_to)
