"""Keep identical audio once: remove the clips whose decoded samples another clip of the manifest has.

Finds the clips that are the same audio (decoded, mixed to mono, resampled to 12 kHz: as long, their
difference at least 45 dB below the sound; so a WAV re-save of an OGG, at any rate or bit depth, is found; a
gain change or a lossy re-encode is not: see mlatr index duplicates for near copies; each file's print is cached
beside the manifest in .audio-prints.json) and keeps, of each group of identical clips, the one of the library (a clip's
first folder) that comes first in --order (then the others alphabetically; then the smaller id); the kept
clip lists the removed ones in its "duplicates" field. So the same recording shipped by two packages never
sits in two libraries, nor in the training and the held-out side of mlatr experiment unseen-library.
Rewrites MANIFEST atomically.

A clip whose audio cannot be read (missing, truncated, not audio) or a malformed line stops the command, naming
the manifest's line, and nothing is written; with --skip-bad each is skipped instead, counted and listed with its
reason in MANIFEST.skipped.jsonl (--skip-report FILE elsewhere), as every command that reads a library does: the
clip is kept in the manifest but compared with none, the malformed line is written back as it was.

Example:
  mlatr data dedup data/real-sounds/manifest.jsonl --order scratch,minetest,wesnoth
"""

from mlatr.commands._outputs import Output
from mlatr.commands._skipping import add_skip_options, finish_skips, report_path
from mlatr.data.dedup import dedup_manifest
from mlatr.data.manifest import Manifest, Skip

HELP = __doc__

#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("manifest", "manifest", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest (rewritten in place)")
    parser.add_argument("--order", default="", help="comma-separated libraries whose copy is kept first")
    parser.add_argument("--no-progress", action="store_true")
    add_skip_options(parser, "clip or line")


def run(args) -> int:
    # a manifest: its bad lines and clips stop the command unless --skip-bad (mlatr.commands._skipping)
    skips_to = report_path(args, args.manifest)
    manifest = Manifest.load(args.manifest, skip_bad=args.skip_bad)
    before = len(manifest)
    order = [x.strip() for x in args.order.split(",") if x.strip()]
    report = dedup_manifest(manifest, order, progress=not args.no_progress, skip_bad=args.skip_bad)
    manifest.rewrite()
    skips = [Skip.of_problem(p) for p in manifest.problems] + report.skipped
    across = sum(1 for r, k in report.removed.items() if r.split("/", 1)[0] != k.split("/", 1)[0])
    print(f"{args.manifest}: {before} clips, {len(report.removed)} duplicates removed ({across} across libraries), "
          f"{report.clips} kept" + (f"; skipped {len(skips)} bad row(s)" if skips else ""))
    return finish_skips(args, skips, skips_to, "bad row(s)")
