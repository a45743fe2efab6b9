"""The CLI end to end: tiny demo (synth -> train x3 -> eval -> report), then eval/encode on its checkpoint."""

import json

import numpy as np
import pytest

from mlatr.cli import main


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--size", "tiny", "--out", str(out), "--no-progress"]) == 0
    return out


def test_demo_writes_comparison(demo_dir):
    report = demo_dir / "report"
    results = json.loads((report / "results.json").read_text())
    assert set(results["summary"]) == {"ML-CLAP", "CACL", "KCL"}
    train = results["training"]
    # equal step budget, texts per epoch 1 : 2 : K=8 per clip
    steps = {name: runs[0]["steps"] for name, runs in train.items()}
    assert len(set(steps.values())) == 1
    texts = {name: runs[0]["texts_encoded"] for name, runs in train.items()}
    assert texts["CACL"] == 2 * texts["ML-CLAP"] and texts["KCL"] == 8 * texts["ML-CLAP"]
    for name in ("recall_by_language.png", "val_curves.png", "summary.md", "report.md", "table1.csv"):
        assert (report / name).stat().st_size > 0
    md = (report / "summary.md").read_text()
    assert "| ML-CLAP | 1 |" in md and "Training overhead" in md
    # the test metrics saved per run are the ones the summary aggregates
    m = json.loads((demo_dir / "runs" / "kcl-seed0" / "test_metrics.json").read_text())
    assert results["summary"]["KCL"]["MRV"][0] == pytest.approx(m["consistency"]["mrv"])


def test_demo_rerun_resumes_without_training(demo_dir, capsys):
    assert main(["demo", "--size", "tiny", "--out", str(demo_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("already trained") == 3


def test_rerun_refuses_a_finished_run_of_another_config(demo_dir, capsys):
    # --epochs 2 changes every run's config: the finished 1-epoch runs must not be passed off as them
    assert main(["demo", "--size", "tiny", "--epochs", "2", "--out", str(demo_dir), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "holds a finished run trained with another config" in err and "mlclap-seed0" in err
    assert "epochs: 1" in (demo_dir / "runs" / "mlclap-seed0" / "run-config.yaml").read_text()


def test_eval_and_encode_match_eval_embeddings(demo_dir, tmp_path):
    ckpt = demo_dir / "runs" / "kcl-seed0" / "best.pt"
    manifest = demo_dir / "data" / "manifest.jsonl"
    assert main(["eval", "--model", str(ckpt), "--manifest", str(manifest), "--split", "test",
                 "--json", str(tmp_path / "m.json"), "--device", "cpu"]) == 0
    direct = json.loads((tmp_path / "m.json").read_text())
    saved = json.loads((demo_dir / "runs" / "kcl-seed0" / "test_metrics.json").read_text())
    assert direct["t2a"]["avg"]["R1"] == pytest.approx(saved["t2a"]["avg"]["R1"])
    assert direct["consistency"]["mrv"] == pytest.approx(saved["consistency"]["mrv"])
    assert main(["encode", "--model", str(ckpt), "--manifest", str(manifest), "--split", "test",
                 "-o", str(tmp_path / "e.npz"), "--device", "cpu"]) == 0
    z = np.load(tmp_path / "e.npz")
    assert z["audio"].shape[0] == 16 and z["text"].shape[0] == 16 * 5 * 8
    np.testing.assert_allclose(np.linalg.norm(z["audio"], axis=1), 1.0, atol=1e-5)
    assert main(["eval-embeddings", str(tmp_path / "e.npz"), "--json", str(tmp_path / "m2.json")]) == 0
    again = json.loads((tmp_path / "m2.json").read_text())
    assert again["a2t"]["avg"]["mAP10"] == pytest.approx(direct["a2t"]["avg"]["mAP10"], abs=1e-4)


def test_eval_no_progress_silences_its_bars(demo_dir, capsys):
    """eval's bars (the encoding of clips and captions) go to stderr; --no-progress turns them off, the
    metrics still print."""
    ckpt = demo_dir / "runs" / "kcl-seed0" / "best.pt"
    manifest = demo_dir / "data" / "manifest.jsonl"
    argv = ["eval", "--model", str(ckpt), "--manifest", str(manifest), "--split", "test", "--device", "cpu"]
    assert main(argv) == 0
    shown = capsys.readouterr()
    assert "|" in shown.err and "R@1" in shown.out
    assert main(argv + ["--no-progress"]) == 0
    quiet = capsys.readouterr()
    assert "|" not in quiet.err and quiet.out == shown.out
