"""``mlatr.toml`` and the environment (``$MLATR_MODEL``, ``$MLATR_MODELS``, ``$MLATR_TOKEN``) pointing at hostile
things: a FIFO, a device, a folder, a link to itself, a huge or deeply nested file, escape sequences. Each is one
``mlatr: error:`` line naming it (exit 2), nothing is opened that would block or never end, nothing is written."""

import os
import signal
from pathlib import Path

import pytest

from clitools import assert_user_error, run_cli
from mlatr.model_registry import SHIPPED_MODEL, SHIPPED_NAME


@pytest.fixture
def mlatr_in(monkeypatch, capsys):
    """``mlatr_in(folder, *argv, **env)``: ``mlatr ARGV`` in this process, run in ``folder`` with the variables
    ``env`` (the others of mlatr unset), under a 60 s alarm: a FIFO opened by mistake would block, and the
    alarm turns that into a failure rather than a hung test run."""
    def run(cwd: Path, *argv: str, **env: str):
        for name in ("MLATR_MODEL", "MLATR_MODELS", "MLATR_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(cwd)

        def hung(_signum, _frame):
            raise TimeoutError("mlatr blocked (a FIFO opened?)")

        previous = signal.signal(signal.SIGALRM, hung)
        signal.alarm(60)
        try:
            return run_cli(capsys, *argv)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)

    return run


def _one_error(done, *fragments: str) -> None:
    assert_user_error(done, *fragments)
    assert done.err.startswith("mlatr: error: ") and done.err.count("\n") == 1, done.err


PROJECT_FILES = {  # how mlatr.toml is made in the folder, a fragment of the error
    "a FIFO": (lambda p: os.mkfifo(p), "not a regular file but a FIFO"),
    "a folder": (lambda p: p.mkdir(), "not a regular file but a folder"),
    "a link to itself": (lambda p: p.symlink_to(p.name), "not a regular file but a link to nothing readable"),
    "a link to nowhere": (lambda p: p.symlink_to("gone.toml"), "not a regular file but a link to nothing readable"),
    "a link to /dev/zero": (lambda p: p.symlink_to("/dev/zero"), "not a regular file but a character device"),
    "3 GiB (sparse)": (lambda p: os.truncate(p.open("w").name, 3 * 2**30), "3,221,225,472 bytes"),
    "arrays 100,000 deep": (lambda p: p.write_text("model = " + "[" * 100000 + "]" * 100000),
                            "nested too deeply"),
    "tables 1,000 deep": (lambda p: p.write_text("a = {" + "b = {" * 1000 + "}" * 1001), "nested too deeply"),
    "not UTF-8": (lambda p: p.write_bytes(b'model = "caf\xe9.pt"\n'), "not a TOML file"),
    "an escape sequence": (lambda p: p.write_text('model = "\x1b]0;pwned\x07"\n'), "not a TOML file"),
    "an unknown key": (lambda p: p.write_text('modle = "x.pt"\n'), "modle: unknown key"),
    "model a number": (lambda p: p.write_text("model = 3\n"), "model: expected a path"),
    "model /dev/zero": (lambda p: p.write_text('model = "/dev/zero"\n'),
                        "/dev/zero: not a regular file but a character device (not opened"),
    "model a FIFO": (lambda p: (os.mkfifo(p.parent / "m.pt"), p.write_text('model = "m.pt"\n')),
                     "m.pt: not a regular file but a FIFO (not opened"),
    "model 1 GiB of zeros": (lambda p: (os.truncate((p.parent / "z.pt").open("w").name, 2**30),
                                        p.write_text('model = "z.pt"\n')), "z.pt: not an mlatr checkpoint"),
}


@pytest.mark.parametrize("case", list(PROJECT_FILES))
def test_a_hostile_project_file_is_one_error(tmp_path, mlatr_in, case):
    make, fragment = PROJECT_FILES[case]
    work = tmp_path / "work"
    work.mkdir()
    make(work / "mlatr.toml")
    done = mlatr_in(work, "embed", "--text", "a dog", "-o", "out.npz")
    _one_error(done, fragment)
    assert not (work / "out.npz").exists()


ENVIRONMENT = {  # the variables, a fragment of the error
    "MLATR_MODEL /dev/zero": ({"MLATR_MODEL": "/dev/zero"}, "not a regular file but a character device"),
    "MLATR_MODEL a FIFO": ({"MLATR_MODEL": "fifo.pt"}, "fifo.pt: not a regular file but a FIFO"),
    "MLATR_MODEL escapes": ({"MLATR_MODEL": "\x1b[2J\x1b]0;pwned\x07"}, "--model \\x1b[2J\\x1b]0;pwned\\x07"),
    "MLATR_MODEL a folder of nothing": ({"MLATR_MODEL": "."}, ".: not a model folder (no config.json"),
    "MLATR_MODELS a file, a name asked": ({"MLATR_MODELS": "fifo.pt", "MLATR_MODEL": "mine"},
                                          f"registered: {SHIPPED_NAME}"),  # the shipped model only
}


@pytest.mark.parametrize("case", list(ENVIRONMENT))
def test_a_hostile_environment_is_one_error(tmp_path, mlatr_in, case):
    env, fragment = ENVIRONMENT[case]
    os.mkfifo(tmp_path / "fifo.pt")
    done = mlatr_in(tmp_path, "embed", "--text", "a dog", "-o", "out.npz", **env)
    _one_error(done, fragment)
    assert "\x1b" not in done.err and not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("registry", ["a file", "a FIFO", "/dev/null"])
def test_a_registry_that_is_no_folder(served_toy, tmp_path, monkeypatch, capsys, registry):
    where = {"a file": tmp_path / "file", "a FIFO": tmp_path / "fifo", "/dev/null": Path("/dev/null")}[registry]
    if registry == "a file":
        where.write_text("x")
    elif registry == "a FIFO":
        os.mkfifo(where)
    monkeypatch.setenv("MLATR_MODELS", str(where))
    r = run_cli(capsys, "models")
    listed = [line.split("\t") for line in r.out.splitlines() if line.startswith("  ")]
    assert r.code == 0 and listed == [[f"  {SHIPPED_NAME}", "aisfx + use-multilingual, dim 512", str(SHIPPED_MODEL)]]
    r = run_cli(capsys, "export", "--model", served_toy[1], "--name", "toy")
    assert_user_error(r, f"{where}", "not a folder to write into")
    assert registry != "a file" or where.read_text() == "x"


@pytest.mark.parametrize("token", ["with space", "semi;colon", "new\nline"])
def test_a_hostile_token_from_the_environment_is_refused_before_serving(served_toy, tmp_path, mlatr_in, token):
    pytest.importorskip("fastapi", reason="mlatr serve needs the serve extra")
    done = mlatr_in(tmp_path, "serve", str(served_toy[2]), "--port", "0", MLATR_TOKEN=token)
    _one_error(done, "--token / $MLATR_TOKEN")
    assert token not in done.err
