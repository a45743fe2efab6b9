"""The ``mlatr`` command.

Each subcommand lives in its own module under :mod:`mlatr.commands`; this file only assembles them.
A command path with a space (``"data validate"``) becomes a nested subcommand. Every command reads its
positional arguments anywhere among its options (``mlatr search IDX --lang fra "pluie"``: :class:`Parser`), a
mistyped command or option gets a "did you mean", and ``mlatr completion bash`` prints a completion script
(:mod:`mlatr.commands.completion`).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import select
import signal
import sys

from mlatr.commands._deprecated import MODEL_OLD_SPELLINGS, new_spellings
from mlatr.commands._outputs import add_wait_option, hold_outputs
from mlatr.errors import MlatrError, describe_os_error
from mlatr.terminal_text import shown_lines, undecodable_argument
from mlatr.version import __version__

#: (command path, module under mlatr.commands). Order is the order shown in --help.
COMMANDS: list[tuple[str, str]] = [
    ("demo-real", "demo_real"),
    ("index build", "index_build"),
    ("index info", "index_info"),
    ("index delete", "index_delete"),
    ("index sync", "index_sync"),
    ("index duplicates", "index_duplicates"),
    ("index compact", "index_compact"),
    ("search", "search"),
    ("serve", "serve"),
    ("embed", "embed"),
    ("classify", "classify"),
    ("export", "export"),
    ("models", "models"),
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
    ("eval", "eval_model"),
    ("eval-embeddings", "eval_embeddings"),
    ("eval-demo", "eval_demo"),
    ("encode", "encode"),
    ("train", "train"),
    ("plot", "plot"),
    ("plan", "plan"),
    ("demo", "demo"),
    ("experiment supclap", "experiment_supclap"),
    ("experiment finegrained", "experiment_finegrained"),
    ("experiment unseen-library", "experiment_unseen_library"),
    ("experiment learning-curve", "experiment_learning_curve"),
    ("experiment calibrate", "experiment_calibrate"),
    ("import-checkpoint", "import_checkpoint"),
    ("completion", "completion"),
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
mlatr: multilingual audio-text retrieval. Search sounds with a query in any language; train and evaluate
the models (ATRI, SupCLAP, fine-grained matching).

Search your own sounds (a model trained offline on real sounds: scripts/get-real-sounds.sh fetches them):
  mlatr demo-real                                # ~8 min on 2 cores: runs/demo-real/model.pt
  export MLATR_MODEL=runs/demo-real/model.pt     # the default --model (or model = "..." in mlatr.toml)
  mlatr index build ~/Sounds -o my-sounds.idx    # a folder, a manifest, sound files or webdataset shards
  mlatr search my-sounds.idx --lang fra "un chien qui aboie"
  mlatr serve my-sounds.idx                      # a web page at http://127.0.0.1:8000/

Reproduce the papers (an offline synthetic multilingual benchmark):
  mlatr demo                                     # ML-CLAP, CACL and KCL trained and compared, a report
  mlatr data synth -o data/synth --train 600
  mlatr train --config configs/demo.yaml objective.scheme=kcl out_dir=runs/kcl
  mlatr eval --model runs/kcl/best.pt --manifest data/synth/manifest.jsonl --split test

Run `mlatr COMMAND --help` for a command's options; eval "$(mlatr completion bash)" completes them.
"""


