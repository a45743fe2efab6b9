"""Evaluate saved embeddings: per-language retrieval (ATRI Table 1) and consistency (Tables 2-3).

EMB.npz holds exactly these arrays (np.savez):
  audio       [Na, D] float   audio clip embeddings
  text        [Nt, D] float   caption embeddings
  text_audio  [Nt]    int     index of the clip each caption describes
  text_lang   [Nt]    str     language code of each caption (ISO 639-3, e.g. eng, fra)
  text_group  [Nt]    int/str id shared by the translations of one source caption

Similarity is cosine. t2a ranks all clips per caption; a2t ranks all captions of a language per
clip (best own caption counts); R@k and mAP10 in percent; medR/meanR 1-based; ties count as the
better rank. Consistency (gap, dis, MRV) uses the caption groups present in every language.

--plot also draws ATRI Appendix C's t-SNE view (tsne.png): --tsne-clips random clips (default 50), their
audio and their captions in every language, colour = clip, marker = language; with --compare EMB2.npz (the
same clips and captions embedded by another model) the two views side by side, as ATRI's Figures 3-4.

Examples:
  mlatr eval-embeddings emb.npz
  mlatr eval-embeddings emb.npz --json results.json --report report/ --plot plots/ --cases 5
  mlatr eval-embeddings kcl.npz --plot plots/ --compare mlclap.npz
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from mlatr.commands._arg_types import non_negative_int, positive_float, random_seed
from mlatr.commands._notices import warn
from mlatr.commands._outputs import Output
from mlatr.commands._paths import refuse_output_over_input
from mlatr.errors import InputError, MlatrError
from mlatr.evaluation import evaluate_embeddings_with_ranks
from mlatr.evaluation.cases import format_cases, rank_cases
from mlatr.evaluation.caveats import evaluation_caveats
from mlatr.evaluation.plots import plot_rank_spread, plot_recall_by_language
from mlatr.evaluation.report import format_report, write_report
from mlatr.file_kinds import sniff, unreadable
from mlatr.io_utils import atomic_write_json
from mlatr.languages import normalize

HELP = __doc__

REQUIRED_ARRAYS = ("audio", "text", "text_audio", "text_lang", "text_group")


#: What the command writes: the CLI checks each one's kind and holds its writer lock (see _outputs).
OUTPUTS = (Output("json", "results file", folder=False), Output("report", "report", folder=True),
           Output("plot", "plots", folder=True))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("npz", metavar="EMB.npz", help="embeddings file (see above)")
    add_output_arguments(parser)
    parser.add_argument("--compare", metavar="EMB2.npz",
                        help="with --plot: a second model's embeddings of the same captions, drawn beside EMB.npz "
                             "in the t-SNE view")


def add_tsne_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tsne-clips", type=non_negative_int, default=50, metavar="N",
                        help="clips in the t-SNE view of --plot (ATRI Appendix C: 50; 0 = no view)")
    parser.add_argument("--tsne-seed", type=random_seed, default=0, metavar="S", help="seed of the clip draw and t-SNE")


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pivot", default="eng", help="reference language of gap/dis (default: eng)")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON (NaN written as null)")
    parser.add_argument("--report", metavar="DIR", help="write report.md and table1-3.csv to DIR")
    parser.add_argument("--plot", metavar="DIR",
                        help="write recall_by_language.png, rank_spread.png and tsne.png to DIR")
    parser.add_argument("--cases", metavar="N", type=non_negative_int, default=0,
                        help="print, for N caption groups, the rank of the right clip per language")
    parser.add_argument("--memory-budget-mb", type=positive_float, default=512.0,
                        help="memory for score blocks (default: 512); the score matrix is never held whole")
    add_tsne_arguments(parser)


def load_embeddings_npz(path: str | Path) -> dict:
    """The five arrays of an embeddings NPZ; a missing file or array is an :class:`InputError`."""

    path = str(path)
    if not Path(path).is_file():
        raise InputError("no such file", file=path)
    try:
        npz = np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError / OSError / EOFError / BadZipFile
        raise unreadable(path, "an embeddings .npz (np.savez of the arrays above)", exc, ("npz",)) from exc
    if not isinstance(npz, np.lib.npyio.NpzFile) or sniff(path).kind != "npz":  # .npy, a torch zip, ...
        raise unreadable(path, "an embeddings .npz (np.savez of the arrays above)")
    with npz:
        present = set(npz.files)
        for key in REQUIRED_ARRAYS:
            if key not in present:
                raise InputError(f"missing array {key!r} (the file holds: {', '.join(sorted(present)) or 'nothing'};"
                                 f" required: {', '.join(REQUIRED_ARRAYS)})", file=path, field=key)
        out = {}
        for key in REQUIRED_ARRAYS:
            try:
                out[key] = npz[key]
            except ValueError as exc:
                raise InputError(f"cannot load ({exc}); save strings as a str array, e.g. "
                                 "np.array(langs, dtype=str)", file=path, field=key) from exc
    return out


def pivot_code(pivot: str, text_lang) -> str:
    """``--pivot`` as the NPZ spells it: as given when some caption has that code, else normalised
    (``en`` -> ``eng``, an unknown code is an error listing the supported ones)."""
    if pivot in {str(c) for c in np.asarray(text_lang).tolist()}:
        return pivot
    return normalize(pivot, "--pivot")


def jsonable(obj):
    """Results with NaN/inf replaced by None and numpy scalars by Python numbers."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def emit(results_by_method: dict, evaluations: dict, args: argparse.Namespace, arrays: dict | None = None) -> None:
    """Print the tables (and cases); write JSON, report and plots where asked (the t-SNE view of
    ``arrays``, ``{name: evaluation arrays}``, when given)."""
    print(format_report(results_by_method if len(results_by_method) > 1 else next(iter(results_by_method.values()))))
    if args.cases:
        for name, ev in evaluations.items():
            print()
            if len(evaluations) > 1:
                print(f"[{name}]")
            print(format_cases(rank_cases(ev, args.cases)))
    single = next(iter(results_by_method.values())) if len(results_by_method) == 1 else None
    if args.json:
        payload = single if single is not None else results_by_method
        if args.cases:
            cases = {name: rank_cases(ev, args.cases) for name, ev in evaluations.items()}
            payload = {**payload, "cases": cases[next(iter(cases))] if single is not None else cases}
        atomic_write_json(args.json, jsonable(payload))
        print(f"\nwrote {args.json}")
    if args.report:
        paths = write_report(args.report, single if single is not None else results_by_method)
        print(f"wrote {', '.join(str(p) for p in paths)}")
    if args.plot:
        d = Path(args.plot)
        p1 = plot_recall_by_language(single if single is not None else results_by_method, d / "recall_by_language.png")
        p2 = plot_rank_spread(next(iter(evaluations.values())) if single is not None else evaluations,
                              d / "rank_spread.png")
        print(f"wrote {p1}, {p2}")
        if arrays and getattr(args, "tsne_clips", 0) > 0:
            from mlatr.evaluation.tsne import plot_tsne_arrays  # loads scikit-learn: not paid by every command's parser

            print(f"wrote {plot_tsne_arrays(arrays, d / 'tsne.png', args.tsne_clips, args.tsne_seed)}")


def run(args: argparse.Namespace) -> int:
    if args.compare and not args.plot:
        raise MlatrError("--compare draws a second t-SNE panel: give --plot DIR too")
    refuse_output_over_input([("--json", args.json)], [("embeddings file", args.npz)])
    arrays = load_embeddings_npz(args.npz)
    pivot = pivot_code(args.pivot, arrays["text_lang"])
    paths = [args.npz] + ([args.compare] if args.compare else [])
    names = [Path(p).stem for p in paths]
    named = dict(zip(names if len(set(names)) == len(names) else paths, [arrays] + [
        load_embeddings_npz(p) for p in paths[1:]], strict=True))
    try:
        ev = evaluate_embeddings_with_ranks(**arrays, pivot=pivot, memory_budget_mb=args.memory_budget_mb,
                                            progress=True)
    except InputError:
        raise
    except MlatrError as exc:
        raise MlatrError(f"{args.npz}: {exc}") from exc
    caveats = warn(evaluation_caveats(len(arrays["audio"]), arrays["text_lang"], arrays["text_group"], pivot))
    if caveats:
        ev.metrics["warnings"] = caveats
    emit({"": ev.metrics}, {"": ev}, args, arrays=named)
    return 0
