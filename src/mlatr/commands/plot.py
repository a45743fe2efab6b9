"""Draw training curves from run folders (their log.jsonl): one PNG, runs overlaid.

A panel per loss term against the step (total loss, then each term when there are several), validation
R@1 (text-to-audio, audio-to-text; average over languages) and MRV against the epoch.

Examples:
  mlatr plot runs/kcl
  mlatr plot runs/mlclap runs/kcl runs/cacl -o curves.png
"""

from pathlib import Path

from mlatr.commands._paths import refuse_output_over_input

HELP = __doc__


def add_arguments(parser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders written by mlatr train")
    parser.add_argument("-o", "--output", default=None,
                        help="PNG to write (default: RUN_DIR/curves.png of the first run)")


def run(args) -> int:
    from mlatr.training.run_curves import plot_runs  # matplotlib: imported when the command runs

    output = Path(args.output) if args.output else Path(args.runs[0]) / "curves.png"
    refuse_output_over_input([("-o", output)], [("log", Path(r) / "log.jsonl") for r in args.runs])
    print(f"wrote {plot_runs(args.runs, output)}")
    return 0
