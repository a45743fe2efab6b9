"""Hostile command lines and hostile text on the terminal.

Arguments that are not UTF-8 and numbers out of range are refused before a command runs (exit 2, naming the
argument); user text printed to the terminal (captions, ids, file names, problems found in a file) carries no
control character and a huge caption takes one line; ``--json`` keeps the exact text. A stored model whose
metadata has wrong types is refused by ``load_model`` naming the file and the field.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch

from clitools import assert_user_error, run_cli
from mlatr.commands._arg_types import tcp_port
from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.store import read_index
from mlatr.errors import InputError, MlatrError
from mlatr.inference import load_model
from mlatr.inference.checkpoint import export_model, read_checkpoint
from mlatr.search import Index, build_index
from mlatr.serve import live_index
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
    (["data", "translation-qa", "m.jsonl", "--out", "o", "--backend", "apertium", "--threshold", "3"], "--threshold",
     "a number in [-1, 1]"),
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


# ---------------------------------------------------------------- stored JSON and YAML with wrong types

GOOD_STORE = {"format": "mlatr-audio-store-1", "sample_rate": 16000, "dtype": "int16", "shards": ["shard-00000.npy"],
              "clips": {"a": {"audio": "a.wav", "shard": 0, "offset": 0, "length": 10, "scale": 1.0}}, "bad": {}}


@pytest.mark.parametrize("edit, field, message", [
    (lambda s: s.update(format="mlatr-audio-store-2"), "format", "version 2 of mlatr-audio-store"),
    (lambda s: s.update(format="something-else"), "format", "not a decoded-audio store"),
    (lambda s: s.update(sample_rate="16000"), "sample_rate", "expected an integer (Hz), found a string"),
    (lambda s: s.update(sample_rate=0), "sample_rate", "must be > 0"),
    (lambda s: s.update(dtype="int8"), "dtype", "must be int16 or float16"),
    (lambda s: s.update(shards=["../../etc/passwd"]), "shards[0]", "inside the store"),
    (lambda s: s["clips"]["a"].update(offset=-4), "clips.a.offset", "must be >= 0"),
    (lambda s: s["clips"]["a"].update(scale="1"), "clips.a.scale", "expected a number"),
    (lambda s: s["clips"]["a"].update(shard=3), "clips.a.shard", "a shard number in 0..0"),
    (lambda s: s.pop("clips"), "clips", "missing"),
])
def test_store_index_with_wrong_types_is_refused_by_field(tmp_path, edit, field, message):
    store = json.loads(json.dumps(GOOD_STORE))
    edit(store)
    (tmp_path / "index.json").write_text(json.dumps(store))
    with pytest.raises(InputError, match=re.escape(f"{tmp_path / 'index.json'}: {field}: ")) as err:
        read_index(tmp_path)
    assert message in str(err.value)


@pytest.mark.parametrize("edit, field", [
    (lambda c: c.update(format="mlatr-model-9"), "format"),
    (lambda c: c.update(model_config="small"), "model_config"),
    (lambda c: c["model_config"].update(embed_dim=-3), "model_config.embed_dim"),
    (lambda c: c["model_config"].update(embed_dim=10**9), "model_config.embed_dim"),
    (lambda c: c["model_config"]["audio_encoder"].pop("name"), "model_config.audio_encoder.name"),
    (lambda c: c.update(matching_head=[1]), "matching_head"),
    (lambda c: c.update(train_config={"data": 5}), "train_config.data"),
])
def test_model_folder_config_with_wrong_types_is_refused_by_field(served_toy, tmp_path, capsys, edit, field):
    _, ckpt, _ = served_toy
    folder = export_model(ckpt, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    r = run_cli(capsys, "embed", "a dog", "--text", "--lang", "eng", "--model", folder, "-o", tmp_path / "e.npz")
    assert_user_error(r, f"{folder / 'config.json'}: {field}: ")


def test_npz_index_meta_of_another_kind_or_version_is_refused(served_toy, tmp_path, capsys):
    _, _, npz = served_toy
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"]))
    for bad, field, says in [(np.arange(3.0), "meta", "expected one JSON string"),
                             (np.asarray(json.dumps(dict(meta, format="mlatr-index-7"))), "format", "version 7"),
                             (np.asarray("[" * 5000), "meta", "nested too deeply")]:
        np.savez(tmp_path / "x.npz", **dict(arrays, meta=bad))
        assert_user_error(run_cli(capsys, "search", tmp_path / "x.npz", "a tone"), f"x.npz: {field}: ", says)


@pytest.mark.parametrize("text, says", [
    ("[" * 3000 + "]" * 3000, "nested too deeply"),
    ("a: &x [*x]\n", "contains itself"),
    ("l0: &l0 [1,1,1,1,1,1,1,1,1,1]\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n"
                                                   for i in range(1, 10)), "more than 100,000 values"),
    (b"\xff\xfe: 1\n", "not UTF-8"),
    ("optim: {betas: 3}\n", "optim.betas: must be a list"),
    ("model: {audio: {name: [1]}}\n", "model.audio.name: expected an encoder name"),
])
def test_yaml_config_hostile_shapes_are_refused(capsys, tmp_path, text, says):
    config = tmp_path / "c.yaml"
    config.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert_user_error(run_cli(capsys, "train", "--config", config, f"out_dir={tmp_path / 'run'}"), says)
    r = run_cli(capsys, "train", "train.epochs=" + "[" * 200 + "]" * 200, f"out_dir={tmp_path / 'run'}")
    assert_user_error(r, "override train.epochs: YAML nested too deeply")


@pytest.mark.parametrize("options", ["dim: abc", "bogus: 1", "channels: 5"])
def test_encoder_options_of_the_wrong_type_name_the_encoder(served_toy, tmp_path, capsys, options):
    manifest, _, _ = served_toy
    r = run_cli(capsys, "train", f"data.manifest={manifest}", f"out_dir={tmp_path / 'run'}",
                "data.languages=[eng,fra,deu]", "train.batch_size=4", f"model.audio={{name: small-cnn, {options}}}",
                "train.progress=false")
    assert_user_error(r, "audio encoder 'small-cnn'")
    assert not (tmp_path / "run" / "last.pt").exists()


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
    m.write_text(json.dumps({"id": "e", "audio": "a.wav", "split": "train", "captions": {"eng": ["a"]},
                             "labels": ["dog \x1b]0;t\x07"]}) + "\n")
    r = run_cli(capsys, "data", "stats", m)  # labels in the table
    assert r.code == 0 and "dog \\x1b]0;t\\x07" in r.out, r.out
    assert not TERMINAL_CONTROL.search(r.out.replace("\n", "")), r.out


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


def test_a_reload_that_fails_unexpectedly_names_no_internal_class(served_toy, monkeypatch):
    _, _, npz = served_toy
    live = live_index.LiveIndex(npz)
    live.reload()

    def broken(*args, **kwargs):
        raise KeyError("secret_key_name")

    monkeypatch.setattr(live_index.Index, "load", broken)
    with pytest.raises(MlatrError) as err:
        live.reload()
    assert "KeyError" not in str(err.value) and "secret_key_name" not in str(err.value)
    assert "server's log" in str(err.value) and live.error == str(err.value)
    assert len(live.current().index) > 0  # the previous index stays in service


@pytest.mark.parametrize("name, array, says", [
    ("caption_clip.npy", lambda a: a.astype(np.float64) + 0.5, "float64 values, expected integers"),
    ("embeddings.npy", lambda a: a.astype(str), "values, expected floats"),
    ("embeddings.npy", lambda a: a[:, :-1], "expected [n, "),
])
def test_index_folder_array_of_the_wrong_kind_is_refused_by_file(served_toy, tmp_path, capsys, name, array, says):
    _, _, npz = served_toy
    folder = Index.load(npz).save(tmp_path / "lib.idx")
    (shard,) = [p for p in folder.iterdir() if p.name.startswith("shard-")]
    np.save(shard / name, array(np.load(shard / name)))
    assert_user_error(run_cli(capsys, "search", folder, "a tone"), f"{shard / name}: ", says)
