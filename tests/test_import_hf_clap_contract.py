"""Hostile round 3: ``import-checkpoint --from hf-clap`` under the error contract. Every file is read from inside
the folder only, regular files only, safetensors only; config fields typed and ranged; one ``mlatr: error:`` line
and exit 2, nothing written. Was: tracebacks, reads outside the folder, a hang on a FIFO, a 30 GB allocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")

from clap_folders import clap_folder  # noqa: E402
from clitools import assert_user_error, run_cli  # noqa: E402


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("clap") / "clap"
    clap_folder(root, fusion=False)
    return root


@pytest.fixture()
def clap(pristine, tmp_path):
    """A fresh copy of the tiny ClapModel folder to break."""
    folder = tmp_path / "clap"
    folder.mkdir()
    for f in pristine.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    return folder


def _edit(path, change):
    value = json.loads(path.read_text())
    value = change(value) or value
    path.write_text(json.dumps(value))


def _import(capsys, folder, tmp_path):
    out = tmp_path / "out.pt"
    r = run_cli(capsys, "import-checkpoint", "--from", "hf-clap", folder, "-o", out)
    assert not out.exists()
    assert len(r.err.strip().splitlines()) == 1, r.err
    return r


def test_the_pristine_folder_imports(clap, tmp_path, capsys):
    assert run_cli(capsys, "import-checkpoint", "--from", "hf-clap", clap, "-o", tmp_path / "ok.pt").code == 0


@pytest.mark.parametrize("change, fragments", [
    (lambda c: [c], ("config.json", "expected a JSON object")),
    (lambda c: c.update(projection_dim="abc"), ("projection_dim", "expected an integer")),
    (lambda c: c.update(projection_dim=10**7), ("config.projection_dim", "65,536")),
    (lambda c: c["text_config"].update(num_hidden_layers=100_000), ("text_config.num_hidden_layers", "0 to 128")),
    (lambda c: c["audio_config"].update(depths=[50_000, 50_000, 1], num_attention_heads=[1, 1, 1]),
     ("audio_config.depths", "layers in all")),
    (lambda c: c["audio_config"].update(depths="deep"), ("audio_config.depths", "a list of integers")),
    (lambda c: c["text_config"].update(hidden_size=4096), ("the weights do not fit", "shape mismatch")),
])
def test_config_fields_are_typed_and_ranged(clap, tmp_path, capsys, change, fragments):
    _edit(clap / "config.json", change)
    assert_user_error(_import(capsys, clap, tmp_path), *fragments)


def test_a_zero_hop_length_is_refused(clap, tmp_path, capsys):
    _edit(clap / "preprocessor_config.json", lambda c: c.update(hop_length=0))
    assert_user_error(_import(capsys, clap, tmp_path), "preprocessor_config.hop_length", "1 to 65,536")


@pytest.mark.parametrize("target", ["/etc/passwd", "../../outside.safetensors", "sub/../../x.safetensors"])
def test_a_weight_map_naming_a_file_outside_is_refused(clap, tmp_path, capsys, target):
    (tmp_path / "outside.safetensors").write_bytes((clap / "model.safetensors").read_bytes())
    (clap / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"logit_scale_a": target}}))
    r = _import(capsys, clap, tmp_path)
    assert_user_error(r, "names a file outside" if target.endswith(".safetensors") else ".safetensors files only")


def test_a_weights_link_leading_outside_is_refused(clap, tmp_path, capsys):
    outside = tmp_path / "elsewhere.safetensors"
    os.replace(clap / "model.safetensors", outside)
    (clap / "model.safetensors").symlink_to(outside)
    assert_user_error(_import(capsys, clap, tmp_path), "leads outside")


def test_a_tokenizer_link_leading_outside_is_refused(clap, tmp_path, capsys):
    (clap / "tokenizer.json").unlink()
    (clap / "tokenizer.json").symlink_to("/etc/passwd")
    assert_user_error(_import(capsys, clap, tmp_path), "tokenizer.json leads outside")


def test_truncated_safetensors_are_one_error(clap, tmp_path, capsys):
    data = (clap / "model.safetensors").read_bytes()
    (clap / "model.safetensors").write_bytes(data[: len(data) // 2])
    assert_user_error(_import(capsys, clap, tmp_path), "model.safetensors: cannot read the weights")


def test_pickled_weights_are_refused_with_the_conversion(clap, tmp_path, capsys):
    (clap / "model.safetensors").rename(clap / "pytorch_model.bin")
    assert_user_error(_import(capsys, clap, tmp_path), "pickled weights", "safe_serialization=True")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "preprocessor_config.json"])
def test_a_fifo_in_the_folder_is_refused_unopened(clap, tmp_path, name):
    """Was: the import hung reading the FIFO. A subprocess, so a hang fails the test instead of stopping it."""
    (clap / name).unlink()
    os.mkfifo(clap / name)
    proc = subprocess.run([sys.executable, "-m", "mlatr", "import-checkpoint", "--from", "hf-clap", str(clap),
                           "-o", str(tmp_path / "out.pt")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is a FIFO" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
