from mlatr.commands._arg_types import positive_int
from mlatr.commands._grid_args import add_grid_arguments, parse_methods, parse_seeds
from mlatr.commands._outputs import Output
from mlatr.lab.experiments.finegrained import EVAL_EVERY, METHODS

HELP = """Fine-grained matching on the synthetic benchmark: cosine vs LGMM vs max/mean modes, CMSC ablation.

Trains one model per method (and seed) with the demo's setup (ML-CLAP pairing, same steps for all),
each with its matching head (fine-grained paper Table 2: pooled cosine, Max-Mean, Max-Max, Mean-Mean,
Mean-Max, LGMM, all with L_InterC) and LGMM with the CMSC terms (Table 3: L, -L_Jnt, -L_IntraC),
evaluates every model on the test split ranking with its own head, and writes OUT/report/summary.md,
results.json and word_to_clip.png (Figure 2: a caption's word-to-clip similarities against its clip
and two hard negatives). Rerunning the same command resumes: finished runs are skipped.

Examples:
  mlatr experiment finegrained --size tiny --methods cosine,lgmm       # smoke run
  mlatr experiment finegrained --size small --seeds 0,1 -o runs/finegrained
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "experiment", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser):
    add_grid_arguments(parser, "mlatr-finegrained", list(METHODS))
    parser.add_argument("--eval-every", type=positive_int, default=EVAL_EVERY,
                        help=f"validate every N epochs and after the last (default: {EVAL_EVERY}; frame-level "
                             "heads make validation cost about two training epochs)")


def run(args) -> int:
    from mlatr.lab.experiments.finegrained_report import (
        run_finegrained,  # loads torch: not paid by every command's parser
    )

    run_finegrained(args.out, size=args.size, seeds=parse_seeds(args.seeds),
                    methods=parse_methods(args.methods, METHODS), progress=not args.no_progress,
                    eval_every=args.eval_every)
    return 0
