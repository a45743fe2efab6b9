"""The command line as one tool: every command's --help is walked; the flags commands share have one spelling;
positionals are read anywhere among the options; old spellings still work with a warning; help texts are not
cut; a mistyped command gets a "did you mean"; the bash completion script completes commands, options, values
and registered model names."""

import argparse
import subprocess

import pytest

from clitools import run_cli
from mlatr.cli import COMMANDS, build_parser, summary

#: What a shared flag means -> its one spelling (the option strings of every action for it, in every command).
SHARED = {
    "model": ("--model",),
    "output": ("-o", "--output"),
    "device": ("--device",),
    "batch_size": ("--batch-size",),
    "skip_bad": ("--skip-bad",),
    "json": ("--json",),
    "no_progress": ("--no-progress",),
    "manifest": ("--manifest",),
    "webdataset": ("--webdataset",),
    "split": ("--split",),
    "lang": ("--lang",),
    "languages": ("--languages",),
    "max_seconds": ("--max-seconds",),
    "window_seconds": ("--window-seconds",),
    "k": ("-k",),
    "seed": ("--seed",),
    "workers": ("--workers",),
}
#: Spellings that would be a second name for a shared flag.
NOT_SPELLINGS = {"--checkpoint", "--ckpt", "--out", "--output-dir", "--outdir", "--to", "--quiet", "--progress",
                 "--top-k", "--topk", "--language", "--lang-code", "--batch_size", "--skip_bad", "--max_seconds",
                 "--index", "--query", "--audio-file", "--n", "-n", "-m"}


def _walk(parser, path=("mlatr",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action._name_parser_map.items():
                yield from _walk(sub, (*path, name))


def _meaning(action) -> str | None:
    """The shared flag an action is, by its option strings (``-o`` is always the output)."""
    for name, spelling in SHARED.items():
        if set(action.option_strings) & set(spelling):
            return name
    return None


def test_every_commands_help_runs_and_shared_flags_have_one_spelling(capsys):
    commands = [p for p, parser in _walk(build_parser())]
    assert {" ".join(p[1:]) for p in commands} >= {path for path, _ in COMMANDS}
    wrong = []
    for path, parser in _walk(build_parser()):
        r = run_cli(capsys, *path[1:], "--help")
        assert r.code == 0 and r.out.startswith("usage: "), (path, r.err)
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            shown = set(action.option_strings)
            if shown & NOT_SPELLINGS:
                wrong.append(f"{' '.join(path)}: {sorted(shown & NOT_SPELLINGS)} (a second name of a shared flag)")
            meaning = _meaning(action)
            if meaning and tuple(action.option_strings) != SHARED[meaning]:
                wrong.append(f"{' '.join(path)}: {action.option_strings} (spelled {SHARED[meaning]} elsewhere)")
            if any(o.startswith("--") and "_" in o for o in action.option_strings):
                wrong.append(f"{' '.join(path)}: {action.option_strings} (words join with '-')")
    assert not wrong, "\n".join(wrong)


def test_every_command_that_uses_a_model_takes_model():
    parser = build_parser()
    models = {" ".join(p[1:]) for p, sub in _walk(parser) if "--model" in sub._option_string_actions}
    assert models >= {"embed", "classify", "encode", "eval", "index build", "search", "serve", "export"}
    assert "data translate" not in models  # its translation model is --translation-model


def test_help_summaries_are_whole_first_paragraphs(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: each summary is one line of the listing
    r = run_cli(capsys, "--help")
    flat = " ".join(r.out.split())
    for path, module_name in COMMANDS:
        module = __import__(f"mlatr.commands.{module_name}", fromlist=["HELP"])
        first = summary(module.HELP)
        assert first.endswith((".", ")")), f"{path}: the summary is not a whole sentence: {first!r}"
        if " " not in path:
            assert first in flat, f"{path}: its summary is cut in mlatr --help"
    assert flat.index("Search your own sounds") < flat.index("Reproduce the papers")


def test_positionals_anywhere_among_the_options():
    parser = build_parser()
    a = parser.parse_args(["search", "IDX", "--lang", "fra", "pluie", "-k", "3"])
    assert (a.index, a.query, a.lang, a.k) == ("IDX", "pluie", "fra", 3)
    a = parser.parse_args(["embed", "--text", "un", "--lang", "fra", "deux", "-o", "q.npz", "trois"])
    assert a.items == ["un", "deux", "trois"] and a.output == "q.npz"
    a = parser.parse_args(["train", "train.epochs=2", "--config", "c.yaml", "seed=1", "--resume"])
    assert a.overrides == ["train.epochs=2", "seed=1"] and a.resume


def test_old_spellings_still_work_with_a_warning(capsys):
    r = run_cli(capsys, "demo", "--out", "x", "--help")
    assert r.code == 0
    parser = build_parser()
    from mlatr.cli import with_new_spellings

    argv = with_new_spellings(["data", "synth", "--out", "d", "--quiet", "--", "--out"], parser.old_spellings)
    assert argv == ["data", "synth", "--output", "d", "--no-progress", "--", "--out"]
    err = capsys.readouterr().err
    assert "--out is deprecated" in err and "use --output" in err and "--quiet is deprecated" in err
    a = parser.parse_args(with_new_spellings(["index", "build", "--checkpoint=m.pt", "x/", "--to", "i"],
                                             parser.old_spellings))
    assert (a.model, a.output) == ("m.pt", "i")
    assert "--checkpoint is deprecated" in capsys.readouterr().err


@pytest.mark.parametrize("argv, suggestion", [(["serch"], "did you mean search or serve?"),
                                              (["data", "imprt"], "did you mean import?"),
                                              (["search", "IDX", "q", "--ranq", "audio"], "did you mean --rank")])
def test_a_mistyped_command_or_option_gets_did_you_mean(capsys, argv, suggestion):
    r = run_cli(capsys, *argv)
    assert r.code == 2 and suggestion in r.err, r.err


def test_bash_completion_completes_commands_options_values_and_model_names(capsys, tmp_path):
    r = run_cli(capsys, "completion", "bash")
    assert r.code == 0
    script = tmp_path / "mlatr.bash"
    script.write_text(r.out, encoding="utf-8")
    (tmp_path / "registry" / "demo-real").mkdir(parents=True)
    (tmp_path / "registry" / "demo-real" / "config.json").write_text("{}", encoding="utf-8")
    cases = {"mlatr se": "search serve", "mlatr index b": "build", "mlatr search IDX --ra": "--rank",
             "mlatr search IDX --rank ''": "audio captions hybrid", "mlatr data import --format webd": "webdataset",
             "mlatr embed --model demo": "demo-real", "mlatr --vers": "--version",
             "mlatr demo-real --heads near": "near-identity near-identity-kcl"}
    lines = [f"source {script}", f"export MLATR_MODELS={tmp_path / 'registry'}"]
    for words in cases:
        lines.append(f"COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}}-1)); _mlatr; echo \"${{COMPREPLY[*]}}\"")
    out = subprocess.run(["bash", "-c", "\n".join(lines)], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == list(cases.values())
