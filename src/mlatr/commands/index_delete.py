from pathlib import Path

from mlatr.errors import MlatrError

HELP = """Delete clips from an index folder by id: each row is marked deleted (a tombstone in the manifest,
written atomically), searches skip it at once, and `mlatr index compact` drops it from the files.
An id not in the index is an error (nothing is changed). Holds the index's writer lock.

Examples:
  mlatr index delete sounds.idx dog_bark_03 rain_07
  mlatr index delete sounds.idx --ids-file gone.txt
"""


def add_arguments(parser):
    parser.add_argument("index", metavar="INDEX", help="index folder written by mlatr index build")
    parser.add_argument("ids", nargs="*", metavar="ID", help="clip ids to delete")
    parser.add_argument("--ids-file", default=None, help="a text file of clip ids, one a line")


def run(args) -> int:
    from mlatr.search.build import delete_clips  # loads torch: not paid by every command's parser

    ids = list(args.ids)
    if args.ids_file:
        try:
            ids += [line.strip() for line in Path(args.ids_file).read_text(encoding="utf-8").splitlines()
                    if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise MlatrError(f"{args.ids_file}: cannot read the ids ({exc})") from exc
    if not ids:
        raise MlatrError("give the ids of the clips to delete (ID ... or --ids-file)")
    n = delete_clips(args.index, ids)
    print(f"{args.index}: {n} clip(s) deleted (mlatr index compact drops them from the files)")
    return 0
