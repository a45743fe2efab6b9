"""The learning curve (mlatr.lab.experiments.learning_curve) on generated clips: nested fractions, the ensemble of
heads (its maths: test_ensemble_heads), one results file per curve that a rerun resumes.

No aiSFX and no real text model: the stand-in data and hashed text vectors of test_unseen_library.
"""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from mlatr.cli import main
from mlatr.errors import MlatrError
from mlatr.frozen_prefix import BlockFeatures
from mlatr.inference.encoded_split import project
from mlatr.lab.augmented_views import Augmentation, AugmentedView, joined_captions, partners
from mlatr.lab.experiments import head_recipe, learning_curve
from mlatr.lab.experiments.head_options import HEAD_OPTIONS
from mlatr.lab.experiments.learning_curve import FrozenInputs, fraction_rows, run_learning_curve
from mlatr.lab.experiments.text_search_eval import query_texts
from mlatr.models.aisfx import AisfxEncoder
from test_unseen_library import fake_text_space, make_data


def test_fractions_are_nested_stable_and_about_their_size():
    ids = [f"lib/clip{k}" for k in range(4000)]
    rows = list(range(len(ids)))
    quarter, half, whole = (set(fraction_rows(rows, ids, f, seed=3)) for f in (0.25, 0.5, 1.0))
    assert quarter < half < whole == set(rows)
    assert abs(len(quarter) - 1000) < 100 and abs(len(half) - 2000) < 130
    # a clip's membership depends on its id and the seed only: adding clips moves no old one
    more = ids + [f"new/clip{k}" for k in range(500)]
    assert set(fraction_rows(rows, more, 0.5, seed=3)) == half
    assert set(fraction_rows(rows, ids, 0.5, seed=4)) != half


@pytest.fixture
def inputs(tmp_path):
    data = make_data(n_libraries=3)
    _, bank = fake_text_space("e5-small", data, tmp_path / "cache")
    return FrozenInputs(data, bank, "e5-small", {}, {})


def test_fold_workers_give_the_results_of_one_process(inputs, tmp_path, monkeypatch):
    """Two spawned processes training folds side by side: the same records, figures and fold order as one."""
    kw = dict(train_blocks=(0,), fractions=(1.0,), seeds=(0,), epochs=2, batch_size=4, progress=False, ensemble=2)
    one = run_learning_curve(inputs, tmp_path / "one", **kw)
    pools, get_context = [], learning_curve.multiprocessing.get_context

    class Watched:  # the spawn context, noting each pool it makes
        def __init__(self, method):
            self.ctx = get_context(method)

        def Pool(self, processes, *args):  # noqa: N802 (multiprocessing's name)
            pools.append(processes)
            return self.ctx.Pool(processes, *args)

    monkeypatch.setattr(learning_curve.multiprocessing, "get_context", Watched)
    two = run_learning_curve(inputs, tmp_path / "two", workers=2, **kw)
    assert pools == [2]  # the folds were trained by two worker processes
    assert len(one["points"]["blocks0/fraction1/seed0"]["folds"]) == 3
    assert json.dumps(two["points"]) == json.dumps(one["points"])
    assert json.loads((tmp_path / "two" / "results.json").read_text(encoding="utf-8"))["points"] == one["points"]
    assert not (tmp_path / "two" / "heads").exists()


