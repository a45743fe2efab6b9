"""A calibration belongs to its model's weights (issue 45, item 1): stored with the checkpoint and the model folder,
used by mlatr.load and every index of the model, reported by index info, the model card and --json; a model
without one (or with another model's) is uncalibrated everywhere: no relevance, no "nothing relevant", no
classification probabilities. Each index fits its own "nothing relevant" level and stores it."""

import json
import shutil

import numpy as np
import pytest
import torch

from clitools import run_cli
from mlatr.errors import MlatrError
from mlatr.inference.checkpoint import export_model, load_model, read_checkpoint, save_checkpoint, store_calibration
from mlatr.search import Index
from mlatr.search.abstention import conformal_level, relevance_logit
from mlatr.search.relevance import Calibration
from toydata import toy_calibration


@pytest.fixture(scope="module")
def models(served_toy, tmp_path_factory):
    """(manifest, calibrated checkpoint, the same weights without a calibration, its index)."""
    manifest, ckpt, index = served_toy
    bare = tmp_path_factory.mktemp("bare") / "bare.pt"
    shutil.copyfile(ckpt, bare)
    store_calibration(bare, None)
    return manifest, ckpt, bare, index


def test_the_calibration_travels_with_the_weights_and_only_with_them(models, tmp_path):
    _, ckpt, bare, _ = models
    calibrated = load_model(ckpt)
    assert calibrated.calibration["weights_sha256"] == calibrated.weights_sha256()
    assert calibrated.calibration_note is None
    assert load_model(bare).calibration is None and "carries no calibration" in load_model(bare).calibration_note
    # another model's calibration is refused when stored, and not used when it is there all the same
    other = toy_calibration("0" * 64)
    with pytest.raises(MlatrError, match="fitted for other weights"):
        store_calibration(bare, other)
    state = read_checkpoint(bare)
    state["calibration"] = other
    state.pop("format")
    torch.save({"format": "mlatr-checkpoint-1", **state}, tmp_path / "foreign.pt")
    foreign = load_model(tmp_path / "foreign.pt")
    assert foreign.calibration is None and "fitted for other weights (sha256 000000000000" in foreign.calibration_note
    # a model folder carries it in config.json, the card says which
    folder = export_model(ckpt, tmp_path / "folder")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["calibration"] == read_checkpoint(ckpt)["calibration"]
    assert load_model(folder).calibration == calibrated.calibration
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"| relevance calibration | {Calibration.from_dict(calibrated.calibration).id}, fitted for these weights" \
        in card
    bare_folder = export_model(bare, tmp_path / "bare-folder")
    assert "calibration" not in json.loads((bare_folder / "config.json").read_text(encoding="utf-8"))
    assert "| relevance calibration | none: searches carry no relevance" in \
        (bare_folder / "README.md").read_text(encoding="utf-8")
    with pytest.raises(MlatrError, match="fitted for other weights"):
        save_checkpoint(tmp_path / "x.pt", {"model_config": state["model_config"], "model": state["model"]}, other)


def test_an_uncalibrated_model_ranks_but_gives_no_relevance(models, capsys):
    manifest, ckpt, bare, index_path = models
    with_cal = Index.load(index_path)
    without = Index.load(index_path, model=load_model(bare))  # the same weights: allowed, but no calibration
    a, b = with_cal.search_text("a high tone", "eng", 5), without.search_text("a high tone", "eng", 5)
    assert [h.id for h in a] == [h.id for h in b]  # the same order (the default ranking)
    assert a.calibrated and all(0 <= h.relevance <= 1 for h in a) and a.min_relevance is not None
    assert not b.calibrated and all(h.relevance is None for h in b) and b.relevance is None
    assert not b.nothing_relevant and b.min_relevance is None and "carries no calibration" in b.uncalibrated
    assert b.to_dict()["calibrated"] is False and "uncalibrated" in b.to_dict()
    sound = without.search_audio(with_cal.paths[0], 3)
    assert not sound.calibrated and all(h.relevance is None for h in sound)
    assert without.summary()["calibration"] == {"calibrated": False, "why": b.uncalibrated}
    # the command line says so, in its table and its JSON
    out = run_cli(capsys, "search", index_path, "a high tone", "--model", bare)
    assert out.code == 0 and "relevance: not calibrated (the model carries no calibration" in out.out
    js = json.loads(run_cli(capsys, "search", index_path, "a high tone", "--model", bare, "--json").out)
    assert js["calibrated"] is False and js["relevance"] is None and all(r["relevance"] is None for r in js["results"])
    cls = json.loads(run_cli(capsys, "classify", with_cal.paths[0], "--labels", "low,high", "--model", bare,
                             "--json").out)
    assert cls["calibrated"] is False and cls["results"][0]["probability"] is None
    assert cls["results"][0]["none_of_these"] is None
    cls = json.loads(run_cli(capsys, "classify", with_cal.paths[0], "--labels", "low,high", "--model", ckpt,
                             "--json").out)
    assert cls["calibrated"] is True and 0 <= cls["results"][0]["probability"] <= 1


