"""Every file a user may have received is read without running what it holds and without filling memory or
blocking: checkpoints through ``torch.load(weights_only=True)`` (a pickle that would run code is refused, and does
not run), arrays without pickles, YAML with the safe loader, JSON bounded in depth and size and never from a FIFO,
safetensors headers checked. The source scan keeps it so for code written later."""

import io
import json
import os
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from clitools import assert_user_error, run_cli
from mlatr.errors import MlatrError
from mlatr.json_input import read_json_file

SRC = Path(__file__).parents[1] / "src" / "mlatr"


def _calls(pattern: str) -> list[tuple[str, str]]:
    """``(file:line, the call's text up to its closing line)`` of every match of ``pattern`` in the sources."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if re.search(pattern, line) and not line.lstrip().startswith("#"):
                found.append((f"{path.relative_to(SRC)}:{i + 1}", " ".join(lines[i:i + 3])))
    return found


def test_every_torch_load_reads_weights_only():
    calls = _calls(r"torch\.load\(")
    assert calls and all("weights_only=True" in text for _, text in calls), calls


def test_every_array_load_refuses_pickles():
    calls = _calls(r"np\.load\(")
    assert calls and not [where for where, text in calls if "allow_pickle=True" in text], calls


#: Modules allowed to import pickle, and why: none of them reads a file or a request.
PICKLE_USERS = {
    # the worker processes' own work and exceptions, checked to pickle (a round trip of an object made in this
    # process) before multiprocessing sends them between mlatr's own processes
    "inference/worker_pool.py",
}


def test_no_unsafe_deserialiser_is_used():
    for pattern in (r"^\s*import pickle|^\s*from pickle|cPickle|dill|joblib", r"yaml\.(load|unsafe_load)\(",
                    r"yaml\.(Unsafe|Full)?Loader", r"marshal\.loads?\(", r"shelve\.open"):
        found = [(where, text) for where, text in _calls(pattern) if where.split(":")[0] not in PICKLE_USERS]
        assert not found, (pattern, found)
    loads = [where for where, text in _calls(r"pickle\.loads?\(") if "pickle.loads(pickle.dumps(" not in text]
    assert not loads, loads  # where pickle is imported, it only ever reads back what it has just written


class RunsCode:
    """Unpickled, it would create a file: the proof that the pickle ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(tmp_path, capsys):
    marker = tmp_path / "it-ran"
    evil = tmp_path / "model.pt"
    torch.save({"model_config": {}, "model": RunsCode(marker)}, evil)
    r = run_cli(capsys, "embed", "--text", "a dog", "--model", evil, "-o", tmp_path / "out.npz")
    assert_user_error(r, str(evil))
    assert not marker.exists() and not (tmp_path / "out.npz").exists()
    np.save(tmp_path / "evil.npy", np.array([RunsCode(marker)], object), allow_pickle=True)
    with pytest.raises(ValueError):
        np.load(tmp_path / "evil.npy")  # what every np.load of mlatr does (allow_pickle=False, the default)
    assert not marker.exists()


def _model_folder(tmp_path: Path, served_toy) -> Path:
    out = tmp_path / "model"
    from mlatr.cli import main

    assert main(["export", "--model", str(served_toy[1]), "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("case", ["header length 2^60", "a shape of 2^60 values", "not safetensors"])
def test_hostile_safetensors_are_refused_before_allocating(served_toy, tmp_path, capsys, case):
    folder = _model_folder(tmp_path, served_toy)
    weights = folder / "model.safetensors"
    if case == "header length 2^60":
        weights.write_bytes(struct.pack("<Q", 2**60) + weights.read_bytes()[8:])
    elif case == "a shape of 2^60 values":
        header = json.dumps({"w": {"dtype": "F32", "shape": [2**40, 2**20], "data_offsets": [0, 16]}}).encode()
        weights.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 16)
    else:
        weights.write_bytes(b"PK\x03\x04" + os.urandom(64))
    r = run_cli(capsys, "embed", "--text", "a dog", "--model", folder, "-o", tmp_path / "out.npz")
    assert_user_error(r, "model.safetensors")


@pytest.mark.parametrize("content", ["[" * 100000 + "]" * 100000, "[1, 2]", '{"model_type": ' + "1" * 5000 + "}",
                                     "\xff\xfe not UTF-8"])
def test_a_hugging_face_folders_config_is_read_safely(tmp_path, content):
    from mlatr.models.hf_text import check_model_folder
    from mlatr.translation.hf_backend import read_model_type

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_bytes(content.encode("utf-8", "surrogateescape") if "\xff" not in content
                                         else b"\xff\xfe not UTF-8")
    with pytest.raises(MlatrError, match="config.json"):
        check_model_folder("xlmr", folder)
    with pytest.raises(MlatrError, match="config.json"):
        read_model_type(folder)


def test_a_fifo_config_is_never_opened(tmp_path):
    from mlatr.translation.hf_backend import read_model_type

    (tmp_path / "hf").mkdir()
    os.mkfifo(tmp_path / "hf" / "config.json")
    with pytest.raises(MlatrError, match="missing"):
        read_model_type(tmp_path / "hf")
    for path, kind in ((tmp_path / "hf" / "config.json", "a FIFO"), (Path("/dev/zero"), "a character device")):
        with pytest.raises(MlatrError, match=f"not a regular file but {kind}"):
            read_json_file(path)


@pytest.mark.parametrize("keys", ["[" * 100000 + "]" * 100000, '[["a", "b"]]', '{"a": 1}', "[[1, 2, 3], 4]"])
def test_a_frozen_text_cache_with_bad_keys_is_refused(tmp_path, keys):
    from mlatr.models.frozen_text import EmbeddingCache

    path = tmp_path / "cache.npz"
    np.savez(path, keys=np.array(keys), vectors=np.zeros((1, 4), np.float32))
    with pytest.raises(MlatrError, match="cache"):
        EmbeddingCache().load(path)


def test_a_frozen_text_cache_that_is_no_zip_is_refused(tmp_path):
    from mlatr.models.frozen_text import EmbeddingCache

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("keys.npy", b"\x93NUMPY garbage")
    (tmp_path / "cache.npz").write_bytes(buf.getvalue()[:40])
    with pytest.raises(MlatrError, match="not a readable mlatr embedding cache"):
        EmbeddingCache().load(tmp_path / "cache.npz")
