from mlatr.commands._arg_types import positive_int
from mlatr.commands._grid_args import add_grid_arguments, parse_methods, parse_seeds
from mlatr.commands._outputs import Output

HELP = """Offline demo: build the synthetic benchmark, train ML-CLAP, CACL and KCL, compare them.

Trains the three pairing schemes of ATRI with the same seed, model and step budget on the synthetic
multilingual benchmark (8 languages), evaluates each on the test split and prints the ATRI-style
tables (per-language recall, gap/dis, MRV, training overhead). Tables, plots and JSON go to
OUT/report. Rerunning the same command resumes: finished runs are skipped.

Examples:
  mlatr demo                          # small: a few minutes on a laptop CPU
  mlatr demo --size medium --seeds 0,1,2 -o runs/demo-medium
"""


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("out", "demo", folder=True),)


#: Old spellings of options, accepted for this release with a warning (mlatr.commands._deprecated).
OLD_SPELLINGS = {"--out": "--output"}


def add_arguments(parser):
    add_grid_arguments(parser, "mlatr-demo", ["mlclap", "cacl", "kcl"], method_flag="--schemes")
    parser.add_argument("--epochs", type=positive_int, help="training epochs (default: the size's)")
    parser.add_argument("--base", choices=["infonce", "siglip"], default="infonce", help="base loss")


def run(args) -> int:
    from mlatr.lab.experiments.demo_report import run_demo  # loads torch: not paid by every command's parser

    run_demo(args.out, size=args.size, seeds=parse_seeds(args.seeds),
             schemes=parse_methods(args.schemes, ["mlclap", "cacl", "kcl"], "--schemes"), base=args.base,
             progress=not args.no_progress, epochs=args.epochs)
    return 0
