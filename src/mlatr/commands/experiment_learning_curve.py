"""Learning curve: sound-only retrieval on unseen libraries vs training clips and trained backbone blocks.

Runs the leave-one-library-out protocol (mlatr experiment unseen-library; every library held out in
turn, the 32 hand-written queries in 8 languages, sound-only ranking) with the near-identity heads for
every point (--train-blocks x --fractions x --seeds): a fraction of each fold's training clips (nested: 25 %
inside 50 % inside 100 %), and how much of aiSFX trains with the heads: 0 = heads only, 1 = its last conv
block, 4 = the whole CNN (over the frozen lower blocks' outputs cached in --cache-dir/prefix-S; batch norm
keeps its pretrained statistics; the blocks learn at --tail-lr). Writes OUT/results.json after every fold
(a rerun with the same settings resumes and adds points) and OUT/learning-curve.png.

--plot LABEL=RESULTS (repeated) draws the points of earlier runs (their OUT/results.json; one label may name
several files) into OUT/learning-curve.png and trains nothing: --group original|added for the 12 original
held-out libraries or the added ones only, --goals R10,R1 for dashed goal lines.

--augment gain,shift,mix adds augmented views of every clip (--augment-views, default 1) that the heads train on
beside the clips: the clips' spectrogram blocks (cached in --cache-dir/prefix-0) shifted in time, mixed with a
clip of the same library and split (captions joined), lowered in level, then the frozen CNN, once per clip
(mlatr.lab.augmented_views; cached in --cache-dir/augment-*.npz). Heads only (--train-blocks 0).

Every fold record holds the queries and the single-target task (each held-out clip's first English caption
against all held-out clips). A point that trains blocks trains them with one head pair (--tail-epochs,
--tail-lr, --tail-patience: stop after N epochs without a better score on the training libraries' validation
clips); with --ensemble K the K head pairs then train, heads only, on the trained blocks' features (the pair
that trained with the blocks is kept as the fold's "joint" record). --in-library adds the in-library split
(the hash test split mlatr demo-real reports), summarized apart; --library-batches fills each batch with the
clips of one library (a clip's negatives from its own library, as on a held-out one).

--paired BASE OPTION compares two runs' results.json fold by fold and seed by seed and trains nothing (BASE and
OPTION may end in #blocks=N, OPTION in #record=joint): OUT/paired-GROUP.md and .json, --group to choose.

--export-bundle DIR writes what the curve needs (the manifest, the text features, float16 spectrogram blocks,
aiSFX's weights) to DIR and stops; --bundle DIR runs from such a folder, with neither the audio nor the text
encoder (e.g. on a machine with a GPU: --device cuda).

Examples:
  mlatr experiment learning-curve --train-blocks 0 --fractions 0.25,0.5,1 --seeds 0,1,2
  mlatr experiment learning-curve --train-blocks 0 --fractions 1 --epochs 10 --batch-size 256 --augment gain,shift,mix
  mlatr experiment learning-curve --export-bundle runs/curve-bundle
  mlatr experiment learning-curve --bundle runs/curve-bundle --train-blocks 1,4 --device cuda
  mlatr experiment learning-curve --train-blocks 1 --tail-epochs 6 --tail-patience 2 --ensemble 3 --in-library
  mlatr experiment learning-curve -o runs/cmp --paired runs/heads/results.json runs/block/results.json#record=joint
  mlatr experiment learning-curve -o runs/both --plot v1=runs/v1/results.json --plot v2=runs/v2/results.json \
      --group original --goals 65,28
"""

import json
from pathlib import Path

from mlatr.commands._arg_types import fraction, number_in, positive_float, positive_int, random_seed
from mlatr.commands._augment_args import add_augment_arguments, augment_kinds
from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.lab.experiments.head_options import HEAD_OPTIONS, TEXT_ENCODERS, default_fold_workers

HELP = __doc__

#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "experiment", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def _list(kind, text: str, flag: str) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except Exception as exc:  # argparse types raise ArgumentTypeError, int() ValueError
        raise MlatrError(f"{flag}: {exc}") from None
    if not values:
        raise MlatrError(f"{flag}: no value given")
    return values


