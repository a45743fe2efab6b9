"""The ``mlatr`` command.

Each subcommand lives in its own module under :mod:`mlatr.commands`; this file only assembles them.
A command path with a space (``"data validate"``) becomes a nested subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from mlatr import __version__
from mlatr.commands._outputs import add_wait_option, hold_outputs
from mlatr.errors import MlatrError, describe_os_error
from mlatr.terminal_text import shown_lines, undecodable_argument

#: (command path, module under mlatr.commands). Order is the order shown in --help.
COMMANDS: list[tuple[str, str]] = [
    ("data validate", "data_validate"),
    ("data import", "data_import"),
    ("data stats", "data_stats"),
    ("data synth", "data_synth"),
    ("data prepare", "data_prepare"),
    ("data export", "data_export"),
    ("data split", "data_split"),
    ("data recaption", "data_recaption"),
    ("data unpack-debs", "data_unpack_debs"),
    ("data dedup", "data_dedup"),
    ("data translate", "data_translate"),
    ("data translation-qa", "data_translation_qa"),
    ("demo", "demo"),
    ("train", "train"),
    ("plot", "plot"),
    ("plan", "plan"),
    ("encode", "encode"),
    ("embed", "embed"),
    ("classify", "classify"),
    ("export", "export"),
    ("eval", "eval_model"),
    ("eval-embeddings", "eval_embeddings"),
    ("eval-demo", "eval_demo"),
    ("import-checkpoint", "import_checkpoint"),
    ("index build", "index_build"),
    ("index info", "index_info"),
    ("index delete", "index_delete"),
    ("index compact", "index_compact"),
    ("search", "search"),
    ("serve", "serve"),
    ("demo-real", "demo_real"),
    ("experiment supclap", "experiment_supclap"),
    ("experiment finegrained", "experiment_finegrained"),
    ("experiment unseen-library", "experiment_unseen_library"),
    ("experiment learning-curve", "experiment_learning_curve"),
    ("experiment calibrate", "experiment_calibrate"),
]

#: One-line help of command groups.
GROUPS: dict[str, str] = {
    "data": "manifests: validate, import, statistics, synthetic benchmark, hash splits, captions from paths, "
            "translate and check translations, decoded-audio store, sound libraries from Debian packages, "
            "duplicates",
    "index": "build, update, inspect, delete from and compact a search index of audio embeddings",
    "experiment": "paper experiments: grids of training runs with tables and figures",
}

DESCRIPTION = """\
mlatr: multilingual audio-text retrieval.

Typical flow:
  mlatr data synth -o data/synth --train 600   # build the offline synthetic benchmark
  mlatr data validate data/synth/manifest.jsonl
  mlatr train --config configs/demo.yaml objective.scheme=kcl out_dir=runs/kcl
  mlatr eval --checkpoint runs/kcl/best.pt --manifest data/synth/manifest.jsonl --split test
  mlatr demo                                   # all of the above for ML-CLAP, CACL and KCL

Run `mlatr COMMAND --help` for the options of a command.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlatr", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )

    parser.add_argument("--version", action="version", version=f"mlatr {__version__}")
    top = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for path, module_name in COMMANDS:
        module = importlib.import_module(f"mlatr.commands.{module_name}")
        *group_path, leaf = path.split()
        target = top
        if group_path:
            (group,) = group_path
            if group not in groups:
                gp = top.add_parser(group, help=GROUPS.get(group, ""), description=GROUPS.get(group, ""))
                groups[group] = gp.add_subparsers(dest=f"{group}_command", metavar="SUBCOMMAND")
                gp.set_defaults(_group_parser=gp)
            target = groups[group]
        sub = target.add_parser(
            leaf,
            help=module.HELP.splitlines()[0],
            description=module.HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        outputs = getattr(module, "OUTPUTS", ())
        if outputs:
            add_wait_option(sub)
        sub.set_defaults(_run=module.run, _parser=sub, _extra=getattr(module, "EXTRA_ARGS", None), _outputs=outputs)
    return parser


def _take_extra(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> None:
    """Arguments argparse did not place: a command with ``EXTRA_ARGS = (dest, hint)`` (``train``) takes
    the ``KEY=VALUE`` ones wherever they stand (argparse only takes one run of positionals); anything else
    is argparse's usage error (exit 2), with the hint."""
    target = getattr(args, "_parser", parser)
    spec = getattr(args, "_extra", None)
    stray = [t for t in extra if spec is None or t.startswith("-") or "=" not in t]
    if stray:
        target.error(f"unrecognized arguments: {' '.join(stray)}" + (f" ({spec[1]})" if spec else ""))
    getattr(args, spec[0]).extend(extra)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    problem = undecodable_argument(argv)
    if problem:  # before argparse, which would print the argument itself
        print(f"mlatr: error: {problem}", file=sys.stderr)
        return 2
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        _take_extra(args, extra, parser)
    run = getattr(args, "_run", None)
    if run is None:
        (getattr(args, "_group_parser", None) or parser).print_help()
        return 2

    try:
        with hold_outputs(args, args._outputs):  # one writer per output (mlatr.commands._outputs)
            return int(run(args) or 0)
    except MlatrError as exc:
        print(f"mlatr: error: {shown_lines(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system refused: a missing folder, a permission, a full disk
        print(f"mlatr: error: {shown_lines(describe_os_error(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
