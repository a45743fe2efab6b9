from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import (
    add_encoding_options,
    add_model_option,
    load_model_from_args,
    runtime_from_args,
    workers_from_args,
)
from mlatr.commands._paths import refuse_output_over_input
from mlatr.commands._skipping import add_skip_options, finish_skips, report_path, skip_bad

HELP = """Embed a library's sounds (or texts, with --text) with a model into an NPZ or a Parquet table.

One row per clip: id, path, embedding (unit norm, the model's space; texts: id, text, lang, embedding).
INPUT is a sound library, as index build and classify take it: a folder of sounds, a manifest (.jsonl;
--split), sound files, webdataset shards (a .tar, shard-{000000..000009}.tar, or a folder of shards), or
several of these. A clip's id is its path under the library's root without extension (a folder's, or the
sound files' common folder), or its manifest / shard id: the ids the index gives it. Files of any length:
a clip longer than the model's evaluation crop is encoded as windows whose embeddings are averaged
(--window-seconds). -o FILE.parquet needs pyarrow (pip install 'mlatr[parquet]'); any other name writes an
NPZ (ids, paths, texts, langs, embeddings).

Bad files: from folders and sound files, an unreadable, truncated or non-audio file is skipped, counted and
listed with its reason in OUTPUT.skipped.jsonl (--skip-report FILE elsewhere), exit status 3 ("done, with
skips"; 0 with --skip-bad); --strict stops at the first. A manifest's or shards' bad clip stops the command
unless --skip-bad.

Examples:
  mlatr embed dog.wav rain.ogg sounds/ --model runs/demo-real/model.pt -o sounds.parquet
  mlatr embed data/real-sounds/manifest.jsonl --split test -o test.npz      # the default model ($MLATR_MODEL)
  mlatr embed --text "un chien aboie" "la pluie" --lang fra --model runs/demo-real/model.pt -o q.npz
"""


def add_arguments(parser):
    parser.add_argument("items", nargs="+", metavar="INPUT",
                        help="the library: sound files, folders, a manifest or webdataset shards (texts with --text)")
    add_model_option(parser)
    parser.add_argument("-o", "--output", required=True, help="output .npz or .parquet")
    parser.add_argument("--text", action="store_true", help="the items are texts, not sounds")
    parser.add_argument("--lang", default=None, help="language of the texts (ISO 639-3 or 639-1; needed when the "
                        "model's text encoder reads it)")
    parser.add_argument("--split", default="all", help="a manifest's or shards' split to embed (default: all clips)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre-crop each file to this length (default: the whole file)")
    parser.add_argument("--window-seconds", type=positive_float, default=None,
                        help="window length for long files (default: the model's evaluation crop)")
    add_encoding_options(parser)
    parser.add_argument("--device", default="auto")
    add_skip_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.inference.tables import is_parquet, require_parquet, write_embeddings

    if is_parquet(args.output):
        require_parquet()
    inputs = [] if args.text else [("INPUT", f) for f in args.items]
    refuse_output_over_input([("-o", args.output)], [("--model", args.model)] + inputs)
    skipping = not args.text and skip_bad(args, args.items)
    report = None if args.text else report_path(args, args.output)
    model = load_model_from_args(args)
    if args.text:
        emb = model.embed_text(args.items, args.lang, batch_size=args.batch_size, progress=not args.no_progress)
        lang = [model.text_languages(1, args.lang)[0]] * len(args.items) if args.lang else None
        write_embeddings(args.output, [str(i) for i in range(len(args.items))], None, emb, texts=list(args.items),
                         langs=lang)
        print(f"wrote {args.output}: {len(args.items)} texts, dim {emb.shape[1]}")
        return 0
    runtime_from_args(args, model, args.items)
    found = model.embed_library(args.items, split=args.split, batch_size=args.batch_size,
                                max_seconds=args.max_seconds, window_seconds=args.window_seconds,
                                progress=not args.no_progress, skip_bad=skipping,
                                workers=workers_from_args(args))
    write_embeddings(args.output, found.ids, found.paths, found.embeddings)
    print(f"wrote {args.output}: {len(found)} clips, dim {found.embeddings.shape[1]}"
          + (f"; skipped {len(found.skips)} bad file(s)" if found.skips else ""))
    return finish_skips(args, found.skips, report)
