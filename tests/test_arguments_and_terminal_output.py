"""Hostile command lines and hostile text on the terminal (issue 24, round 2).

Arguments that are not UTF-8 and numbers out of range are refused before a command runs (exit 2, naming the
argument); user text printed to the terminal (captions, ids, file names, problems found in a file) carries no
control character and a huge caption takes one line; ``--json`` keeps the exact text. A stored model whose
metadata has wrong types is refused by ``load_model`` naming the file and the field.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import torch

from clitools import assert_user_error, run_cli
from mlatr.commands._arg_types import tcp_port
from mlatr.errors import InputError
from mlatr.inference import load_model
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.terminal_text import shown

#: What a terminal obeys: C0 controls (ESC, BEL, CR, ...), DEL and C1 controls, bidirectional overrides.
TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = ["retitle \x1b]0;pwned\x07 me", "clear \x1b[2J\x1b[H screen", "over\rwrite", "bidi \u202eevil",
           "c1 \x9b31m red"]


# ---------------------------------------------------------------- arguments that are not UTF-8

@pytest.mark.parametrize("argv, position", [
    (["search", "some.idx", b"\xff\xfe"], 3),
    (["data", "validate", b"caf\xe9.jsonl"], 3),
    (["train", b"out_dir=\xff"], 2),
    (["index", "info", b"\x80.idx", "--json"], 3),
    (["serve", "x.idx", "--host", b"\xc3"], 4),
])
def test_an_argument_that_is_not_utf8_is_refused_by_position(capsys, argv, position):
    args = [os.fsdecode(a) if isinstance(a, bytes) else a for a in argv]  # as Python hands them over
    r = run_cli(capsys, *args)
    raw = next(a for a in argv if isinstance(a, bytes))
    assert_user_error(r, f"argument {position} ({raw!r}): not valid UTF-8")
    assert r.out == ""


# ---------------------------------------------------------------- numeric options out of range

@pytest.mark.parametrize("argv, option, rule", [
    (["serve", "x.idx", "--port", "99999"], "--port", "an integer in [0, 65535]"),
    (["serve", "x.idx", "--port", "-1"], "--port", "an integer in [0, 65535]"),
    (["serve", "x.idx", "--watch", "-1"], "--watch", "a number >= 0"),
    (["serve", "x.idx", "--watch", "nan"], "--watch", "a number >= 0"),
    (["data", "translate", "m.jsonl", "-o", "o.jsonl", "--to", "fra", "--backend", "openai", "--timeout", "-1"],
     "--timeout", "a number > 0"),
    (["data", "translate", "m.jsonl", "-o", "o.jsonl", "--to", "fra", "--backend", "openai", "--retries", "-2"],
     "--retries", "an integer >= 0"),
    (["data", "synth", "-o", "d", "--seed", "-5"], "--seed", "an integer in [0, 4.29497e+09]"),
    (["data", "synth", "-o", "d", "--hard-negatives", "1.5"], "--hard-negatives", "a number in [0, 1]"),
    (["data", "split", "m.jsonl", "--val", "2"], "--val", "a number in [0, 1]"),
    (["data", "prepare", "m.jsonl", "-o", "s", "--shard-mb", "0"], "--shard-mb", "a number > 0"),
    (["data", "prepare", "m.jsonl", "-o", "s", "--sample-rate", "inf"], "--sample-rate", "an integer >= 1"),
    (["eval-embeddings", "e.npz", "--tsne-clips", "-1"], "--tsne-clips", "an integer >= 0"),
    (["plan", "--reserve-mib", "-1"], "--reserve-mib", "a number >= 0"),
])
def test_a_number_out_of_range_is_refused_naming_option_and_range(capsys, argv, option, rule):
    r = run_cli(capsys, *argv)
    assert r.code == 2 and "Traceback" not in r.err, (r.code, r.err)
    assert f"argument {option}: " in r.err and rule in r.err, r.err


def test_port_bounds_and_free_port():
    assert [tcp_port(p) for p in ("0", "1", "65535")] == [0, 1, 65535]  # 0: the system picks a free port


def test_an_out_dir_that_is_a_file_says_so(capsys, tmp_path):
    afile = tmp_path / "run"
    afile.write_text("not a folder")
    r = run_cli(capsys, "train", f"out_dir={afile}", f"data.manifest={tmp_path / 'm.jsonl'}")
    assert_user_error(r, f"out_dir {afile}: is a file", "writes a folder")
    assert "File exists" not in r.err and afile.read_text() == "not a folder"


# ---------------------------------------------------------------- user text on the terminal

def test_shown_escapes_every_control_and_cuts_long_text():
    for text in HOSTILE:
        assert not TERMINAL_CONTROL.search(shown(text)), shown(text)
    assert shown("a\x1b[2Jb") == "a\\x1b[2Jb" and shown("x\u202ey") == "x\\u202ey"
    assert shown("plain café 音") == "plain café 音"
    long = shown("w" * 20_000)
    assert long == "w" * 300 + "\u2026 (20,000 characters)"


@pytest.fixture(scope="module")
def hostile_index(served_toy, tmp_path_factory):
    """An index of four toy clips whose captions would retitle, clear or flood the terminal."""
    from mlatr.data.manifest import Manifest
    from mlatr.search.index import build_index

    manifest, ckpt, _ = served_toy
    root = tmp_path_factory.mktemp("hostile")
    lines = manifest.read_text().splitlines()[:5]
    clips = []
    for i, line in enumerate(lines):
        clip = json.loads(line)
        clip["audio"] = str(manifest.parent / clip["audio"])
        caption = ("tone " * 4000) if i == 4 else f"tone {HOSTILE[i]}"
        clip["captions"] = {"eng": [caption]}
        clips.append(json.dumps(clip))
    m = root / "m.jsonl"
    m.write_text("\n".join(clips) + "\n")
    out = build_index(load_model(ckpt), Manifest.load(m), root / "h.idx.npz", caption_languages=["eng"]).index.path
    return m, out


def test_search_and_index_info_print_no_control_character(capsys, hostile_index):
    _, index = hostile_index
    r = run_cli(capsys, "search", index, "tone", "-k", "5")
    assert r.code == 0, r.err
    assert not TERMINAL_CONTROL.search(r.out.replace("\n", "")), r.out
    assert "\\x1b]0;pwned\\x07" in r.out and "\\x1b[2J" in r.out and "\\u202e" in r.out
    assert "(20,000 characters)" in r.out and len(max(r.out.splitlines(), key=len)) < 400
    r = run_cli(capsys, "search", index, "tone", "-k", "5", "--json")
    texts = [c for hit in json.loads(r.out)["results"] for c in hit["captions"]]
    assert f"tone {HOSTILE[0]}" in texts and "tone " * 4000 in texts  # JSON keeps the exact text
    r = run_cli(capsys, "index", "info", index, "--check")
    assert r.code == 0 and not TERMINAL_CONTROL.search(r.out.replace("\n", ""))


def test_problems_and_errors_print_no_control_character(capsys, tmp_path):
    m = tmp_path / "m.jsonl"
    m.write_text(json.dumps({"id": "c", "audio": "a.wav", "captions": {"e\x1b[2Jng": ["a"]}}) + "\n"
                 + json.dumps({"id": "d", "audio": "a.wav", "captions": {"eng": ["a"]}, "duration": "\x1b]0;t\x07"})
                 + "\n")
    r = run_cli(capsys, "data", "validate", m)
    assert r.code == 1 and "e\\x1b[2Jng" in r.out and "\\x1b]0;t\\x07" in r.out
    assert not TERMINAL_CONTROL.search(r.out.replace("\n", ""))
    r = run_cli(capsys, "data", "stats", m)  # the error contract's message
    assert_user_error(r, "captions.e\\x1b[2Jng")
    assert not TERMINAL_CONTROL.search(r.err.replace("\n", ""))
    r = run_cli(capsys, "data", "stats", m, "--skip-bad")  # the skipped-lines notice
    assert not TERMINAL_CONTROL.search(r.err.replace("\n", "")), r.err


# ---------------------------------------------------------------- checkpoint metadata with wrong types

#: Wrong values a field of a checkpoint's metadata is replaced with (``...``: the field is removed).
WRONG = [..., None, "x", [1], {}, -1, 2**40, True, 1.5]
#: The same for an encoder's own options (each one rebuilds the encoder: fewer, to stay fast).
WRONG_OPTION = ["x", -1, 2**40]


def _fields(state: dict) -> list[tuple[str, ...]]:
    paths = [("model_config",), ("matching_head",), ("train_config",), ("train_config", "data"), ("model",)]
    cfg = state["model_config"]
    paths += [("model_config", k) for k in cfg]
    paths += [("model_config", side, k) for side in ("audio_encoder", "text_encoder") for k in cfg[side]
              if k != "tokenizer"]
    return paths


def test_checkpoint_metadata_fuzz_is_refused_naming_file_and_field(served_toy, tmp_path):
    _, ckpt, _ = served_toy
    good = read_checkpoint(ckpt)
    good = {k: good[k] for k in ("format", "model_config", "model", "matching_head", "train_config")}
    refused = 0
    for path in _fields(good):
        for wrong in WRONG if len(path) < 3 else WRONG_OPTION:
            state = {k: v for k, v in good.items()}
            state["model_config"] = json.loads(json.dumps(good["model_config"]))
            state["train_config"] = json.loads(json.dumps(good["train_config"]))
            node = state
            for key in path[:-1]:
                node = node[key]
            if wrong is ...:
                node.pop(path[-1])
            else:
                node[path[-1]] = wrong
            file = tmp_path / "m.pt"
            torch.save(state, file)
            try:
                load_model(file)
            except InputError as exc:
                refused += 1
                assert exc.file == str(file) and exc.field, (path, wrong, str(exc))
                assert exc.field.split(".")[0] in (path[0], "model"), (path, wrong, str(exc))
    assert refused > len(_fields(good)) * 4  # most wrong values are refused; a few are allowed (a null option)
