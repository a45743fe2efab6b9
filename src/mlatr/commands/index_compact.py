from pathlib import Path

from mlatr.commands._arg_types import positive_int
from mlatr.commands.index_build import parse_ann_params
from mlatr.errors import MlatrError
from mlatr.output_paths import check_output_path
from mlatr.search.ann import EXACT_BELOW, KINDS, AnnBuild
from mlatr.search.shards import DTYPES
from mlatr.search.storage_choice import open_storage
from mlatr.writer_lock import writer_lock

HELP = """Rewrite an index's live clips into one shard: deleted rows (tombstones) are dropped, the shards
written by --add runs are merged, and the approximate-search structure is built again over the whole
(its recall@10 measured and recorded). With -o the result goes to another folder and INDEX is left as
it is: this converts an old single-file .npz index into a folder (or a folder into a .npz). Holds the
index's writer lock (a concurrent build waits).

Examples:
  mlatr index compact sounds.idx
  mlatr index compact old.idx.npz -o sounds.idx --dtype float16
"""


def add_arguments(parser):
    parser.add_argument("index", metavar="INDEX", help="index folder or .npz")
    parser.add_argument("-o", "--output", default=None, help="write here instead of replacing INDEX")
    parser.add_argument("--dtype", choices=DTYPES, default=None, help="stored vectors (default: INDEX's)")
    parser.add_argument("--ann", choices=KINDS, default="auto", help="approximate search structure (as index build)")
    parser.add_argument("--ann-exact-below", type=positive_int, default=EXACT_BELOW)
    parser.add_argument("--ann-param", action="append", default=[], metavar="KEY=INT")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from mlatr.search.index import Index  # loads torch: not paid by every command's parser

    if args.output:
        check_output_path(args.output, "-o", folder=None)
    out = Path(args.output or args.index)
    build = AnnBuild(args.ann, parse_ann_params(args.ann_param), args.ann_exact_below, not args.no_progress)
    with writer_lock(args.index, "index", wait=True):
        index = Index.load(args.index, backend="numpy")
        deleted = len(index.deleted_rows)
        dtype = args.dtype or index.meta.get("dtype", "float32")
        if out.resolve() == Path(args.index).resolve():
            index.live().save(out, dtype, build)
        else:
            with writer_lock(out, "index", wait=True):
                index.live().save(out, dtype, build)
    size = open_storage(out).size()
    print(f"wrote {out}: {len(index)} clips ({deleted} deleted rows dropped), {size / 2**20:.1f} MiB")
    _record_level(out)
    return 0


def _record_level(path: Path) -> None:
    """Store the compacted index's own "nothing relevant" level (its library may have lost clips); said, not
    raised, when its model cannot be loaded or has no calibration (the level is then fitted at the first query)."""
    from mlatr.search.index import Index  # loads torch: not paid by every command's parser

    try:
        record = Index.load(path).record_abstention()
    except MlatrError as exc:
        print(f"nothing relevant: the level is not stored ({exc}); a search fits it when first asked")
        return
    if record is not None:
        print(f"nothing relevant: this index's level fitted on {record['queries']} nonsense queries and stored")
