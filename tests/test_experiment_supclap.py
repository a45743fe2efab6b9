"""`mlatr experiment supclap` on a minimal grid writes tables that match the runs, and the figures."""

import json

import numpy as np

import mlatr.lab.experiments.demo as demo
from mlatr.cli import main
from mlatr.lab.experiments.runner import read_step_log


def test_experiment_supclap_tiny(tmp_path, monkeypatch):
    # the tiny preset with smaller eval splits: 64 training clips = 2 steps of 32 (drift needs a second step)
    monkeypatch.setitem(demo.SIZES, "tiny", {"train": 64, "val": 8, "test": 8, "epochs": 1})
    out = tmp_path / "sc"
    rc = main(["experiment", "supclap", "--size", "tiny", "--methods", "infonce,infonce-bi-static",
               "--out", str(out), "--no-progress"])
    assert rc == 0
    report = out / "report"
    for name in ("drift.png", "radius.png", "positive_similarity.png", "convergence_t2a.png", "convergence_a2t.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    md = (report / "summary.md").read_text()
    results = json.loads((report / "results.json").read_text())
    assert set(results["methods"]) == {"infonce", "infonce-bi-static"}
    for method, label in results["methods"].items():
        run = out / "runs" / f"{method}-seed0"
        metrics = json.loads((run / "test_metrics.json").read_text())
        r1 = metrics["t2a"]["avg"]["R1"]
        assert f"| {label} | 1 | {r1:.2f} |" in md  # the table row is this run's test R@1
        steps = read_step_log(run / "log.jsonl")
        assert [s["step"] for s in steps] == [1, 2]
        drift = np.mean([s["drift_cos"] for s in steps if "drift_cos" in s])
        assert results["diagnostics"][label]["drift cos (mean)"] == f"{drift:.3f}"
        pos = json.loads((run / "test_positive_similarity.json").read_text())
        assert len(pos) == 8 * 8 * 5  # 8 test clips x 8 languages x 5 captions
    static = results["diagnostics"]["InfoNCE-bi-StaticSVR"]["radius first -> last step"]
    assert static != "-" and results["diagnostics"]["InfoNCE"]["radius first -> last step"] == "-"
    svr_steps = read_step_log(out / "runs" / "infonce-bi-static-seed0" / "log.jsonl")
    first, last = (f"{svr_steps[i]['svr_distance']:.3f}" for i in (0, -1))  # the distance R is plotted against
    assert results["diagnostics"]["InfoNCE-bi-StaticSVR"]["||a⁺−t⁺|| first -> last step"] == f"{first} -> {last}"
    # rerunning resumes: nothing is retrained, the same report comes out
    assert main(["experiment", "supclap", "--size", "tiny", "--methods", "infonce,infonce-bi-static",
                 "--out", str(out), "--no-progress"]) == 0
    assert json.loads((report / "results.json").read_text())["results"] == results["results"]
    # --report-only reports the finished runs it finds, trains nothing
    assert main(["experiment", "supclap", "--size", "tiny", "--methods", "infonce,siglip", "--report-only",
                 "--out", str(out), "--no-progress"]) == 0
    only = json.loads((report / "results.json").read_text())
    assert list(only["methods"]) == ["infonce"] and not (out / "runs" / "siglip-seed0").exists()
    assert only["results"]["infonce"] == results["results"]["infonce"]
