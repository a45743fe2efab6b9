"""The learning curve (mlatr.experiments.learning_curve) on generated clips: nested fractions, the ensemble of
heads (its maths: test_ensemble_heads), one results file per curve that a rerun resumes.

No aiSFX and no real text model: the stand-in data and hashed text vectors of test_unseen_library.
"""

import json

import numpy as np
import pytest

from mlatr.augmented_views import Augmentation, AugmentedView, joined_captions, partners
from mlatr.cli import main
from mlatr.experiments import learning_curve
from mlatr.experiments.learning_curve import FrozenInputs, fraction_rows, run_learning_curve
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
    trained, train = [], learning_curve._train_point
    monkeypatch.setattr(learning_curve, "_train_point", lambda *a, **k: trained.append(a[2]) or train(*a, **k))
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
    seen, train = [], learning_curve.train_heads
    monkeypatch.setattr(learning_curve, "train_heads", lambda m, feats, rows, *a, **k: seen.append(rows)
                        or train(m, feats, rows, *a, **k))
    res = run_learning_curve(FrozenInputs(data, bank, "e5-small", {}, {}), tmp_path / "aug", train_blocks=(0,),
                             fractions=(1.0,), seeds=(0,), epochs=1, batch_size=4, progress=False,
                             libraries=["lib0"])
    assert res["settings"]["augment"] == ["mix-0"]
    assert len(seen[0]) == 2 * 10 and any(" and " in r[0][0] for r in seen[0][10:])  # the clips, then the view
