from mlatr.commands._grid_args import add_grid_arguments, parse_methods, parse_seeds
from mlatr.commands._outputs import Output
from mlatr.lab.experiments.supclap import METHODS

HELP = """SupCLAP experiments: InfoNCE / SigLIP / CACL with and without support vector regularization.

Builds the synthetic multilingual benchmark, trains every method with the demo's model and step budget
(InfoNCE, SigLIP, each + bi-StaticSVR and + bi-DynamicSVR; CACL + SVR; the uni/bi x constraint ablation;
Simple Reweight), evaluates each on the test split and writes OUT/report/summary.md with the tables
(mean ± std over seeds) and figures: trajectory drift, semantic radius, positive-pair similarity,
convergence. Rerunning the same command resumes: finished runs are skipped.

Examples:
  mlatr experiment supclap --size small -o runs/supclap
  mlatr experiment supclap --size small --seeds 0,1,2 --methods infonce,infonce-bi-dynamic
  mlatr experiment supclap --size small --report-only     # tables of whatever has finished
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "experiment", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser):
    add_grid_arguments(parser, "mlatr-supclap", list(METHODS))
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: report the finished runs of --methods found in OUT (any seed)")


def run(args) -> int:
    from mlatr.lab.experiments.supclap_report import run_supclap  # loads torch: not paid by every command's parser

    run_supclap(args.out, size=args.size, seeds=parse_seeds(args.seeds), methods=parse_methods(args.methods, METHODS),
                progress=not args.no_progress, report_only=args.report_only)
    return 0
