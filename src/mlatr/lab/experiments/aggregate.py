"""Aggregate a grid's results over seeds: mean and standard deviation, summary tables, curves.

``methods`` below is ``{method: [result of seed 1, result of seed 2, ...]}`` where a result is the dict
of :func:`mlatr.evaluation.evaluate_embeddings`. Standard deviations are the sample standard deviation
(``ddof=1``; 0 for a single seed), as in SupCLAP Table 4's "mean ± std over seeds".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mlatr.plotting import pyplot


def mean_std(results: list[Any]) -> tuple[Any, Any]:
    """Element-wise mean and sample std of nested dicts of numbers with the same keys."""
    first = results[0]
    if isinstance(first, dict):
        means, stds = {}, {}
        for key in first:
            if all(isinstance(r, dict) and key in r for r in results):
                means[key], stds[key] = mean_std([r[key] for r in results])
        return means, stds
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        values = np.asarray(results, dtype=float)
        std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        return float(values.mean()), std
    return first, None


def _avg(d: dict[str, float]) -> float:
    values = [v for v in d.values() if not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(values)) if values else float("nan")


#: (label, getter, digits, higher is better) of the summary table.
SUMMARY_COLUMNS = [
    ("T2A R@1", lambda r: r["t2a"]["avg"]["R1"], 2, True),
    ("T2A R@5", lambda r: r["t2a"]["avg"]["R5"], 2, True),
    ("T2A mAP10", lambda r: r["t2a"]["avg"]["mAP10"], 2, True),
    ("A2T R@1", lambda r: r["a2t"]["avg"]["R1"], 2, True),
    ("A2T R@5", lambda r: r["a2t"]["avg"]["R5"], 2, True),
    ("A2T mAP10", lambda r: r["a2t"]["avg"]["mAP10"], 2, True),
    ("Gap", lambda r: _avg(r["consistency"]["gap"]), 3, False),
    ("Dis", lambda r: _avg(r["consistency"]["dis"]), 3, False),
    ("MRV", lambda r: r["consistency"]["mrv"], 2, False),
]


def summary_rows(methods: dict[str, list[dict]]) -> tuple[list[str], list[list[str]], dict[str, dict]]:
    """Header, formatted ``mean ± std`` rows and the raw numbers ``{method: {column: (mean, std)}}``."""
    header = ["Method", "seeds"] + [c[0] for c in SUMMARY_COLUMNS]
    rows, raw = [], {}
    for name, results in methods.items():
        raw[name] = {}
        row = [name, str(len(results))]
        for label, get, digits, _ in SUMMARY_COLUMNS:
            values = np.asarray([get(r) for r in results], dtype=float)
            m = float(values.mean())
            s = float(values.std(ddof=1)) if len(values) > 1 else 0.0
            raw[name][label] = (m, s)
            row.append(f"{m:.{digits}f} ± {s:.{digits}f}" if len(values) > 1 else f"{m:.{digits}f}")
        rows.append(row)
    return header, rows, raw


OVERHEAD_COLUMNS = [
    ("peak memory (MB)", "peak_memory_mb", 0),
    ("time / epoch (s)", "epoch_time_s", 1),
    ("texts / epoch", "texts_per_epoch", 0),
]


def overhead_rows(summaries: dict[str, list[dict]]) -> tuple[list[str], list[list[str]]]:
    """ATRI Table 4: peak memory and time per epoch (mean over seeds) and the ratio to the first method."""
    header = ["Method"] + [c[0] for c in OVERHEAD_COLUMNS] + ["memory ×", "time ×"]
    means = {}
    for name, runs in summaries.items():
        means[name] = {
            "peak_memory_mb": float(np.mean([r["peak_memory_mb"] for r in runs])),
            "epoch_time_s": float(np.mean([r["epoch_time_s"] for r in runs])),
            "texts_per_epoch": float(np.mean([r["texts_encoded"] / r["epochs"] for r in runs])),
        }
    ref = next(iter(means.values()))
    rows = []
    for name, m in means.items():
        rows.append([name] + [f"{m[key]:.{d}f}" for _, key, d in OVERHEAD_COLUMNS]
                    + [f"{m['peak_memory_mb'] / ref['peak_memory_mb']:.2f}",
                       f"{m['epoch_time_s'] / ref['epoch_time_s']:.2f}"])
    return header, rows


def grid_tables(tables: list[tuple[str, list[str]]], results: dict[str, list[dict]], labels: dict[str, str],
                min_methods: int = 2) -> tuple[list[str], list[str], dict[str, dict]]:
    """The summary table of each ``(title, method keys)`` in ``tables`` over the methods that have results.

    A table is left out when fewer than ``min_methods`` of its methods have results. Returns Markdown
    lines (a ``## title`` section per table), the text tables, and the raw ``(mean, std)`` numbers by title.
    """
    md: list[str] = []
    texts: list[str] = []
    raw_tables: dict[str, dict] = {}
    for title, keys in tables:
        present = [k for k in keys if k in results]
        if len(present) < max(1, min_methods):
            continue
        header, rows, raw = summary_rows({labels[k]: results[k] for k in present})
        raw_tables[title] = raw
        md += [f"## {title}", "", markdown_table(header, rows), ""]
        texts.append(text_table(header, rows, title))
    return md, texts, raw_tables


def text_table(header: list[str], rows: list[list[str]], title: str) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [title, line, "-" * len(line)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def plot_curves(curves: dict[str, list[list[tuple[int, float]]]], path, ylabel: str = "validation avg R@1 (%)"):
    """One line per method (mean over seeds, band = min..max) of a per-epoch quantity."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    for name, seeds in curves.items():
        epochs = sorted({e for seed in seeds for e, _ in seed})
        table = np.full((len(seeds), len(epochs)), np.nan)
        for i, seed in enumerate(seeds):
            for e, v in seed:
                table[i, epochs.index(e)] = v
        mean = np.nanmean(table, axis=0)
        (line,) = ax.plot(epochs, mean, marker="o", ms=3, label=name)
        if len(seeds) > 1:
            ax.fill_between(epochs, np.nanmin(table, axis=0), np.nanmax(table, axis=0), alpha=0.15,
                            color=line.get_color())
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
