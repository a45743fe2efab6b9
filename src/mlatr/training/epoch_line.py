"""The one line a training run prints after each epoch: loss terms, validation R@1 / MRV, time and ETA.

::

    epoch 3/12  loss 2.8121 (infonce 2.7003, svr 0.1118)  val R@1 t2a 12.4 a2t 11.0 MRV 31.2 (best)  4.1s  ETA 37s

The ETA is the mean wall time of the epochs this process ran (training + validation + checkpoint) times the
epochs left. The per-term means come from the step records (``loss_<term>``).
"""

from __future__ import annotations

from typing import Any


def duration(seconds: float) -> str:
    """``37s``, ``4m05s``, ``2h03m``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def eta_seconds(epoch_walls: list[float], epochs_done: int, epochs_total: int) -> float | None:
    """Mean of ``epoch_walls`` times the epochs left; None before the first timed epoch."""
    if not epoch_walls:
        return None
    return sum(epoch_walls) / len(epoch_walls) * max(0, epochs_total - epochs_done)


def epoch_line(record: dict[str, Any], epochs_total: int, wall_s: float, eta_s: float | None, best: bool) -> str:
    """The line for an epoch ``record`` (the trainer's: ``epoch``, ``train_loss``, ``train_terms``, ``val``)."""
    parts = [f"epoch {record['epoch']}/{epochs_total}", f"loss {record['train_loss']:.4f}"]
    terms = record.get("train_terms") or {}
    if len(terms) > 1:
        parts[-1] += " (" + ", ".join(f"{k.removeprefix('loss_')} {v:.4f}" for k, v in terms.items()) + ")"
    val = record.get("val")
    if val:
        parts.append(f"val R@1 t2a {val['t2a']['avg']['R1']:.1f} a2t {val['a2t']['avg']['R1']:.1f} "
                     f"MRV {val['consistency']['mrv']:.1f}" + (" (best)" if best else ""))
    parts.append(duration(wall_s))
    if eta_s is not None:
        parts.append(f"ETA {duration(eta_s)}" if eta_s > 0 else "done")
    return "  ".join(parts)