def test_every_point_and_fold_is_written_and_a_rerun_trains_nothing(inputs, tmp_path, monkeypatch):
    trained, train = [], learning_curve.train_recipe

    def counted(*a, **k):  # each pair the fold's recipe trains
        heads = train(*a, **k)
        trained.extend(heads.seeds)
        return heads

    monkeypatch.setattr(learning_curve, "train_recipe", counted)
    out = tmp_path / "curve"
    res = run_learning_curve(inputs, out, train_blocks=(0,), fractions=(0.5, 1.0), seeds=(0,), epochs=2,
                             batch_size=4, progress=False, ensemble=2)
    assert set(res["points"]) == {"blocks0/fraction0.5/seed0", "blocks0/fraction1/seed0"}
    assert len(trained) == 2 * 2 * 3  # 2 fractions x 2 ensemble members x 3 held-out libraries
    for point in res["points"].values():
        assert set(point["folds"]) == {"lib0", "lib1", "lib2"}
        expected = np.mean([point["folds"][f]["queries"]["t2a"]["avg"]["R10"] for f in point["folds"]
                            if point["folds"][f]["queries"]["n_queries"]])
        assert point["summary"]["t2a"]["avg"]["R10"] == pytest.approx(expected)
        # each fold trains on the other libraries' train clips (a fraction of them), never the held-out one
        whole = res["points"]["blocks0/fraction1/seed0"]["folds"]
        assert all(point["folds"][f]["train_clips"] <= whole[f]["train_clips"] for f in point["folds"])
    assert all(whole[f]["train_clips"] == 2 * 5 for f in whole)  # the 5 clips out of val of each other library
    assert json.loads((out / "results.json").read_text(encoding="utf-8")) == res
    assert (out / "learning-curve.png").read_bytes()[:4] == b"\x89PNG" and not (out / "heads").exists()
    two = learning_curve.plot_learning_curve({"v1": res, "v2": res}, tmp_path / "two.png", group="added")
    assert two.read_bytes()[:4] == b"\x89PNG"
    # earlier runs drawn together: a point with fewer folds than its file's most complete one (still running) is
    # left out, one label gathers several files
    partial = json.loads(json.dumps(res))
    del partial["points"]["blocks0/fraction0.5/seed0"]["folds"]["lib1"]
    (tmp_path / "partial.json").write_text(json.dumps(partial), encoding="utf-8")
    curves = learning_curve.complete_points([("a", out / "results.json"), ("a", tmp_path / "partial.json"),
                                             ("b", tmp_path / "partial.json")])
    assert sorted(curves["a"]["points"]) == ["0:blocks0/fraction0.5/seed0", "0:blocks0/fraction1/seed0",
                                             "1:blocks0/fraction1/seed0"]
    assert list(curves["b"]["points"]) == ["2:blocks0/fraction1/seed0"]
    assert curves["b"]["points"]["2:blocks0/fraction1/seed0"]["summary"] == res["points"][
        "blocks0/fraction1/seed0"]["summary"]
    assert main(["experiment", "learning-curve", "-o", str(tmp_path / "fig"), "--plot", f"a={out / 'results.json'}",
                 "--plot", f"b={tmp_path / 'partial.json'}", "--goals", "65,28"]) == 0
    assert (tmp_path / "fig" / "learning-curve.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["experiment", "learning-curve", "-o", str(tmp_path / "fig"), "--plot", "nolabel"]) == 2
    trained.clear()
    again = run_learning_curve(inputs, out, train_blocks=(0,), fractions=(0.5, 1.0), seeds=(0,), epochs=2,
                               batch_size=4, progress=False, ensemble=2)
    assert trained == [] and again == res
    run_learning_curve(inputs, out, train_blocks=(0,), fractions=(1.0,), seeds=(0,), epochs=3, batch_size=4,
                       progress=False)  # other settings: the curve starts again
    assert len(trained) == 3


def test_augmented_views_add_training_items_and_mark_the_settings(tmp_path, monkeypatch):
    data = make_data(n_libraries=3)
    mates = partners(data.manifest, Augmentation(("mix",)))
    data.views = [AugmentedView(Augmentation(("mix",)), data.features[::-1].copy(),
                                [joined_captions(c.captions, data.manifest.clips[j].captions) if j is not None
                                 else c.captions for c, j in zip(data.manifest.clips, mates, strict=True)], mates)]
    _, bank = fake_text_space("e5-small", data, tmp_path / "cache")  # the joined captions are embedded too
    seen, train = [], head_recipe.train_heads
    monkeypatch.setattr(head_recipe, "train_heads", lambda m, feats, rows, *a, **k: seen.append(rows)
                        or train(m, feats, rows, *a, **k))
    res = run_learning_curve(FrozenInputs(data, bank, "e5-small", {}, {}), tmp_path / "aug", train_blocks=(0,),
                             fractions=(1.0,), seeds=(0,), epochs=1, batch_size=4, progress=False,
                             libraries=["lib0"])
    assert res["settings"]["augment"] == ["mix-0"]
    assert len(seen[0]) == 2 * 10 and any(" and " in r[0][0] for r in seen[0][10:])  # the clips, then the view


def test_fold_records_hold_the_single_target_task_and_the_in_library_split_apart(inputs, tmp_path):
    res = run_learning_curve(inputs, tmp_path / "c", train_blocks=(0,), fractions=(1.0,), seeds=(0,), epochs=2,
                             batch_size=4, progress=False, in_library=True)
    assert "in_library" not in res["settings"]  # which folds run, as --libraries: a rerun adds them
    point = res["points"]["blocks0/fraction1/seed0"]
    assert list(point["folds"]) == ["lib0", "lib1", "lib2", "in-library"]
    clips = inputs.data.manifest.clips
    for fold, record in point["folds"].items():
        test = [c for c in clips if (c.split == "test" if fold == "in-library" else c.id.startswith(fold + "/"))]
        caps = record["captions"]
        assert caps["n_clips"] == len(test)  # every test clip's caption against every test clip
        assert caps["chance"]["t2a"]["R1"] == pytest.approx(100 / len(test))
        assert 0 <= caps["t2a"]["R1"] <= caps["t2a"]["R5"] <= caps["t2a"]["R10"] <= 100
    s = point["summary"]
    unseen = [point["folds"][f] for f in ("lib0", "lib1", "lib2")]
    assert s["captions"]["libraries"] == 3 and s["libraries"] == 3  # the in-library split is not a held-out fold
    assert s["captions"]["t2a"]["R10"] == pytest.approx(np.mean([r["captions"]["t2a"]["R10"] for r in unseen]))
    assert s["groups"]["added"]["captions"]["libraries"] == 3
    assert s["in_library"]["captions"]["t2a"]["R10"] == point["folds"]["in-library"]["captions"]["t2a"]["R10"]
    assert s["in_library"]["train_clips"] == sum(c.split == "train" for c in clips)
    assert s["train_clips"] == np.mean([r["train_clips"] for r in unseen])
    assert set(res["seconds"]["blocks0/fraction1/seed0"]) == set(point["folds"])


def test_a_kept_folds_heads_rebuild_the_model_that_made_its_embeddings(inputs, tmp_path):
    """``keep_embeddings``: each fold writes its held-out clips' and queries' embeddings and its heads (float16);
    :func:`learning_curve.fold_model` over those heads embeds them again as the fold's model did (what the
    calibration's scripts use to embed further texts with a fold's model)."""
    run_learning_curve(inputs, tmp_path / "c", train_blocks=(0,), fractions=(1.0,), seeds=(0,), epochs=2,
                       batch_size=4, progress=False, ensemble=2, heads="near-identity", keep_embeddings=True)
    kept = np.load(tmp_path / "c" / "embeddings" / "lib1.npz")
    model = learning_curve.fold_model(inputs, tmp_path / "c" / "embeddings" / "lib1.heads.pt",
                                      HEAD_OPTIONS["near-identity"], 2)
    q_text, q_lang, _ = query_texts(inputs.data)
    audio, queries = project(model, inputs.data.features[kept["rows"].tolist()],
                             inputs.bank.lookup(q_text, q_lang).numpy())
    assert audio.shape == kept["audio"].shape and queries.shape == kept["queries"].shape
    assert np.abs(audio - kept["audio"]).max() < 5e-3  # the heads stored in float16
    assert np.abs(queries - kept["queries"]).max() < 5e-3
    stored = torch.load(tmp_path / "c" / "embeddings" / "lib1.heads.pt", weights_only=True)
    torch.save({k: -v if k.startswith("audio_projection.") else v for k, v in stored.items()}, tmp_path / "neg.pt")
    negated = learning_curve.fold_model(inputs, tmp_path / "neg.pt", HEAD_OPTIONS["near-identity"], 2)
    audio_neg, _ = project(negated, inputs.data.features[kept["rows"].tolist()], inputs.bank.lookup(
        q_text, q_lang).numpy())
    assert np.abs(audio_neg - audio).max() > 0.1  # the stored weights are what it reads (not its initialisation)
    with pytest.raises(MlatrError, match="not the heads of 3 near-identity"):
        learning_curve.fold_model(inputs, tmp_path / "c" / "embeddings" / "lib1.heads.pt",
                                  HEAD_OPTIONS["near-identity"], 3)


def test_library_batches_hold_one_library_each(inputs, tmp_path, monkeypatch):
    assert head_recipe.library_groups(["b/x", "a/y", "b/z", "c/w"]) == [0, 1, 0, 2]
    seen, train = [], head_recipe.train_heads
    monkeypatch.setattr(head_recipe, "train_heads", lambda *a, **k: seen.append(k["batch_groups"])
                        or train(*a, **k))
    res = run_learning_curve(inputs, tmp_path / "lib", train_blocks=(0,), fractions=(1.0,), seeds=(0,), epochs=1,
                             batch_size=4, progress=False, libraries=["lib0"], library_batches=True)
    assert res["settings"]["library_batches"] is True
    assert seen == [[0] * 5 + [1] * 5]  # lib1's five training clips, then lib2's
    with pytest.raises(MlatrError, match="give one of them"):
        run_learning_curve(inputs, tmp_path / "both", train_blocks=(0,), seeds=(0,), fractions=(1.0,),
                           hard_negatives=2, library_batches=True, progress=False)


@pytest.fixture
def block_inputs(tmp_path):
    """Clips with stage-3 maps of a random aiSFX CNN (small maps), their pooled features through its frozen last
    block, hashed text features."""
    data = make_data(n_libraries=3)
    torch.manual_seed(0)
    enc = AisfxEncoder(pretrained=False, frozen=True)
    rng = np.random.default_rng(0)
    maps = np.abs(rng.standard_normal((len(data.manifest), 256, 2, 2))).astype(np.float32)
    blocks = BlockFeatures([maps], [(0, i, 1) for i in range(len(maps))], 3)
    data = replace(data, features=learning_curve.stage_features(enc, blocks, "cpu"), audio_encoder=enc)
    _, bank = fake_text_space("e5-small", data, tmp_path / "cache")
    return FrozenInputs(data, bank, "e5-small", {3: blocks}, {k: v.clone() for k, v in enc.cnn.state_dict().items()})


def test_a_trained_block_feeds_the_ensemble_and_its_own_pair_is_kept_as_joint(block_inputs, tmp_path, monkeypatch):
    joints, members, train_blocks, train = [], [], learning_curve._train_blocks, learning_curve.train_recipe
    logs, train_heads = [], learning_curve.train_heads

    def joint(*a, **k):
        feats, log = train_blocks(*a, **k)
        joints.append({"blocks": a[4], "returned": feats})
        return feats, log

    def ensemble(recipe, data, *a, **k):
        members.append({"features": data.features, "ensemble": recipe.ensemble})
        return train(recipe, data, *a, **k)

    monkeypatch.setattr(learning_curve, "_train_blocks", joint)
    monkeypatch.setattr(learning_curve, "train_recipe", ensemble)
    # the run that trains the block (the heads-only pairs train in head_recipe)
    monkeypatch.setattr(learning_curve, "train_heads", lambda *a, **k: logs.append(train_heads(*a, **k)) or logs[-1])
    res = run_learning_curve(block_inputs, tmp_path / "b", train_blocks=(1,), fractions=(1.0,), seeds=(0,), epochs=2,
                             tail_epochs=6, tail_lr=1e-2, batch_size=4, progress=False, libraries=["lib1"],
                             ensemble=2, tail_patience=1)
    assert res["settings"]["tail_patience"] == 1
    (joint,) = joints
    assert joint["blocks"] == 1 and [c["ensemble"] for c in members] == [2]
    frozen = block_inputs.data.features
    assert not np.allclose(joint["returned"], frozen)  # the block trained: every clip's features moved
    for c in members:  # the ensemble's pairs train on the trained block's features, not the frozen ones
        assert c["features"] is joint["returned"]
    # early stopping: the tail run ended one epoch after its best (or ran all six)
    tail_log = logs[0]
    best = max(tail_log, key=lambda e: e["val"])["epoch"]
    assert len(tail_log) == min(6, best + 1)
    fold = res["points"]["blocks1/fraction1/seed0"]["folds"]["lib1"]
    assert set(fold) == {"queries", "captions", "train_clips", "best_epoch", "joint", "tail_val"}
    assert fold["joint"]["best_epoch"] == best and len(fold["best_epoch"]) == 2
    assert fold["tail_val"] == [e["val"] for e in tail_log]
    assert fold["joint"]["captions"]["n_clips"] == fold["captions"]["n_clips"] == 6
    # one pair (no ensemble): the pair that trained with the block is the fold's record
    one = run_learning_curve(block_inputs, tmp_path / "one", train_blocks=(1,), fractions=(1.0,), seeds=(0,),
                             epochs=2, tail_epochs=2, tail_lr=1e-2, batch_size=4, progress=False, libraries=["lib1"])
    assert "joint" not in one["points"]["blocks1/fraction1/seed0"]["folds"]["lib1"]


def test_paired_differences_pair_folds_and_seeds(tmp_path):
    def fold(r10, r1, mrv, single, langs=(("eng", 0.0), ("cat", -10.0))):
        t2a = {lang: {"R1": r1, "R10": r10 + d} for lang, d in langs}
        t2a["avg"] = {"R1": r1, "R10": r10}
        return {"queries": {"n_queries": 3, "t2a": t2a, "a2t": {"avg": {"R1": 1.0}}, "consistency": {"mrv": mrv},
                            "chance": {"t2a": {"R1": 1.0, "R10": 5.0}, "a2t": {"R1": 1.0}}},
                "captions": {"n_clips": 9, "t2a": {"R1": single, "R5": single, "R10": single}}, "train_clips": 5}

    def results(values, blocks):
        return {"points": {f"blocks{blocks}/fraction1/seed{s}": {"train_blocks": blocks, "fraction": 1.0, "seed": s,
                                                                  "folds": {f: fold(*v) for f, v in folds.items()}}
                           for s, folds in values.items()}}

    base = results({0: {"wesnoth": (50, 20, 100, 30), "lmms": (40, 10, 200, 20), "added-1": (10, 1, 5, 5)},
                    1: {"wesnoth": (60, 30, 100, 30), "lmms": (30, 10, 300, 20)}}, 0)
    option = results({0: {"wesnoth": (56, 22, 90, 34), "lmms": (42, 9, 210, 20), "added-1": (0, 0, 0, 0)},
                      1: {"wesnoth": (61, 30, 80, 40), "lmms": (35, 10, 200, 30)}, 2: {"lmms": (1, 1, 1, 1)}}, 1)
    p = learning_curve.paired_differences(base, option)
    assert [s["seed"] for s in p["seeds"]] == [0, 1]  # seed 2 has no base; added-1 is not an original library
    s0 = p["seeds"][0]["metrics"]
    assert [r["fold"] for r in p["seeds"][0]["folds"]] == ["wesnoth", "lmms"]
    assert s0["R10"]["diff"] == pytest.approx(4.0)
    assert s0["R10"]["se"] == pytest.approx(np.std([6, 2], ddof=1) / 2 ** .5)
    assert (s0["R10"]["won"], s0["R1"]["won"], s0["R1"]["lost"]) == (2, 1, 1)
    assert (s0["MRV"]["diff"], s0["MRV"]["won"]) == (0.0, 1)  # a lower MRV wins
    assert s0["single R1"]["diff"] == pytest.approx(2.0)
    assert p["overall"]["R10"] == {"mean": pytest.approx(3.5), "min": pytest.approx(3.0), "max": pytest.approx(4.0),
                                   "seeds": 2, "base": pytest.approx(45.0), "option": pytest.approx(48.5)}
    assert p["seeds"][0]["lowest"]["base"] == ("cat", pytest.approx(35.0))
    assert p["overall"]["lowest language R10"]["option"] == pytest.approx(48.5 - 10)
    report = learning_curve.paired_report(p)
    assert "| 0 | wesnoth | 50.0 / 56.0 (+6.0)" in report and "**+4.0**" in report
    added = learning_curve.paired_differences(base, option, group="added")
    assert added["overall"]["R10"]["mean"] == pytest.approx(-10.0)
    # the CLI: a sub-record of the option's folds, files written per group
    for f in option["points"].values():
        for r in f["folds"].values():
            r["joint"] = {k: r[k] for k in ("queries", "captions")}
    (tmp_path / "a.json").write_text(json.dumps(base), encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(option), encoding="utf-8")
    assert main(["experiment", "learning-curve", "-o", str(tmp_path / "cmp"), "--paired", str(tmp_path / "a.json"),
                 f"{tmp_path / 'b.json'}#blocks=1#record=joint"]) == 0
    written = json.loads((tmp_path / "cmp" / "paired-original.json").read_text(encoding="utf-8"))
    assert written["overall"]["R10"]["mean"] == pytest.approx(3.5)
    assert (tmp_path / "cmp" / "paired-added.md").is_file() and not (tmp_path / "cmp" / "paired-in-library.md").exists()
    assert main(["experiment", "learning-curve", "--paired", str(tmp_path / "a.json"), "b#nothing"]) == 2


@pytest.mark.parametrize("compact", [False, True])
def test_a_bundle_gives_back_the_blocks_texts_and_features_it_was_made_from(tmp_path, compact):
    data = make_data(n_libraries=2)
    torch.manual_seed(0)
    enc = AisfxEncoder(pretrained=False, frozen=True)
    rng = np.random.default_rng(1)
    counts = [1 + k % 3 for k in range(len(data.manifest))]  # 1, 2 or 3 overlapping blocks (hop 50 of 100 frames)
    parts = []
    for n in counts:
        frames = rng.random(((n - 1) * 50 + 100, 96)).astype(np.float32) * 1.05
        parts.append(np.stack([frames[k * 50:k * 50 + 100] for k in range(n)])[:, None])
    starts = np.cumsum([0, *counts[:-1]])
    stage0 = BlockFeatures([np.concatenate(parts)], [(0, int(a), n) for a, n in zip(starts, counts, strict=True)], 0)
    data = replace(data, features=learning_curve.stage_features(enc, stage0, "cpu"), audio_encoder=enc)
    _, bank = fake_text_space("e5-small", data, tmp_path / "cache")
    inputs = FrozenInputs(data, bank, "e5-small", {0: stage0}, {k: v.clone() for k, v in enc.cnn.state_dict().items()})
    folder = learning_curve.export_bundle(inputs, tmp_path / "bundle", compact=compact)
    back = FrozenInputs.from_bundle(folder)
    assert [c.id for c in back.data.manifest.clips] == [c.id for c in data.manifest.clips]
    assert back.text_name == "e5-small"
    blocks_tol = 1.05 / 510 + 1e-6 if compact else 1.05 * 2 ** -11
    for i, n in enumerate(counts):
        got = back.blocks[0].blocks(i)
        assert got.shape == (n, 1, 100, 96) and np.abs(got - parts[i]).max() <= blocks_tol
    texts = [(lang, q["captions"][lang]) for q in data.queries for lang in data.languages] + [
        ("eng", c.captions["eng"][0]) for c in data.manifest.clips]
    want = bank.lookup([t for _, t in texts], [lang for lang, _ in texts]).numpy()
    got = back.bank.lookup([t for _, t in texts], [lang for lang, _ in texts]).numpy()
    tol = np.abs(want).max(axis=1, keepdims=True) / 254 + 1e-7 if compact else np.abs(want) * 2 ** -11 + 1e-7
    assert np.all(np.abs(got - want) <= tol)
    # the pooled features through the frozen CNN: within a thousandth (8 bits) or a ten-thousandth of their size
    difference = np.abs(back.data.features - data.features).max() / np.abs(data.features).max()
    assert difference <= (1e-3 if compact else 1e-4)
    files = {p.name for p in folder.iterdir()}
    assert files == ({"frames-0.npz", "texts-q8.npz"} if compact else {"blocks-0.npz", "texts.npz"}) | {
        "manifest.jsonl", "cnn.pt", "bundle.json"}
    if compact:  # written over a full bundle's folder: only the compact files are left
        assert learning_curve.export_bundle(inputs, tmp_path / "full") and learning_curve.export_bundle(
            inputs, tmp_path / "full", compact=True)
        assert not (tmp_path / "full" / "blocks-0.npz").exists()


def test_the_gpu_script_runs_its_plan_from_a_bundle_within_its_budget(tmp_path):
    """scripts/gpu-backbone.sh run, on the CPU with a toy bundle: the points of its plan, results.json in OUT; a call
    whose budget is spent starts no point and gives back what the curve holds."""
    queries = json.loads(learning_curve.QUERIES_PATH.read_text(encoding="utf-8"))
    data = replace(make_data(n_libraries=3), queries=queries["queries"], languages=list(queries["languages"]))
    torch.manual_seed(0)
    enc = AisfxEncoder(pretrained=False, frozen=True)
    blocks = np.random.default_rng(0).random((len(data.manifest), 1, 100, 96)).astype(np.float32)
    stage0 = BlockFeatures([blocks], [(0, i, 1) for i in range(len(blocks))], 0)
    data = replace(data, features=learning_curve.stage_features(enc, stage0, "cpu"), audio_encoder=enc)
    _, bank = fake_text_space("e5-small", data, tmp_path / "cache")
    inputs = FrozenInputs(data, bank, "e5-small", {0: stage0}, {k: v.clone() for k, v in enc.cnn.state_dict().items()})
    learning_curve.export_bundle(inputs, tmp_path / "bundle", compact=True)
    (tmp_path / "out").mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "DEVICE": "cpu", "BUNDLE": str(tmp_path / "bundle"),
           "CURVE": str(tmp_path / "curve"), "OUT": str(tmp_path / "out"), "PLAN": "1:0:added 0:1:added",
           "RECIPE": "--heads near-identity --epochs 1 --tail-epochs 2 --tail-patience 1 --batch-size 4 "
                     "--fractions 1 --libraries lib0"}
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu-backbone.sh"
    run = subprocess.run(["bash", str(script), "run"], env={**env, "PLAN": "1:0:added"}, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert list(res["points"]) == ["blocks1/fraction1/seed0"]
    assert list(res["points"]["blocks1/fraction1/seed0"]["folds"]) == ["lib0"]
    assert res["settings"]["tail_patience"] == 1 and "blocks1/fraction1/seed0 added (1 folds)" in run.stdout
    (tmp_path / "out" / "results.json").unlink()
    spent = subprocess.run(["bash", str(script), "run"], env={**env, "BUDGET_S": "0"}, capture_output=True,
                           text=True, timeout=600)
    assert spent.returncode == 0 and "budget spent: 1:0:added and after not started" in spent.stdout
    assert json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8")) == res
