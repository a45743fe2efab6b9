import time
from functools import partial

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import (
    add_encoding_options,
    add_model_option,
    clips_from_args,
    load_model_from_args,
    runtime_from_args,
    workers_from_args,
)
from mlatr.commands._notices import report_metadata, some_ids
from mlatr.commands._paths import model_inputs, refuse_output_over_input
from mlatr.commands._skipping import add_skip_options, finish_skips, report_path, skip_bad
from mlatr.errors import MlatrError
from mlatr.languages import parse_language_list
from mlatr.output_paths import check_output_path
from mlatr.search.ann import EXACT_BELOW, KINDS, AnnBuild
from mlatr.search.shards import DTYPES
from mlatr.search.storage_choice import open_storage

HELP = """Build (or extend with --add) a search index of a sound library with a model.

INPUT is the library, as embed and classify take it: a folder of sounds (captions from sidecar files or the
file names), a manifest (.jsonl; --split), sound files, webdataset shards (a .tar, a brace range, or a folder
of shards), or several of these; --manifest M and --webdataset S say the same explicitly. A clip's id is its
path under the library's root without extension, or its manifest / shard id.

Encodes every clip's audio (and every caption, for sound-to-caption search) with the model and writes the
index: unit-norm embeddings, clip ids, absolute audio paths, captions and where each came from, each
audio file's size and mtime and its facets, and the checkpoint's path and SHA-256. A folder's captions come
from sidecar files, the files' tags (BWF bext / iXML, ID3, Vorbis, MP4), UCS names and the paths' words
(folders included), as `mlatr data import --format folder` makes them; its facets (duration, sample rate,
bit depth, channels, format, loudness, true peak, silence, folder, UCS category, keywords) from the header
and, for each clip encoded, one decode (--no-loudness: the header only). INDEX is a folder of append-only
shards (memory-mapped when searched; --add writes one new shard and a small manifest), or one .npz
file (rewritten whole) when its name ends in .npz. A folder shard of --ann-exact-below clips or more
gets an approximate-search structure (HNSW, IVF-PQ above 5M clips) whose recall@10 against exact
search is measured now and recorded (mlatr index info shows it).

A clip longer than --segments-above seconds (default: the model's window) is also indexed as overlapping
segments of --segment-seconds every --segment-hop seconds over the whole file, each with its start and end:
a search scores such a clip by its best segment where that beats its whole-file vector, and says where it
matched (--no-segments: none).

With --add and an existing INDEX only clips whose id is not in it yet are encoded; a clip whose audio
changed since it was indexed is encoded again, an indexed clip whose file is gone (listed in the
source or not) is deleted, and both are listed;
an index built with another checkpoint is refused. Two builds onto one INDEX at once are serialised
(the second waits for the first's write, saying so) and keep the clips of both. A clip longer than
--window-seconds is encoded as windows (memory stays bounded with a long --max-seconds).

Bad files: from folders and sound files, a file that is unreadable, truncated, empty or not audio at all (a
FIFO, a name that is not UTF-8) is skipped, counted on stderr and listed with its reason in INDEX.skipped.jsonl
beside the index (--skip-report FILE elsewhere; a milvus:PATH.db target: beside PATH.db); the exit status is
then 3 ("done, with skips"; 0 with --skip-bad, which says skips are expected). --strict stops at the first bad
file instead, writing nothing (exit 2). A manifest's bad line or clip and a bad shard sample stop the build
unless --skip-bad: a person or a program wrote them, and they are a mistake to fix.

The audio is read and encoded by --workers processes (default: one per core this process may use), with a
progress bar of clips (rate, time left); the results equal one process's. A killed build started again with
the same command encodes only the clips it had not done (their vectors are kept as they come, in the cache
folder: $MLATR_CACHE_DIR, else ~/.cache/mlatr; removed once the index is written).

Under torchrun (torchrun --nproc_per_node=N -m mlatr index build ... -o FOLDER) each process encodes
its contiguous part of the new clips and writes its own shard; the first process then adds the shards
to the manifest. The result equals a one-process build. A killed run started again with the same
command keeps the shards already written and encodes only the missing parts.

Examples:
  mlatr index build ~/Sounds --model runs/demo-real/model.pt -o my-sounds.idx
  mlatr index build data/real-sounds/manifest.jsonl -o sounds.idx         # the default model ($MLATR_MODEL)
  mlatr index build more-sounds/ -o my-sounds.idx --add
  mlatr index build big.jsonl --model model.pt -o milvus://db.example:19530/sounds
  mlatr index build 'shards/shard-{000000..000009}.tar' --model model.pt -o sounds.idx
  mlatr index build big.jsonl --model model.pt -o big.idx --dtype float16 --ann hnsw --ann-param efSearch=96
"""


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--to": "--output"}


