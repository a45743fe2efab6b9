"""Give every clip of a manifest a train/val/test split from a hash of its id (in place).

test if sha256(id) maps below --test, val below --test + --val, else train; a clip's split never
depends on the other clips, so adding files to a library keeps the old splits. Rewrites MANIFEST
atomically.

Example:
  mlatr data split data/real-sounds/manifest.jsonl
"""

from mlatr.commands._arg_types import fraction
from mlatr.commands._outputs import Output
from mlatr.data.manifest import Manifest
from mlatr.data.splits import TEST_FRACTION, VAL_FRACTION, assign_hash_splits
from mlatr.errors import MlatrError

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("manifest", "manifest", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest")
    parser.add_argument("--val", type=fraction, default=VAL_FRACTION, help=f"val fraction (default {VAL_FRACTION})")
    parser.add_argument("--test", type=fraction, default=TEST_FRACTION,
                        help=f"test fraction (default {TEST_FRACTION})")


def run(args) -> int:
    if args.val + args.test > 1:  # each is a fraction (_arg_types.fraction)
        raise MlatrError(f"--val {args.val} and --test {args.test} must be fractions summing to at most 1")
    manifest = Manifest.load(args.manifest)
    counts = assign_hash_splits(manifest, args.val, args.test)
    manifest.save(args.manifest)
    print(f"{args.manifest}: {len(manifest)} clips; " + ", ".join(f"{k} {counts[k]}" for k in ("train", "val", "test")))
    return 0
