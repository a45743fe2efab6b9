from pathlib import Path

from mlatr.commands._arg_types import positive_float, positive_int
from mlatr.commands._model_io import add_model_option, encode_from_args, load_model_from_args, model_path_from_args
from mlatr.commands._notices import report_skipped, warn
from mlatr.commands._outputs import Output
from mlatr.commands._paths import model_inputs, refuse_output_over_input
from mlatr.commands.eval_embeddings import add_tsne_arguments
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.evaluation import format_report, plot_rank_spread, plot_recall_by_language, write_report
from mlatr.io_utils import atomic_write_json
from mlatr.languages import normalize, parse_language_list
from mlatr.model_registry import resolve_model

HELP = """Evaluate a trained model on a manifest split (recall, mAP@10, consistency, zero-shot).

The Python API gives the same numbers as a dict: mlatr.evaluate(mlatr.load(MODEL), MANIFEST, split=...).

Encodes the split with the model, then reports exactly what `mlatr eval-embeddings` reports
(ATRI Tables 1-3 layout; same JSON shape). A model trained with a fine-grained matching head
(objective.matching, e.g. LGMM) ranks with that head on frames and tokens: text-to-audio and
audio-to-text scores separately (LGMM is asymmetric), block by block under --head-memory-mb; the JSON
then also names the head ("matching_head"). Zero-shot ranks the class prompts with the same head
(audio-to-text direction; pooled cosine for models without one).
When the clips carry exactly one label each (ESC-50, UrbanSound8K imports), also zero-shot
classification with the prompt "This is a sound of {label}." (SupCLAP §4.2.2); clips with several
labels are left out of it and counted.

--plot also draws ATRI Appendix C's t-SNE view (tsne.png): --tsne-clips random clips (default 50), their
audio and one caption group in every language, colour = clip, marker = language; --compare MODEL2 encodes
the same clips and captions with a second model and draws the two side by side (ATRI Figures 3-4:
ML-CLAP vs KCL).

Examples:
  mlatr eval --model runs/kcl/best.pt --manifest data/synth/manifest.jsonl --split test --json m.json
  mlatr eval --model runs/kcl/best.pt --manifest data/synth/manifest.jsonl --plot plots/ \
      --compare runs/mlclap/best.pt
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("json", "metrics file", folder=False), Output("report", "report", folder=True),
           Output("plot", "plots", folder=True))


def add_arguments(parser):
    add_model_option(parser)
    clips = parser.add_mutually_exclusive_group(required=True)
    clips.add_argument("--manifest", help="JSONL manifest")
    clips.add_argument("--webdataset", metavar="SHARDS",
                       help="webdataset shards instead of a manifest: DIR/shard-{000000..000009}.tar (any fsspec URL)")
    parser.add_argument("--split", default="test", help="split to evaluate (default: test); 'all' for every clip")
    parser.add_argument("--languages", help="comma-separated languages (default: the model's training languages)")
    parser.add_argument("--pivot", default="eng", help="pivot language of the consistency metrics")
    parser.add_argument("--json", help="write the metrics as JSON here")
    parser.add_argument("--report", help="write Markdown/CSV tables to this folder")
    parser.add_argument("--plot", help="write plots to this folder")
    parser.add_argument("--zero-shot-languages", default="eng",
                        help="prompt languages for zero-shot (labels must be in that language; default eng)")
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--max-seconds", type=positive_float, default=None,
                        help="centre crop (default: the training config's)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--skip-bad", action="store_true", help="skip unreadable audio and count it")
    parser.add_argument("--head-memory-mb", type=positive_float, default=1024.0,
                        help="working-memory budget of a fine-grained matching head's scoring (default 1024)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--compare", metavar="MODEL2",
                        help="with --plot: a second model (as --model) drawn beside this one in the t-SNE view")
    add_tsne_arguments(parser)


def run(args) -> int:
    from mlatr.inference.model_evaluation import evaluate_model  # loads torch: not paid by every command's parser

    if args.compare and not args.plot:
        raise MlatrError("--compare draws a second t-SNE panel: give --plot DIR too")
    refuse_output_over_input([("--json", args.json)], model_inputs(args))
    pivot = normalize(args.pivot, "--pivot")
    zero_shot_languages = parse_language_list(args.zero_shot_languages, "--zero-shot-languages")
    languages = parse_language_list(args.languages, "--languages") if args.languages else None
    loaded = load_model_from_args(args)
    shards = None
    clips = args.manifest
    if args.webdataset:
        from mlatr.data.webdataset_shards import index_shards  # loads torch: not paid by every command's parser

        shards = index_shards(args.webdataset, progress=not args.no_progress)
        clips = shards.manifest
    result = evaluate_model(loaded, clips, args.split, languages=languages, pivot=pivot,
                            zero_shot_languages=zero_shot_languages, batch_size=args.batch_size,
                            max_seconds=args.max_seconds, skip_bad=args.skip_bad, head_memory_mb=args.head_memory_mb,
                            shards=shards, progress=not args.no_progress)
    report_skipped(result.skipped_lines, "malformed manifest line(s)")
    report_skipped(result.encoded.skipped, "clip(s) with unreadable audio")
    metrics = result.metrics
    warn(metrics.get("warnings", []))
    if "matching_head" in metrics:
        print(f"ranked with the model's matching head: {loaded.head!r}\n")
    print(format_report(metrics))
    for lang in zero_shot_languages if "zero_shot" in metrics else []:
        zs, n = metrics["zero_shot"][lang], metrics["zero_shot"]
        print(f"\nzero-shot ({lang}, {n['classes']} classes, {n['clips']} clips): "
              f"top-1 {zs['top1']:.2f}%, top-5 {zs['top5']:.2f}%")
    if args.json:
        atomic_write_json(args.json, metrics)
    if args.report:
        write_report(args.report, metrics)
    if args.plot:
        plot_recall_by_language(metrics, Path(args.plot) / "recall_by_language.png")
        plot_rank_spread(result.evaluation, Path(args.plot) / "rank_spread.png")
        if args.tsne_clips > 0:
            print(f"\nwrote {_plot_tsne(args, result.encoded, result.clips, shards)}")
    return 0


def _panel_name(path: str) -> str:
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _plot_tsne(args, enc, manifest, shards=None):
    """ATRI Appendix C's view of ``enc``; with --compare, the second model's encoding of the same clips
    and caption groups beside it."""
    # loads scikit-learn: not paid by every command's parser
    from mlatr.evaluation.tsne import plot_tsne, select_rows, view_from_arrays
    from mlatr.inference import load_model  # loads torch: not paid by every command's parser

    sel = select_rows(enc.text_audio, enc.text_lang, enc.text_group, len(enc.audio), args.tsne_clips, args.tsne_seed)
    views = [view_from_arrays(_panel_name(str(model_path_from_args(args))), enc.audio, enc.text, enc.text_lang, sel)]
    if args.compare:
        other = load_model(resolve_model(args.compare, "--compare").path, args.device)
        clips = Manifest(clips=[manifest[enc.clip_rows[i]] for i in sel.clips], root=manifest.root,
                         path=manifest.path)
        languages = sorted(set(enc.text_lang.tolist()), key=enc.text_lang.tolist().index)
        enc2 = encode_from_args(args, other, manifest=clips, languages=languages, shards=shards)
        sel2 = select_rows(enc2.text_audio, enc2.text_lang, enc2.text_group, len(enc2.audio), len(sel.clips))
        if [enc.texts[r] for r in sel.text_rows] != [enc2.texts[r] for r in sel2.text_rows]:
            raise MlatrError(f"--compare: {args.compare} did not encode the same clips and captions (unreadable "
                             f"audio skipped by one model only?)")
        views.append(view_from_arrays(_panel_name(args.compare), enc2.audio, enc2.text, enc2.text_lang, sel2))
    return plot_tsne(views, Path(args.plot) / "tsne.png", args.tsne_seed)
