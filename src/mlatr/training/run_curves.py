"""Training curves of one or more runs from their ``log.jsonl``: ``mlatr plot RUN_DIR [RUN_DIR ...]``.

One figure, runs overlaid (one colour per run; an ensemble's head pairs, ``members/K/``, are runs): a panel
per loss term against the optimizer step (the
total ``loss`` first, then each ``loss_<term>`` when a run has more than one), then validation R@1
(text-to-audio and audio-to-text, the average over languages), t2a R@10 and the validation MRV (ATRI eq. 16)
against the epoch, each where the run's epoch records have it (a head run of ``mlatr demo-real``: t2a
R@10). Loss panels read the step records (every ``train.log_every`` steps), or, where a run logged fewer
steps than epochs, the epochs' mean loss and terms at each epoch's last step; the validation panels read
the epoch records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mlatr.errors import MlatrError
from mlatr.plotting import pyplot, save_figure
from mlatr.training.run_log import read_run_log

#: Validation panels: title -> how an epoch record's ``val`` gives the value.
VAL_PANELS = {"val t2a R@1 (%)": lambda v: v["t2a"]["R1"], "val t2a R@10 (%)": lambda v: v["t2a"]["R10"],
              "val a2t R@1 (%)": lambda v: v["a2t"]["R1"], "val MRV": lambda v: v["mrv"]}


@dataclass
class RunCurves:
    """The series of one run: ``losses[name] = (steps, values)``, ``val[title] = (epochs, values)``."""

    name: str
    losses: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)
    val: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)


def read_curves(run_dir: str | Path, name: str | None = None) -> RunCurves:
    """The curves of the run in ``run_dir`` (its ``log.jsonl``)."""
    path = Path(run_dir) / "log.jsonl"
    if not path.is_file():
        raise MlatrError(f"{path}: no such file (a run folder written by mlatr train holds log.jsonl)")
    steps, epochs = read_run_log(path)
    if not steps and not epochs:
        raise MlatrError(f"{path}: no step or epoch records yet")
    curves = RunCurves(name or Path(run_dir).name)
    if len(steps) < max(2, len(epochs)):  # sparse step records (train.log_every): the epochs' means instead
        steps = [{"step": r["step"], "loss": r["train_loss"], **(r.get("train_terms") or {})} for r in epochs]
    keys = [k for k in dict.fromkeys(k for r in steps for k in r) if k == "loss" or k.startswith("loss_")]
    if sum(k.startswith("loss_") for k in keys) < 2:
        keys = [k for k in keys if k == "loss"]  # a single term is the total
    for key in keys:
        rows = [r for r in steps if isinstance(r.get(key), (int, float))]
        curves.losses[key] = ([r["step"] for r in rows], [float(r[key]) for r in rows])
    validated = [r for r in epochs if r.get("val")]
    for title, get in VAL_PANELS.items():
        values = [_value(get, r["val"]) for r in validated]
        kept = [(r["epoch"], v) for r, v in zip(validated, values, strict=True) if v is not None]
        if kept:  # a panel for each figure the run validates (a head run: t2a R@10 only)
            curves.val[title] = ([e for e, _ in kept], [v for _, v in kept])
    return curves


def _value(get, val: dict) -> float | None:
    """One validation figure of an epoch record, or None where the run does not validate it."""
    try:
        return float(get(val))
    except (KeyError, TypeError):
        return None


def draw_runs(runs: Sequence[RunCurves]):
    """The figure of the runs' curves (see the module docstring)."""
    plt = pyplot()
    loss_panels = list(dict.fromkeys(k for run in runs for k in run.losses))
    val_panels = [t for t in VAL_PANELS if any(t in run.val for run in runs)]
    panels = [(k, "step") for k in loss_panels] + [(t, "epoch") for t in val_panels]
    if not panels:
        raise MlatrError("nothing to plot: the logs hold neither loss nor validation records")
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, xlabel) in zip(axes.flat, panels, strict=False):
        for i, run in enumerate(runs):
            series = (run.losses if xlabel == "step" else run.val).get(title)
            if series is not None:
                ax.plot(*series, label=run.name, color=colours[i % len(colours)],
                        marker="o" if len(series[0]) <= 30 else None, markersize=3, linewidth=1.2)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_title(title if xlabel == "epoch" else title.replace("loss_", "loss: "), fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(runs), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig


def run_folders(run_dirs: Sequence[str | Path]) -> list[Path]:
    """The folders whose ``log.jsonl`` is drawn: each of ``run_dirs``, or, for a folder without a log of its own
    that holds ``members/K/log.jsonl`` (the head pairs of an ensemble, ``mlatr demo-real``), those members."""
    out = []
    for d in map(Path, run_dirs):
        members = sorted((p.parent for p in d.glob("members/*/log.jsonl")), key=lambda p: (len(p.name), p.name))
        out += members if members and not (d / "log.jsonl").is_file() else [d]
    return out


def plot_runs(run_dirs: Sequence[str | Path], path: str | Path) -> Path:
    """Draw the curves of ``run_dirs`` (:func:`run_folders`) into one PNG at ``path`` (runs named by their
    folder, or by their path where two folders share a name)."""
    folders = run_folders(run_dirs)
    names = [f"{d.parent.parent.name} member {d.name}" if d.parent.name == "members" else d.name for d in folders]
    if len(set(names)) < len(names):
        names = [str(d) for d in folders]
    plt = pyplot()
    fig = draw_runs([read_curves(d, n) for d, n in zip(folders, names, strict=True)])
    out = save_figure(fig, path)
    plt.close(fig)
    return out