def add_arguments(parser) -> None:
    parser.add_argument("--manifest", default="data/real-sounds/manifest.jsonl",
                        help="manifest of the real sounds (default: data/real-sounds/manifest.jsonl)")
    parser.add_argument("-o", "--output", dest="out", default="runs/learning-curve",
                        help="output folder (default: runs/learning-curve)")
    parser.add_argument("--cache-dir", default=None, help="feature caches (default: OUT/cache)")
    parser.add_argument("--audio-runtime", default="torch", metavar="RUNTIME/PRECISION",
                        help="what computes aiSFX's pooled features: torch (default), or an optimised runtime and "
                             "precision such as openvino/int8 (mlatr.inference.runtime; its own feature cache): "
                             "what a precision costs in retrieval")
    parser.add_argument("--text", default="use-multilingual", choices=TEXT_ENCODERS, help="frozen text encoder")
    parser.add_argument("--train-blocks", default="0,1,4",
                        help="comma-separated numbers of aiSFX's last conv blocks that train (0-4; default 0,1,4)")
    parser.add_argument("--fractions", default="0.25,0.5,1", help="fractions of each fold's training clips")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    parser.add_argument("--libraries", default=None, help="comma-separated libraries to hold out (default: all)")
    parser.add_argument("--epochs", type=positive_int, default=60, help="epochs of a heads-only run")
    parser.add_argument("--tail-epochs", type=positive_int, default=None,
                        help="epochs of a run that trains blocks (default: --epochs)")
    parser.add_argument("--tail-lr", type=positive_float, default=1e-4, help="learning rate of the trained blocks")
    parser.add_argument("--tail-patience", type=positive_int, default=None,
                        help="stop a run that trains blocks after N epochs without a better validation score")
    parser.add_argument("--in-library", action="store_true",
                        help="also the in-library split (the hash test split demo-real reports), reported apart")
    parser.add_argument("--library-batches", action="store_true",
                        help="batches of one library each: a clip's negatives from its own library")
    parser.add_argument("--heads", default="near-identity", help="head option (default near-identity; "
                        "near-identity-kcl needs a translated manifest)"
                        ).completions = [k for k, o in HEAD_OPTIONS.items() if o.trained]  # run_learning_curve checks
    parser.add_argument("--ensemble", type=positive_int, default=1,
                        help="heads trained per fold and averaged (heads-only points; default 1)")
    parser.add_argument("--workers", type=number_in(int, 1, 64), default=default_fold_workers(),
                        help="processes that train folds side by side, one thread each (default: the cores this "
                             f"process may use, at most 8: {default_fold_workers()} here; 1 with a GPU --device)")
    parser.add_argument("--added-groups", type=positive_int, default=None,
                        help="hold the libraries added since the first 12 out this many folds at a time")
    parser.add_argument("--batch-size", type=positive_int, default=64, help="clips per step (default 64)")
    parser.add_argument("--hard-negatives", type=positive_int, default=None,
                        help="batches of whole clusters of similar captions (hard negatives), about N clips a cluster")
    parser.add_argument("--val-libraries", type=fraction, default=None,
                        help="choose the epoch on this fraction of the training libraries held out whole "
                             "(default: on their hash-val clips)")
    add_augment_arguments(parser)
    parser.add_argument("--device", default="cpu", help="torch device of the runs (default cpu)")
    parser.add_argument("--bundle", default=None, help="run from a folder written by --export-bundle")
    parser.add_argument("--export-bundle", default=None, help="write the curve's inputs to this folder and stop")
    parser.add_argument("--compact", action="store_true",
                        help="with --export-bundle: spectrogram frames and text features in 8 bits, about a fifth of "
                             "the size (fits a device machine's 64 MiB working tree with the 8,267 clips)")
    parser.add_argument("--plot", action="append", default=None, metavar="LABEL=RESULTS",
                        help="draw earlier runs' results.json into OUT/learning-curve.png, train nothing (repeat)")
    parser.add_argument("--group", choices=("original", "added", "in-library", "all"), default=None,
                        help="with --plot: the 12 original held-out libraries or the added ones only (original, "
                             "added); with --paired: the folds compared (default: original, added, in-library apart)")
    parser.add_argument("--goals", default=None, help="with --plot: goal R@10,R@1 drawn as dashed lines")
    parser.add_argument("--paired", nargs=2, metavar=("BASE", "OPTION"), default=None,
                        help="compare two runs' results.json fold by fold and seed by seed, train nothing; a path "
                             "may end in #blocks=N (the points of N trained blocks) and #record=joint (the head "
                             "pair that trained with the blocks); writes OUT/paired-GROUP.md and .json")
    parser.add_argument("--no-progress", action="store_true")


