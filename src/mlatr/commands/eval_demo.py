"""Evaluation demo: random-but-structured embeddings in 8 languages, evaluated and reported.

No model and no data needed. Two synthetic embedding spaces share the same clips: "noisy" (larger
translation noise and language offsets) and "aligned" (smaller); Japanese and Chinese are the
noisiest languages, and a few translations are missing. Both are evaluated with the metrics of
`mlatr eval-embeddings` and printed side by side in the layout of ATRI Tables 1-3, followed by the
rank of the right clip per language for a few caption groups; report and plots (the two spaces side by
side in the t-SNE view of ATRI Appendix C included) go to --out.

Example:
  mlatr eval-demo --seed 0 -o runs/eval-demo
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mlatr.commands._arg_types import non_negative_int, positive_int, random_seed
from mlatr.commands._outputs import Output
from mlatr.commands.eval_embeddings import add_tsne_arguments, emit
from mlatr.errors import MlatrError
from mlatr.evaluation import evaluate_embeddings_with_ranks
from mlatr.evaluation.synthetic import DEFAULT_LANGUAGE_NOISE, structured_embeddings

HELP = __doc__


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "evaluation demo", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=random_seed, default=0, help="random seed (default: 0)")
    parser.add_argument("-o", "--output", dest="out", metavar="DIR", default="runs/eval-demo",
                        help="folder for results.json, report.md, CSVs and plots (default: runs/eval-demo)")
    parser.add_argument("--clips", type=positive_int, default=500, help="number of clips (default: 500)")
    parser.add_argument("--cases", type=non_negative_int, default=4,
                        help="caption groups to show ranks for (default: 4)")
    add_tsne_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.clips < 2:
        raise MlatrError(f"--clips: need at least 2 clips, got {args.clips}")
    spaces = {
        "noisy": structured_embeddings(n_clips=args.clips, seed=args.seed, language_shift=0.35),
        "aligned": structured_embeddings(
            n_clips=args.clips, seed=args.seed, language_shift=0.12,
            language_noise={k: 0.3 + 0.5 * (v - 0.3) for k, v in DEFAULT_LANGUAGE_NOISE.items()},
        ),
    }
    evaluations = {name: evaluate_embeddings_with_ranks(**arrays) for name, arrays in spaces.items()}
    results = {name: ev.metrics for name, ev in evaluations.items()}
    n_text = spaces["noisy"]["text"].shape[0]
    print(f"eval-demo: {args.clips} clips, {n_text} captions in 8 languages (seed {args.seed}); "
          "synthetic embeddings, not a trained model\n")
    out = Path(args.out)
    args.json, args.report, args.plot = str(out / "results.json"), str(out), str(out)
    emit(results, evaluations, args, arrays=spaces)
    return 0
