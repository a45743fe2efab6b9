import json

from mlatr.commands._arg_types import cosine, fraction, non_negative_float, positive_int
from mlatr.terminal_text import shown

HELP = """List the duplicates among an index's clips: the same audio under several names, and near copies.

Exact groups: files that are the same audio once decoded, mixed to mono and resampled to 12 kHz (as long, their
difference at least 45 dB below the sound): a WAV re-save of an OGG, another container, bit depth or sample
rate. Each file is decoded once (its print is cached beside the index, or in --cache) and candidates of equal
length are compared sample by sample. Near groups: clips whose audio embeddings have a cosine of
--near-cosine or more and whose durations differ by at most --duration-seconds or --duration-share of the
longer, and that are not the same audio: MP3 / Vorbis re-encodes, gain changes, trimmed copies. The
thresholds were measured on copies made from the real corpus (docs/sound-libraries.md: precision and recall).
Nothing is changed: delete what you do not want with mlatr index delete. --json prints one JSON object.

Examples:
  mlatr index duplicates sounds.idx
  mlatr index duplicates sounds.idx --near-cosine 0.97 --json
"""


def add_arguments(parser):
    parser.add_argument("index", metavar="INDEX", help="index written by mlatr index build")
    parser.add_argument("--near-cosine", type=cosine, default=None,
                        help="cosine of two clips' embeddings from which they may be near copies (default: the "
                             "measured threshold)")
    parser.add_argument("--duration-seconds", type=non_negative_float, default=None,
                        help="near copies differ in duration by at most this many seconds ...")
    parser.add_argument("--duration-share", type=fraction, default=None,
                        help="... or by at most this share of the longer one")
    parser.add_argument("--neighbours", type=positive_int, default=None,
                        help="nearest clips of each clip examined for near copies (default 10)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--exact-only", action="store_true", help="only the same audio (decodes every file once)")
    which.add_argument("--near-only", action="store_true", help="only near copies (reads no audio file)")
    parser.add_argument("--cache", default=None, metavar="FILE",
                        help="where the files' audio prints are kept between runs (default: .INDEX.audio-prints.json "
                             "beside a local index)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    # these load torch: not paid by every command's parser
    from mlatr.search import duplicates
    from mlatr.search.index import Index

    index = Index.load(args.index)
    options = {"near_cosine": args.near_cosine, "duration_seconds": args.duration_seconds,
               "duration_share": args.duration_share, "neighbours": args.neighbours}
    found = duplicates.find_duplicates(
        index, exact=not args.near_only, near=not args.exact_only, progress=not args.no_progress,
        cache=args.cache or duplicates.default_cache(index.path), **{k: v for k, v in options.items() if v is not None})
    if args.json:
        print(json.dumps(found.to_dict(), ensure_ascii=False, indent=1))
        return 0
    t = found.thresholds
    print(f"{args.index}: {found.compared} clips; {len(found.exact)} group(s) of the same audio, {len(found.near)} "
          f"group(s) of near copies (cosine >= {t['near_cosine']}, durations within {t['duration_seconds']} s or "
          f"{t['duration_share']:.0%})")
    for kind, groups in (("same audio", found.exact), ("near copies", found.near)):
        for n, g in enumerate(groups, 1):
            print(f"{kind} {n}:")
            for cid, path, sec in zip(g.ids, g.paths, g.seconds, strict=True):
                print(f"  {shown(cid)}  ({'?' if sec is None else f'{sec:.2f} s'})  {shown(path)}")
            if g.pairs:
                print("  cosines: " + ", ".join(f"{g.ids[i].rsplit('/', 1)[-1]}~{g.ids[j].rsplit('/', 1)[-1]} "
                                                f"{c:.3f}" for i, j, c in g.pairs[:6]))
    if found.skipped:
        print(f"{len(found.skipped)} clip(s) not compared by their audio (file gone or unreadable): "
              + ", ".join(shown(c) for c in list(found.skipped)[:5]))
    return 0
