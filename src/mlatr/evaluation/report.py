"""Tables of evaluation results in the layouts of ATRI Tables 1-3, as text, Markdown and CSV.

- Table 1 (ATRI §5.5): rows = languages + avg; columns T2A R@1 / R@5 / mAP10, A2T R@1 / R@5 / mAP10.
- Table 2 (ATRI §5.6.1): embedding gap and distance to the pivot per language (+ avg).
- Table 3 (ATRI §5.6.2): mean rank variance.

Every function takes ``results_by_method``: ``{method name: evaluate_embeddings(...) result}``, so
several methods (e.g. ML-CLAP, CACL, KCL) appear side by side as in the paper; a single result dict
is accepted too. Pure string building; :func:`write_report` is the only function that writes files.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from mlatr.io_utils import atomic_write_text

TABLE1_COLUMNS = [("t2a", "R1", "T2A R@1"), ("t2a", "R5", "T2A R@5"), ("t2a", "mAP10", "T2A mAP10"),
                  ("a2t", "R1", "A2T R@1"), ("a2t", "R5", "A2T R@5"), ("a2t", "mAP10", "A2T mAP10")]


def as_methods(results: dict) -> dict[str, dict]:
    """``{name: result}`` from either that or one result dict (named ``""``)."""
    return {"": results} if "t2a" in results else dict(results)


def _num(value: float, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _languages(result: dict) -> list[str]:
    return [lang for lang in result["t2a"] if lang != "avg"] + ["avg"]


def table1_rows(results: dict) -> tuple[list[str], list[list]]:
    """Header and rows (raw floats) of ATRI Table 1; a ``Method`` column when there are several."""
    methods = as_methods(results)
    named = len(methods) > 1 or "" not in methods
    header = (["Method"] if named else []) + ["Lang"] + [c[2] for c in TABLE1_COLUMNS]
    rows = []
    for name, res in methods.items():
        for lang in _languages(res):
            values = [res[task][lang][key] for task, key, _ in TABLE1_COLUMNS]
            rows.append(([name] if named else []) + [lang] + values)
    return header, rows


def table2_rows(results: dict) -> tuple[list[str], list[list]]:
    """Header and rows of ATRI Table 2: Gap and Dis to the pivot per non-pivot language, then avg."""
    methods = as_methods(results)
    named = len(methods) > 1 or "" not in methods
    header = (["Method"] if named else []) + ["Lang", "Gap", "Dis"]
    rows = []
    for name, res in methods.items():
        cons = res["consistency"]
        for lang in cons["gap"]:
            rows.append(([name] if named else []) + [lang, cons["gap"][lang], cons["dis"][lang]])
        if cons["gap"]:
            avg_gap = cons.get("gap_avg", sum(cons["gap"].values()) / len(cons["gap"]))
            avg_dis = cons.get("dis_avg", sum(cons["dis"].values()) / len(cons["dis"]))
            rows.append(([name] if named else []) + ["avg", avg_gap, avg_dis])
    return header, rows


def table3_rows(results: dict) -> tuple[list[str], list[list]]:
    """Header and rows of ATRI Table 3: MRV per method (and the number of groups it is over)."""
    methods = as_methods(results)
    header = ["Method", "MRV", "groups"]
    rows = [[name or "-", res["consistency"]["mrv"], res["consistency"].get("n_groups", "")]
            for name, res in methods.items()]
    return header, rows


def _cells(header: list[str], rows: list[list], digits: dict[str, int]) -> list[list[str]]:
    return [[_num(v, digits.get(h, 2)) if isinstance(v, float) else str(v)
             for h, v in zip(header, row, strict=True)] for row in rows]


def _text_table(header: list[str], cells: list[list[str]], title: str, separate: bool = True) -> str:
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if k else c.ljust(w) for k, (c, w) in enumerate(zip(r, widths, strict=True)))

    out = [title, line(header), "  ".join("-" * w for w in widths)]
    previous = None
    for r in cells:
        if separate and previous is not None and header[0] == "Method" and r[0] != previous:
            out.append("")
        previous = r[0]
        out.append(line(r))
    return "\n".join(out)


def _markdown_table(header: list[str], cells: list[list[str]], bold: set[tuple[int, int]] = frozenset()) -> str:
    align = "|".join("---" if h in ("Method", "Lang") else "---:" for h in header)
    out = ["| " + " | ".join(header) + " |", "|" + align + "|"]
    for i, r in enumerate(cells):
        out.append("| " + " | ".join(f"**{c}**" if (i, j) in bold else c for j, c in enumerate(r)) + " |")
    return "\n".join(out)


def _csv(header: list[str], rows: list[list]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in r])
    return buf.getvalue()


def _best_cells(header: list[str], rows: list[list], higher_is_better: bool) -> set[tuple[int, int]]:
    """(row, column) of the best value per language and metric across methods (the paper's bold)."""
    if header[0] != "Method":
        return set()
    best: dict[tuple[str, int], tuple[float, list[int]]] = {}
    for i, r in enumerate(rows):
        for j in range(2, len(r)):
            v = r[j]
            if not isinstance(v, float) or math.isnan(v):
                continue
            key = (r[1], j)
            score = v if higher_is_better else -v
            if key not in best or score > best[key][0]:
                best[key] = (score, [i])
            elif score == best[key][0]:
                best[key][1].append(i)
    n_methods = len({r[0] for r in rows})
    if n_methods < 2:
        return set()
    return {(i, j) for (_, j), (_, idx) in best.items() for i in idx}


DIGITS = {"Gap": 3, "Dis": 3, "MRV": 2}


def format_table1(results: dict) -> str:
    """ATRI Table 1 as aligned text (recall and mAP@10 in percent)."""
    header, rows = table1_rows(results)
    return _text_table(header, _cells(header, rows, DIGITS), "Table 1: retrieval per language (R@k, mAP10 in %)")


def format_consistency(results: dict) -> str:
    """ATRI Tables 2 and 3 as aligned text."""
    h2, r2 = table2_rows(results)
    h3, r3 = table3_rows(results)
    pivot = next(iter(as_methods(results).values())).get("pivot", "eng")
    t2 = _text_table(h2, _cells(h2, r2, DIGITS), f"Table 2: embedding gap and distance to {pivot} (lower is better)")
    t3 = _text_table(h3, _cells(h3, r3, DIGITS), "Table 3: mean rank variance of t2a ranks (lower is better)",
                     separate=False)
    return t2 + "\n\n" + t3


def format_report(results: dict) -> str:
    """All three tables as text, the way the CLI prints them."""
    return format_table1(results) + "\n\n" + format_consistency(results)


def report_markdown(results: dict) -> str:
    """All three tables as one Markdown document (best values in bold when several methods)."""
    parts = ["# Evaluation report", ""]
    h1, r1 = table1_rows(results)
    parts += ["## Table 1: retrieval per language (R@k, mAP10 in %)", "",
              _markdown_table(h1, _cells(h1, r1, DIGITS), _best_cells(h1, r1, True)), ""]
    h2, r2 = table2_rows(results)
    parts += ["## Table 2: embedding gap and distance to the pivot (lower is better)", "",
              _markdown_table(h2, _cells(h2, r2, DIGITS), _best_cells(h2, r2, False)), ""]
    h3, r3 = table3_rows(results)
    parts += ["## Table 3: mean rank variance (lower is better)", "", _markdown_table(h3, _cells(h3, r3, DIGITS)), ""]
    return "\n".join(parts)


def write_report(directory: str | Path, results: dict) -> list[Path]:
    """Write ``report.md`` and ``table1.csv``, ``table2.csv``, ``table3.csv`` (atomically); return paths."""
    d = Path(directory)
    files = {
        "report.md": report_markdown(results),
        "table1.csv": _csv(*table1_rows(results)),
        "table2.csv": _csv(*table2_rows(results)),
        "table3.csv": _csv(*table3_rows(results)),
    }
    paths = []
    for name, text in files.items():
        atomic_write_text(d / name, text)
        paths.append(d / name)
    return paths
