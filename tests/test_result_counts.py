"""How many results, asked for in every way: ``-k`` on the command line, ``k`` in Python (HTTP: the server's tests).
A count that is no integer of at least 1 is refused naming it; a huge one answers the whole library, allocating
nothing by its size."""

import numpy as np
import pytest

from clitools import run_cli
from mlatr.api_args import ArgumentError, ArgumentTypeError
from mlatr.search import Index


@pytest.fixture(scope="module")
def index(served_toy):
    return Index.load(served_toy[2])


@pytest.mark.parametrize("command,k", [(c, k) for k in ("0", "-1", "abc", "1e3", "2.5", "", "nan", "0x10")
                                       for c in ("search",)] + [("classify", "0"), ("classify", "abc")])
def test_a_count_that_is_no_positive_integer_is_a_usage_error(served_toy, capsys, command, k):
    manifest, ckpt, index = served_toy
    argv = (["search", index, "a tone", "-k", k] if command == "search"
            else ["classify", manifest.parent / "audio" / "clip001.wav", "--labels", "a,b", "--model", ckpt, "-k", k])
    r = run_cli(capsys, *argv)
    assert r.code == 2 and "argument -k: " in r.err and "an integer >= 1, got" in r.err, r.err
    assert "Traceback" not in r.err


@pytest.mark.parametrize("argv,count", [
    (["a tone", "-k", str(10**12), "--json"], 20),
    (["a tone", "-k", "9" * 40, "--json", "--rank", "audio"], 20),
    (["--audio", "{wav}", "-k", str(2**63), "--json"], 20),
])
def test_a_huge_count_answers_the_whole_library(served_toy, capsys, argv, count):
    import json

    manifest, _, index = served_toy
    r = run_cli(capsys, "search", index, *[a.format(wav=manifest.parent / "audio" / "clip001.wav") for a in argv])
    assert r.code == 0, r.err
    assert len(json.loads(r.out)["results"]) == count


@pytest.mark.parametrize("k,error", [
    (0, ArgumentError), (-1, ArgumentError), (True, ArgumentTypeError), (1.5, ArgumentTypeError),
    ("5", ArgumentTypeError), (float("inf"), ArgumentTypeError), (None, ArgumentTypeError), ([3], ArgumentTypeError),
    (np.float64(3.0), ArgumentTypeError),
])
@pytest.mark.parametrize("how", ["text", "sound", "similar"])
def test_python_counts_are_checked(index, k, error, how):
    call = {"text": lambda: index.search_text("a tone", k=k), "sound": lambda: index.search_audio(index.paths[0], k=k),
            "similar": lambda: index.search_similar(0, k)}[how]
    with pytest.raises(error, match="k: expected an integer"):
        call()


@pytest.mark.parametrize("k", [10**30, 2**63, np.int64(2**62)])
def test_python_huge_counts_answer_the_library(index, k):
    assert len(index.search_text("a tone", k=k)) == 20 and len(index.search_audio(index.paths[0], k=k)) == 20
    assert len(index.search_similar(0, k)) == 19