def add_arguments(parser):
    parser.add_argument("items", nargs="*", metavar="INPUT",
                        help="the library: a folder of sounds, a manifest, sound files or webdataset shards")
    add_model_option(parser)
    clips = parser.add_mutually_exclusive_group()
    clips.add_argument("--manifest", help="JSONL manifest of the clips to index")
    clips.add_argument("--webdataset", metavar="SHARDS",
                       help="webdataset shards instead of a manifest: DIR/shard-{000000..000009}.tar (any fsspec "
                            "URL); each clip's path in the index is its shard member's address")
    parser.add_argument("-o", "--output", required=True, metavar="INDEX",
                        help="index to write: a folder (any name), one file when the name ends in .npz, or a "
                             "Milvus collection: milvus:PATH.db (milvus-lite) or milvus://HOST:PORT/COLLECTION")
    parser.add_argument("--add", action="store_true", help="keep INDEX's entries and encode only new clips")
    parser.add_argument("--split", default="all", help="index only this split (default: all clips)")
    parser.add_argument("--caption-langs", default=None,
                        help="comma-separated caption languages to index (default: the manifest's)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre crop (default: the checkpoint's data.eval_max_seconds, else 10)")
    parser.add_argument("--window-seconds", type=positive_float, default=None,
                        help="a clip longer than this is encoded as windows whose embeddings are averaged, "
                             "--batch-size windows at a time (default: the checkpoint's data.eval_max_seconds)")
    parser.add_argument("--segment-seconds", type=positive_float, default=None, metavar="SECONDS",
                        help="length of the segments of a long clip (default: the model's window, at most "
                             "5 s; never longer than --window-seconds)")
    parser.add_argument("--segment-hop", type=positive_float, default=None, metavar="SECONDS",
                        help="a segment starts every this many seconds (default: half the segment length)")
    parser.add_argument("--segments-above", type=positive_float, default=None, metavar="SECONDS",
                        help="clips longer than this are indexed as segments too (default: --window-seconds)")
    parser.add_argument("--no-segments", action="store_true", help="index no clip as segments")
    add_skip_options(parser, "file or clip")
    parser.add_argument("--no-loudness", action="store_true",
                        help="a folder's clips: skip measuring loudness, true peak and silence (one decode of each "
                             "new clip before it is encoded)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="stored vectors of a folder index (float16: half the bytes; default float32)")
    parser.add_argument("--ann", choices=KINDS, default="auto",
                        help="approximate search of each new shard: auto (exact below --ann-exact-below clips, "
                             "HNSW up to 5M, IVF-PQ above), exact, hnsw, ivfpq (needs faiss-cpu)")
    parser.add_argument("--ann-exact-below", type=positive_int, default=EXACT_BELOW,
                        help=f"with --ann auto, shards of fewer clips are searched exactly (default {EXACT_BELOW})")
    parser.add_argument("--ann-param", action="append", default=[], metavar="KEY=INT",
                        help="a parameter of the structure (hnsw: M, efConstruction, efSearch, rerank; ivfpq: "
                             "nlist, m, pq_bits, nprobe, rerank); repeatable")
    add_encoding_options(parser)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args) -> int:
    from mlatr.inference.process_group import environment_world_size, setup, shutdown  # torch: start-up time

    storage = open_storage(args.output)
    if storage.path is not None:
        check_output_path(args.output, "-o", folder=None)
    if storage.single_file:  # a folder is checked by the build (it refuses a folder of other files)
        refuse_output_over_input([("-o", args.output)], model_inputs(args))
    beside = storage.local_file
    skipping, report = skip_bad(args, args.items), report_path(args, None if beside is None else str(beside))

    ctx = None
    if environment_world_size() > 1:  # torchrun: each process encodes its part of the new clips
        ctx, device = setup(args.device)
        args.device = str(device)
    try:
        return _build(args, ctx, skipping, report)
    finally:
        shutdown()


