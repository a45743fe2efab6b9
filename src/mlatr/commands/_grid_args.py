"""Arguments shared by the commands that train a grid of methods x seeds (demo, experiment *)."""

from __future__ import annotations

from mlatr.errors import MlatrError
from mlatr.lab.experiments.demo import SIZES


def add_grid_arguments(parser, default_out: str, methods: list[str] | None = None, method_flag: str = "--methods"):
    """``--out``, ``--size``, ``--seeds``, ``--no-progress`` and (when ``methods``) a method filter."""
    parser.add_argument("-o", "--output", dest="out", default=default_out,
                        help=f"output folder (default: {default_out})")
    parser.add_argument("--size", choices=list(SIZES), default="small",
                        help="benchmark size and epochs: " + "; ".join(
                            f"{k}: {v['train']}/{v['val']}/{v['test']} clips, {v['epochs']} epochs"
                            for k, v in SIZES.items()))
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default: 0)")
    if methods is not None:
        parser.add_argument(method_flag, default=",".join(methods),
                            help=f"comma-separated, from: {', '.join(methods)} (default: all)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise MlatrError(f"--seeds: expected comma-separated integers, got {text!r}") from None
    if not seeds:
        raise MlatrError("--seeds: give at least one seed")
    return seeds


def parse_methods(text: str, known: list[str], flag: str = "--methods") -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in known]
    if unknown or not methods:
        raise MlatrError(f"{flag}: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    return methods
