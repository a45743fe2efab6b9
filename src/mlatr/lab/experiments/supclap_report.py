"""``mlatr experiment supclap``: train the SupCLAP grid (:mod:`mlatr.lab.experiments.supclap`), report it.

Tables (mean ± std over seeds), the diagnostics table and the figures: trajectory drift (Figure 1),
radius against the positive distance (Figure 3), positive-pair similarity (Figure 4), convergence
(Figure 5). Rerunning the same command resumes: finished runs are skipped.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.lab.experiments.aggregate import grid_tables, markdown_table, overhead_rows, plot_curves, text_table
from mlatr.lab.experiments.demo_report import prepare_benchmark
from mlatr.lab.experiments.runner import GridRuns, Row, run_grid, validation_curve
from mlatr.lab.experiments.supclap import FIGURE_METHODS, METHODS, RADIUS_FIGURE_METHODS, TABLES, supclap_config
from mlatr.plotting import pyplot


def supclap_rows(methods: list[str]) -> list[Row]:
    return [Row(m, METHODS[m][0], partial(supclap_config, method=m)) for m in methods]


def run_supclap(out: str | Path, size: str = "small", seeds: list[int] = (0,), methods: list[str] | None = None,
                progress: bool = True, report_only: bool = False, log=print) -> dict[str, Any]:
    """Train, evaluate and report the grid (see the module docstring). Returns the ``results.json`` payload.

    ``report_only``: train nothing; report every finished run of ``methods`` found under ``OUT/runs``
    (whatever its seed), e.g. after stopping a long grid or combining grids run with other ``--seeds``.
    """
    out = Path(out)
    manifest, preset = prepare_benchmark(out, size, progress, log, tag="supclap", build=not report_only)
    runs = run_grid(out, supclap_rows(list(methods or METHODS)), seeds, manifest, preset["epochs"],
                    progress=progress, report_only=report_only, log=log)
    return write_supclap_report(out / "report", size, runs, log=log)


def step_series(runs: list[list[dict]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, mean over seeds)`` of a per-step log value (steps where every seed has it)."""
    per_seed = [{r["step"]: r[key] for r in run if key in r} for run in runs]
    common = sorted(set.intersection(*(set(d) for d in per_seed))) if per_seed else []
    values = np.asarray([[d[s] for s in common] for d in per_seed], dtype=float)
    return np.asarray(common), values.mean(axis=0) if len(common) else np.zeros(0)


def _first_last(values: np.ndarray) -> str:
    return f"{values[0]:.3f} -> {values[-1]:.3f}" if len(values) else "-"


def _moving_average(y: np.ndarray, width: int) -> np.ndarray:
    if len(y) < width or width <= 1:
        return y
    kernel = np.ones(width) / width
    return np.convolve(y, kernel, mode="valid")




def plot_step_series(logs: dict[str, list[list[dict]]], key: str, path: Path, ylabel: str, title: str,
                     labels: dict[str, str], smooth: int = 1) -> Path | None:
    """One line per method of a per-step value (mean over seeds; moving average of ``smooth`` steps)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    drawn = 0
    for method, runs in logs.items():
        steps, values = step_series(runs, key)
        if len(steps) == 0:
            continue
        y = _moving_average(values, smooth)
        ax.plot(steps[len(steps) - len(y):], y, lw=1.4, label=labels.get(method, method))
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    return _save_axes(plt, fig, ax, path, "optimizer step", ylabel, title)


def plot_radius_and_distance(logs: dict[str, list[list[dict]]], path: Path, labels: dict[str, str],
                             smooth: int = 1) -> Path | None:
    """Figure 3 with what the radius is measured against: per SVR method, the semantic radius R (solid;
    dynamic: batch mean) and the batch mean of ``||a⁺ − t⁺||`` (dashed, same colour), mean over seeds.
    Appendix B's constraint wants ``0 <= R <= ||a⁺ − t⁺||``; §4.3 reads a radius that falls below the
    distance as pairs align as the trade-off being learned."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    drawn = 0
    for method, runs in logs.items():
        steps, radius = step_series(runs, "svr_radius")
        _, distance = step_series(runs, "svr_distance")
        if len(steps) == 0:
            continue
        r, d = _moving_average(radius, smooth), _moving_average(distance, smooth)
        x = steps[len(steps) - len(r):]
        (line,) = ax.plot(x, r, lw=1.4, label=f"{labels.get(method, method)}: R")
        if len(d) == len(r):
            ax.plot(x, d, lw=1.0, ls="--", color=line.get_color(), label=f"{labels.get(method, method)}: ||a⁺−t⁺||")
        drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.axhline(0.0, color="0.6", lw=0.8)
    return _save_axes(plt, fig, ax, path, "optimizer step", "radius / distance",
                      f"Semantic radius vs positive distance (SupCLAP Figure 3; moving average of {smooth} steps)")


