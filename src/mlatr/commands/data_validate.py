from mlatr.data.manifest import Manifest, validate_manifest
from mlatr.languages import parse_language_list
from mlatr.terminal_text import shown_lines

HELP = """Check a manifest and report every problem with its line and field.

Reports bad JSON, missing or empty id/audio, duplicate ids, captions that are not lists, caption lists
longer than the English one, other languages without an English list, unknown language codes, empty
captions, wrong types of split/labels/duration, an empty manifest, and (with --check-audio, which decodes
every file) audio files that are missing, unreadable, truncated (fewer frames than their header declares)
or far from the manifest's duration. Prints one `file:line: field: message` per problem and a summary;
exits 1 if there is any problem (2 for a bad argument).
"""


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest")
    parser.add_argument("--check-audio", action="store_true",
                        help="also decode every clip's audio file (relative to the manifest): missing, "
                             "unreadable, truncated or of another duration than the manifest's is a problem")
    parser.add_argument("--languages", metavar="L1,L2", default=None,
                        help="comma-separated language codes (ISO 639-3, or 639-1 such as fr): report "
                             "captions in any other language")


def run(args) -> int:
    langs = parse_language_list(args.languages, "--languages") if args.languages else None
    problems = validate_manifest(args.manifest, check_audio=args.check_audio, languages=langs)
    for p in problems:
        print(shown_lines(p))
    if problems:
        lines = {p.line for p in problems}
        print(f"{len(problems)} problem(s) on {len(lines)} line(s) of {args.manifest}")
        return 1
    m = Manifest.load(args.manifest)
    n_captions = sum(c.caption_count(lang) for c in m.clips for lang in c.captions)
    checked = ", every audio file decodes whole" if args.check_audio else ""
    print(f"OK: {len(m)} clips, {n_captions} captions in {', '.join(m.languages()) or 'no language'}"
          f"{checked} ({args.manifest})")
    return 0
