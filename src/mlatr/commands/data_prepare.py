from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._notices import some_ids
from mlatr.commands._outputs import Output
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError

HELP = """Decode a manifest's audio once into a store that training reads without a codec.

Every clip is decoded, mixed to mono and resampled to the model rate, then written into shards of int16
(or float16) samples with an index (see mlatr.data.pipeline.store). Train from it with `data.store=STORE`: the
loader reads each crop window directly, so an epoch costs no decoding and the training processes' memory
stays flat whatever the data set size. Interrupted runs resume: rerun the same command (also after the
manifest gained clips) and only the missing clips are prepared.

Examples:
  mlatr data prepare data/audiocaps/manifest.jsonl -o data/audiocaps/store
  mlatr data prepare data/clotho/manifest.jsonl -o data/clotho/store --split train --split val --skip-bad
  mlatr train --config configs/atri-kcl-audiocaps.yaml data.store=data/audiocaps/store ...
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "store", folder=True),)


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest")
    parser.add_argument("-o", "--out", required=True, metavar="STORE", help="store folder (created or resumed)")
    parser.add_argument("--split", action="append", default=None, metavar="SPLIT",
                        help="prepare only this split (repeatable; default: every clip)")
    parser.add_argument("--sample-rate", type=positive_int, default=16000, help="model sample rate (default 16000)")
    parser.add_argument("--dtype", choices=("int16", "float16"), default="int16",
                        help="stored sample type (default int16, with a per-clip scale: 96 dB of range)")
    parser.add_argument("--shard-mb", type=positive_float, default=512.0, help="shard size in MB (default 512)")
    parser.add_argument("--workers", default="auto",
                        help="decoding processes (default auto: the CPUs minus one, at most 8)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="record unreadable clips (training skips them with data.skip_bad) instead of stopping")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    # the store and its workers pull in torch: imported here so that `mlatr --help` stays fast
    from mlatr.data.pipeline.store import prepare_store  # loads torch: not paid by every command's parser
    from mlatr.data.pipeline.workers import default_workers  # loads torch: not paid by every command's parser

    if args.workers == "auto":
        workers = default_workers()
    else:
        try:
            workers = int(args.workers)
        except ValueError:
            raise MlatrError(f"--workers must be auto or an integer >= 0, got {args.workers!r}") from None
        if workers < 0:
            raise MlatrError(f"--workers must be auto or an integer >= 0, got {workers}")
    manifest = Manifest.load(args.manifest)
    report = prepare_store(manifest, args.out, sample_rate=args.sample_rate, dtype=args.dtype,
                           shard_mb=args.shard_mb, workers=workers, skip_bad=args.skip_bad, splits=args.split,
                           progress=not args.no_progress)
    print(f"{report.store}: {report.stored} clip(s) prepared now, {report.already} already there, "
          f"{report.bad} unreadable (recorded), {report.shards} shard(s)")
    if report.changed:
        print(f"{len(report.changed)} clip(s) changed since they were stored (size or mtime) and were prepared "
              f"again: {some_ids(report.changed)}")
    return 0
