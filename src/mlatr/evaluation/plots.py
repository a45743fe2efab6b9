"""Figures of evaluation results (matplotlib, Agg backend; imported lazily by the commands).

- :func:`plot_recall_by_language`: per-language R@1 (or another metric) bars, T2A and A2T panels, one
  bar per method, the layout of ATRI Table 1 as a picture;
- :func:`plot_rank_spread`: how far each language's t2a rank is from its group's mean rank (the
  quantity MRV, ATRI eq. 16, averages) and the distribution of the per-group spread.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlatr.evaluation.consistency import complete_groups
from mlatr.evaluation.evaluate import Evaluation
from mlatr.evaluation.report import as_methods
from mlatr.plotting import pyplot, save_figure


def plot_recall_by_language(results: dict, path: str | Path, metric: str = "R1") -> Path:
    """Grouped bars of ``metric`` per language (+ avg) for T2A and A2T, one colour per method."""
    plt = pyplot()
    methods = as_methods(results)
    langs = [lg for lg in next(iter(methods.values()))["t2a"] if lg != "avg"] + ["avg"]
    x = np.arange(len(langs))
    width = 0.8 / len(methods)
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 0.62 * len(langs) * 2 + 1), 4.0), sharey=True)
    label = {"R1": "R@1", "R5": "R@5", "R10": "R@10", "mAP10": "mAP@10"}.get(metric, metric)
    for ax, task in zip(axes, ("t2a", "a2t"), strict=True):
        for m, (name, res) in enumerate(methods.items()):
            vals = [res[task].get(lg, {}).get(metric, np.nan) for lg in langs]
            bars = ax.bar(x - 0.4 + width * (m + 0.5), vals, width, label=name or None)
            if len(methods) <= 3:
                ax.bar_label(bars, fmt="%.1f", fontsize=6.5, padding=1)
        ax.set_xticks(x, langs)
        ax.axvline(len(langs) - 1.5, color="0.7", lw=0.8, ls="--")
        ax.set_title(f"{task.upper()} {label} (%)")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    axes[0].set_ylabel(f"{label} (%)")
    top = max(np.nanmax([r[t][lg][metric] for r in methods.values() for t in ("t2a", "a2t")
                         for lg in langs if lg in r[t]]), 1.0)
    axes[0].set_ylim(0, min(100.0, top * 1.15) if metric != "medR" else top * 1.15)
    fig.suptitle(f"Retrieval {label} per language", fontsize=11)
    fig.tight_layout()
    if len(methods) > 1 or "" not in methods:
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="upper right", ncol=len(methods), fontsize=8, frameon=False)
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def plot_rank_spread(evaluations: Evaluation | dict[str, Evaluation], path: str | Path) -> Path:
    """Left: per language, |t2a rank - group mean rank| over the groups present in every language
    (box plot, log scale). Right: cumulative share of caption groups by their rank standard deviation
    across languages, with the MRV (the mean squared deviation, ATRI eq. 16) in the legend."""
    plt = pyplot()
    evals = {"": evaluations} if isinstance(evaluations, Evaluation) else dict(evaluations)
    first = next(iter(evals.values()))
    langs = first.table.languages
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [1.6, 1]})
    width = 0.8 / len(evals)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    all_std = []
    for m, (name, ev) in enumerate(evals.items()):
        groups = complete_groups(ev.table)
        if groups.shape[0] == 0:
            continue
        ranks = ev.ranks.t2a[groups].astype(float)
        dev = np.abs(ranks - ranks.mean(axis=1, keepdims=True))
        pos = np.arange(len(langs)) - 0.4 + width * (m + 0.5)
        box = ax1.boxplot([dev[:, k] + 0.5 for k in range(dev.shape[1])], positions=pos, widths=width * 0.85,
                          patch_artist=True, showfliers=True, flierprops={"markersize": 2, "alpha": 0.4},
                          medianprops={"color": "black"})
        for patch in box["boxes"]:
            patch.set_facecolor(colors[m % len(colors)])
            patch.set_alpha(0.6)
        std = ranks.std(axis=1)
        all_std.append((name, std, float(np.mean(dev**2)), colors[m % len(colors)]))
    ax1.set_yscale("log")
    ax1.set_xticks(np.arange(len(langs)), langs)
    ax1.set_ylabel("|rank - group mean rank| + 0.5")
    ax1.set_title("T2A rank deviation from the group's mean, per language")
    ax1.grid(axis="y", alpha=0.3)
    for name, std, mrv, color in all_std:
        xs = np.sort(std)
        ax2.step(np.r_[0.0, xs], np.r_[0.0, np.arange(1, xs.size + 1) / xs.size], where="post", lw=1.8,
                 color=color, label=f"{name + ': ' if name else ''}MRV {mrv:.1f}")
    if all_std:
        ax2.set_xscale("symlog", linthresh=1.0)
        ax2.set_ylim(0, 1.02)
        ax2.legend(fontsize=8, loc="lower right")
    ax2.set_xlabel("std of the group's t2a ranks across languages")
    ax2.set_ylabel("share of groups with std <= x")
    ax2.set_title("Rank spread per caption group (higher = more consistent)", fontsize=10)
    ax2.grid(alpha=0.3)
    if len(evals) > 1:
        handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.6) for _, _, _, c in all_std]
        ax1.legend(handles, [n for n, _, _, _ in all_std], fontsize=8)
    fig.tight_layout()
    out = save_figure(fig, path)
    plt.close(fig)
    return out
