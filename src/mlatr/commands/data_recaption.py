"""Captions and labels from the clips' paths (folder context, numbering and jargon cleaned, reviewed).

For a manifest made by `mlatr data import --format folder` whose captions are the file names: each
English-only clip gets its captions from its id (the path under the folder) by the rules of
mlatr.data.path_captions, and its label from the folder; a reviewed table replaces the automatic
captions where a person found them wrong and may leave clips out. The default table is mlatr's own for
the Debian sound libraries of scripts/get-real-sounds.sh (src/mlatr/data/real_sound_captions.json).
Clips with captions in other languages are kept as they are. Rewrites MANIFEST atomically.

Example:
  mlatr data recaption data/real-sounds/manifest.jsonl
"""

from mlatr.commands._outputs import Output
from mlatr.data.manifest import Manifest
from mlatr.data.path_captions import DEFAULT_TABLE, CaptionTable, recaption

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("manifest", "manifest", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest (rewritten in place)")
    parser.add_argument("--table", default=str(DEFAULT_TABLE),
                        help="JSON table of words, labels and reviewed captions (default: mlatr's own)")


def run(args) -> int:
    manifest = Manifest.load(args.manifest)
    counts = recaption(manifest, CaptionTable.load(args.table))
    manifest.save(args.manifest)
    print(f"{args.manifest}: {len(manifest)} clips; " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0
