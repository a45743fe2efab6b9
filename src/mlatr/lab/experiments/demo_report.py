"""``mlatr demo``: train the demo grid (:mod:`mlatr.lab.experiments.demo`), evaluate it and write the report.

Everything is resumable: rerunning the same command skips what is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from mlatr.data.synth.build import build_synthetic_benchmark
from mlatr.evaluation import format_report, plot_recall_by_language, write_report
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.lab.experiments.aggregate import (
    markdown_table,
    mean_std,
    overhead_rows,
    plot_curves,
    summary_rows,
    text_table,
)
from mlatr.lab.experiments.demo import SCHEME_NAMES, SIZES, demo_config
from mlatr.lab.experiments.runner import Row, run_grid, validation_curve
from mlatr.languages import DEFAULT_LANGUAGES


def prepare_benchmark(out: Path, size: str, progress: bool = True, log=print, tag: str = "demo",
                      build: bool = True) -> tuple[str, dict[str, int]]:
    """The synthetic benchmark of ``size`` in ``out/data`` (built or resumed unless ``build`` is False).

    Returns the manifest's absolute path and the size preset (clip counts, epochs)."""
    preset = SIZES[size]
    data_dir = Path(out) / "data"
    if build:
        log(f"[{tag}] synthetic benchmark ({preset['train']}/{preset['val']}/{preset['test']} clips, "
            f"{len(DEFAULT_LANGUAGES)} languages) in {data_dir}")
        build_synthetic_benchmark(data_dir, n_train=preset["train"], n_val=preset["val"], n_test=preset["test"],
                                  seed=0, progress=progress)
    return str((data_dir / "manifest.jsonl").resolve()), preset


def demo_rows(schemes: Sequence[str], base: str = "infonce") -> list[Row]:
    """The demo's grid rows: one per pairing scheme, all with the same base loss."""
    suffix = "" if base == "infonce" else f"-{base}"
    label = "" if base == "infonce" else f" ({base})"
    return [Row(f"{scheme}{suffix}", SCHEME_NAMES.get(scheme, scheme) + label,
                partial(_scheme_config, scheme=scheme, base=base)) for scheme in schemes]


def _scheme_config(manifest: str, epochs: int, scheme: str, base: str) -> dict[str, Any]:
    return demo_config(manifest, scheme, epochs, base)


def run_demo(out: str | Path, size: str = "small", seeds: list[int] = (0,),
             schemes: list[str] = ("mlclap", "cacl", "kcl"), base: str = "infonce", progress: bool = True,
             epochs: int | None = None, log=print) -> dict[str, Any]:
    out = Path(out)
    manifest, preset = prepare_benchmark(out, size, progress, log)
    preset = dict(preset, **({"epochs": epochs} if epochs else {}))
    runs = run_grid(out, demo_rows(schemes, base), seeds, manifest, preset["epochs"], progress=progress, log=log)
    labels = runs.labels
    results = {labels[k]: v for k, v in runs.metrics.items()}
    summaries = {labels[k]: v for k, v in runs.summaries.items()}
    curves = {labels[k]: [validation_curve(h) for h in v] for k, v in runs.histories.items()}

    header, rows, raw = summary_rows(results)
    oh_header, oh_rows = overhead_rows(summaries)
    seed_means = {name: mean_std(rs)[0] for name, rs in results.items()}
    steps = next(iter(summaries.values()))[0]["steps"] // preset["epochs"]
    budget = (f"Equal budget: {preset['epochs']} epochs x {steps} steps of 32 clips for every method "
              "(same steps and audio clips; texts per step differ).")
    text = "\n\n".join([
        text_table(header, rows, f"Test split, average over languages (mean ± std over {len(seeds)} seed(s))"),
        text_table(oh_header, oh_rows, "Training overhead (ATRI Table 4; CPU: peak RSS of the training process)"),
        "Per-language results (mean over seeds):\n" + format_report(seed_means),
        budget,
    ])
    report_dir = out / "report"
    write_report(report_dir, seed_means)
    md = ["# mlatr demo: ML-CLAP vs CACL vs KCL on the synthetic benchmark", "",
          f"Size `{size}`, seeds {list(seeds)}, base loss {base}. {budget}", "",
          "## Average over languages (test split)", "", markdown_table(header, rows), "",
          "## Training overhead (ATRI Table 4)", "", markdown_table(oh_header, oh_rows), "",
          "![per-language R@1](recall_by_language.png)", "", "![validation curves](val_curves.png)", "",
          "Per-language tables: [report.md](report.md).", ""]
    atomic_write_text(report_dir / "summary.md", "\n".join(md))
    plot_recall_by_language(seed_means, report_dir / "recall_by_language.png")
    plot_curves(curves, report_dir / "val_curves.png")
    payload = {"size": size, "seeds": list(seeds), "base": base, "summary": raw, "results": results,
               "training": summaries}
    atomic_write_json(report_dir / "results.json", payload)
    log("\n" + text)
    log(f"\n[demo] report: {report_dir}/summary.md (tables, plots, results.json)")
    return payload