def plot_positive_similarity(positives: dict[str, np.ndarray], path: Path, labels: dict[str, str]) -> Path:
    """Figure 4: density of the test split's positive-pair cosine, one curve per method."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    values = np.concatenate(list(positives.values()))
    pad = 0.02 * max(1e-3, float(values.max() - values.min()))
    bins = np.linspace(float(values.min()) - pad, float(values.max()) + pad, 41)
    for method, pos in positives.items():
        ax.hist(pos, bins=bins, density=True, histtype="step", lw=1.5,
                label=f"{labels.get(method, method)} (mean {pos.mean():.3f})")
    return _save_axes(plt, fig, ax, path, "cosine(caption, its clip), test split", "density",
                      "Positive-pair similarity (SupCLAP Figure 4)")


def _save_axes(plt, fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    """Label, grid and legend ``ax`` the same way for every SupCLAP figure; write ``path`` and close."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def write_supclap_report(report_dir: Path, size: str, runs: GridRuns, log=print) -> dict[str, Any]:
    """Tables, figures and ``results.json`` of a finished grid (row keys are :data:`METHODS` keys)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    results, summaries, logs, positives = runs.metrics, runs.summaries, runs.steps, runs.positives
    seeds = runs.all_seeds()
    labels = runs.labels
    epochs = next(iter(summaries.values()))[0]["epochs"]
    steps = next(iter(summaries.values()))[0]["steps"]
    md = ["# SupCLAP on the synthetic benchmark", "",
          f"Size `{size}`, seeds {seeds} (per method: the `seeds` column); every method: {epochs} epochs, "
          f"{steps} optimizer steps of 32 clips, "
          "the demo's model and optimizer. Test split, averages over the 8 languages; mean ± std over seeds "
          "(sample std, SupCLAP Table 4).", ""]
    table_md, texts, raw_tables = grid_tables(TABLES, results, labels)
    md += table_md
    oh_header, oh_rows = overhead_rows({labels[k]: v for k, v in summaries.items()})
    md += ["## Training overhead (whole run, every method with the drift diagnostic on)", "",
           markdown_table(oh_header, oh_rows), "",
           "CPU: peak RSS of the training process (includes the decoded-audio cache); for one step's overhead "
           "see `benchmarks/bench_svr_overhead.py`.", ""]
    texts.append(text_table(oh_header, oh_rows, "Training overhead"))

    diag_rows = []
    for m in results:
        _, drift = step_series(logs[m], "drift_cos")
        _, perp = step_series(logs[m], "drift_perp")
        _, radius = step_series(logs[m], "svr_radius")
        _, distance = step_series(logs[m], "svr_distance")
        pos = np.concatenate(positives[m])
        diag_rows.append([labels[m], f"{drift.mean():.3f}" if len(drift) else "-",
                          f"{perp.mean():.3f}" if len(perp) else "-",
                          _first_last(radius), _first_last(distance),
                          f"{pos.mean():.3f}", f"{np.median(pos):.3f}"])
    diag_header = ["Method", "drift cos (mean)", "perp share (mean)", "radius first -> last step",
                   "||a⁺−t⁺|| first -> last step", "test pos. cos mean", "median"]
    md += ["## Diagnostics", "", markdown_table(diag_header, diag_rows), "",
           "drift cos: cosine between a text's update over one step and its pull a⁺ − t⁺ (higher = less "
           "drift, SupCLAP Figure 1), mean over all steps; perp share: ||Δt_⊥|| / ||Δt||.", ""]
    texts.append(text_table(diag_header, diag_rows, "Diagnostics"))

    fig_logs = {m: logs[m] for m in FIGURE_METHODS if m in logs} or logs
    figures = []
    smooth = max(1, steps // 30)
    if plot_step_series(fig_logs, "drift_cos", report_dir / "drift.png", "cos(Δt, a⁺ − t⁺)",
                        f"Trajectory drift (SupCLAP Figure 1; moving average of {smooth} steps)", labels, smooth):
        figures.append(("drift", "drift.png"))
    svr_logs = {m: v for m, v in logs.items() if "svr" in METHODS[m][3] and m in RADIUS_FIGURE_METHODS}
    if svr_logs and plot_radius_and_distance(svr_logs, report_dir / "radius.png", labels, smooth):
        figures.append(("radius vs ||a⁺−t⁺|| (Figure 3)", "radius.png"))
    plot_positive_similarity({m: np.concatenate(positives[m]) for m in (fig_logs or results)},
                             report_dir / "positive_similarity.png", labels)
    figures.append(("positive-pair similarity", "positive_similarity.png"))
    for direction in ("t2a", "a2t"):
        curves = {labels[m]: [validation_curve(h, direction) for h in runs.histories[m]] for m in fig_logs}
        plot_curves(curves, report_dir / f"convergence_{direction}.png",
                    ylabel=f"validation {direction.upper()} R@1 (%)")
        figures.append((f"convergence {direction.upper()} (Figure 5)", f"convergence_{direction}.png"))
    md += ["## Figures", ""] + [f"![{name}]({file})" for name, file in figures] + [""]
    atomic_write_text(report_dir / "summary.md", "\n".join(md))
    payload = {"size": size, "seeds": seeds, "methods": {m: labels[m] for m in results}, "tables": raw_tables,
               "results": results, "training": summaries,
               "diagnostics": {row[0]: dict(zip(diag_header[1:], row[1:], strict=True)) for row in diag_rows}}
    atomic_write_json(report_dir / "results.json", payload)
    log("\n" + "\n\n".join(texts))
    log(f"\n[supclap] report: {report_dir}/summary.md")
    return payload