def _plot(args) -> int:
    from mlatr.lab.experiments.learning_curve import complete_points, plot_learning_curve

    if args.group not in (None, "original", "added"):
        raise MlatrError(f"--group {args.group}: --plot draws the original or the added libraries")
    specs = []
    for spec in args.plot:
        label, sep, path = spec.partition("=")
        if not sep or not path:
            raise MlatrError(f"--plot: expected LABEL=RESULTS, got {spec!r}")
        specs.append((label, path))
    goals = dict(zip(("R10", "R1"), _list(float, args.goals, "--goals"), strict=False)) if args.goals else None
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = plot_learning_curve(complete_points(specs, args.group), Path(args.out) / "learning-curve.png",
                               args.group, goals)
    print(f"figure: {path}")
    return 0


def _paired_spec(spec: str) -> tuple[str, int | None, str | None]:
    path, *marks = spec.split("#")
    blocks, record = None, None
    for mark in marks:
        key, _, value = mark.partition("=")
        if key == "blocks" and value.isdigit():
            blocks = int(value)
        elif key == "record" and value:
            record = value
        else:
            raise MlatrError(f"--paired: {spec!r}: expected PATH[#blocks=N][#record=NAME], not #{mark}")
    return path, blocks, record


def _paired(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.lab.experiments.learning_curve import paired_differences, paired_report

    (base, base_blocks, base_record), (option, option_blocks, record) = map(_paired_spec, args.paired)
    if base_record:
        raise MlatrError("--paired: #record= names a sub-record of the option's folds (the second path)")
    runs = []
    for path in (base, option):
        try:
            runs.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise MlatrError(f"--paired: {path}: not a learning-curve results.json ({exc})") from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for group in (args.group,) if args.group else ("original", "added", "in-library"):
        paired = paired_differences(*runs, group, base_blocks, option_blocks, record)
        if not paired["seeds"]:
            continue
        text = paired_report(paired, args.paired[0], args.paired[1])
        atomic_write_json(out / f"paired-{group}.json", paired)
        atomic_write_text(out / f"paired-{group}.md", text)
        print(text)
    return 0


def run(args) -> int:
    # loads torch: not paid by every command's parser
    from mlatr.lab.experiments.learning_curve import FrozenInputs, export_bundle, run_learning_curve

    if args.plot:
        return _plot(args)
    if args.paired:
        return _paired(args)

    blocks = _list(int, args.train_blocks, "--train-blocks")
    if any(not 0 <= b <= 4 for b in blocks):
        raise MlatrError(f"--train-blocks: each must be in 0..4, got {args.train_blocks}")
    fractions = _list(fraction, args.fractions, "--fractions")
    seeds = _list(random_seed, args.seeds, "--seeds")
    libraries = [x.strip() for x in args.libraries.split(",") if x.strip()] if args.libraries else None
    progress = not args.no_progress
    augment = augment_kinds(args)
    if augment and (args.bundle or args.export_bundle or any(blocks)):
        raise MlatrError("--augment: augmented views train the heads only, from a manifest (--train-blocks 0, "
                         "no --bundle / --export-bundle)")
    if args.bundle:
        inputs = FrozenInputs.from_bundle(args.bundle, args.device)
    else:
        if not Path(args.manifest).is_file():
            raise MlatrError(f"{args.manifest} not found: run scripts/get-real-sounds.sh first (or pass --manifest)")
        stages = (0,) if args.export_bundle else sorted({4 - b for b in blocks if 0 < b})
        inputs = FrozenInputs.from_manifest(args.manifest, args.cache_dir or Path(args.out) / "cache", args.text,
                                            stages, progress=progress, dtype="float16" if args.export_bundle
                                            else "float32", augment=augment, augment_views=args.augment_views,
                                            audio_runtime=args.audio_runtime)
    if args.export_bundle:
        print(f"bundle: {export_bundle(inputs, args.export_bundle, args.compact)}")
        return 0
    results = run_learning_curve(inputs, args.out, blocks, fractions, seeds, args.epochs, args.tail_epochs,
                                 args.tail_lr, libraries, args.device, progress, args.heads, args.ensemble,
                                 args.added_groups, args.batch_size, args.hard_negatives, args.val_libraries,
                                 args.workers if args.device == "cpu" else 1, in_library=args.in_library,
                                 tail_patience=args.tail_patience, library_batches=args.library_batches)
    for key, point in results["points"].items():
        s = point.get("summary")
        if s:
            print(f"{key}: t2a R@1 {s['t2a']['avg']['R1']:.1f} R@10 {s['t2a']['avg']['R10']:.1f} "
                  f"MRV {s['mrv']:.1f} ({s['libraries']} folds, {s['train_clips']:.0f} training clips)")
    print(f"figure: {Path(args.out) / 'learning-curve.png'}")
    return 0
