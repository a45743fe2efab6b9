"""Write a manifest's clips as webdataset tar shards (the layout ML-CLAP and LAION-CLAP train from).

Each sample is KEY.flac (or .wav/.mp3/.ogg: the clip's file as it is) and KEY.json:
{"captions": {"eng_Latn": [...], "fra_Latn": [...]}, "id", "audio", "split", "labels", "duration"}
(ML-CLAP's caption layout with NLLB language codes; a missing translation is null). KEY is the clip id made
safe for tar member names plus its position. Train from the shards with
data.webdataset="DIR/shard-{000000..000009}.tar"; get a manifest back with mlatr data import --format webdataset.

Examples:
  mlatr data export --format webdataset data/synth/manifest.jsonl -o shards/shard-%06d.tar --maxcount 1000
  mlatr data export --format webdataset M.jsonl -o shards/clips-%06d.tar.gz --maxsize 1e9
"""

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.data.manifest import Manifest

HELP = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="M", help="the manifest to export")
    parser.add_argument("--format", "-f", required=True, choices=("webdataset",), help="output format")
    parser.add_argument("-o", "--output", required=True, metavar="PATTERN",
                        help="shard names with a %%d field, e.g. DIR/shard-%%06d.tar (.tar.gz: gzipped)")
    parser.add_argument("--maxcount", type=positive_int, default=10_000, help="samples per shard (default 10000)")
    parser.add_argument("--maxsize", type=positive_float, default=1e9, help="bytes per shard (default 1e9)")
    parser.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    from mlatr.data.webdataset_shards import export_webdataset  # loads torch: not paid by every command's parser

    manifest = Manifest.load(args.manifest)
    shards = export_webdataset(manifest, args.output, maxcount=args.maxcount, maxsize=args.maxsize,
                               progress=not args.no_progress)
    print(f"wrote {len(manifest)} clips to {len(shards)} shard(s): {shards[0]} ... {shards[-1]}")
    return 0