class Parser(argparse.ArgumentParser):
    """argparse's parser with a command's positionals read anywhere among its options (a command's parser, one
    without subcommands, parses with ``parse_known_intermixed_args``) and a "did you mean" on a mistyped
    command, choice or option."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        if self._subparsers is not None or self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # parse_known_intermixed_args calls parse_known_args twice itself
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str):
        hint = did_you_mean(self, message)
        if hint and "invalid choice: " in message:  # before the list of choices, which may be long
            at = message.index("invalid choice: ")
            end = message.index("'", message.index("'", at) + 1) + 1
            message, hint = message[:end] + hint + message[end:], ""
        super().error(message + hint)


def _known_words(parser: argparse.ArgumentParser, message: str) -> list[str]:
    """The words the mistyped one of ``message`` could have been: the choices it names, else the parser's
    option strings."""
    choices = re.search(r"\(choose from (.*)\)", message)
    if choices:
        return re.findall(r"'([^']*)'", choices.group(1)) or [c.strip() for c in choices.group(1).split(",")]
    return [o for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings]


def did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    """``" (did you mean ...?)"`` for the mistyped word of an argparse error, when one is close; else ``""``."""
    wrong = re.search(r"invalid choice: '([^']*)'", message) or re.search(r"unrecognized arguments: (\S+)", message)
    if not wrong:
        return ""
    word = wrong.group(1).split("=", 1)[0]
    close = difflib.get_close_matches(word, _known_words(parser, message), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def summary(help_text: str) -> str:
    """A command's one-line summary for ``mlatr --help``: its help's first paragraph, on one line."""
    return " ".join(help_text.strip().split("\n\n", 1)[0].split())


def with_new_spellings(argv: list[str], spellings: dict[str, dict[str, str]]) -> list[str]:
    """``argv`` with the old spellings of its command's options (``spellings``: ``{command path: {old: new}}``)
    replaced, warning once for each (:mod:`mlatr.commands._deprecated`)."""
    for path, renamed in spellings.items():
        words = path.split()
        if argv[: len(words)] == words:
            return words + new_spellings(argv[len(words):], renamed)
    return argv


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mlatr", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.old_spellings = {}  # {command path: {old option: new option}}

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
            help=summary(module.HELP),
            description=module.HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        renamed = dict(getattr(module, "OLD_SPELLINGS", {}))
        if "--model" in sub._option_string_actions:  # every command with --model reads --checkpoint too
            renamed.update(MODEL_OLD_SPELLINGS)
        if renamed:
            parser.old_spellings[path] = renamed
        outputs = getattr(module, "OUTPUTS", ())
        if outputs:
            add_wait_option(sub)
        sub.set_defaults(_run=module.run, _parser=sub, _extra=getattr(module, "EXTRA_ARGS", None), _outputs=outputs)
    parser.set_defaults(_root_parser=parser)  # for mlatr completion, which reads every command's options
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


#: Exit status after the reader of stdout left (``mlatr search ... | head -1``): a shell's for a command ended by
#: SIGPIPE (128 + 13), as ``cat`` or ``grep`` give there; nothing is printed.
CLOSED_PIPE_STATUS = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1


def stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone: a write there raises BrokenPipeError. True when
    it cannot be told (no ``poll`` on this system)."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture), or no poll()
        return True
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def quiet_after_closed_stdout() -> int:
    """End quietly once stdout's reader has gone: stdout pointed at /dev/null, so the interpreter's last flush of
    what is still buffered cannot fail again ("Exception ignored ... BrokenPipeError"; Python's documented way)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # not a real file: nothing will be flushed there
        pass
    return CLOSED_PIPE_STATUS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    problem = undecodable_argument(argv)
    if problem:  # before argparse, which would print the argument itself
        print(f"mlatr: error: {problem}", file=sys.stderr)
        return 2
    parser = build_parser()
    args, extra = parser.parse_known_args(with_new_spellings(argv, parser.old_spellings))
    if extra:
        _take_extra(args, extra, parser)
    run = getattr(args, "_run", None)
    if run is None:
        (getattr(args, "_group_parser", None) or parser).print_help()
        return 2

    try:
        with hold_outputs(args, args._outputs):  # one writer per output (mlatr.commands._outputs)
            code = int(run(args) or 0)
        sys.stdout.flush()  # a reader that left (| head) is found here, not by the interpreter's last flush
        return code
    except BrokenPipeError:
        if not stdout_closed():  # another pipe (a child process's): an error like any other
            print(f"mlatr: error: {shown_lines(describe_os_error(sys.exc_info()[1]))}", file=sys.stderr)
            return 2
        return quiet_after_closed_stdout()
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
