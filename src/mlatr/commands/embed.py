from pathlib import Path

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import add_model_option, load_model_from_args
from mlatr.commands._notices import report_skipped
from mlatr.commands._paths import refuse_output_over_input
from mlatr.errors import MlatrError

HELP = """Embed sound files (or texts, with --text) with a model into an NPZ or a Parquet table.

One row per item: id, path, embedding (unit norm, the model's space; texts: id, text, lang, embedding).
A folder among FILES stands for every sound file under it. Files of any length: a clip longer than the
model's evaluation crop is encoded as windows whose embeddings are averaged (--window-seconds).
-o FILE.parquet needs pyarrow (pip install 'mlatr[parquet]'); any other name writes an NPZ (ids, paths,
texts, langs, embeddings).

Examples:
  mlatr embed dog.wav rain.ogg sounds/ --model runs/demo-real/model.pt -o sounds.parquet
  mlatr embed --text "un chien aboie" "la pluie" --lang fra --model runs/demo-real/model.pt -o q.npz
"""


def add_arguments(parser):
    parser.add_argument("items", nargs="+", metavar="FILES", help="sound files or folders (texts with --text)")
    add_model_option(parser)
    parser.add_argument("-o", "--output", required=True, help="output .npz or .parquet")
    parser.add_argument("--text", action="store_true", help="the items are texts, not files")
    parser.add_argument("--lang", default=None, help="language of the texts (ISO 639-3 or 639-1; needed when the "
                        "model's text encoder reads it)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre-crop each file to this length (default: the whole file)")
    parser.add_argument("--window-seconds", type=positive_float, default=None,
                        help="window length for long files (default: the model's evaluation crop)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--skip-bad", action="store_true", help="skip unreadable files and count them")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def audio_files(items):
    """The sound files of ``items``: files as given, folders expanded to the sound files under them."""
    from mlatr.data.importers.folder import sound_files  # imports torch (mlatr.audio.io): start-up time

    files = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sound_files(p)
            if not found:
                raise MlatrError(f"{p}: no sound file in this folder")
            files += [str(f) for f in found]
        else:
            files.append(str(item))
    return files


def run(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.inference.tables import is_parquet, require_parquet, write_embeddings

    if is_parquet(args.output):
        require_parquet()
    items = list(args.items) if args.text else audio_files(args.items)
    refuse_output_over_input([("-o", args.output)],
                             [("--model", args.model)] + ([] if args.text else [("FILE", f) for f in items]))
    model = load_model_from_args(args)
    if args.text:
        emb = model.embed_text(items, args.lang, batch_size=args.batch_size, progress=not args.no_progress)
        lang = [model.text_languages(1, args.lang)[0]] * len(items) if args.lang else None
        write_embeddings(args.output, [str(i) for i in range(len(items))], None, emb, texts=items, langs=lang)
        print(f"wrote {args.output}: {len(items)} texts, dim {emb.shape[1]}")
        return 0
    skipped: dict[str, str] | None = {} if args.skip_bad else None
    rows, emb = model.embed_audio_rows(items, batch_size=args.batch_size, max_seconds=args.max_seconds,
                                       window_seconds=args.window_seconds, progress=not args.no_progress,
                                       skipped=skipped)
    if not rows:
        raise MlatrError(f"none of the {len(items)} file(s) could be read (first: {next(iter(skipped.values()))})")
    write_embeddings(args.output, [items[i] for i in rows], [str(Path(items[i]).resolve()) for i in rows], emb)
    print(f"wrote {args.output}: {len(rows)} files, dim {emb.shape[1]}"
          + (f"; skipped {len(skipped)} unreadable" if skipped else ""))
    report_skipped(skipped or {}, "unreadable file(s)")
    return 0
