"""The files of a back-translation check (ATRI Appendix A): what a person reads to trust a translation.

In the output folder, each written atomically:

- ``table5.md`` / ``table5.csv``: mean cosine × 100 per language (rows) and split (columns, plus all
  splits), ATRI Table 5's layout, with the number of captions scored and failed;
- ``distribution.png``: the cosine distribution per language (violins, the mean marked, the threshold
  drawn);
- ``worst.md``: the lowest-scoring captions of each language with their English source and round trip;
- ``below_threshold.csv`` (with a threshold): every caption under it, lowest first;
- ``scores.csv``: every caption with its round trip and cosine; ``qa.json``: the table and the settings.
"""

from __future__ import annotations

import csv
import inspect
import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mlatr.data.manifest import language_order
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.languages import LANGUAGE_NAMES
from mlatr.plotting import pyplot, save_figure
from mlatr.translation.qa import ALL_SPLITS, QARow, below_threshold, worst_rows

ROW_FIELDS = ("clip_id", "split", "lang", "index", "cosine", "english", "translation", "round_trip", "reason")


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.1f}"


def format_table5(table: dict, title: str = "") -> str:
    """Markdown: one row per language, one column per split (mean cosine × 100), then the counts."""
    splits = list(next(iter(table.values()))) if table else [ALL_SPLITS]
    head = "| Language | " + " | ".join(splits) + " |\n|---|" + "---|" * len(splits) + "\n"
    body = "".join(f"| {LANGUAGE_NAMES.get(lang, lang)} | " + " | ".join(_pct(cells[s]["mean"]) for s in splits)
                   + " |\n" for lang, cells in table.items())
    counts = "".join(f"| {lang} | " + " | ".join(f"{cells[s]['n']}" + (f" ({cells[s]['failed']} failed)"
                                                                       if cells[s]["failed"] else "")
                                                  for s in splits) + " |\n" for lang, cells in table.items())
    out = (f"{title}\n\n" if title else "") + head + body
    return out + "\nCaptions scored per cell (back-translations that failed are not scored):\n\n" + head + counts


def _csv(rows: Sequence[Sequence]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def _row_values(r: QARow) -> list:
    return [r.clip_id, r.split, r.lang, r.index, "" if r.cosine is None else f"{r.cosine:.6f}", r.english,
            r.translation, r.round_trip or "", r.reason]


def _md(text: str | None) -> str:
    return (text or "").replace("|", "\\|")


def format_worst(rows: Sequence[QARow], per_language: int) -> str:
    parts = [f"# Lowest-scoring back-translations ({per_language} per language)\n"]
    for lang, worst in worst_rows(rows, per_language).items():
        parts.append(f"\n## {LANGUAGE_NAMES.get(lang, lang)} ({lang})\n\n"
                     "| cosine | clip [j] | English | translation | round trip |\n|---|---|---|---|---|\n")
        parts.extend(f"| {r.cosine:.3f} | {_md(r.clip_id)} [{r.index}] | {_md(r.english)} | {_md(r.translation)} "
                     f"| {_md(r.round_trip)} |\n" for r in worst)
    return "".join(parts)


def plot_distribution(rows: Sequence[QARow], path: str | Path, threshold: float | None = None,
                      title: str = "") -> Path:
    """Violins of the cosine per language (mean as a dot and label), the threshold as a dashed line."""
    plt = pyplot()
    langs = language_order({r.lang for r in rows})
    data = [np.array([r.cosine for r in rows if r.lang == lang and r.cosine is not None]) for lang in langs]
    keep = [k for k, d in enumerate(data) if d.size]
    fig, ax = plt.subplots(figsize=(7.5, 0.55 * max(len(keep), 2) + 1.4))
    if keep:
        pos = np.arange(len(keep))
        sideways = ({"orientation": "horizontal"} if "orientation" in inspect.signature(ax.violinplot).parameters
                    else {"vert": False})  # matplotlib < 3.10
        parts = ax.violinplot([data[k] for k in keep], positions=pos, showextrema=False, widths=0.8, **sideways)
        for body in parts["bodies"]:
            body.set_alpha(0.45)
        for p, k in zip(pos, keep, strict=True):
            mean = float(data[k].mean())
            ax.plot(mean, p, "o", color="black", ms=4)
            ax.annotate(f"{100 * mean:.1f}", (mean, p), xytext=(4, 6), textcoords="offset points", fontsize=8)
        ax.set_yticks(pos, [f"{LANGUAGE_NAMES.get(langs[k], langs[k])} (n={data[k].size})" for k in keep])
    if threshold is not None:
        ax.axvline(threshold, color="tab:red", ls="--", lw=1, label=f"threshold {threshold:g}")
        ax.legend(fontsize=8, loc="lower left")
    ax.invert_yaxis()  # the first language on top, as in the table
    ax.set_xlabel("cosine(English caption, back-translation)")
    ax.set_title(title or "Back-translation similarity per language", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def write_qa_report(out_dir: str | Path, rows: Sequence[QARow], table: dict, meta: dict,
                    threshold: float | None = None, worst: int = 10) -> list[Path]:
    """Write the files of the module docstring to ``out_dir``; returns their paths."""
    out = Path(out_dir)
    title = (f"Back-translation check: mean cosine × 100 of the English caption and its round trip "
             f"({meta.get('backend', '?')}, encoder {meta.get('encoder', '?')})")
    paths = [out / "table5.md", out / "table5.csv", out / "scores.csv", out / "worst.md", out / "qa.json",
             out / "distribution.png"]
    atomic_write_text(paths[0], format_table5(table, title))
    atomic_write_text(paths[1], _csv([("lang", "split", "mean_cosine", "n", "failed")]
                                     + [(lang, s, f"{c['mean']:.6f}", c["n"], c["failed"])
                                        for lang, cells in table.items() for s, c in cells.items()]))
    atomic_write_text(paths[2], _csv([ROW_FIELDS] + [_row_values(r) for r in rows]))
    atomic_write_text(paths[3], format_worst(rows, worst))
    low = below_threshold(rows, threshold) if threshold is not None else []
    summary = {**meta, "table": table, "threshold": threshold, "captions": len(rows),
               "scored": sum(r.cosine is not None for r in rows),
               "failed": sum(r.round_trip is None for r in rows)}
    if threshold is not None:
        summary["below_threshold"] = {lang: sum(r.lang == lang for r in low) for lang in table}
        paths.append(out / "below_threshold.csv")
        atomic_write_text(paths[-1], _csv([ROW_FIELDS] + [_row_values(r) for r in low]))
    atomic_write_json(paths[4], _nan_to_none(summary))
    plot_distribution(rows, paths[5], threshold, title=f"Back-translation similarity per language "
                                                      f"({meta.get('backend', '?')}, {meta.get('encoder', '?')})")
    return paths


def _nan_to_none(obj):
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return obj
