import json

from mlatr.commands._notices import report_skipped
from mlatr.data.manifest import Manifest
from mlatr.data.stats import format_stats, manifest_stats
from mlatr.terminal_text import shown, shown_lines

HELP = """Statistics of a manifest.

Clips per split, captions per language (and per split), clips with captions in each language, missing
translations per language, clips without captions, durations (total, min/mean/max), label counts.
"""


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest")
    parser.add_argument("--json", action="store_true", help="print the statistics as JSON")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip malformed lines (counted) instead of failing")


def run(args) -> int:
    m = Manifest.load(args.manifest, skip_bad=args.skip_bad)
    stats = manifest_stats(m)
    if args.skip_bad:
        stats["skipped_problems"] = len(m.problems)
        stats["skipped_lines"] = m.skipped_lines()
    if args.json:
        print(json.dumps(stats, ensure_ascii=False, indent=2))
    else:
        print(shown(args.manifest))
        print(shown_lines(format_stats(stats)))  # labels and split names are the manifest's own text
        if m.problems:
            print(f"skipped {m.skipped_lines()} malformed line(s) with {len(m.problems)} problem(s) "
                  f"(details: mlatr data validate {args.manifest})")
    report_skipped(m.problems, "problem(s) of malformed lines")
    return 0
