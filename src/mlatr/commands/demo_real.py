"""Real-sound demo: frozen aisfx + multilingual text backbones, trained projections, an index.

Needs the real sound libraries (scripts/get-real-sounds.sh, no root), the `real` extra and, for the default
recipe, Apertium (scripts/setup-system.sh). Computes aisfx features of every clip once (cached in OUT/cache),
trains only the projection heads on the train split with the chosen head option (--heads; the default is the
best recipe measured on libraries never trained on, docs/real-sounds.md: a near-identity text head kept close
to the frozen multilingual space by a penalty, trained with KCL over the English captions and their Apertium
translations), and compares
with random (untrained) heads on the held-out test split: each clip's caption, 32 hand-written queries
in 8 languages (a hit = a clip whose caption contains one of the query's keywords) with the consistency
metrics (gap, dis, MRV), zero-shot folder labels in 8 languages; chance levels beside them. Then indexes
the whole library with the first text encoder's model and answers example queries in eight languages.
A head option that trains on captions in several languages (near-identity-kcl, kcl-translations) on a manifest
with English captions only has them translated offline by Apertium into Spanish and Catalan (apertium-eng-spa,
apertium-eng-cat; cached in OUT/cache/translations.jsonl); the index keeps the manifest's own captions.
The trained model is an ensemble: --ensemble head pairs (default 3) trained apart from different seeds, their
unit embeddings averaged on each side (docs/real-sounds.md: better than one pair on unseen libraries).
Writes OUT/report.md, OUT/results.json, OUT/model.pt with its card OUT/model-card.md (data, licences, figures
on unseen libraries) and each head pair's training curve OUT/members/K/log.jsonl (mlatr plot OUT),
the index folder OUT/sounds.idx and OUT/query-recall-by-language.png, and ends by saying where they are and
what to run next.
--augment gain,shift,mix: the heads (and the unseen-library run) train also on an augmented view of every clip,
computed once from its spectrogram blocks (cached in OUT/cache; one more pass of aiSFX's CNN over the corpus);
off by default (docs/real-sounds.md: not clearly better on libraries never trained on).

Examples:
  scripts/get-real-sounds.sh && mlatr demo-real
  mlatr demo-real --text e5-small --heads both-heads -o runs/real
  mlatr search runs/demo-real/sounds.idx "un chien aboie" --lang fra
  mlatr plot runs/demo-real
"""

from pathlib import Path

from mlatr.commands._arg_types import non_negative_int, number_in, positive_float, positive_int, random_seed
from mlatr.commands._augment_args import add_augment_arguments, augment_kinds
from mlatr.commands._grid_args import parse_methods
from mlatr.commands._outputs import Output
from mlatr.errors import MlatrError
from mlatr.lab.experiments.head_options import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_ENSEMBLE,
    DEFAULT_EPOCHS,
    DEFAULT_HEADS,
    DEFAULT_TEXT_ENCODERS,
    HEAD_OPTIONS,
    TEXT_ENCODERS,
    default_fold_workers,
)

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "demo", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser):
    parser.add_argument("--manifest", default="data/real-sounds/manifest.jsonl",
                        help="manifest of the real sounds (default: data/real-sounds/manifest.jsonl)")
    parser.add_argument("-o", "--output", dest="out", default="runs/demo-real",
                        help="output folder (default: runs/demo-real)")
    parser.add_argument("--text", default=",".join(DEFAULT_TEXT_ENCODERS),
                        help="comma-separated frozen text encoders to compare; the first one is indexed "
                             f"(default: {','.join(DEFAULT_TEXT_ENCODERS)})")
    trained = [k for k, o in HEAD_OPTIONS.items() if o.trained]
    parser.add_argument("--heads", default=DEFAULT_HEADS,  # checked by run_real_demo's HeadRecipe
                        help=f"how the heads train: {', '.join(trained)} (default: {DEFAULT_HEADS})"
                        ).completions = trained
    parser.add_argument("--ensemble", type=positive_int, default=DEFAULT_ENSEMBLE,
                        help="head pairs trained apart (seeds SEED*1000+K) whose unit embeddings the model averages, "
                             f"here and in the leave-one-library-out run (default {DEFAULT_ENSEMBLE}; 1: one pair, "
                             "seed SEED)")
    parser.add_argument("--epochs", type=positive_int, default=DEFAULT_EPOCHS,
                        help=f"epochs of the head runs, the best on the validation clips kept "
                             f"(default {DEFAULT_EPOCHS})")
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULT_BATCH_SIZE,
                        help="clips per step, here and in the leave-one-library-out run "
                             f"(default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--embed-dim", type=positive_int, default=256, help="embedding size of the both-heads option")
    parser.add_argument("--seed", type=random_seed, default=0)
    parser.add_argument("--max-seconds", type=positive_float, default=10.0, help="centre crop of long clips")
    parser.add_argument("--unseen-epochs", type=non_negative_int, default=None,
                        help="epochs of the leave-one-library-out run of the recipe reported beside it "
                             "(default: --epochs; 0: none)")
    parser.add_argument("--workers", type=number_in(int, 1, 64), default=default_fold_workers(),
                        help="processes that train the leave-one-library-out folds side by side (default: the "
                             f"cores this process may use, at most 8: {default_fold_workers()} here)")
    parser.add_argument("--added-groups", type=positive_int, default=12,
                        help="folds the libraries added since the first 12 are held out in (default 12)")
    add_augment_arguments(parser)
    parser.add_argument("--no-progress", action="store_true")


def run(args) -> int:
    from mlatr.lab.experiments.real_sounds import run_real_demo  # loads torch: not paid by every command's parser

    if not Path(args.manifest).is_file():
        raise MlatrError(f"{args.manifest} not found: run scripts/get-real-sounds.sh first (or pass --manifest)")
    names = parse_methods(args.text, list(TEXT_ENCODERS), "--text")
    unseen_epochs = args.epochs if args.unseen_epochs is None else args.unseen_epochs or None
    results = run_real_demo(args.manifest, args.out, names, heads=args.heads, embed_dim=args.embed_dim,
                            epochs=args.epochs, batch_size=args.batch_size, seed=args.seed,
                            max_seconds=args.max_seconds,
                            progress=not args.no_progress, unseen_epochs=unseen_epochs,
                            added_groups=args.added_groups, augment=augment_kinds(args),
                            augment_views=args.augment_views, ensemble=args.ensemble, workers=args.workers)
    print((Path(args.out) / "report.md").read_text(encoding="utf-8"))
    print(closing_lines(results, Path(args.out)))
    return 0


def closing_lines(results: dict, out: Path) -> str:
    """Where the demo's model, index, report and figure are, and the commands to run next."""
    index = results["index"]["path"]
    return "\n".join([
        f"model:  {out / 'model.pt'}", f"index:  {index} ({results['index']['clips']} clips)",
        f"report: {out / 'report.md'}", f"figure: {results['figure']}",
        f"curves: {out / 'members'}/K/log.jsonl, one per head pair (mlatr plot {out})",
        f'next:   mlatr search {index} "un chien aboie" --lang fra     (or: mlatr serve {index})'])
