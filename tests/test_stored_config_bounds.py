"""Hostile round 3, models trusted by their config: a stored model's config is bounded before anything is built
(every number typed and ranged by its name, nested options included; sizes checked against the weights' shapes
on the meta device), its tokenizer validated, and a panic inside a Rust tokenizer is one error."""

from __future__ import annotations

import json
import os

import pytest

import mlatr
from clitools import assert_user_error, run_cli
from mlatr.errors import InputError, MlatrError
from mlatr.inference import stored_model
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.models.hf_text import check_tokenizer_files
from mlatr.stored_config import MAX_LAYERS, check_bounded, check_model_config


@pytest.fixture()
def folder(served_toy, tmp_path, capsys):
    """The toy model exported as a model folder (config.json + model.safetensors) to edit."""
    out = tmp_path / "model"
    assert run_cli(capsys, "export", served_toy[1], "-o", out).code == 0
    return out


def _edit(folder, change):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    change(config["model_config"])
    path.write_text(json.dumps(config))


def _embed(capsys, model, tmp_path, text="a low tone"):
    return run_cli(capsys, "embed", "--text", text, "--model", model, "-o", tmp_path / "e.npz", "--no-progress")


def test_a_layer_count_beyond_any_encoder_is_refused_before_building(folder, tmp_path, capsys):
    """Was: num_layers 20000 built 1.6 GB of layers before the weights were refused (200,000: past 6 GB)."""
    _edit(folder, lambda c: c["text_encoder"].update(num_layers=20_000))
    r = _embed(capsys, folder, tmp_path)
    assert_user_error(r, "model_config.text_encoder.num_layers", f"0 to {MAX_LAYERS}")
    assert len(r.err.strip().splitlines()) == 1


def test_a_nested_fft_length_is_refused_by_its_name(folder, tmp_path, capsys):
    """Was: a nested n_fft of 4,194,304 loaded and embedded at 5 GB."""
    _edit(folder, lambda c: c["audio_encoder"]["frontend"].update(n_fft=4_194_304))
    assert_user_error(_embed(capsys, folder, tmp_path), "model_config.audio_encoder.frontend.n_fft", "65,536")


@pytest.mark.parametrize("path, value, fragment", [
    (("audio_encoder", "channels"), [8, 10**7], "channels[1]"),
    (("audio_encoder", "dropout"), 3.0, "audio_encoder.dropout"),
    (("audio_encoder", "frontend", "sample_rate"), 10**7, "frontend.sample_rate"),
    (("text_encoder", "max_length"), 10**7, "text_encoder.max_length"),
    (("audio_encoder", "channels"), [8] * 5000, "a list of 5,000 items"),
])
def test_numbers_anywhere_in_the_options_are_ranged(served_toy, path, value, fragment):
    config = read_checkpoint(served_toy[1])["model_config"]
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(InputError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        check_model_config("ck.pt", config)


def test_check_bounded_on_a_hugging_face_tree():
    check_bounded("c.json", {"depths": [2, 2, 6, 2], "num_attention_heads": [4, 8, 16, 32], "hidden_size": 768}, "a")
    with pytest.raises(InputError, match="a.depths: 100,000 layers in all"):
        check_bounded("c.json", {"depths": [50_000, 50_000]}, "a")
    with pytest.raises(InputError, match="expected a finite number"):
        check_bounded("c.json", {"x": {"y": float("nan")}}, "a")


def test_sizes_the_weights_do_not_hold_are_refused_before_the_model_is_built(folder, tmp_path, capsys, monkeypatch):
    """Within every range, but 3 text layers and a 4096-wide audio encoder where the weights hold 1 layer and 32:
    refused from the weights' shapes on the meta device, the real build never started."""
    _edit(folder, lambda c: (c["text_encoder"].update(num_layers=3), c["audio_encoder"].update(dim=4096,
                                                                                                 ff_dim=65_536)))

    def no_build(*args):
        raise AssertionError("the model was built")

    monkeypatch.setattr(stored_model, "_build", no_build)
    r = _embed(capsys, folder, tmp_path)
    assert_user_error(r, "model.safetensors: model: the weights do not fit model_config (found before building it",
                      "tensor(s) the weights lack", "text_encoder.transformer.layers.1.",
                      "tensor(s) of another shape", "stored [32], config [4096]")


def _hostile_tokenizer(config):
    tok = json.loads(config["text_encoder"]["tokenizer"])
    tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|a)+$"
    config["text_encoder"]["tokenizer"] = json.dumps(tok)


def test_a_tokenizer_with_a_hostile_regex_is_refused_at_load(folder, tmp_path, capsys):
    """Was: a tokenizer regex (a|a)+$ in the folder made every text query raise a Rust panic that
    `except Exception` does not catch, with a 70-line backtrace."""
    _edit(folder, _hostile_tokenizer)
    r = _embed(capsys, folder, tmp_path, text="a" * 40 + "b")
    assert_user_error(r, "tokenizer: the regular expression '(a|a)+$' is not one mlatr's tokenizer uses")
    assert len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("tokenizer, fragment", [
    ("[" * 10_000 + "]" * 10_000, "nested too deeply"), ("not json", "invalid JSON"), (7, "found int"),
    (json.dumps({"model": {"type": "Unigram", "vocab": []}}), "expected a BPE tokenizer"),
])
def test_a_damaged_tokenizer_is_refused_naming_the_field(served_toy, tmp_path, tokenizer, fragment):
    from mlatr.inference.checkpoint import save_checkpoint

    state = read_checkpoint(served_toy[1])
    state["model_config"]["text_encoder"]["tokenizer"] = tokenizer
    save_checkpoint(tmp_path / "bad.pt", {k: v for k, v in state.items() if k != "format"})
    with pytest.raises(InputError, match=f"model_config: cannot build the model: .*tokenizer: .*{fragment}"):
        mlatr.load(tmp_path / "bad.pt", device="cpu")


def test_a_panic_inside_the_tokenizer_is_one_error(served_toy):
    """The Rust panic (pyo3's PanicException derives from BaseException) becomes an MlatrError, whichever
    tokenizer raised it: here one made to panic behind the load-time check."""
    from tokenizers import Tokenizer

    model = mlatr.load(served_toy[1], device="cpu")
    encoder = model.model.text_encoder
    tok = json.loads(encoder.tokenizer.to_json())
    tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|a)+$"
    encoder.tokenizer.tokenizer = Tokenizer.from_str(json.dumps(tok))
    with pytest.raises(MlatrError, match="encoding text: the tokenizer failed inside its Rust code"):
        model.embed_text(["a" * 40 + "b"], "eng")


def test_hugging_face_tokenizer_files_are_checked_before_they_are_read(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text("[" * 100_000)
    with pytest.raises(MlatrError, match="nested too deeply"):
        check_tokenizer_files(tmp_path, "text encoder 'xlmr'")
    (tmp_path / "tokenizer_config.json").write_text("{}")
    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(MlatrError, match="tokenizer.json is a FIFO"):
        check_tokenizer_files(tmp_path, "text encoder 'xlmr'")