def test_an_index_refuses_a_calibration_of_other_weights(models, tmp_path):
    manifest, ckpt, _, index_path = models
    loaded = load_model(ckpt)
    with torch.no_grad():  # another model: other weights, carrying its own calibration
        for p in loaded.model.parameters():
            p.add_(0.01)
    loaded._digests.clear()
    loaded.use_calibration(toy_calibration(loaded.weights_sha256()))
    assert loaded.calibration is not None
    index = Index.load(index_path, model=loaded, allow_other_model=True)
    hits = index.search_text("a high tone", "eng", 3)
    assert not hits.calibrated and "the index's embeddings were made by weights" in hits.uncalibrated
    assert all(h.relevance is None for h in hits)


def test_each_index_fits_stores_and_refits_its_own_level(models, tmp_path, capsys):
    manifest, ckpt, _, index_path = models
    out = tmp_path / "lib.idx"
    assert run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", manifest, "-o", out, "--caption-langs",
                   "eng,fra", "--no-progress").code == 0
    index = Index.load(out)
    record = index.meta["abstention"]
    cal = index.calibration()
    assert record["calibration"] == cal.id and record["clips"] == len(index) and record["queries"] == 80
    # the level is the conformal one of the index draw's relevance logits, recomputed here
    from mlatr.evaluation.nonsense import INDEX_SEED, nonsense_queries

    queries = nonsense_queries(list(load_model(ckpt).data["languages"]), seed=INDEX_SEED)
    logits = [relevance_logit(index.search_text(q["text"], q["lang"], 10).relevance) for q in queries]
    assert record["level"] == pytest.approx(conformal_level(np.asarray(logits)), abs=1e-9)
    assert np.sum(np.asarray(logits) < record["level"]) >= 77  # ceil(81 * 0.95) of the 80 at least (ties: more)
    info = json.loads(run_cli(capsys, "index", "info", out, "--json").out)
    assert info["calibration"]["calibrated"] and info["calibration"]["id"] == cal.id
    assert info["nothing_relevant"]["stored"] is True and info["nothing_relevant"]["level"] == record["level"]
    # the library changes: the stored level is stale, fitted again in memory, stored again by a compact
    assert run_cli(capsys, "index", "delete", out, index.ids[0]).code == 0
    assert Index.load(out).abstention()["stored"] is False
    assert run_cli(capsys, "index", "compact", out).code == 0
    again = Index.load(out)
    assert again.abstention()["stored"] is True and again.meta["abstention"]["clips"] == len(index) - 1


def test_a_calibration_stored_in_a_half_precision_folder_is_the_loaded_models(models, tmp_path):
    """A model folder whose weights are stored in float16 is loaded into float32 modules: a calibration stored in it
    (mlatr experiment calibrate --model FOLDER) is stamped with the digest of the weights as loaded, and used."""
    from safetensors.torch import load_file, save_file

    from mlatr.inference.model_folder import read_model_folder
    from mlatr.inference.model_identity import weights_sha256

    _, _, bare, _ = models
    folder = export_model(bare, tmp_path / "half")
    weights = next(folder.glob("*.safetensors"))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(weights).items()}, weights)
    digest = weights_sha256(read_model_folder(folder)["model"])
    loaded = load_model(folder)
    assert digest == loaded.weights_sha256() and digest != load_model(bare).weights_sha256()  # rounded once
    assert "| relevance calibration | none:" in (folder / "README.md").read_text(encoding="utf-8")
    store_calibration(folder, toy_calibration(digest))
    assert load_model(folder).calibration["weights_sha256"] == digest
    stored = Calibration.from_dict(toy_calibration(digest)).id
    assert f"| relevance calibration | {stored}, fitted for these weights" in \
        (folder / "README.md").read_text(encoding="utf-8")  # the card says which it now carries
