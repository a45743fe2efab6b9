from mlatr.data.manifest import Manifest, validate_manifest

HELP = """Check a manifest and report every problem with its line and field.

Reports bad JSON, missing or empty id/audio, duplicate ids, captions that are not lists, caption lists
longer than the English one, other languages without an English list, unknown language codes, empty
captions, wrong types of split/labels/duration, and (with --check-audio) audio files that do not exist.
Prints one `file:line: field: message` per problem and a summary; exits 1 if there is any problem.
"""


def add_arguments(parser) -> None:
    parser.add_argument("manifest", metavar="MANIFEST", help="JSONL manifest")
    parser.add_argument("--check-audio", action="store_true",
                        help="also check that every clip's audio file exists (relative to the manifest)")
    parser.add_argument("--languages", metavar="L1,L2", default=None,
                        help="comma-separated ISO 639-3 codes: report captions in any other language")


def run(args) -> int:
    langs = [c.strip() for c in args.languages.split(",") if c.strip()] if args.languages else None
    problems = validate_manifest(args.manifest, check_audio=args.check_audio, languages=langs)
    for p in problems:
        print(p)
    if problems:
        lines = {p.line for p in problems}
        print(f"{len(problems)} problem(s) on {len(lines)} line(s) of {args.manifest}")
        return 1
    m = Manifest.load(args.manifest)
    n_captions = sum(c.caption_count(lang) for c in m.clips for lang in c.captions)
    checked = ", audio files present" if args.check_audio else ""
    print(f"OK: {len(m)} clips, {n_captions} captions in {', '.join(m.languages()) or 'no language'}"
          f"{checked} ({args.manifest})")
    return 0