def _build(args, ctx, skipping: bool, skip_report) -> int:
    """Build the index; ``skipping``: skip bad inputs, listed in ``skip_report`` (see _skipping)."""
    from mlatr.data.file_metadata import measure_clips  # scipy.signal, as above
    from mlatr.inference.worker_pool import ordered_map  # loads torch, as above
    from mlatr.search.build import plan_index_build, write_build  # loads torch: not paid by every command's parser
    from mlatr.search.library_encoding import build_settings  # as above
    from mlatr.search.rank_build import build_by_rank  # loads torch.distributed, as above
    from mlatr.search.segments import segmenting  # as above

    model = load_model_from_args(args)
    library = library_from_args(args, skipping)
    langs = parse_language_list(args.caption_langs, "--caption-langs") if args.caption_langs else None
    params = parse_ann_params(args.ann_param)
    runtime = runtime_from_args(args, model, library)
    t0 = time.perf_counter()
    window = build_settings(model, args.max_seconds, args.window_seconds, None)[2]
    cut = segmenting(window, args.segment_seconds, args.segment_hop, args.segments_above, not args.no_segments)
    job = plan_index_build(model, library.manifest, args.output, add=args.add, caption_languages=langs, segments=cut,
                           batch_size=args.batch_size, max_seconds=args.max_seconds,
                           window_seconds=args.window_seconds, skip_bad=skipping,
                           progress=not args.no_progress, dtype=args.dtype, shards=library.shards,
                           ann=AnnBuild(args.ann, params, args.ann_exact_below, not args.no_progress),
                           workers=workers_from_args(args))
    if not args.no_loudness:  # the folder's listing read headers only: the clips to encode are measured now
        measure_clips(job.plan.new, job.manifest.root, progress=not args.no_progress,
                      map_files=partial(ordered_map, workers=workers_from_args(args)))
    # under torchrun each process encodes its part of the new clips into a shard of its own
    report = build_by_rank(ctx, job) if ctx is not None and ctx.enabled else write_build(job)
    dt = time.perf_counter() - t0
    if report is None:  # not the first process: it printed nothing
        return 0
    skips = library.skips(report.skipped)
    rate = f" ({report.added / dt:.1f} clips/s, {runtime})" if report.added else ""
    print(f"wrote {args.output}: {len(report.index)} clips ({report.added} encoded{rate}, {report.kept} kept), "
          f"{len(report.index.caption_text)} captions, dim {report.index.dim}, "
          f"{report.bytes_written / 2**20:.1f} MiB written"
          + (f"; skipped {len(skips)} bad file(s)" if skips else ""))
    if report.changed:
        print(f"{len(report.changed)} clip(s) changed since they were indexed (size or mtime) and were encoded "
              f"again: {some_ids(report.changed)}")
    if report.deleted:
        print(f"{len(report.deleted)} indexed clip(s) whose audio file is gone were deleted from the index: "
              f"{some_ids(report.deleted)}")
    return finish_skips(args, skips, skip_report)


def library_from_args(args, skipping: bool):
    """The :class:`~mlatr.inference.library.Library` INPUT names (:func:`mlatr.inference.library.open_library`), or
    ``--manifest`` / ``--webdataset`` name; ``skipping``: skip bad files and lines instead of stopping."""
    from mlatr.inference.library import Library, open_library  # loads torch: not paid by every command's parser

    if bool(args.items) == bool(args.manifest or args.webdataset):
        raise MlatrError("give the library to index once: INPUT (a folder of sounds, a manifest, sound files or "
                         "webdataset shards), or --manifest / --webdataset")
    if not args.items:
        # a split the manifest lacks: the error says what to do
        return Library(*clips_from_args(args, skip_bad=skipping, report=False))
    library = open_library(args.items, args.split, skipping, progress=not args.no_progress)
    report_metadata(library.manifest.clips)
    return library


def parse_ann_params(items: list[str]) -> dict[str, int]:
    """``["efSearch=96", ...]`` -> ``{"efSearch": 96}`` (refused unless KEY=INTEGER)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            sep = ""
        if not sep or not key.strip() or out[key.strip()] < 1:
            raise MlatrError(f"--ann-param: expected KEY=POSITIVE_INTEGER, got {item!r}")
    return out
