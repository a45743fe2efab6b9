import os
from pathlib import Path

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._notices import report_metadata
from mlatr.commands._outputs import Output
from mlatr.commands._paths import refuse_output_over_input
from mlatr.commands._skipping import add_skip_options, finish_skips, report_path
from mlatr.data.importers import FORMATS, IMPORTERS, merge_translations
from mlatr.data.manifest import Manifest, Skip, split_problem
from mlatr.errors import MlatrError
from mlatr.io_utils import remove_orphan_temps
from mlatr.languages import normalize

HELP = """Make a manifest from a common dataset format, or merge translations into one.

Formats:
  audiocaps-csv     AudioCaps CSV (audiocap_id,youtube_id,start_time,caption); rows of one clip (same
                    youtube_id and start_time) become one clip; audio name pattern default Y{youtube_id}.wav
  clotho-csv        Clotho captions CSV (file_name,caption_1..caption_5)
  mlclap-json       ML-CLAP JSON ({"data": [{"id", "wav"|"audio", "caption_k", "source_lang_k", ...}]});
                    several files (e.g. one per language) merge by clip id, aligned by caption index
  translations      merge another language into a manifest (--base, default the -o file) from CSV
                    (id,index,caption[,lang] or id,caption_1..N[,lang]) or JSONL; index j is the English
                    caption's 0-based position
  esc50-csv         ESC-50 meta CSV (filename,fold,target,category,...) -> labels; split from the fold
  urbansound8k-csv  UrbanSound8K CSV (slice_file_name,fsID,start,end,salience,fold,classID,class) -> labels;
                    audio fold{fold}/{slice_file_name}
  folder            a folder of sound files (wav/flac/ogg/mp3/aiff); captions, in this order, from NAME.txt
                    sidecars (one per line; NAME.fra.txt for French...), the files' tags (BWF bext / iXML,
                    RIFF INFO, ID3, Vorbis comments), UCS names (DOORWood_Creaky door_ACME_LIB.wav) and the
                    path's words (CarPassing.wav -> "car passing", blackcat.wav -> "black cat", with the
                    folders' words), each caption's source recorded; labels from the parent folder;
                    durations, sample rate, bit depth, channels, loudness, true peak, silence ("facets")
                    read from the files; prints how many clips got which metadata
  webdataset        tar shards (DIR/shard-{000000..000009}.tar, .tar.gz, any fsspec URL) in mlatr's or
                    ML-CLAP's layout (KEY.flac + KEY.json {"captions": {"eng_Latn": [...], ...}}) or
                    LAION-CLAP's ({"text": [...]}); the audio members are written as files under --audio-dir
                    (default: beside the manifest, MANIFEST_STEM-audio/), each named by its key alone
                    (characters other than letters, digits, _ - . become _; never a folder part);
                    members over --max-member-mb and shards over --max-shard-mb are refused

A relative --audio-dir is taken from the current folder and written relative to the output manifest's
folder. Every malformed source row stops the import with its file and line; --skip-bad skips and counts.
--format folder skips by default: an unreadable, truncated or non-audio file (a FIFO, a name that is not
UTF-8, a bad sidecar) is skipped, counted and listed with its reason in MANIFEST.skipped.jsonl beside the
manifest (--skip-report FILE elsewhere), exit status 3 ("done, with skips"; 0 with --skip-bad); --strict
stops at the first.

Examples:
  mlatr data import --format audiocaps-csv test.csv -o data/audiocaps/test.jsonl --split test \\
      --audio-dir data/audiocaps/audio
  mlatr data import --format translations test_fra.csv --lang fra -o data/audiocaps/test.jsonl
  mlatr data import --format folder /usr/share/scratch/Media/Sounds -o data/scratch.jsonl
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("output", "manifest", folder=False),)


def add_arguments(parser) -> None:
    parser.add_argument("--format", "-f", required=True, choices=FORMATS, help="source format (see above)")
    parser.add_argument("sources", nargs="+", metavar="SRC", help="source file(s) or folder(s)")
    parser.add_argument("-o", "--output", required=True, metavar="MANIFEST", help="manifest to write (JSONL)")
    parser.add_argument("--split", default=None, help="split of every imported clip (e.g. train, val, test)")
    parser.add_argument("--audio-dir", default=None, metavar="D", help="folder the audio files are in")
    parser.add_argument("--audio-pattern", default=None, metavar="PATTERN",
                        help="audio file name pattern over the source's fields, e.g. 'Y{youtube_id}.wav', "
                             "'{youtube_id}_{start_time}.flac' (mlclap-json: {name}, {stem}, {id})")
    add_skip_options(parser, "row or file")
    parser.add_argument("--lang", default=None,
                        help="translations: language of rows without a lang column; mlclap-json: language of "
                             "every caption, overriding source_lang_k")
    parser.add_argument("--base", default=None, metavar="MANIFEST",
                        help="translations: manifest to merge into (default: the -o manifest itself)")
    parser.add_argument("--overwrite", action="store_true",
                        help="translations: replace existing captions instead of reporting a conflict")
    parser.add_argument("--test-fold", type=positive_int, default=None, metavar="N",
                        help="esc50/urbansound8k: fold N is 'test', the others 'train' "
                             "(default split: foldN)")
    parser.add_argument("--val-fold", type=positive_int, default=None, metavar="N",
                        help="esc50/urbansound8k: fold N is 'val'")
    parser.add_argument("--no-folder-labels", action="store_true",
                        help="folder: do not put the parent folder's name into labels")
    parser.add_argument("--no-folder-words", action="store_true",
                        help="folder: the path's caption without the folders' words and with joined words left "
                             "as they are (what data recaption makes of a library it knows; labels are kept)")
    parser.add_argument("--no-tag-captions", action="store_true",
                        help="folder: no captions from the files' tags (their keywords and facets are read)")
    parser.add_argument("--no-loudness", action="store_true",
                        help="folder: skip measuring loudness, true peak and silence (in the decode every file gets)")
    parser.add_argument("--max-member-mb", type=positive_float, default=None, metavar="MB",
                        help="webdataset: refuse an audio member larger than this (default 512)")
    parser.add_argument("--max-shard-mb", type=positive_float, default=None, metavar="MB",
                        help="webdataset: refuse a shard whose members add up to more than this, decompressed "
                             "(default 16384)")


def _check_options(args) -> None:
    fmt = args.format
    only = {
        "base": ("translations",), "overwrite": ("translations",),
        "lang": ("translations", "mlclap-json"),
        "test_fold": ("esc50-csv", "urbansound8k-csv"), "val_fold": ("esc50-csv", "urbansound8k-csv"),
        "no_folder_labels": ("folder",), "no_loudness": ("folder",), "no_folder_words": ("folder",),
        "no_tag_captions": ("folder",),
        "max_member_mb": ("webdataset",), "max_shard_mb": ("webdataset",),
        "audio_dir": ("audiocaps-csv", "clotho-csv", "mlclap-json", "esc50-csv", "urbansound8k-csv", "webdataset"),
        "audio_pattern": ("audiocaps-csv", "clotho-csv", "mlclap-json", "esc50-csv", "urbansound8k-csv"),
        "split": ("audiocaps-csv", "clotho-csv", "mlclap-json", "esc50-csv", "urbansound8k-csv", "folder",
                  "webdataset"),
    }
    for opt, formats in only.items():
        value = getattr(args, opt)
        if value not in (None, False) and fmt not in formats:
            raise MlatrError(f"--{opt.replace('_', '-')} does not apply to --format {fmt} "
                             f"(only to {', '.join(formats)})")
    if args.lang is not None:
        args.lang = normalize(args.lang, "--lang")
    if args.split is not None and (problem := split_problem(args.split)):
        raise MlatrError(f"--split: {problem}")


def _audio_dir_for(audio_dir: str | None, output) -> str | None:
    """A relative --audio-dir is relative to the current folder; the manifest wants it relative to itself."""

    if audio_dir is None or os.path.isabs(audio_dir):
        return audio_dir
    out_dir = Path(os.path.abspath(output)).parent
    return Path(os.path.relpath(os.path.abspath(audio_dir), out_dir)).as_posix()


def run(args) -> int:
    _check_options(args)
    refuse_output_over_input([("-o", args.output)], [("source", s) for s in args.sources])
    out = Path(args.output)
    report = report_path(args, out)
    # a folder's files as found on a disk: bad ones skipped by default (mlatr.commands._skipping)
    skipping = args.skip_bad or (args.format == "folder" and not args.strict)
    remove_orphan_temps(out.parent, [out.name])  # what a killed import left beside the manifest
    if args.format == "translations":
        base_path = Path(args.base or args.output)
        if not base_path.is_file():
            raise MlatrError(f"translations merge into an existing manifest: {base_path} does not exist "
                             f"(give it with --base or -o)")
        base = Manifest.load(base_path)
        manifest = merge_translations(base, args.sources, lang=args.lang, overwrite=args.overwrite,
                                      skip_bad=skipping)
        manifest.rebase(out.resolve().parent)
    elif args.format == "webdataset":  # the shards' audio becomes files under --audio-dir
        # loads torch: not paid by every command's parser
        from mlatr.data.webdataset_shards import ShardLimits, import_webdataset

        manifest = import_webdataset(args.sources, out, audio_dir=args.audio_dir, split=args.split,
                                     skip_bad=skipping,
                                     limits=ShardLimits.from_mb(args.max_member_mb, args.max_shard_mb))
    else:
        func, _ = IMPORTERS[args.format]
        opts: dict = {"skip_bad": skipping, "split": args.split}
        if args.format == "folder":
            opts.update(relative_to=out.resolve().parent, labels_from_folder=not args.no_folder_labels,
                        progress=True, loudness=not args.no_loudness, folder_words=not args.no_folder_words,
                        tag_captions=not args.no_tag_captions)
        else:
            opts.update(audio_dir=_audio_dir_for(args.audio_dir, out), audio_pattern=args.audio_pattern)
        if args.format == "mlclap-json" and args.lang:
            opts["force_lang"] = args.lang
        if args.format in ("esc50-csv", "urbansound8k-csv"):
            opts.update(test_fold=args.test_fold, val_fold=args.val_fold)
        manifest = func(args.sources, **opts)
    problems = manifest.problems
    if not manifest.clips:
        raise MlatrError(f"nothing to write: no clip was imported from {', '.join(args.sources)}"
                         + (f" ({len(problems)} bad rows skipped)" if problems else ""))
    manifest.save(out)
    n_captions = sum(c.caption_count(lang) for c in manifest.clips for lang in c.captions)
    langs = ", ".join(manifest.languages()) or "no captions"
    print(f"wrote {len(manifest)} clips, {n_captions} captions ({langs}) to {out}")
    if args.format == "folder":
        report_metadata(manifest.clips)
    if problems:
        print(f"skipped {len(problems)} bad row(s)")
    return finish_skips(args, [Skip.of_problem(p) for p in problems], report, "bad row(s)")
