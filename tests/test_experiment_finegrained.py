"""mlatr experiment finegrained end to end at the tiny size with one method: summary + Figure 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.lab.experiments.finegrained_report import hard_negative_triple


def test_tiny_lgmm_writes_summary_and_heatmap(tmp_path):
    out = tmp_path / "fg"
    assert main(["experiment", "finegrained", "--size", "tiny", "--methods", "lgmm", "--out", str(out),
                 "--no-progress", "--eval-every", "2"]) == 0
    run = out / "runs" / "lgmm-seed0"
    assert "eval_every: 2" in (run / "config.yaml").read_text()
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log if r["type"] == "epoch" and "val" in r] == [1]  # the last epoch
    report = out / "report"
    results = json.loads((report / "results.json").read_text())
    assert list(results["methods"]) == ["lgmm"]
    metrics = json.loads((out / "runs" / "lgmm-seed0" / "test_metrics.json").read_text())
    assert metrics["matching_head"] == {"name": "lgmm", "tau_w": 0.25, "lam": 10.0}
    assert results["results"]["lgmm"][0]["t2a"]["avg"]["R1"] == metrics["t2a"]["avg"]["R1"]
    md = (report / "summary.md").read_text()
    assert "| LGMM (L_InterC) | 1 |" in md and "word_to_clip.png" in md
    assert (report / "word_to_clip.png").stat().st_size > 10_000
    fig = results["figure2"]
    panel = fig["panels"][0]
    local = np.asarray(panel["local"])
    assert local.shape == (3, len(panel["tokens"])) and panel["tokens"][0] == "[CLS]"
    assert np.all(np.abs(local) <= 1 + 1e-5)  # cosines (eq. 4)
    # A1, A2 are hard negatives of A0: relatives through extra.variant_of
    test = Manifest.load(out / "data" / "manifest.jsonl").split("test")
    pos, negs = hard_negative_triple(test)
    assert fig["clips"] == [test[pos].id] + [test[i].id for i in negs]
    by_id = {c.id: c for c in test}
    family = {c.id for c in test if (c.extra or {}).get("variant_of")} | {
        c.extra["variant_of"] for c in test if (c.extra or {}).get("variant_of")}
    assert all(cid in family for cid in fig["clips"])
    assert panel["caption"] == by_id[fig["clips"][0]].captions["eng"][0]
    assert fig["negative_captions"] == [by_id[c].captions["eng"][0] for c in fig["clips"][1:]]
    assert all(f'("{cap}")' in md for cap in fig["negative_captions"])


def test_unknown_method_is_refused(tmp_path, capsys):
    assert main(["experiment", "finegrained", "--methods", "lgmm,nope", "--out", str(tmp_path)]) != 0
    assert "--methods: unknown nope" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
    with pytest.raises(SystemExit) as usage_error:  # argparse's usage error
        main(["experiment", "finegrained", "--eval-every", "0", "--out", str(tmp_path)])
    assert usage_error.value.code == 2
    assert "--eval-every: must be an integer >= 1, got 0" in capsys.readouterr().err
