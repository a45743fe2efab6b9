"""Keep identical audio once: remove the clips whose decoded samples another clip of the manifest has.

Finds the clips that are the same audio (decoded, mixed to mono, resampled to 12 kHz: as long, their
difference at least 45 dB below the sound; so a WAV re-save of an OGG, at any rate or bit depth, is found; a
gain change or a lossy re-encode is not: see mlatr index duplicates for near copies; each file's print is cached
beside the manifest in .audio-prints.json) and keeps, of each group of identical clips, the one of the library (a clip's
first folder) that comes first in --order (then the others alphabetically; then the smaller id); the kept
clip lists the removed ones in its "duplicates" field. So the same recording shipped by two packages never
sits in two libraries, nor in the training and the held-out side of mlatr experiment unseen-library.
Rewrites MANIFEST atomically.

Example:
  mlatr data dedup data/real-sounds/manifest.jsonl --order scratch,minetest,wesnoth
"""

from mlatr.commands._outputs import Output
from mlatr.data.dedup import dedup_manifest
from mlatr.data.manifest import Manifest

HELP = __doc__

#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("manifest", "manifest", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest (rewritten in place)")
    parser.add_argument("--order", default="", help="comma-separated libraries whose copy is kept first")
    parser.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    manifest = Manifest.load(args.manifest)
    before = len(manifest)
    order = [x.strip() for x in args.order.split(",") if x.strip()]
    report = dedup_manifest(manifest, order, progress=not args.no_progress)
    manifest.save(args.manifest)
    across = sum(1 for r, k in report.removed.items() if r.split("/", 1)[0] != k.split("/", 1)[0])
    print(f"{args.manifest}: {before} clips, {len(report.removed)} duplicates removed ({across} across libraries), "
          f"{report.clips} kept")
    return 0
