"""Reports (ATRI Tables 1-3), cases, plots and the eval-embeddings / eval-demo commands."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from mlatr.cli import main
from mlatr.evaluation import evaluate_embeddings, evaluate_embeddings_with_ranks
from mlatr.evaluation.cases import format_cases, rank_cases
from mlatr.evaluation.report import format_consistency, format_table1, report_markdown, write_report
from mlatr.evaluation.synthetic import structured_embeddings


@pytest.fixture(scope="module")
def arrays():
    return structured_embeddings(n_clips=40, captions_per_clip=2, languages=["eng", "fra", "jpn"], dim=16,
                                 missing_fraction=0.1, seed=1)


@pytest.fixture(scope="module")
def results(arrays):
    return evaluate_embeddings(**arrays)


def test_synthetic_has_missing_translations_and_noisier_languages(arrays, results):
    tl = arrays["text_lang"]
    assert (tl == "eng").sum() == 80 and (tl == "fra").sum() < 80 and (tl == "jpn").sum() < 80
    assert results["t2a"]["eng"]["R1"] > results["t2a"]["jpn"]["R1"]
    again = structured_embeddings(n_clips=40, captions_per_clip=2, languages=["eng", "fra", "jpn"], dim=16,
                                  missing_fraction=0.1, seed=1)
    assert all(np.array_equal(again[k], arrays[k]) for k in arrays)


def test_table1_text_holds_the_numbers(results):
    text = format_table1(results)
    lines = text.splitlines()
    assert lines[1].split() == ["Lang", "T2A", "R@1", "T2A", "R@5", "T2A", "mAP10", "A2T", "R@1", "A2T", "R@5",
                                "A2T", "mAP10"]
    rows = {ln.split()[0]: ln.split()[1:] for ln in lines[3:]}
    assert list(rows) == ["eng", "fra", "jpn", "avg"]
    for lang, cells in rows.items():
        want = [results["t2a"][lang]["R1"], results["t2a"][lang]["R5"], results["t2a"][lang]["mAP10"],
                results["a2t"][lang]["R1"], results["a2t"][lang]["R5"], results["a2t"][lang]["mAP10"]]
        assert cells == [f"{v:.2f}" for v in want]


def test_several_methods_side_by_side_and_bold_best(results, arrays):
    other = evaluate_embeddings(**{**arrays, "text": arrays["text"] + 0.5 * np.random.default_rng(0).normal(
        size=arrays["text"].shape).astype(np.float32)})
    both = {"A": results, "B": other}
    t1 = format_table1(both)
    assert t1.splitlines()[1].split()[:2] == ["Method", "Lang"]
    assert sum(ln.startswith("A ") for ln in t1.splitlines()) == 4
    assert sum(ln.startswith("B ") for ln in t1.splitlines()) == 4
    cons = format_consistency(both)
    assert f"{results['consistency']['mrv']:.2f}" in cons and f"{other['consistency']['mrv']:.2f}" in cons
    md = report_markdown(both)
    best = max(results["t2a"]["eng"]["R1"], other["t2a"]["eng"]["R1"])
    assert f"**{best:.2f}**" in md


def test_write_report_files(tmp_path, results):
    paths = write_report(tmp_path, results)
    assert sorted(p.name for p in paths) == ["report.md", "table1.csv", "table2.csv", "table3.csv"]
    rows = list(csv.DictReader(open(tmp_path / "table1.csv", encoding="utf-8")))
    assert [r["Lang"] for r in rows] == ["eng", "fra", "jpn", "avg"]
    assert float(rows[1]["A2T mAP10"]) == pytest.approx(results["a2t"]["fra"]["mAP10"])
    t2 = list(csv.DictReader(open(tmp_path / "table2.csv", encoding="utf-8")))
    assert [r["Lang"] for r in t2] == ["fra", "jpn", "avg"]
    assert float(t2[1]["Dis"]) == pytest.approx(results["consistency"]["dis"]["jpn"])
    assert float(t2[2]["Gap"]) == pytest.approx((results["consistency"]["gap"]["fra"]
                                                 + results["consistency"]["gap"]["jpn"]) / 2)
    t3 = list(csv.DictReader(open(tmp_path / "table3.csv", encoding="utf-8")))
    assert float(t3[0]["MRV"]) == pytest.approx(results["consistency"]["mrv"])
    assert "## Table 2" in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_cases_give_the_rank_per_language(arrays):
    ev = evaluate_embeddings_with_ranks(**arrays)
    cases = rank_cases(ev, 3)
    assert len(cases) == 3 and cases[0]["spread"] >= cases[1]["spread"] >= cases[2]["spread"]
    # recompute the rank of case 0 in French by hand
    tl, tg, ta = arrays["text_lang"], arrays["text_group"], arrays["text_audio"]
    i = int(np.nonzero((tg == cases[0]["group"]) & (tl == "fra"))[0][0])
    a = arrays["audio"] / np.linalg.norm(arrays["audio"], axis=1, keepdims=True)
    t = arrays["text"][i] / np.linalg.norm(arrays["text"][i])
    s = a @ t
    assert cases[0]["ranks"]["fra"] == 1 + int(np.sum(s > s[ta[i]]))
    assert cases[0]["clip"] == ta[i]
    assert str(cases[0]["group"]) in format_cases(cases)
    assert [c["group"] for c in rank_cases(ev, 2, select="first")] == sorted(c["group"] for c in
                                                                            rank_cases(ev, 10**6, "first"))[:2]


def test_eval_embeddings_cli(tmp_path, arrays, capsys):
    npz = tmp_path / "emb.npz"
    np.savez(npz, **arrays)
    out_json = tmp_path / "res.json"
    rc = main(["eval-embeddings", str(npz), "--json", str(out_json), "--report", str(tmp_path / "rep"),
               "--plot", str(tmp_path / "plots"), "--cases", "2", "--tsne-clips", "10"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Table 1" in printed and "Table 2" in printed and "Table 3" in printed and "Cases" in printed
    got = json.loads(out_json.read_text(encoding="utf-8"))
    want = evaluate_embeddings(**arrays)
    assert got["t2a"]["fra"]["R5"] == pytest.approx(want["t2a"]["fra"]["R5"])
    assert got["consistency"]["mrv"] == pytest.approx(want["consistency"]["mrv"])
    assert len(got["cases"]) == 2
    for name in ("recall_by_language.png", "rank_spread.png", "tsne.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "rep" / "table1.csv").exists()


def test_eval_embeddings_cli_missing_key(tmp_path, arrays, capsys):
    npz = tmp_path / "emb.npz"
    np.savez(npz, **{k: v for k, v in arrays.items() if k != "text_group"})
    assert main(["eval-embeddings", str(npz)]) == 2
    err = capsys.readouterr().err
    assert str(npz) in err and "text_group" in err and "missing array" in err


def test_eval_embeddings_cli_bad_array(tmp_path, arrays, capsys):
    npz = tmp_path / "emb.npz"
    bad = dict(arrays)
    bad["text_audio"] = bad["text_audio"] + 1000
    np.savez(npz, **bad)
    assert main(["eval-embeddings", str(npz)]) == 2
    err = capsys.readouterr().err
    assert str(npz) in err and "text_audio: index" in err and "out of range" in err


def test_eval_demo(tmp_path, capsys):
    assert main(["eval-demo", "--seed", "3", "--clips", "60", "--out", str(tmp_path), "--tsne-clips", "10"]) == 0
    printed = capsys.readouterr().out
    assert "noisy" in printed and "aligned" in printed and "Cases" in printed
    res = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(res) == {"noisy", "aligned", "cases"}
    assert res["aligned"]["consistency"]["mrv"] < res["noisy"]["consistency"]["mrv"]
    assert res["aligned"]["consistency"]["gap_avg"] < res["noisy"]["consistency"]["gap_avg"]
    for name in ("report.md", "table1.csv", "table2.csv", "table3.csv", "recall_by_language.png", "rank_spread.png",
                 "tsne.png"):
        assert (tmp_path / name).stat().st_size > 0
